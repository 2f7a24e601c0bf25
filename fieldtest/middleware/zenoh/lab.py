"""Zenoh's lab side: zenoh-bridge-ros2dds and router configs of a lab side, and the twin's bridged path
(one trial's bridges and router with exactly those configs).

zenoh-bridge-ros2dds (1.x): the mode is the positional first argument (``zenoh-bridge-ros2dds
client -c <file>``); the config file holds endpoints, scouting, TLS/ACL and the ``plugins.ros2dds``
section, whose keys and values are checked as strictly as the plugin does (``check_ros2dds_plugin``;
unknown keys are errors in the bridge and ``id`` moved out of the plugin section). Note that the
bridge's command line overrides ``ros_localhost_only`` with ``$ROS_LOCALHOST_ONLY`` (false when
unset), so the launch file sets the environment *and* passes the flag. Where the bridge binary is
not installed, zenohd with the ros2dds plugin runs the same file (``zenohd_bridge_command``; built
by tools/install_zenoh_bridge.sh); ``run_trial_bridges`` starts and stops a trial's bridges (and
router) with exactly these configs. The bridge reads ``ROS_DISTRO`` (GID size, discovery settings),
so its process gets it explicitly.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fieldtest.middleware import registry
from fieldtest.middleware.dds.lab import bridge_cyclonedds_uri, dds_stays_on_machine
from fieldtest.middleware.labshared import (
    BridgeConfigError,
    received_by,
    ros_topic,
    sent_by,
)
from fieldtest.middleware.launch import LabLaunch, SideProcess, write_config_files
from fieldtest.middleware.zenoh.bridge import (
    LOOPBACK,
    BridgeBinaries,
    BridgeMissingError,
    bridge_argv,
    bridge_env,
    find_bridge,
    router_argv,
    side_domain,
)
from fieldtest.middleware.zenoh.infra import router_session_config
from fieldtest.middleware.zenoh.infra import zenoh_router_command as kit_router_command
from fieldtest.middleware.zenoh.security import zenoh_security_overrides
from fieldtest.middleware.zenoh.settings import Settings
from fieldtest.procs import ProcessStartError
from fieldtest.transport.base import TransportConfig

ZENOH_BRIDGE = "zenoh-bridge-ros2dds"
ZENOHD = "zenohd"


# plugins.ros2dds keys of zenoh-plugin-ros2dds 1.x (src/config.rs, struct Config, deny_unknown_fields).
# "id" is a Zenoh root key now, not a plugin key; "shm_enabled" exists only in builds with the
# dds_shm feature, and the default build (the bridge binary's and ours) refuses it.
ROS2DDS_PLUGIN_KEYS = frozenset(
    {
        "nodename",
        "namespace",
        "domain",
        "ros_localhost_only",
        "ros_automatic_discovery_range",
        "ros_static_peers",
        "allow",
        "deny",
        "pub_max_frequencies",
        "pub_priorities",
        "reliable_routes_blocking",
        "queries_timeout",
        "transient_local_cache_multiplier",
        "work_thread_num",
        "max_block_thread_num",
    }
)
ROS2DDS_INTERFACE_KINDS = frozenset(
    {"publishers", "subscribers", "service_servers", "service_clients", "action_servers", "action_clients"}
)
ROS2DDS_REMOVED_KEYS = frozenset({"id"})
# Zenoh priorities a route may take: 1 (real time) .. 7 (background); 0 is Zenoh's own control
# priority, which the plugin refuses (src/config.rs, deserialize_vec_regex_prio).
ROS2DDS_PRIORITIES = range(1, 8)
# A client bridge waits for its router instead of exiting (zenoh's client default is timeout_ms 0
# with exit_on_failure true: DEFAULT_CONFIG.json5 of eclipse-zenoh/zenoh, "connect"); the same retry
# period as the kit's own sessions (fieldtest.middleware.zenoh.transport.CONNECT_RETRY).
BRIDGE_CONNECT_TIMEOUT_MS = -1  # retry for ever


# ----------------------------------------------------------------------------------------- Zenoh


def zenoh_mode(cfg: LabLaunch) -> str:
    """Bridge mode: both peers in zenoh-peer, both clients of the router in zenoh-router."""
    if registry.get(cfg.middleware).lab_bridge_mode:
        return registry.get(cfg.middleware).lab_bridge_mode
    raise BridgeConfigError(f"middleware {cfg.middleware!r} has no Zenoh bridge")


def tcp_locator(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"tcp/{host}:{port}"


def zenoh_endpoints(cfg: LabLaunch) -> tuple[list[str], list[str]]:
    """(listen, connect) of this side's bridge: the robot listens in peer mode, the host connects."""
    if zenoh_mode(cfg) == "peer":
        if cfg.role == "robot":
            return [tcp_locator("0.0.0.0", cfg.settings(Settings).port)], []
        return [], [tcp_locator(cfg.robot_address, cfg.settings(Settings).port)]
    return [], [tcp_locator(cfg.router_address, cfg.settings(Settings).port)]


_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_/]+$")


def _exact(name: str) -> str:
    """A ROS name as an allow-list entry: the plugin anchors allow/deny regexes itself (``^...$``),
    and ROS names hold no regex metacharacters (checked, so a literal name cannot match more)."""
    if not _PLAIN_NAME.match(name):
        raise BridgeConfigError(f"{name!r} is not a plain ROS name")
    return name


def _anchored(name: str) -> str:
    """A ROS name as a ``pub_priorities``/``pub_max_frequencies`` regex: the plugin does not anchor
    those (src/config.rs), so "/tb4/cmd_vel" alone would also match "/tb4/fieldtest/cmd_vel"."""
    return f"^{_exact(name)}$"


def ros2dds_plugin(cfg: LabLaunch) -> dict[str, Any]:
    """The ``plugins.ros2dds`` section: route exactly this side's link topics, nothing else."""
    plugin: dict[str, Any] = {
        "nodename": f"zenoh_bridge_ros2dds_{cfg.role}",
        "domain": cfg.domain_id,
        "allow": {
            "publishers": [_exact(ros_topic(cfg, t.topic)) for t in sent_by(cfg)],
            "subscribers": [_exact(ros_topic(cfg, t.topic)) for t in received_by(cfg)],
            "service_servers": [],
            "service_clients": [],
            "action_servers": [],
            "action_clients": [],
        },
        # Per-topic QoS is not configured: each route takes the discovered DDS writer's reliability
        # (best-effort clock probes: Zenoh congestion control Drop), and the receiving bridge's DDS
        # writer is always RELIABLE, which a best-effort reader matches (zenoh-plugin-ros2dds
        # src/route_publisher.rs, src/route_subscriber.rs).
        "reliable_routes_blocking": True,
    }
    if dds_stays_on_machine(cfg):
        if cfg.ros_distro == "humble":
            plugin["ros_localhost_only"] = True
        else:
            plugin["ros_automatic_discovery_range"] = "LOCALHOST"
    if cfg.settings(Settings).express:
        plugin["pub_priorities"] = [f"{_anchored(ros_topic(cfg, '/' + cfg.cmd_topic))}=1:express"]
    return plugin


def zenoh_bridge_config(cfg: LabLaunch) -> dict[str, Any]:
    """The bridge's config file (as a dict; ``to_json5`` writes it). The mode is not in it."""
    listen, connect = zenoh_endpoints(cfg)
    config: dict[str, Any] = {
        "plugins": {"ros2dds": ros2dds_plugin(cfg)},
        "listen": {"endpoints": listen},
        "connect": _bridge_connect(connect),
        # No multicast scouting on the Wi-Fi: the link is exactly the configured endpoint.
        "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}},
    }
    return _with_zenoh_security(cfg, config, cfg.role)


def _bridge_connect(endpoints: list[str]) -> dict[str, Any]:
    """Connect settings of a bridge: one that dials (peer host, clients) retries until it is up."""
    if not endpoints:
        return {"endpoints": []}
    from fieldtest.middleware.zenoh.transport import CONNECT_RETRY

    return {
        "endpoints": endpoints,
        "timeout_ms": BRIDGE_CONNECT_TIMEOUT_MS,
        "exit_on_failure": False,
        "retry": dict(CONNECT_RETRY),
    }


def _with_zenoh_security(cfg: LabLaunch, config: dict[str, Any], identity: str) -> dict[str, Any]:
    if cfg.security == "none":
        return config
    overrides = zenoh_security_overrides(
        cfg.keystore, identity, cfg.security, namespace=cfg.namespace, session_config=config
    )
    from fieldtest.middleware.zenoh.transport import deep_merge

    return deep_merge(config, overrides)


def zenoh_router_config(cfg: LabLaunch) -> dict[str, Any]:
    """Config of the router of zenoh-router trials (for zenohd, or the kit's Python router): the
    twin's router config, listening on every address."""
    return _with_zenoh_security(cfg, router_session_config("0.0.0.0", cfg.settings(Settings).port), "router")


def check_ros2dds_plugin(plugin: dict[str, Any], source: str = "plugins.ros2dds") -> None:
    """Refuse keys the bridge would refuse, with the key named."""
    for key in plugin:
        if key in ROS2DDS_REMOVED_KEYS:
            raise BridgeConfigError(
                f"{source}.{key}: removed from the plugin section (use the Zenoh root key 'id')"
            )
        if key not in ROS2DDS_PLUGIN_KEYS:
            raise BridgeConfigError(
                f"{source}.{key}: unknown key (known: {', '.join(sorted(ROS2DDS_PLUGIN_KEYS))})"
            )
    for section in ("allow", "deny"):
        for kind, patterns in (plugin.get(section) or {}).items():
            if kind not in ROS2DDS_INTERFACE_KINDS:
                raise BridgeConfigError(f"{source}.{section}.{kind}: unknown interface kind")
            for pattern in patterns:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise BridgeConfigError(
                        f"{source}.{section}.{kind}: bad regex {pattern!r} ({exc})"
                    ) from None
    if "allow" in plugin and "deny" in plugin:
        raise BridgeConfigError(f"{source}: 'allow' and 'deny' cannot both be set")
    for entry in plugin.get("pub_priorities") or []:
        _check_priority(entry, f"{source}.pub_priorities")
    frequencies = plugin.get("pub_max_frequencies")
    for entry in frequencies if isinstance(frequencies, list) else []:
        _check_frequency(entry, f"{source}.pub_max_frequencies")


def _regex_and_value(entry: Any, source: str, form: str) -> tuple[str, str]:
    """Split ``<regex>=<value>`` at the first '=' as the plugin does; the regex must compile."""
    if not isinstance(entry, str) or "=" not in entry:
        raise BridgeConfigError(f"{source}: {entry!r} is not {form}")
    regex, value = entry.split("=", 1)
    try:
        re.compile(regex)
    except re.error as exc:
        raise BridgeConfigError(f"{source}: bad regex in {entry!r} ({exc})") from None
    return regex, value


def _check_priority(entry: Any, source: str) -> None:
    _, value = _regex_and_value(entry, source, '"<regex>=<priority>[:express]"')
    priority = value.removesuffix(":express")
    if not priority.isdigit() or int(priority) not in ROS2DDS_PRIORITIES:
        raise BridgeConfigError(
            f"{source}: priority {priority!r} in {entry!r} is not an integer from "
            f"{ROS2DDS_PRIORITIES.start} to {ROS2DDS_PRIORITIES.stop - 1}"
        )


def _check_frequency(entry: Any, source: str) -> None:
    _, value = _regex_and_value(entry, source, '"<regex>=<frequency>"')
    try:
        float(value)
    except ValueError:
        raise BridgeConfigError(f"{source}: frequency {value!r} in {entry!r} is not a number") from None


def to_json5(config: dict[str, Any], comment: str = "") -> str:
    """JSON is valid JSON5; a leading comment says where the file came from."""
    header = f"// {comment}\n" if comment else ""
    return header + json.dumps(config, indent=2) + "\n"


def zenoh_bridge_command(cfg: LabLaunch, config_path: str | Path) -> list[str]:
    """``zenoh-bridge-ros2dds <mode> -c <file>`` plus the discovery-scope flags."""
    argv = [ZENOH_BRIDGE, zenoh_mode(cfg), "-c", str(config_path)]
    if dds_stays_on_machine(cfg):
        if cfg.ros_distro == "humble":
            argv.append("--ros-localhost-only")
        else:
            argv += ["--ros-automatic-discovery-range", "LOCALHOST"]
    return argv


def zenohd_bridge_command(cfg: LabLaunch, config_path: str | Path, bridge: BridgeBinaries) -> list[str]:
    """The same bridge as zenohd + the ros2dds plugin (what tools/install_zenoh_bridge.sh builds).
    The discovery scope comes from the config file (zenohd has no --ros-* flags)."""
    return bridge_argv(bridge, config_path, zenoh_mode(cfg))


def zenoh_bridge_env(cfg: LabLaunch) -> dict[str, str]:
    """The plugin reads ROS_DISTRO (GID size of ros_discovery_info, discovery settings; iron if unset).
    Where the nodes run CycloneDDS the launch environment already holds the kit's CYCLONEDDS_URI (or
    unsets the login's); with Fast DDS nodes the bridge's CycloneDDS gets its own here."""
    env: dict[str, str] = {"ROS_DISTRO": cfg.ros_distro}
    if registry.get(cfg.middleware).lab_node_rmw(cfg.dds) != "cyclonedds":
        env["CYCLONEDDS_URI"] = bridge_cyclonedds_uri(cfg)
    return env


def zenoh_router_command(
    cfg: LabLaunch, config_path: str | Path, config: dict[str, Any], *, zenohd: str | None = None
) -> list[str]:
    """zenohd with the config file when installed, else the kit's own router (eclipse-zenoh in
    router mode) with the same listen/TLS/ACL settings."""
    if zenohd:
        return [zenohd, "-c", str(config_path)]
    extra = {k: v for k, v in config.items() if k in ("transport", "access_control", "listen")}
    return kit_router_command("0.0.0.0", cfg.settings(Settings).port, extra, python="python3")


def lab_side_processes(cfg: LabLaunch, folder: Path, *, zenohd: str | None = None) -> list[SideProcess]:
    """This side's bridge, and on the host the router where it runs one."""
    out: list[SideProcess] = []
    if cfg.start_router and cfg.role == "host":
        path = folder / "zenoh_router.json5"
        config = zenoh_router_config(cfg)
        text = to_json5(config, "fieldtest lab Zenoh router (generated)")
        argv = zenoh_router_command(cfg, path, config, zenohd=zenohd)
        out.append(SideProcess("zenoh_router", argv, {}, {path.name: text}))
    path = folder / f"zenoh_bridge_{cfg.role}.json5"
    text = to_json5(
        zenoh_bridge_config(cfg), f"fieldtest lab zenoh-bridge-ros2dds, {cfg.role} side (generated)"
    )
    out.append(
        SideProcess("zenoh_bridge", zenoh_bridge_command(cfg, path), zenoh_bridge_env(cfg), {path.name: text})
    )
    return out


def rehearsal_side_process(proc: SideProcess, cfg: LabLaunch, config_dir: Path) -> SideProcess:
    """The bridge and router as zenohd with the ros2dds plugin where their binaries are not installed."""
    argv, env = proc.argv, dict(proc.env)
    if proc.name == "zenoh_bridge" and proc.argv[0] == ZENOH_BRIDGE:
        config = config_dir / next(iter(proc.config_files))
        # The nodes' Fast DDS is pinned to 127.0.0.1 (environment.fastdds_profile_xml); the
        # plugin's CycloneDDS 11 never meets it there without a unicast peer (0 routes).
        argv, bridge_env = zenohd_bridge_launch(cfg, config, find_bridge(), LOOPBACK)
        env.update(bridge_env)
    elif proc.name == "zenoh_router" and Path(proc.argv[0]).name != ZENOHD:
        argv = router_argv(find_bridge(), config_dir / next(iter(proc.config_files)))
    return SideProcess(proc.name, argv, env, proc.config_files)


# ------------------------------------------------------------------ one trial's Zenoh bridges

BRIDGE_START_CHECK_S = 0.5  # a bridge that refuses its config exits within this
BRIDGE_STOP_TIMEOUT_S = 5.0


def twin_side_launches(
    transport: TransportConfig, cmd_type: str, robot_traffic: str = "none"
) -> tuple[LabLaunch, LabLaunch]:
    """The host's and robot's LabLaunch of a twin trial bridged as in the lab: each side's DDS in
    its own domain (``side_domain``); Humble for Twist commands, Jazzy for TwistStamped. The
    bridges also carry ``robot_traffic``'s topics, and route cmd_vel at priority 1 (express) when
    the transport's zenoh ``express`` setting asks."""
    common = {
        "ros_distro": "humble" if cmd_type == "twist" else "jazzy",
        "cmd_type": cmd_type,
        "record_ros2bag": False,
        "robot_traffic": robot_traffic,
        **transport.model_dump(
            include={"middleware", "security", "qos", "namespace", "keystore"}
            | {"host_address", "robot_address", "router_address"}
        ),
        "zenoh": transport.settings(Settings).model_dump(include={"port", "express"}),
    }
    host, robot = (
        LabLaunch(role=role, domain_id=side_domain(transport, role), **common) for role in ("host", "robot")
    )
    return host, robot


def trial_bridge_processes(
    host: LabLaunch,
    robot: LabLaunch,
    config_dir: str | Path,
    bridge: BridgeBinaries,
    *,
    dds_address: str | None = LOOPBACK,
) -> list[SideProcess]:
    """The router (zenoh-router) and the robot's and host's bridges of one trial, in start order:
    zenohd + the ros2dds plugin with exactly the configs the kit generates for the lab.

    ``dds_address``: where the kit's own DDS endpoints are pinned (the bridges get a unicast peer
    there, ``bridge_env``); None next to real ROS nodes (the plugin's own discovery settings).
    """
    folder = Path(config_dir)
    out: list[SideProcess] = []
    if registry.get(host.middleware).infra_process == "router":
        path = folder / "zenoh_router.json5"
        text = to_json5(zenoh_router_config(host), "fieldtest Zenoh router (generated)")
        out.append(SideProcess("router", router_argv(bridge, path), {}, {path.name: text}))
    for cfg in (robot, host):
        path = folder / f"zenoh_bridge_{cfg.role}.json5"
        text = to_json5(
            zenoh_bridge_config(cfg), f"fieldtest zenoh-bridge-ros2dds, {cfg.role} side (generated)"
        )
        argv, env = zenohd_bridge_launch(cfg, path, bridge, dds_address)
        out.append(SideProcess(f"bridge_{cfg.role}", argv, env, {path.name: text}))
    return out


def zenohd_bridge_launch(
    cfg: LabLaunch, config_path: Path, bridge: BridgeBinaries, dds_address: str | None
) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of one side's bridge as zenohd + the ros2dds plugin reading ``config_path``.

    ``dds_address``: where the side's DDS endpoints are pinned (the bridge gets a unicast peer there,
    ``bridge_env``); None: the plugin's own discovery settings. The plugin pins 127.0.0.1 itself
    under ``ros_localhost_only`` (set for Humble only, ``ros2dds_plugin``)."""
    pins = bool(ros2dds_plugin(cfg).get("ros_localhost_only"))
    env = bridge_env(cfg.ros_distro, dds_address, plugin_pins_loopback=pins)
    return zenohd_bridge_command(cfg, config_path, bridge), env


@contextlib.contextmanager
def run_trial_bridges(
    host: LabLaunch,
    robot: LabLaunch,
    config_dir: str | Path,
    *,
    bridge: BridgeBinaries | None = None,
    dds_address: str | None = LOOPBACK,
    prefixes: dict[str, list[str]] | None = None,
) -> Iterator[dict[str, subprocess.Popen]]:
    """Start one trial's bridges (and router) and stop them when the block ends, on every path.

    For the lab rehearsal: both sides on this machine, each bridge logging to
    ``<config_dir>/<name>.log``. Start a fresh set per trial: a bridge that sees a publisher of a
    bridged topic go and come back adds another DDS reader (a plugin bug), and its commands then
    arrive twice. ``prefixes`` maps a process name to a command prefix (``ip netns exec ...``).
    Stop the kit's host node (its stop burst) before leaving the block. Raises BridgeMissingError
    when zenohd/the plugin are not built, BridgeConfigError when a bridge refuses its config.

    On one machine the two sides' DDS must not meet except through the bridges: give them separate
    domains. ``twin_side_launches`` does (``side_domain``), and the kit's transports opened with
    the zenoh ``path`` "bridge" use the same domains, on 127.0.0.1, with $ROS_DISTRO as the bridges':

        transport = request.transport.with_settings(Settings, path="bridge")
        host, robot = twin_side_launches(transport, request.cmd_type)
        os.environ["ROS_DISTRO"] = host.ros_distro  # GID size of the kit's ros_discovery_info
        with run_trial_bridges(host, robot, trial_dir / "bridges"):
            ...  # open_transport(transport, "host"/"robot") in the trial's host and robot nodes
    """
    bridge = bridge or find_bridge()
    processes = trial_bridge_processes(host, robot, config_dir, bridge, dds_address=dds_address)
    write_config_files(processes, config_dir)
    running: dict[str, subprocess.Popen] = {}
    try:
        for proc in processes:
            log = (Path(config_dir) / f"{proc.name}.log").open("w")
            argv = [*(prefixes or {}).get(proc.name, []), *proc.argv]
            running[proc.name] = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **proc.env}, start_new_session=True,
            )  # fmt: skip
            log.close()
        time.sleep(BRIDGE_START_CHECK_S)
        for name, popen in running.items():
            if popen.poll() is not None:
                tail = (Path(config_dir) / f"{name}.log").read_text(errors="replace").strip()[-400:]
                raise BridgeConfigError(f"{name} exited with code {popen.returncode}: {tail}")
        yield running
    finally:
        for popen in reversed(list(running.values())):  # host bridge, robot bridge, router
            stop_process(popen)


def stop_process(popen: subprocess.Popen, timeout_s: float = BRIDGE_STOP_TIMEOUT_S) -> None:
    """SIGTERM, then SIGKILL of its process group after ``timeout_s``."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()


def twin_bridge_processes(
    transport: TransportConfig, cmd_type: str, config_dir: Path, robot_traffic: str = "none"
) -> tuple[list[tuple[str, SideProcess]], dict[str, str]]:
    """A bridged twin trial's zenohd router (zenoh-router) and two bridges with the lab's generated
    configs (written to ``config_dir``), each with its emulated node, and the environment of the
    twin's host and robot (their ROS_DISTRO must match the bridges' for ros_discovery_info)."""
    try:
        bridge = find_bridge()
    except BridgeMissingError as exc:
        raise ProcessStartError(str(exc)) from None
    host, robot = twin_side_launches(transport, cmd_type, robot_traffic)
    processes = trial_bridge_processes(host, robot, config_dir, bridge)
    write_config_files(processes, config_dir)
    placed = [(p.name if p.name == "router" else p.name.removeprefix("bridge_"), p) for p in processes]
    return placed, {"ROS_DISTRO": host.ros_distro}
