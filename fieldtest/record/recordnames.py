"""Names in a trial record: format version, files, bag folders and topics (docs/trial-format.md).

Plain constants, so a command can use them (say, as argument defaults) without importing the record
models (pydantic) and the bag code (mcap).
"""

TRIAL_FORMAT_VERSION = 1
TRIAL_FILE = "trial.yaml"
HOST_BAG, ROBOT_BAG, MOCAP_BAG, ANALYSIS_DIR = "host", "robot", "mocap", "analysis"

CMD_VEL_TOPIC = "/cmd_vel"
RELAY_CMD_VEL_TOPIC = (
    "/fieldtest/cmd_vel"  # the commands when the robot's link monitor relays them to the base
)
CMD_STAMP_TOPIC = "/fieldtest/cmd_stamp"  # Humble (Twist) mode: send time and seq of each Twist
RECEIPTS_TOPIC = "/fieldtest/cmd_receipts"
CLOCK_OFFSET_TOPIC = "/fieldtest/clock_offset"
CLOCK_PROBE_TOPIC = "/fieldtest/clock_probe"
CLOCK_PROBE_REPLY_TOPIC = "/fieldtest/clock_probe_reply"
MOCAP_POSE_TOPIC = "/mocap/pose"
MOCAP_FRAMES_TOPIC = "/mocap/frames"
TWIN_TRUTH_TOPIC = "/twin/true_pose"
