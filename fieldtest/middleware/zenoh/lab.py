"""Bridge, router, broker and recorder configuration of the lab, from a ``LabLaunch`` (no ROS needed).

Which topics cross the host-robot link, per direction (ROS names under the robot namespace):

    host -> robot   cmd_vel (fieldtest/cmd_vel when the robot relays), fieldtest/cmd_stamp (Humble
                    Twist commands only), fieldtest/clock_probe_reply
    robot -> host   fieldtest/clock_probe

Everything else (odometry, receipts, clock offsets) stays on its machine and is recorded there.

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

mqtt_client (ika-rwth-aachen, ROS 2 2.3+ layout): ``bridge.ros2mqtt.ros_topics`` lists the ROS
topics, each with its own ``mqtt_topic``/``primitive``/``ros_type``/``inject_timestamp``/``advanced``
block; ``bridge.mqtt2ros.mqtt_topics`` likewise with ``ros_topic``. Receivers get a fixed
``ros_type`` so they need not wait for the retained type announcement, except with
``inject_timestamp``: a receiver with a fixed type never reads the announcement, and only the
announcement tells it that the payload starts with a timestamp (mqtt_client
src/MqttClient.cpp, ``message_arrived``/``mqtt2ros``; mqtt2ros has no inject_timestamp parameter).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fieldtest import rosmsg
from fieldtest.catalog import catalog_entry
from fieldtest.errors import FieldtestError
from fieldtest.middleware.dds.lab import _local_only, dds_security_enabled, rmw_zenoh_security_enabled
from fieldtest.middleware.launch import LabLaunch, SideProcess, write_config_files
from fieldtest.middleware.mqtt.infra import mosquitto_conf as broker_conf
from fieldtest.middleware.mqtt.infra import plain_listener_lines, router_session_config
from fieldtest.middleware.mqtt.infra import zenoh_router_command as kit_router_command
from fieldtest.middleware.zenoh.bridge import (
    LOOPBACK,
    BridgeBinaries,
    bridge_argv,
    bridge_env,
    find_bridge,
    router_argv,
    side_domain,
)
from fieldtest.qos import get_qos, mqtt_qos
from fieldtest.record import (
    CLOCK_OFFSET_TOPIC,
    CLOCK_PROBE_REPLY_TOPIC,
    CLOCK_PROBE_TOPIC,
    CMD_STAMP_TOPIC,
    RECEIPTS_TOPIC,
)
from fieldtest.security.policy import BASE_TOPICS, kit_enclave
from fieldtest.security.settings import mosquitto_acl as acl_for_flows
from fieldtest.security.settings import mosquitto_tls_lines, zenoh_security_overrides
from fieldtest.transport.base import TransportConfig, full_topic

ZENOH_BRIDGE = "zenoh-bridge-ros2dds"
ZENOHD = "zenohd"
MOSQUITTO = "mosquitto"

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


class BridgeConfigError(FieldtestError, ValueError):
    """A bridge/broker configuration that the real program would refuse."""


@dataclass(frozen=True)
class LinkTopic:
    topic: str  # ROS name under the namespace, e.g. "/cmd_vel"
    typename: str
    sender: str  # "host" or "robot"


def link_topics(cfg: LabLaunch) -> list[LinkTopic]:
    """The topics the bridges carry for this trial, in a fixed order."""
    cmd_type = rosmsg.TWIST if cfg.cmd_type == "twist" else rosmsg.TWIST_STAMPED
    topics = [LinkTopic("/" + cfg.cmd_topic, cmd_type, "host")]
    if cfg.cmd_type == "twist":
        topics.append(LinkTopic(CMD_STAMP_TOPIC, rosmsg.HEADER, "host"))
    topics += [
        LinkTopic(CLOCK_PROBE_REPLY_TOPIC, rosmsg.CLOCK_PROBE, "host"),
        LinkTopic(CLOCK_PROBE_TOPIC, rosmsg.CLOCK_PROBE, "robot"),
    ]
    return topics


def ros_topic(cfg: LabLaunch, topic: str) -> str:
    return full_topic(cfg.namespace, topic)


def wire_name(cfg: LabLaunch, topic: str) -> str:
    """Zenoh key / MQTT topic, as zenoh-bridge-ros2dds maps ROS names (and the kit's transports do)."""
    return ros_topic(cfg, topic).lstrip("/")


def sent_by(cfg: LabLaunch) -> list[LinkTopic]:
    return [t for t in link_topics(cfg) if t.sender == cfg.role]


def received_by(cfg: LabLaunch) -> list[LinkTopic]:
    return [t for t in link_topics(cfg) if t.sender != cfg.role]


# ----------------------------------------------------------------------------------------- Zenoh


def zenoh_mode(cfg: LabLaunch) -> str:
    """Bridge mode: both peers in zenoh-peer, both clients of the router in zenoh-router."""
    if cfg.entry.lab_bridge_mode:
        return cfg.entry.lab_bridge_mode
    raise BridgeConfigError(f"middleware {cfg.middleware!r} has no Zenoh bridge")


def _tcp(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"tcp/{host}:{port}"


def zenoh_endpoints(cfg: LabLaunch) -> tuple[list[str], list[str]]:
    """(listen, connect) of this side's bridge: the robot listens in peer mode, the host connects."""
    if zenoh_mode(cfg) == "peer":
        if cfg.role == "robot":
            return [_tcp("0.0.0.0", cfg.zenoh_port)], []
        return [], [_tcp(cfg.robot_address, cfg.zenoh_port)]
    return [], [_tcp(cfg.router_address, cfg.zenoh_port)]


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
        "reliable_routes_blocking": True,
    }
    if _local_only(cfg):
        if cfg.ros_distro == "humble":
            plugin["ros_localhost_only"] = True
        else:
            plugin["ros_automatic_discovery_range"] = "LOCALHOST"
    if cfg.zenoh_express:
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
    return _with_zenoh_security(cfg, router_session_config("0.0.0.0", cfg.zenoh_port), "router")


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
    if _local_only(cfg):
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
    """The plugin reads ROS_DISTRO (GID size of ros_discovery_info, discovery settings; iron if unset)."""
    return {"ROS_DISTRO": cfg.ros_distro}


def zenoh_router_command(
    cfg: LabLaunch, config_path: str | Path, config: dict[str, Any], *, zenohd: str | None = None
) -> list[str]:
    """zenohd with the config file when installed, else the kit's own router (eclipse-zenoh in
    router mode) with the same listen/TLS/ACL settings."""
    if zenohd:
        return [zenohd, "-c", str(config_path)]
    extra = {k: v for k, v in config.items() if k in ("transport", "access_control", "listen")}
    return kit_router_command("0.0.0.0", cfg.zenoh_port, extra, python="python3")


# --------------------------------------------------------------------------------------- rmw_zenoh


def rmw_zenoh_router(cfg: LabLaunch) -> tuple[list[str], dict[str, str]]:
    """rmw_zenohd of this side: the host's listens, the robot's connects to it (router to router).

    The default router config listens on ``tcp/[::]:7447`` (rmw_zenoh_cpp
    config/DEFAULT_RMW_ZENOH_ROUTER_CONFIG.json5), which fails where IPv6 is off: the host's listens
    on IPv4 explicitly. Secured, the router reads zenoh_security_tools' ``zenohd.json5`` and the
    endpoints are tls/ (ZENOH_CONFIG_OVERRIDE is applied on top of the file)."""
    env: dict[str, str] = {}
    scheme = "tcp"
    if rmw_zenoh_security_enabled(cfg):
        from fieldtest.security.rmw_zenoh import router_config

        env["ZENOH_ROUTER_CONFIG_URI"] = str(router_config(cfg.keystore))
        scheme = "tls"
    if cfg.role == "robot":
        endpoint = _tcp(cfg.host_address, cfg.zenoh_port).replace("tcp/", f"{scheme}/", 1)
        env["ZENOH_CONFIG_OVERRIDE"] = f'connect/endpoints=["{endpoint}"]'
    else:
        endpoint = _tcp("0.0.0.0", cfg.zenoh_port).replace("tcp/", f"{scheme}/", 1)
        env["ZENOH_CONFIG_OVERRIDE"] = f'listen/endpoints=["{endpoint}"]'
    return ["ros2", "run", "rmw_zenoh_cpp", "rmw_zenohd"], env


# ------------------------------------------------------------------------------------------ MQTT


def mqtt_broker_host(cfg: LabLaunch) -> str:
    """The broker's address: the host's (mqtt-local-broker) or its own (mqtt-broker)."""
    listener = catalog_entry(cfg.middleware).listener
    if not cfg.mqtt or listener is None:
        raise BridgeConfigError(f"middleware {cfg.middleware!r} has no MQTT broker")
    return getattr(cfg, listener[1])


def _ros_qos_params(cfg: LabLaunch) -> dict[str, Any]:
    qos = get_qos(cfg.qos)
    return {"queue_size": qos.depth, "qos": {"reliability": qos.reliability, "durability": qos.durability}}


def mqtt_client_params(cfg: LabLaunch) -> dict[str, Any]:
    """mqtt_client's parameter file content for this side."""
    if not cfg.mqtt:
        raise BridgeConfigError(f"middleware {cfg.middleware!r} has no MQTT bridge")
    broker: dict[str, Any] = {"host": mqtt_broker_host(cfg), "port": cfg.mqtt_port}
    client: dict[str, Any] = {"id": f"fieldtest_{cfg.role}"}
    if cfg.security != "none":
        from fieldtest.security.keystore import tls_files

        files = tls_files(cfg.keystore, cfg.role)
        broker["tls"] = {"enabled": True, "ca_certificate": str(Path(files.ca).absolute())}
        client["tls"] = {
            "certificate": str(Path(files.cert).absolute()),
            "key": str(Path(files.key).absolute()),
        }
    ros2mqtt: dict[str, Any] = {"ros_topics": [ros_topic(cfg, t.topic) for t in sent_by(cfg)]}
    for t in sent_by(cfg):
        ros2mqtt[ros_topic(cfg, t.topic)] = {
            "mqtt_topic": wire_name(cfg, t.topic),
            "primitive": False,
            "inject_timestamp": cfg.mqtt_inject_timestamp,
            "advanced": {"ros": _ros_qos_params(cfg), "mqtt": {"qos": mqtt_qos(cfg.qos), "retained": False}},
        }
    mqtt2ros: dict[str, Any] = {"mqtt_topics": [wire_name(cfg, t.topic) for t in received_by(cfg)]}
    for t in received_by(cfg):
        block: dict[str, Any] = {"ros_topic": ros_topic(cfg, t.topic), "primitive": False}
        if not cfg.mqtt_inject_timestamp:  # else the type (and the stamp flag) come from the sender
            block["ros_type"] = t.typename
        block["advanced"] = {
            "mqtt": {"qos": mqtt_qos(cfg.qos)},
            "ros": {**_ros_qos_params(cfg), "latched": False},
        }
        mqtt2ros[wire_name(cfg, t.topic)] = block
    return {
        "/**": {
            "ros__parameters": {
                "broker": broker,
                "client": client,
                "bridge": {"ros2mqtt": ros2mqtt, "mqtt2ros": mqtt2ros},
            }
        }
    }


def check_mqtt_client_pair(sender: dict[str, Any], receiver: dict[str, Any]) -> list[str]:
    """Problems of two mqtt_client parameter files (``mqtt_client_params`` output) that would garble
    or drop messages: every sent MQTT topic needs a receiver, and a timestamp-injecting sender needs
    a receiver without a fixed ``ros_type`` (mqtt_client learns "stamped" only from the type
    announcement, which a fixed-type receiver ignores: it would publish stamp + message as the
    message; mqtt_client src/MqttClient.cpp)."""
    out = next(iter(sender.values()))["ros__parameters"]["bridge"]["ros2mqtt"]
    into = next(iter(receiver.values()))["ros__parameters"]["bridge"]["mqtt2ros"]
    problems = []
    for ros_name in out["ros_topics"]:
        block = out[ros_name]
        mqtt_topic = block["mqtt_topic"]
        if mqtt_topic not in into.get("mqtt_topics", []):
            problems.append(f"{mqtt_topic}: sent, but no mqtt2ros entry receives it")
        elif block.get("inject_timestamp") and not block.get("primitive") and "ros_type" in into[mqtt_topic]:
            problems.append(
                f"{mqtt_topic}: inject_timestamp with a fixed ros_type on the receiver: the stamp "
                "would be published as part of the message"
            )
    return problems


def to_yaml(data: dict[str, Any], comment: str = "") -> str:
    header = f"# {comment}\n" if comment else ""
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def mqtt_client_command(params_path: str | Path) -> list[str]:
    return ["ros2", "run", "mqtt_client", "mqtt_client", "--ros-args", "--params-file", str(params_path)]


def mosquitto_acl(cfg: LabLaunch) -> str:
    """ACL by certificate CN (security's one ACL writer, for this trial's link topics): each side
    writes what it sends, reads what it receives, with mqtt_client's type announcements."""
    flows = [(wire_name(cfg, t.topic), t.sender) for t in link_topics(cfg)]
    return acl_for_flows(flows, "fieldtest lab ACL (generated)")


def mosquitto_conf(
    cfg: LabLaunch,
    acl_path: str | Path | None = None,
    *,
    bind_address: str = "0.0.0.0",
    run_as: str | None = None,
) -> str:
    """mosquitto.conf (2.x) for the broker of an MQTT trial, plain or TLS with client certificates:
    the twin's broker config (``fieldtest.middleware.mqtt.infra.mosquitto_conf``) around this listener.

    Started as root, Mosquitto drops to the ``mosquitto`` user before reading the ACL: ``run_as``
    sets the ``user`` option when the files are readable only by another user.
    """
    if cfg.security == "none":
        listener = plain_listener_lines(bind_address, cfg.mqtt_port)
    elif acl_path is None:
        raise BridgeConfigError("a TLS broker needs its ACL file path")
    else:
        listener = mosquitto_tls_lines(cfg.keystore, acl_path, port=cfg.mqtt_port, bind_address=bind_address)
    return broker_conf(
        listener, run_as=run_as, comment="fieldtest lab broker (generated by fieldtest.middleware.zenoh.lab)"
    )


# Mosquitto options that per_listener_settings ties to the listener defined before them.
PER_LISTENER_OPTIONS = ("allow_anonymous", "acl_file")


def two_listener_mosquitto_conf(
    cfg: LabLaunch,
    acl_path: str | Path,
    *,
    plain_port: int,
    bind_address: str = "0.0.0.0",
    run_as: str | None = None,
) -> str:
    """mosquitto.conf for a separate broker machine serving a campaign with security off and on:
    a plain anonymous listener on ``plain_port`` and the TLS listener of ``cfg`` (client
    certificates, the trial's ACL) on ``cfg.mqtt_port``, each with its own settings."""
    if cfg.security == "none" or not cfg.mqtt:
        raise BridgeConfigError("broker-config: needs an MQTT middleware with security on (the TLS listener)")
    if plain_port == cfg.mqtt_port:
        raise BridgeConfigError(f"broker-config: plain and TLS listeners both on port {plain_port}")
    tls = mosquitto_tls_lines(cfg.keystore, acl_path, port=cfg.mqtt_port, bind_address=bind_address)
    own = [line for line in tls if line.startswith(PER_LISTENER_OPTIONS)]
    listeners = [*plain_listener_lines(bind_address, plain_port), *[x for x in tls if x not in own], *own]
    comment = "fieldtest lab broker, plain and TLS listeners (generated by fieldtest.middleware.zenoh.lab)"
    return broker_conf(listeners, run_as=run_as, comment=comment, per_listener_settings=True)


# --------------------------------------------------------------------------------------- recording


def recorded_topics(cfg: LabLaunch) -> list[str]:
    """What ``ros2 bag record`` takes on this side (the kit's own bags are written by the nodes)."""
    topics = [t.topic for t in link_topics(cfg)]
    if cfg.role == "robot":
        topics += [RECEIPTS_TOPIC, CLOCK_OFFSET_TOPIC, *BASE_TOPICS]
        if cfg.relay:
            topics.append("/cmd_vel")
    return [ros_topic(cfg, t) for t in dict.fromkeys(topics)]


def ros2bag_dir(cfg: LabLaunch) -> Path:
    return Path(cfg.trial_dir) / "ros2bag" / cfg.role


def ros2bag_record_command(cfg: LabLaunch) -> list[str]:
    """``ros2 bag record`` in MCAP into ``<trial>/ros2bag/<role>`` (Humble needs
    ros-humble-rosbag2-storage-mcap; Jazzy's default storage is MCAP already)."""
    if not cfg.trial_dir:
        raise BridgeConfigError("trial_dir is empty: nowhere to record")
    return ["ros2", "bag", "record", "-s", "mcap", "-o", str(ros2bag_dir(cfg)), *recorded_topics(cfg)]


def ros2bag_record_env(cfg: LabLaunch) -> dict[str, str]:
    """Its enclave under SROS2: ``ros2 bag record`` takes no --ros-args, rcl reads this variable;
    on secured rmw_zenoh its session config."""
    if rmw_zenoh_security_enabled(cfg):
        from fieldtest.security.rmw_zenoh import session_config

        node = kit_enclave("recorder").nodes[0]
        return {"ZENOH_SESSION_CONFIG_URI": str(session_config(cfg.keystore, node))}
    return (
        {"ROS_SECURITY_ENCLAVE_OVERRIDE": kit_enclave("recorder").path} if dds_security_enabled(cfg) else {}
    )


# --------------------------------------------------------------------------------------- overview


def side_processes(cfg: LabLaunch, config_dir: str | Path, *, zenohd: str | None = None) -> list[SideProcess]:
    """Bridges, routers, brokers and recorders for this side, with the files they read."""
    folder = Path(config_dir)
    out: list[SideProcess] = []
    if cfg.rmw == "zenoh":
        if cfg.start_router or cfg.role == "robot":
            argv, env = rmw_zenoh_router(cfg)
            out.append(SideProcess("rmw_zenohd", argv, env, {}))
    elif cfg.zenoh:
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
            SideProcess(
                "zenoh_bridge", zenoh_bridge_command(cfg, path), zenoh_bridge_env(cfg), {path.name: text}
            )
        )
    elif cfg.mqtt:
        if cfg.start_broker and cfg.role == "host":
            files = {}
            acl = folder / "mosquitto.acl"
            if cfg.security != "none":
                files[acl.name] = mosquitto_acl(cfg)
            conf = folder / "mosquitto.conf"
            files[conf.name] = mosquitto_conf(cfg, acl, run_as=broker_user())
            out.append(SideProcess("mosquitto", [MOSQUITTO, "-c", str(conf)], {}, files))
        params = folder / f"mqtt_client_{cfg.role}.yaml"
        text = to_yaml(mqtt_client_params(cfg), f"fieldtest lab mqtt_client, {cfg.role} side (generated)")
        out.append(SideProcess("mqtt_client", mqtt_client_command(params), {}, {params.name: text}))
    if cfg.record_ros2bag and cfg.trial_dir:
        out.append(SideProcess("ros2bag", ros2bag_record_command(cfg), ros2bag_record_env(cfg), {}))
    return out


def broker_user() -> str | None:
    """Started as root, Mosquitto drops to the ``mosquitto`` user before it reads the ACL and the
    keystore's files, which the launching user owns (a private folder: "Error opening acl file"):
    as root it keeps root's identity. None for anyone else (Mosquitto then runs as that user)."""
    if os.geteuid() != 0:
        return None
    import pwd

    return pwd.getpwuid(0).pw_name


# ------------------------------------------------------------------ one trial's Zenoh bridges

BRIDGE_START_CHECK_S = 0.5  # a bridge that refuses its config exits within this
BRIDGE_STOP_TIMEOUT_S = 5.0


def twin_side_launches(transport: TransportConfig, cmd_type: str) -> tuple[LabLaunch, LabLaunch]:
    """The host's and robot's LabLaunch of a twin trial bridged as in the lab: each side's DDS in
    its own domain (``side_domain``); Humble for Twist commands, Jazzy for TwistStamped."""
    common = {
        "ros_distro": "humble" if cmd_type == "twist" else "jazzy",
        "cmd_type": cmd_type,
        "record_ros2bag": False,
        **transport.model_dump(
            include={"middleware", "security", "qos", "namespace", "keystore", "zenoh_port"}
            | {"host_address", "robot_address", "router_address"}
        ),
    }
    host, robot = (
        LabLaunch(role=role, domain_id=side_domain(transport, role), **common)  # type: ignore[arg-type]
        for role in ("host", "robot")
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
    if host.entry.infra_process == "router":
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
    ``zenoh_path="bridge"`` use the same domains, on 127.0.0.1, with $ROS_DISTRO as the bridges':

        transport = request.transport.model_copy(update={"zenoh_path": "bridge"})
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
