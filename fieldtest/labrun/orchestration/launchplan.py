"""What a lab launch file starts, decided without ROS: the launch files only translate this.

``launch_plan(args, role)`` turns the launch arguments into a ``LaunchPlan``: environment to set
and unset, config files to write, helper processes (bridge, router, broker, ``ros2 bag record``)
and the kit's nodes with their parameters and ``--ros-args``. ``host.launch.py`` and
``robot.launch.py`` map it one to one onto SetEnvironmentVariable / UnsetEnvironmentVariable /
ExecuteProcess / Node actions, so everything below is tested here without ROS.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fieldtest.labrun.configuration.launchsettings import (
    PREFLIGHT_ARGUMENTS,
    LabLaunch,
    LaunchArgError,
    Role,
    parse_launch_args,
)
from fieldtest.labrun.nodelogic.create3params import CHECKED_PARAMETERS, MOTION_CONTROL_NODE
from fieldtest.labrun.nodelogic.driver import CONTROL_DIR
from fieldtest.middleware import registry
from fieldtest.middleware.dds.lab import (
    RMW_IMPLEMENTATIONS,
    RosEnvironment,
    node_enclave,
    rmw_implementation,
    ros_environment,
)
from fieldtest.middleware.labshared import side_processes
from fieldtest.middleware.launch import SideProcess, write_config_files

HOST_PACKAGE, ROBOT_PACKAGE = "fieldtest_host", "fieldtest_robot"
CONFIG_SUBDIR = "config"
BASE_MATCH_WAIT_S = 10.0  # base_stop: a fresh participant's discovery of the base (seen: over 2 s)


@dataclass(frozen=True)
class NodeSpec:
    package: str
    executable: str
    name: str
    namespace: str
    parameters: dict[str, Any]
    ros_arguments: list[str]
    env: dict[str, str] = field(default_factory=dict)  # set for this node only


@dataclass
class LaunchPlan:
    cfg: LabLaunch
    config_dir: Path
    environment: RosEnvironment
    files: dict[Path, str] = field(default_factory=dict)
    processes: list[SideProcess] = field(default_factory=list)
    nodes: list[NodeSpec] = field(default_factory=list)
    gate: NodeSpec | None = None  # runs first; the nodes start only if it exits 0 (robot pre-flight)

    def write_files(self) -> list[Path]:
        written = []
        for path, text in self.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written.append(path)
        written += write_config_files(self.processes, self.config_dir)
        return written

    def summary(self) -> list[str]:
        """Human-readable lines: what will run, for the launch log and ``fieldtest lab plan``."""
        lines = [
            f"{self.cfg.role}: middleware {self.cfg.middleware}, security {self.cfg.security}, "
            f"ROS 2 {self.cfg.ros_distro}, cmd {self.cfg.cmd_type} on {self.cfg.ns}/{self.cfg.cmd_topic}"
        ]
        lines += [f"  env {k}={v}" for k, v in sorted(self.environment.set.items())]
        lines += [f"  unset {k}" for k in self.environment.unset]
        if self.gate is not None:
            lines.append(f"  gate {self.gate.package}/{self.gate.executable}")
        lines += [f"  run {p.name}: {' '.join(p.argv)}" for p in self.processes]
        lines += [f"  node {n.package}/{n.executable} as {n.namespace}/{n.name}" for n in self.nodes]
        lines += [f"  note: {note}" for note in self.environment.notes]
        return lines


def config_dir_for(cfg: LabLaunch) -> Path:
    """Generated configs go into the trial (kept with the record) or a scratch folder."""
    if cfg.trial_dir:
        return Path(cfg.trial_dir) / CONTROL_DIR / CONFIG_SUBDIR / cfg.role
    return Path(tempfile.gettempdir()) / f"fieldtest-{cfg.role}-config"


def _plan_file(cfg: LabLaunch, config_dir: Path) -> tuple[Path, str]:
    return config_dir / "plan.yaml", yaml.safe_dump(cfg.plan.model_dump(mode="json"), sort_keys=False)


def _common_parameters(cfg: LabLaunch, plan_path: Path) -> dict[str, Any]:
    return {
        "plan": str(plan_path),
        "qos": cfg.qos,
        "cmd_type": cfg.cmd_type,
        "middleware": cfg.middleware,
        "security": cfg.security,
        "trial_dir": cfg.trial_dir,
        "relay": cfg.relay,
    }


def host_nodes(cfg: LabLaunch, plan_path: Path) -> list[NodeSpec]:
    params = {
        **_common_parameters(cfg, plan_path),
        "wait_for_go": bool(cfg.trial_dir),
        "rate_hz": 0.0,
        "clock_udp_port": cfg.clock_port if cfg.clock_source == "udp" else 0,  # 0: no UDP responder
    }
    env = registry.get(cfg.middleware).lab_node_env(cfg, "square_driver")
    return [NodeSpec(HOST_PACKAGE, "square_driver", "square_driver", cfg.ns, params, _enclave_args(cfg), env)]


def robot_nodes(cfg: LabLaunch, plan_path: Path) -> list[NodeSpec]:
    params = {
        **_common_parameters(cfg, plan_path),
        "relay_topic": "cmd_vel",
        "relay_type": cfg.cmd_type,
        # A secure DDS domain cannot include the Create 3: what faces the base (the relay, the
        # battery reading) then goes through a second, plain ROS context.
        "base_plain_context": _base_outside_domain(cfg),
        "clock_source": cfg.clock_source,
        "dry_run": cfg.dry_run,
        "clock_host": cfg.host_address,
        "clock_udp_port": cfg.clock_port,
    }
    env = registry.get(cfg.middleware).lab_node_env(cfg, "link_monitor")
    return [NodeSpec(ROBOT_PACKAGE, "link_monitor", "link_monitor", cfg.ns, params, _enclave_args(cfg), env)]


def robot_gate(
    cfg: LabLaunch, plan_path: Path, warn_only: bool, min_battery_percent: float, robot_rmw: str = ""
) -> NodeSpec:
    params = {
        "plan": str(plan_path),
        "warn_only": warn_only,
        "min_battery_percent": float(min_battery_percent),
        "parameters": list(CHECKED_PARAMETERS),
        "motion_control": f"{cfg.base_namespace}/{MOTION_CONTROL_NODE}",  # Jazzy: <ns>/_do_not_use/...
        "out": str(Path(cfg.trial_dir) / CONTROL_DIR / "robot_preflight.json") if cfg.trial_dir else "",
        "timeout_s": 10.0,
    }
    return _base_facing_node(cfg, "create3_preflight", params, robot_rmw)


def base_stop_node(cfg: LabLaunch, robot_rmw: str = "") -> NodeSpec:
    """The robot side's emergency stop (robot_ws ``base_stop``): zero commands to the base on the
    robot's own graph, as the relay would send them (the base's ``cmd_vel``, the trial's type)."""
    params = {"cmd_type": cfg.cmd_type, "match_wait_s": BASE_MATCH_WAIT_S}
    return _base_facing_node(cfg, "base_stop", params, robot_rmw)


# The DDS RMWs a robot's setup may name; rmw_zenoh_cpp is not one (the Create 3 speaks DDS only).
DDS_RMWS = frozenset({RMW_IMPLEMENTATIONS["cyclonedds"], RMW_IMPLEMENTATIONS["fastrtps"]})


def _base_facing_node(cfg: LabLaunch, executable: str, params: dict[str, Any], robot_rmw: str) -> NodeSpec:
    """A robot node that talks to the base only: outside a secure domain, on DDS, and on the
    robot's own DDS RMW (``robot_rmw``, its setup.bash's RMW_IMPLEMENTATION, which turtlebot4-setup
    also gives the Create 3) where the trial's differs: topics cross the two DDS vendors, but a
    CycloneDDS client's parameter request carries rmw_cyclonedds' own request header in the payload
    and a Fast DDS base cannot read it (nor the reverse), measured in tests/test_mixed_vendors.py."""
    base_rmw = robot_rmw if robot_rmw in DDS_RMWS else RMW_IMPLEMENTATIONS[cfg.dds]
    own = {"RMW_IMPLEMENTATION": base_rmw} if base_rmw != rmw_implementation(cfg) else {}
    if _base_outside_domain(cfg):  # the Create 3 is not an SROS2 member: no enclave, security off
        return NodeSpec(ROBOT_PACKAGE, executable, executable, cfg.ns, params, [], {**PLAIN_NODE_ENV, **own})
    if own:  # on another RMW than the side's nodes (rmw_zenoh's included): not in their secure set-up
        return NodeSpec(ROBOT_PACKAGE, executable, executable, cfg.ns, params, [], own)
    return NodeSpec(ROBOT_PACKAGE, executable, executable, cfg.ns, params, _enclave_args(cfg))


def _base_outside_domain(cfg: LabLaunch) -> bool:
    return node_enclave(cfg) is not None  # an enclave: SROS2 on plain DDS


def _enclave_args(cfg: LabLaunch) -> list[str]:
    enclave = node_enclave(cfg)
    return ["--enclave", enclave] if enclave else []


PLAIN_NODE_ENV = {"ROS_SECURITY_ENABLE": "false"}


def split_preflight_args(args: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Robot launch: the pre-flight arguments apart from the common ones."""
    common = {k: v for k, v in args.items() if k not in PREFLIGHT_ARGUMENTS}
    pre = {**PREFLIGHT_ARGUMENTS, **{k: v for k, v in args.items() if k in PREFLIGHT_ARGUMENTS}}
    return common, pre


def launch_plan(args: Mapping[str, str], role: Role, environ: Mapping[str, str] | None = None) -> LaunchPlan:
    """Everything one side's launch file does, from its string arguments."""
    from fieldtest.labrun.configuration.launchsettings import _bool

    common, pre = split_preflight_args(args) if role == "robot" else (dict(args), {})
    cfg = parse_launch_args(common, role, environ=environ)
    config_dir = config_dir_for(cfg)
    env = ros_environment(cfg, config_dir / "cyclonedds.xml", config_dir / "fastdds.xml")
    plan_path, plan_text = _plan_file(cfg, config_dir)
    files = {plan_path: plan_text}
    if env.cyclonedds_xml is not None:
        files[config_dir / "cyclonedds.xml"] = env.cyclonedds_xml
    if env.fastdds_xml is not None:
        files[config_dir / "fastdds.xml"] = env.fastdds_xml
    zenohd = shutil.which("zenohd", path=(environ or os.environ).get("PATH"))
    from fieldtest.middleware.rmw_zenoh.security import RmwZenohSecurityError

    try:
        plan = LaunchPlan(cfg, config_dir, env, files, side_processes(cfg, config_dir, zenohd=zenohd))
        plan.nodes = host_nodes(cfg, plan_path) if role == "host" else robot_nodes(cfg, plan_path)
    except RmwZenohSecurityError as exc:
        raise LaunchArgError(f"launch argument security:={cfg.security}: {exc}") from None
    if role == "robot":
        if _bool("preflight", pre["preflight"]):
            try:
                battery = float(pre["min_battery_percent"])
            except ValueError:
                raise LaunchArgError(
                    f"launch argument min_battery_percent:={pre['min_battery_percent']!r}: expected a number"
                ) from None
            warn_only = _bool("preflight_warn_only", pre["preflight_warn_only"])
            robot_rmw = (os.environ if environ is None else environ).get("RMW_IMPLEMENTATION", "")
            plan.gate = robot_gate(cfg, plan_path, warn_only, battery, robot_rmw)
    return plan
