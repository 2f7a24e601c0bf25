"""Emergency stop: zero commands from the runner itself when the host side cannot send its stop burst.

Layers that stop the robot, outermost last: the driver's stop burst (every exit path), this
emergency stop (the runner, when the driver did not confirm its burst), the robot relay's
silence watchdog (0.3 s, when relaying) and the Create 3's own command watchdog (0.5 s); the
zero commands themselves are ``fieldtest.endpoints.stop.zero_commands``.
"""

from __future__ import annotations

import os
import subprocess

from fieldtest.endpoints.link import RemappedTransport, command_remap
from fieldtest.endpoints.stop import ZERO_COUNT, zero_commands
from fieldtest.labrun.launchplan import launch_plan
from fieldtest.labrun.settings import launch_args_for_trial
from fieldtest.middleware.registry import open_transport
from fieldtest.record import CMD_VEL_TOPIC, TrialRequest
from fieldtest.record.names import RELAY_CMD_VEL_TOPIC


def zero_commands_over_transport(request: TrialRequest, relay: bool = False) -> int:
    """Join the link as the host with the kit's own transport and send zero commands (stand-in
    trials, or a lab whose middleware the kit's transports speak: DDS, Zenoh, MQTT)."""
    transport = RemappedTransport(open_transport(request.transport, "host"), command_remap(relay))
    try:
        return zero_commands(transport, request.cmd_type)
    finally:
        transport.close()


def ros2_zero_command_argv(request: TrialRequest, relay: bool = False) -> list[str]:
    """``ros2 topic pub`` of zero commands on the host's command topic."""
    ns = request.transport.namespace.strip("/")
    topic = ("/" + ns if ns else "") + (RELAY_CMD_VEL_TOPIC if relay else CMD_VEL_TOPIC)
    typename = "geometry_msgs/msg/Twist" if request.cmd_type == "twist" else "geometry_msgs/msg/TwistStamped"
    return ["ros2", "topic", "pub", "--times", str(ZERO_COUNT), "--rate", "20", topic, typename, "{}"]


def ros2_zero_commands(request: TrialRequest, ros_distro: str, host_args: dict[str, str]) -> None:
    """Run ``ros2 topic pub`` in the host side's RMW environment (reaches the robot directly with
    DDS; with a bridge only while the host's bridge still runs)."""
    args = launch_args_for_trial(request, "host", ros_distro=ros_distro, trial_dir="", extra=host_args)
    plan = launch_plan(args, "host", environ={"ROS_DISTRO": ros_distro, "PATH": os.environ.get("PATH", "")})
    plan.write_files()  # CYCLONEDDS_URI points at a generated file
    env = plan.environment.apply(dict(os.environ))
    relay = host_args.get("relay", "false").lower() in ("true", "1", "yes", "on")
    subprocess.run(
        ros2_zero_command_argv(request, relay), env=env, timeout=15, check=False, capture_output=True
    )
