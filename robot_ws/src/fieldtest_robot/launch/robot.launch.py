"""Robot (Raspberry Pi) side of a trial: RMW environment, robot-side bridge, SROS2 enclave,
recording, the Create 3 pre-flight and the link monitor.

    ros2 launch fieldtest_robot robot.launch.py middleware:=zenoh-peer namespace:=/tb4 \
        host_address:=192.168.1.10 base_interface:=usb0 trial_dir:=/home/ubuntu/fieldtest/trials/<id>

The pre-flight (create3_preflight) runs first and the link monitor starts only if it passes
(preflight_warn_only:=true turns refusals into warnings, preflight:=false skips it). Every decision
is made by fieldtest.labrun.orchestration.launchplan, tested without ROS.
"""

from launch import LaunchDescription
from launch.actions import OpaqueFunction

from fieldtest.labrun.orchestration.launch_actions import declare_arguments, generate_actions


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            *declare_arguments("robot"),
            OpaqueFunction(function=lambda context: generate_actions(context, "robot")),
        ]
    )
