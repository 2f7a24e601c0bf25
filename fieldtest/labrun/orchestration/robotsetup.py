"""The robot's own ROS set-up, read over ssh before anything moves, and the trials it would refuse.

A TurtleBot 4 keeps its RMW, domain, namespace and discovery server in
``/etc/turtlebot4/setup.bash`` (turtlebot4_setup), and turtlebot4-setup applies the same values to
the Create 3. The robot launch sources that file (``remote.robot_setup_script``), but the kit then
sets the trial's domain and namespace: where they differ from the robot's, the kit's nodes never
meet the base, and the pre-flight's symptom ("no clock probe", "create3: no answer") names
something else. So the runner reads the file's values first and refuses such a trial with one line
naming the setting, both values and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping

from fieldtest.errors import FieldtestError
from fieldtest.labrun.configuration.settings import PREFLIGHT_ARGUMENTS
from fieldtest.labrun.configuration.stockrobot import SETUP_VARIABLES, TURTLEBOT4_SETUP
from fieldtest.labrun.orchestration.launchplan import DDS_RMWS
from fieldtest.labrun.orchestration.remote import RemoteError, RobotSide
from fieldtest.middleware.dds.lab import RMW_IMPLEMENTATIONS, rmw_implementation
from fieldtest.middleware.launch import LabLaunch
from fieldtest.record.trial import TrialRequest

MARK = "fieldtest-robot-setup "
# ROS 2's default RMW on Humble and Jazzy (rmw_implementation), where the robot's setup names none
ROS_DEFAULT_RMW = "rmw_fastrtps_cpp"
# Measured with the real libraries (tests/test_mixed_vendors.py; docs/networks.md, "Mixed DDS vendors")
ACROSS_VENDORS = (
    "CycloneDDS and Fast DDS meet on topics, but neither answers the other's service request "
    "(the base's parameters)"
)
FIX_ON_ROBOT = f"or change the robot's (turtlebot4-setup -> ROS Setup -> Bash Setup, {TURTLEBOT4_SETUP})"


class RobotSetupError(FieldtestError, RuntimeError):
    """The robot's setup could not be read, or a trial does not match it (one line)."""


def read_script(setup: str) -> str:
    """The robot side's own setup (what its launch sources), then each variable on a marked line."""
    prints = " && ".join(f'printf "{MARK}%s=%s\\n" {name} "${{{name}-}}"' for name in SETUP_VARIABLES)
    return f"{setup} && {prints}" if setup else prints


def read_robot_setup(robot: RobotSide, timeout_s: float = 20.0) -> dict[str, str]:
    """RMW_IMPLEMENTATION, ROS_DOMAIN_ID, ROBOT_NAMESPACE and ROS_DISCOVERY_SERVER as the robot's
    launch will have them ('' where unset)."""
    try:
        done = robot.shell.run(read_script(robot.setup), timeout_s=timeout_s)
    except RemoteError as exc:
        raise RobotSetupError(f"the robot's ROS setup could not be read: {exc}") from None
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            name, _, value = line[len(MARK) :].partition("=")
            found[name] = value.strip()
    missing = [name for name in SETUP_VARIABLES if name not in found]
    if missing:
        raise RobotSetupError(
            f"the robot's ROS setup could not be read: no {', '.join(missing)} in its answer"
        )
    return found


def _namespace(value: str) -> str:
    stripped = value.strip().strip("/")
    return f"/{stripped}" if stripped else ""


def setup_mismatch(cfg: LabLaunch, robot: Mapping[str, str]) -> str:
    """Why the robot side of ``cfg`` would not meet the robot set up as ``robot`` says (one line:
    the setting, both values, the fix), or ''."""
    robot_domain = robot.get("ROS_DOMAIN_ID", "").strip() or "0"
    if robot_domain != str(cfg.domain_id):
        return (
            f"ROS_DOMAIN_ID: the robot's is {robot_domain}, the trial's domain_id is {cfg.domain_id}: "
            f"the base is not in the trial's domain (set the campaign's domain_id to {robot_domain}, "
            f"{FIX_ON_ROBOT})"
        )
    robot_ns, trial_ns = _namespace(robot.get("ROBOT_NAMESPACE", "")), cfg.ns
    if robot_ns != trial_ns:
        campaign_value = robot_ns or '""'
        return (
            f"ROBOT_NAMESPACE: the robot's is {robot_ns or '(empty)'}, the trial's namespace is "
            f"{trial_ns or '(empty)'}: the base listens on {robot_ns}/cmd_vel (set the campaign's "
            f"namespace to {campaign_value}, {FIX_ON_ROBOT})"
        )
    if cfg.dry_run:  # nothing reaches the base
        return ""
    robot_rmw = robot.get("RMW_IMPLEMENTATION", "").strip() or ROS_DEFAULT_RMW
    relay_rmw = rmw_implementation(cfg)  # the link monitor's relay is on the side's own RMW
    if robot_rmw not in DDS_RMWS and relay_rmw in DDS_RMWS:
        return (
            f"RMW_IMPLEMENTATION: the robot's is {robot_rmw}, the trial's robot nodes run {relay_rmw}: "
            f"they cannot meet the robot's nodes (its republisher) nor a base behind them (set "
            f"RMW_IMPLEMENTATION to rmw_fastrtps_cpp or rmw_cyclonedds_cpp, {FIX_ON_ROBOT})"
        )
    server = robot.get("ROS_DISCOVERY_SERVER", "").strip()
    if server and relay_rmw != RMW_IMPLEMENTATIONS["fastrtps"]:
        return (
            f"ROS_DISCOVERY_SERVER: the robot's is {server}, the trial's robot nodes run {relay_rmw}, "
            "which has no discovery-server mode: they never discover the base (run with "
            f"--host-arg dds=fastrtps --robot-arg dds=fastrtps, {FIX_ON_ROBOT})"
        )
    return ""


def vendor_note(cfg: LabLaunch, robot: Mapping[str, str]) -> str:
    """Where the robot's DDS RMW is the other vendor's than the trial's robot nodes: what runs on
    which, in one line; else ''."""
    robot_rmw = robot.get("RMW_IMPLEMENTATION", "").strip() or ROS_DEFAULT_RMW
    nodes_rmw = rmw_implementation(cfg)
    if cfg.dry_run or robot_rmw not in DDS_RMWS or nodes_rmw not in DDS_RMWS or robot_rmw == nodes_rmw:
        return ""
    return (
        f"RMW_IMPLEMENTATION: the robot's is {robot_rmw}, the trial's robot nodes run {nodes_rmw}: "
        f"{ACROSS_VENDORS}, so the Create 3 pre-flight and base_stop run on {robot_rmw}"
    )


def refuse_unmet_robot(
    requests: list[TrialRequest], ros_distro: str, robot_args: Mapping[str, str], robot: Mapping[str, str]
) -> list[str]:
    """A RobotSetupError naming the first trial whose robot side would not meet ``robot`` (the
    values ``read_robot_setup`` read), and why; else the trials' notes on it (``vendor_note``), each once."""
    from fieldtest.labrun.configuration.settings import launch_args_for_trial, parse_launch_args
    from fieldtest.labrun.orchestration.preflight import STATIC_TRIAL_DIR

    notes = []
    for request in requests:
        args = launch_args_for_trial(
            request, "robot", ros_distro=ros_distro, trial_dir=STATIC_TRIAL_DIR, extra=robot_args
        )
        common = {k: v for k, v in args.items() if k not in PREFLIGHT_ARGUMENTS}
        cfg = parse_launch_args(common, "robot", environ=robot)
        why = setup_mismatch(cfg, robot)
        if why:
            raise RobotSetupError(f"trial {request.name} does not match the robot's setup: {why}")
        notes.append(vendor_note(cfg, robot))
    return [note for note in dict.fromkeys(notes) if note]
