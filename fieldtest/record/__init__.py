"""The trial record format: trial.yaml plus rosbag2 MCAP bags (docs/trial-format.md).

The names (files, bags, topics) load with the package; the models and the bag code (pydantic,
mcap) on first use of one of theirs, so importing a topic name costs nothing.
"""

from fieldtest.lazy import lazy_attributes

from .names import (
    ANALYSIS_DIR,
    CLOCK_OFFSET_TOPIC,
    CLOCK_PROBE_REPLY_TOPIC,
    CLOCK_PROBE_TOPIC,
    CMD_STAMP_TOPIC,
    CMD_VEL_TOPIC,
    HOST_BAG,
    MOCAP_BAG,
    MOCAP_FRAMES_TOPIC,
    MOCAP_POSE_TOPIC,
    RECEIPTS_TOPIC,
    ROBOT_BAG,
    TRIAL_FILE,
    TRIAL_FORMAT_VERSION,
    TWIN_TRUTH_TOPIC,
)

_LAZY = {
    **dict.fromkeys(("BagData", "BagError", "BagWriter", "read_bag", "repair_bag"), ".bag"),
    **dict.fromkeys(
        (
            "TrialFormatError",
            "TrialOutcome",
            "TrialRecord",
            "TrialRequest",
            "TwinSettings",
            "new_trial_id",
            "read_trial",
            "software_versions",
            "write_trial",
        ),
        ".trial",
    ),
}

__all__ = [
    "ANALYSIS_DIR",
    "CLOCK_OFFSET_TOPIC",
    "CLOCK_PROBE_REPLY_TOPIC",
    "CLOCK_PROBE_TOPIC",
    "CMD_STAMP_TOPIC",
    "CMD_VEL_TOPIC",
    "HOST_BAG",
    "MOCAP_BAG",
    "MOCAP_FRAMES_TOPIC",
    "MOCAP_POSE_TOPIC",
    "RECEIPTS_TOPIC",
    "ROBOT_BAG",
    "TRIAL_FILE",
    "TRIAL_FORMAT_VERSION",
    "TWIN_TRUTH_TOPIC",
    *_LAZY,
]
__getattr__ = lazy_attributes(__name__, _LAZY, globals())
