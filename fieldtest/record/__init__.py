"""The trial record format: trial.yaml plus rosbag2 MCAP bags (docs/trial-format.md).

The names (files, bags, topics) load with the package; the models and the bag code (pydantic,
mcap) on first use of one of theirs, so importing a topic name costs nothing.
"""

from typing import TYPE_CHECKING

from fieldtest.lazy import lazy_attributes

from .recordnames import (
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

# The lazy names for the type checker, which does not run __getattr__ ("X as X" marks a re-export).
if TYPE_CHECKING:
    from .bag import BagData as BagData
    from .bag import BagError as BagError
    from .bag import BagWriter as BagWriter
    from .bag import read_bag as read_bag
    from .bag import repair_bag as repair_bag
    from .trial import TrialFormatError as TrialFormatError
    from .trial import TrialOutcome as TrialOutcome
    from .trial import TrialRecord as TrialRecord
    from .trial import TrialRequest as TrialRequest
    from .trial import TwinSettings as TwinSettings
    from .trial import new_trial_id as new_trial_id
    from .trial import read_trial as read_trial
    from .trial import software_versions as software_versions
    from .trial import write_trial as write_trial
