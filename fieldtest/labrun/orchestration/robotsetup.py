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

import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fieldtest.errors import FieldtestError
from fieldtest.labrun.configuration.launchsettings import PREFLIGHT_ARGUMENTS
from fieldtest.labrun.configuration.stockrobot import SETUP_VARIABLES, TURTLEBOT4_SETUP
from fieldtest.labrun.orchestration.launchplan import DDS_RMWS
from fieldtest.labrun.orchestration.remote import RemoteError, RobotSide, shell_word
from fieldtest.middleware.dds.lab import RMW_IMPLEMENTATIONS, rmw_implementation
from fieldtest.middleware.launch import LabLaunch
from fieldtest.names import RECORDER_ENCLAVE, ROBOT_ENCLAVE
from fieldtest.record.trial import TrialRequest

MARK = "fieldtest-robot-setup "
PROBE_MARK = "fieldtest-robot-has "
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


def read_script(setup: str, probes: Sequence[str] = ()) -> str:
    """The robot side's own setup (what its launch sources), then each variable on a marked line,
    then each of ``probes`` (a shell test) as PROBE_MARK<index>=1 where it holds, else =0."""
    prints = " && ".join(f'printf "{MARK}%s=%s\\n" {name} "${{{name}-}}"' for name in SETUP_VARIABLES)
    prints += "".join(
        f'; if {probe}; then echo "{PROBE_MARK}{i}=1"; else echo "{PROBE_MARK}{i}=0"; fi'
        for i, probe in enumerate(probes)
    )
    return f"{setup} && {{ {prints}; }}" if setup else prints


def read_robot_setup(robot: RobotSide, timeout_s: float = 20.0) -> dict[str, str]:
    """RMW_IMPLEMENTATION, ROS_DOMAIN_ID, ROBOT_NAMESPACE and ROS_DISCOVERY_SERVER as the robot's
    launch will have them ('' where unset)."""
    return read_robot(robot, (), timeout_s)[0]


def read_robot(
    robot: RobotSide, probes: Sequence[str], timeout_s: float = 20.0
) -> tuple[dict[str, str], dict[str, bool]]:
    """The robot's setup variables (``read_robot_setup``) and whether each of ``probes`` holds
    there, in one ssh session."""
    try:
        done = robot.shell.run(read_script(robot.setup, probes), timeout_s=timeout_s)
    except RemoteError as exc:
        raise RobotSetupError(f"the robot's ROS setup could not be read: {exc}") from None
    found: dict[str, str] = {}
    held: dict[str, bool] = {}
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            name, _, value = line[len(MARK) :].partition("=")
            found[name] = value.strip()
        elif line.startswith(PROBE_MARK):
            index, _, value = line[len(PROBE_MARK) :].partition("=")
            if index.isdigit() and int(index) < len(probes):
                held[probes[int(index)]] = value.strip() == "1"
    missing = [name for name in SETUP_VARIABLES if name not in found]
    if missing:
        raise RobotSetupError(
            f"the robot's ROS setup could not be read: no {', '.join(missing)} in its answer"
        )
    return found, held


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


@dataclass(frozen=True)
class Prerequisite:
    """Something a trial's robot side needs on the robot: ``probe`` is a shell test that holds
    there when it is in place; the refusal names ``what`` and ``fix``."""

    what: str
    probe: str
    fix: str


KEYS_FIX = "export the robot's share with `fieldtest keys export --for robot` and copy it there (lab guide section 6)"


def _program(argv: Sequence[str], distro: str) -> Prerequisite | None:
    """The program a side process runs: on PATH, or for ``ros2 run <package> <executable>`` where
    ros2 run looks (``lib/<package>/<executable>`` under a prefix of AMENT_PREFIX_PATH)."""
    if list(argv[:2]) == ["ros2", "run"] and len(argv) >= 4:
        package, executable = argv[2], argv[3]
        target = shlex.quote(f"lib/{package}/{executable}")
        probe = (
            f'( IFS=:; for p in ${{AMENT_PREFIX_PATH-}}; do [ -x "$p"/{target} ] && exit 0; done; exit 1 )'
        )
        fix = f"sudo apt install ros-{distro}-{package.replace('_', '-')} (lab guide 3.1)"
        return Prerequisite(
            f"{package} (no lib/{package}/{executable} in the robot's AMENT_PREFIX_PATH)", probe, fix
        )
    if argv and argv[0] != "ros2":  # ros2 itself (ros2 bag record) comes with ROS 2
        # the apt packages of the robot's programs are named as the programs (lab guide 3.1)
        fix = f"sudo apt install {argv[0]} (lab guide 3.1)"
        return Prerequisite(
            f"{argv[0]} (not on the robot's PATH)", f"command -v {shlex.quote(argv[0])} >/dev/null", fix
        )
    return None


def _keystore_files(cfg: LabLaunch, keystore: str) -> list[str]:
    """The robot's own keystore files a secure trial loads, relative to the keystore."""
    from fieldtest.middleware import registry
    from fieldtest.security.governance import DEFAULT_GOVERNANCE
    from fieldtest.security.keystore import ENCLAVE_FILES, TLS_DIR, enclave_dir, governance_variant_path

    if cfg.security == "none" or not keystore:
        return []
    setting = registry.get(cfg.middleware).security_setting(cfg.security)
    if setting.kind == "tls":
        return [f"{TLS_DIR}/ca.pem", f"{TLS_DIR}/robot.crt", f"{TLS_DIR}/robot.key"]
    if setting.kind != "dds-security":
        return []
    enclaves = [ROBOT_ENCLAVE, *([RECORDER_ENCLAVE] if cfg.record_ros2bag and cfg.trial_dir else [])]
    files = [(enclave_dir("", e) / name).as_posix() for e in enclaves for name in ENCLAVE_FILES]
    if setting.governance and setting.governance != DEFAULT_GOVERNANCE:  # the default: the enclave's link
        files.append(governance_variant_path("", setting.governance).as_posix())
    return files


def robot_prerequisites(cfg: LabLaunch, keystore: str) -> list[Prerequisite]:
    """What ``cfg``'s robot side needs on the robot: the programs of its bridges (and the like) and,
    for a secure trial, its own keystore files at ``keystore`` (the path as the robot reads it)."""
    from fieldtest.middleware import registry

    # the same programs without security: no keystore is read here, on the host
    plain = cfg.model_copy(update={"security": "none", "keystore": ""})
    out = []
    for process in registry.get(cfg.middleware).lab_side_processes(plain, Path("/nonexistent")):
        program = _program(process.argv, cfg.ros_distro)
        if program is not None:
            out.append(program)
    for relative in _keystore_files(cfg, keystore):
        path = f"{keystore.rstrip('/')}/{relative}"
        out.append(Prerequisite(f"{path} (the robot's keystore)", f"[ -r {shell_word(path)} ]", KEYS_FIX))
    return out


def _robot_sides(
    requests: list[TrialRequest], ros_distro: str, robot_args: Mapping[str, str], robot: Mapping[str, str]
) -> Iterator[tuple[TrialRequest, LabLaunch, list[Prerequisite]]]:
    from fieldtest.labrun.configuration.launchsettings import launch_args_for_trial, parse_launch_args
    from fieldtest.labrun.orchestration.preflight import STATIC_TRIAL_DIR

    for request in requests:
        args = launch_args_for_trial(
            request, "robot", ros_distro=ros_distro, trial_dir=STATIC_TRIAL_DIR, extra=robot_args
        )
        common = {k: v for k, v in args.items() if k not in PREFLIGHT_ARGUMENTS}
        cfg = parse_launch_args(common, "robot", environ=robot)
        yield request, cfg, robot_prerequisites(cfg, args.get("keystore", ""))


def robot_probes(requests: list[TrialRequest], ros_distro: str, robot_args: Mapping[str, str]) -> list[str]:
    """The shell tests of every trial's prerequisites on the robot, each once (for ``read_robot``)."""
    sides = _robot_sides(requests, ros_distro, robot_args, {})
    return list(dict.fromkeys(p.probe for _, _, prerequisites in sides for p in prerequisites))


def refuse_unmet_robot(
    requests: list[TrialRequest],
    ros_distro: str,
    robot_args: Mapping[str, str],
    robot: Mapping[str, str],
    held: Mapping[str, bool] | None = None,
) -> list[str]:
    """A RobotSetupError naming the first trial whose robot side would not meet ``robot`` (the
    values ``read_robot_setup`` read), or, given ``held`` (each probe's answer, ``read_robot``),
    whose prerequisites are missing on the robot, and why; else the trials' notes on it
    (``vendor_note``), each once."""
    notes = []
    for request, cfg, prerequisites in _robot_sides(requests, ros_distro, robot_args, robot):
        why = setup_mismatch(cfg, robot)
        if why:
            raise RobotSetupError(f"trial {request.name} does not match the robot's setup: {why}")
        missing = next((p for p in prerequisites if held is not None and held.get(p.probe) is False), None)
        if missing is not None:
            raise RobotSetupError(f"trial {request.name} needs on the robot {missing.what}: {missing.fix}")
        notes.append(vendor_note(cfg, robot))
    return [note for note in dict.fromkeys(notes) if note]
