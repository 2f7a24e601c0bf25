"""Names and constants that several parts of the kit share, defined once here.

Plain constants with no imports, so any layer may use them (the record, transports, security, twin,
lab runner, ROS nodes). The trial record's own names (files, bag folders, topics, including the
relay topic) are in ``fieldtest.record.recordnames``.
"""

# SROS2 enclave paths of the kit's nodes (fieldtest.security.policy.KIT_ENCLAVES grants each one);
# host and robot also name their TLS identities, so one identity is the same party on every middleware.
HOST_ENCLAVE = "/fieldtest/host"
ROBOT_ENCLAVE = "/fieldtest/robot"
BRIDGE_HOST_ENCLAVE = "/fieldtest/bridge_host"
BRIDGE_ROBOT_ENCLAVE = "/fieldtest/bridge_robot"
MOCAP_ENCLAVE = "/fieldtest/mocap"
MOCAP_DRIVER_ENCLAVE = "/fieldtest/mocap_driver"
RECORDER_ENCLAVE = "/fieldtest/recorder"
RMW_ZENOH_ENCLAVE = "/fieldtest/rmw_zenoh"  # rmw_zenoh's nodes: enclaves/fieldtest/rmw_zenoh/<node>
ROLE_ENCLAVES = {"host": HOST_ENCLAVE, "robot": ROBOT_ENCLAVE}
# TLS identities of the infrastructure (no DDS enclave of their own)
ROUTER_IDENTITY = "/fieldtest/router"
BROKER_IDENTITY = "/fieldtest/broker"

# What a TurtleBot 4's cmd_vel takes per ROS 2 distro: on Humble the Create 3 itself (Twist); on
# Jazzy create3_republisher (turtlebot4_robot jazzy, turtlebot4_bringup/launch/robot.launch.py and
# config/republisher.yaml), which relays TwistStamped on cmd_vel and Twist only on cmd_vel_unstamped.
# ``cmd_type: auto`` (campaigns, launch arguments) picks from it.
CMD_TYPE_AUTO = "auto"
BASE_CMD_TYPE = {"humble": "twist", "jazzy": "twist_stamped"}

# The host's stop burst: whatever ends the stream, this many zero commands (seq n_ticks,
# n_ticks + 1, ...) this far apart. The synthetic trials model the same burst.
STOP_BURST_COUNT = 5
STOP_BURST_SPACING_S = 0.02

# Motive's NatNet default ports (a middleware's own are in its family's settings.py).
NATNET_COMMAND_PORT = 1510  # Motive's defaults (Streaming pane)
NATNET_DATA_PORT = 1511

# The robot's own traffic in a trial (fieldtest.robottraffic): what an operator's tool pulls from
# the robot while the host streams commands; "none" (default) leaves the link to the commands.
ROBOT_TRAFFIC_PRESETS = ("none", "rviz", "rviz-view-robot", "foxglove", "all")
