"""ROS-free stand-ins for the lab launch files: the same arguments, the same driver and monitor code.

    python -m fieldtest.labrun.rehearsal.standin host middleware:=zenoh-peer trial_dir:=/tmp/t ...
    python -m fieldtest.labrun.rehearsal.standin robot middleware:=zenoh-peer trial_dir:=/tmp/r ...

Instead of rclpy plus a bridge, each side joins the trial's middleware directly with the kit's own
transports (wire-compatible with the bridges and with ROS 2 DDS), and runs ``LabDriver`` /
``LabLinkMonitor`` (over ``fieldtest.endpoints``) exactly as the rclpy nodes do: go/stop files, status files, lost-robot
watchdog, stop burst, relay with its watchdog. The lab runner drives them like the real launch
files, which is how the runner is tested on a machine without ROS; on a lab machine they are a
quick link check before ROS is involved (there is no base behind the stand-in robot).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from fieldtest.endpoints.link import RemappedTransport, command_remap
from fieldtest.endpoints.status import say
from fieldtest.labrun.configuration.launchsettings import LaunchArgError, parse_launch_args
from fieldtest.labrun.nodelogic.driver import LabDriver, request_for_side
from fieldtest.labrun.nodelogic.monitor import LabLinkMonitor
from fieldtest.labrun.orchestration.launchplan import split_preflight_args
from fieldtest.linkconfig import Role, TransportConfig
from fieldtest.middleware import registry
from fieldtest.middleware.launch import LabLaunch
from fieldtest.middleware.registry import open_transport
from fieldtest.procs import stop_on_signals, watch_parent
from fieldtest.realtime import try_realtime


def transport_config(cfg: LabLaunch) -> TransportConfig:
    if not registry.get(cfg.middleware).twin:
        raise LaunchArgError(
            f"middleware {cfg.middleware} needs ROS 2 ({registry.get(cfg.middleware).lab_node_rmw(cfg.dds)}); no stand-in exists"
        )
    return TransportConfig.model_validate(
        {
            **cfg.model_dump(include={"middleware", "qos", "namespace", "domain_id", "security", "keystore"}),
            **cfg.model_dump(include={"host_address", "robot_address", "router_address", "broker_address"}),
            "families": cfg.families,  # its ports (launch arguments), the other settings as given
        }
    )


@contextlib.contextmanager
def infrastructure(cfg: LabLaunch, config: TransportConfig, workdir: Path) -> Iterator[None]:
    """The router or broker the host starts for zenoh-router / mqtt-local-broker trials."""
    starts = {"router": cfg.start_router, "broker": cfg.start_broker}.get(
        registry.get(cfg.middleware).infra_process or ""
    )
    process = registry.infrastructure(config, workdir) if cfg.role == "host" and starts else None
    if process is None:
        yield
        return
    with process:
        yield


def parse_argv(argv: list[str]) -> tuple[Role, dict[str, str]]:
    if not argv or argv[0] not in ("host", "robot"):
        raise LaunchArgError("usage: python -m fieldtest.labrun.rehearsal.standin host|robot name:=value ...")
    args = {}
    for item in argv[1:]:
        name, sep, value = item.partition(":=")
        if not sep:
            raise LaunchArgError(f"argument {item!r}: expected name:=value")
        args[name] = value
    return ("host" if argv[0] == "host" else "robot"), args


def run_side(role: Role, args: dict[str, str]) -> int:
    common, _ = split_preflight_args(args) if role == "robot" else (args, {})
    environ = {"ROS_DISTRO": os.environ.get("ROS_DISTRO") or "humble"}
    cfg = parse_launch_args(common, role, environ=environ)
    config = transport_config(cfg)
    trial_dir = Path(cfg.trial_dir) if cfg.trial_dir else Path.cwd() / f"fieldtest-{role}"
    request = request_for_side(config, cfg.plan, cfg.cmd_type, name=f"lab-{role}")
    realtime = try_realtime()  # as the rclpy nodes do, before the middleware's threads start
    with stop_on_signals() as stop, infrastructure(cfg, config, trial_dir):
        watch_parent(stop)
        transport = RemappedTransport(open_transport(config, role), command_remap(cfg.relay))
        if role == "host":
            driver = LabDriver(
                request, trial_dir, transport=transport, wait_for_go=bool(cfg.trial_dir), realtime=realtime
            )
            say(f"READY stand-in host {cfg.middleware}")
            try:
                code = driver.run(stop)
            finally:
                status = driver.close()
            say(f"HOST DONE end={status['end']} sent={status['plan_sent']}/{status['plan_ticks']}")
            return code
        relayed: list[int] = []
        monitor = LabLinkMonitor(
            request,
            trial_dir,
            transport=transport,
            relay=(lambda _t: relayed.append(1)) if cfg.relay else None,
            realtime=realtime,
        )
        say(f"READY stand-in robot {cfg.middleware}")
        try:
            monitor.run(stop)
        finally:
            status = monitor.close()
        say(f"ROBOT DONE received={status['received']} offset_s={status['clock_offset_s']}")
        return 0


def main(argv: list[str] | None = None) -> int:
    try:
        role, args = parse_argv(list(sys.argv[1:] if argv is None else argv))
        return run_side(role, args)
    except LaunchArgError as exc:
        print(f"fieldtest.labrun.rehearsal.standin: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
