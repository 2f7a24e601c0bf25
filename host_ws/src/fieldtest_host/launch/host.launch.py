"""Host side of a trial: RMW environment, host-side bridge/router/broker, SROS2 enclave, recording,
and the square driver.

    ros2 launch fieldtest_host host.launch.py middleware:=zenoh-peer security:=none qos:=default \
        namespace:=/tb4 plan:=trials/plans/seed.yaml robot_address:=192.168.1.20 trial_dir:=/path/trial

Every decision (environment, bridge command lines, generated configs) is made by
fieldtest.labrun.orchestration.launchplan, which is tested without ROS; this file only hands it the arguments.
`ros2 launch fieldtest_host host.launch.py --show-args` lists them.
"""

from launch import LaunchDescription
from launch.actions import OpaqueFunction

from fieldtest.labrun.orchestration.launch_actions import declare_arguments, generate_actions


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            *declare_arguments("host"),
            OpaqueFunction(function=lambda context: generate_actions(context, "host")),
        ]
    )
