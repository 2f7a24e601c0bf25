"""Emergency stop: zero commands from the runner when the host side cannot send its stop burst.

Layers that stop the robot, outermost last: the driver's stop burst (every exit path), this
emergency stop (the runner, when the driver did not confirm its burst), the robot relay's
silence watchdog (0.3 s, when relaying) and the Create 3's own command watchdog (0.5 s); the
zero commands themselves are ``fieldtest.endpoints.stop.zero_commands``.

The runner's emergency stop runs on the robot (``RobotSide.emergency_stop`` over ssh):

    python3 -m fieldtest.labrun.nodelogic.estop name:=value ...     (the trial's robot launch arguments)

starts robot_ws's ``base_stop`` node in the robot launch's environment (its RMW, DDS config,
domain, discovery range; outside the SROS2 domain, as the relay), so the zeros reach the base
on the robot's own graph whatever the middleware between the machines: the host's bridge,
router or broker has been stopped by then, and with Zenoh or MQTT the host's DDS never reached
the base anyway. Its configs go to a scratch folder, not the trial's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from fieldtest.endpoints.link import RemappedTransport, command_remap
from fieldtest.endpoints.stop import ZERO_COUNT, zero_commands
from fieldtest.labrun.configuration.launchsettings import launch_args_for_trial
from fieldtest.labrun.orchestration.launchplan import launch_plan
from fieldtest.middleware.registry import open_transport
from fieldtest.record import CMD_VEL_TOPIC, TrialRequest
from fieldtest.record.recordnames import RELAY_CMD_VEL_TOPIC


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


ESTOP_TIMEOUT_S = 30.0  # rclpy start, discovery (base_stop sends zeros up to 10 s until the base matches)


def robot_estop_argv(
    args: dict[str, str], scratch: Path, python: str = sys.executable
) -> tuple[list[str], dict]:
    """``base_stop``'s command line and environment for the robot launch arguments ``args``."""
    from fieldtest.labrun.orchestration.launchplan import base_stop_node
    from fieldtest.labrun.orchestration.planrun import node_argv, parameters_yaml

    plan = launch_plan({**args, "trial_dir": str(scratch)}, "robot")
    plan.write_files()  # CYCLONEDDS_URI / the Fast DDS profile point at generated files
    spec = base_stop_node(plan.cfg, os.environ.get("RMW_IMPLEMENTATION", ""))  # the robot's setup's
    params = plan.config_dir / f"{spec.name}.params.yaml"
    params.write_text(parameters_yaml(spec))
    env = {**plan.environment.apply(dict(os.environ)), **spec.env}
    return node_argv(spec, params, python), env


def main(argv: list[str] | None = None) -> int:
    """Run ``base_stop`` for these robot launch arguments; prints its line, exits with its code."""
    from fieldtest.labrun.rehearsal.standin import parse_argv

    _, args = parse_argv(["robot", *(sys.argv[1:] if argv is None else argv)])
    with tempfile.TemporaryDirectory(prefix="fieldtest-estop-") as scratch:
        command, env = robot_estop_argv(args, Path(scratch))
        try:
            done = subprocess.run(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=ESTOP_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            print(f"base_stop did not finish within {ESTOP_TIMEOUT_S:g} s", file=sys.stderr)
            return 1
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"base_stop exited {done.returncode}: {last}", file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
