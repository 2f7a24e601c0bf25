"""Bridge, router and broker configs of the lab, checked by the real programs where they run here:
eclipse-zenoh's config loader and TLS sessions, a real Mosquitto, and the documented parameter and
plugin layouts of zenoh-bridge-ros2dds and mqtt_client for what cannot run here."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
import zenoh

from fieldtest.labrun.configuration.launchsettings import parse_launch_args
from fieldtest.middleware.labshared import (
    BridgeConfigError,
    link_topics,
    ros2bag_record_command,
    side_processes,
)
from fieldtest.middleware.mqtt.lab import (
    check_mqtt_client_pair,
    mosquitto_acl,
    mosquitto_conf,
    mqtt_client_params,
)
from fieldtest.middleware.mqtt.security import paho_tls_args
from fieldtest.middleware.zenoh.lab import (
    ROS2DDS_INTERFACE_KINDS,
    ROS2DDS_PLUGIN_KEYS,
    check_ros2dds_plugin,
    to_json5,
    zenoh_bridge_command,
    zenoh_bridge_config,
    zenoh_router_config,
)
from fieldtest.procs import free_port
from fieldtest.testkit import needs
from fieldtest.testkit.mqttacked import AckedClient
from fieldtest.testkit.refusal import plain_mqtt_answer, tls_alert

ZENOH_CASES = [
    (middleware, role, distro)
    for middleware in ("zenoh-peer", "zenoh-router")
    for role in ("host", "robot")
    for distro in ("humble", "jazzy")
]

# The layout mqtt_client (ika-rwth-aachen, ROS 2, 2.3+) declares in MqttClient::loadParameters():
# broker.*, client.*, and per bridged topic the keys below.
MQTT_BROKER_KEYS = {"host", "port", "user", "pass", "tls"}
MQTT_TLS_BROKER_KEYS = {"enabled", "ca_certificate"}
MQTT_CLIENT_KEYS = {
    "id",
    "buffer",
    "last_will",
    "clean_session",
    "keep_alive_interval",
    "max_inflight",
    "tls",
}
MQTT_CLIENT_TLS_KEYS = {"certificate", "key", "password", "version", "verify", "alpn_protos"}
ROS2MQTT_KEYS = {"mqtt_topic", "primitive", "ros_type", "inject_timestamp", "advanced"}
MQTT2ROS_KEYS = {"ros_topic", "primitive", "ros_type", "advanced"}
ROS2MQTT_ADVANCED = {"ros": {"queue_size", "qos"}, "mqtt": {"qos", "retained"}}
MQTT2ROS_ADVANCED = {"ros": {"queue_size", "qos", "latched"}, "mqtt": {"qos"}}
ROS_QOS_VALUES = {
    "reliability": {"system_default", "reliable", "best_effort"},
    "durability": {"system_default", "volatile", "transient_local"},
}


def cfg(role, **args):
    args.setdefault("ros_distro", "humble")
    args.setdefault("namespace", "/tb4")
    return parse_launch_args(args, role, environ={})


# ------------------------------------------------------------------------------------------ Zenoh


@pytest.mark.parametrize(("middleware", "role", "distro"), ZENOH_CASES)
@pytest.mark.parametrize("security", ["none", "mtls-acl"])
def test_zenoh_bridge_configs_parse_with_zenohs_own_loader(
    tmp_path, keystore, middleware, role, distro, security
):
    c = cfg(role, middleware=middleware, ros_distro=distro, security=security, keystore=str(keystore))
    config = zenoh_bridge_config(c)
    path = tmp_path / "bridge.json5"
    path.write_text(to_json5(config, "generated"))
    zenoh.Config.from_file(str(path))  # raises on any key zenoh does not know
    zenoh.Config.from_json5(path.read_text())
    plugin = config["plugins"]["ros2dds"]
    assert set(plugin) <= ROS2DDS_PLUGIN_KEYS
    assert set(plugin["allow"]) == ROS2DDS_INTERFACE_KINDS
    check_ros2dds_plugin(plugin)
    assert "mode" not in config  # positional on the command line
    argv = zenoh_bridge_command(c, path)
    assert argv[:4] == [
        "zenoh-bridge-ros2dds",
        "peer" if middleware == "zenoh-peer" else "client",
        "-c",
        str(path),
    ]
    if distro == "humble":
        assert plugin["ros_localhost_only"] is True and "--ros-localhost-only" in argv
    else:
        assert plugin["ros_automatic_discovery_range"] == "LOCALHOST"
        assert argv[-2:] == ["--ros-automatic-discovery-range", "LOCALHOST"]
    if security != "none":
        assert config["transport"]["link"]["tls"]["enable_mtls"] is True
        assert all(
            e.startswith("tls/") for e in config["connect"]["endpoints"] + config["listen"]["endpoints"]
        )
        assert config["access_control"]["enabled"] is True


def test_zenoh_bridge_routes_exactly_the_link_topics():
    host = zenoh_bridge_config(cfg("host", middleware="zenoh-peer", cmd_type="twist"))["plugins"]["ros2dds"]
    robot = zenoh_bridge_config(cfg("robot", middleware="zenoh-peer", cmd_type="twist"))["plugins"]["ros2dds"]
    sent = ["/tb4/cmd_vel", "/tb4/fieldtest/cmd_stamp", "/tb4/fieldtest/clock_probe_reply"]
    assert host["allow"]["publishers"] == sent == robot["allow"]["subscribers"]
    assert host["allow"]["subscribers"] == ["/tb4/fieldtest/clock_probe"] == robot["allow"]["publishers"]
    for kind in ("service_servers", "service_clients", "action_servers", "action_clients"):
        assert host["allow"][kind] == []
    relay = zenoh_bridge_config(
        cfg("host", middleware="zenoh-peer", relay="true", cmd_type="twist_stamped", ros_distro="jazzy")
    )
    assert relay["plugins"]["ros2dds"]["allow"]["publishers"][0] == "/tb4/fieldtest/cmd_vel"
    express = zenoh_bridge_config(cfg("host", middleware="zenoh-router", zenoh_express="true"))
    assert express["plugins"]["ros2dds"]["pub_priorities"] == ["^/tb4/cmd_vel$=1:express"]


@pytest.mark.parametrize("relay", ["false", "true"])
def test_express_priority_matches_only_the_command_topic(relay):
    """The plugin does not anchor pub_priorities regexes: the kit does, so /tb4/cmd_vel does not
    also give /tb4/fieldtest/cmd_vel (or anything else containing it) priority 1 + express."""
    config = zenoh_bridge_config(cfg("host", middleware="zenoh-peer", zenoh_express="true", relay=relay))
    plugin = config["plugins"]["ros2dds"]
    check_ros2dds_plugin(plugin)
    (entry,) = plugin["pub_priorities"]
    regex = re.compile(entry.split("=", 1)[0])
    command = plugin["allow"]["publishers"][0]
    others = ["/tb4/fieldtest/cmd_vel", "/tb4/cmd_vel", "/tb4/cmd_vel_unstamped", "/other/tb4/cmd_vel"]
    assert [name for name in others if regex.search(name)] == [command]


def test_dialing_bridges_retry_instead_of_exiting():
    """zenoh's client default exits when the router is not up yet (timeout 0, exit_on_failure);
    a bridge that dials must keep retrying."""
    dialing = [
        cfg("host", middleware="zenoh-peer"),
        cfg("host", middleware="zenoh-router"),
        cfg("robot", middleware="zenoh-router"),
    ]
    for c in dialing:
        connect = zenoh_bridge_config(c)["connect"]
        assert connect["endpoints"] and connect["timeout_ms"] == -1 and connect["exit_on_failure"] is False
        assert connect["retry"]["period_init_ms"] > 0
    assert zenoh_bridge_config(cfg("robot", middleware="zenoh-peer"))["connect"] == {"endpoints": []}


@pytest.mark.parametrize("distro", ["humble", "jazzy"])
def test_bridge_process_gets_the_ros_distro(tmp_path, distro):
    procs = side_processes(cfg("robot", middleware="zenoh-peer", ros_distro=distro), tmp_path)
    (bridge,) = [p for p in procs if p.name == "zenoh_bridge"]
    assert bridge.env["ROS_DISTRO"] == distro


def test_plugin_check_refuses_removed_and_unknown_keys():
    with pytest.raises(BridgeConfigError, match=r"plugins.ros2dds.id: removed"):
        check_ros2dds_plugin({"id": "abc"})
    with pytest.raises(BridgeConfigError, match=r"plugins.ros2dds.allowlist: unknown key"):
        check_ros2dds_plugin({"allowlist": {}})
    with pytest.raises(BridgeConfigError, match=r"allow.topics: unknown interface kind"):
        check_ros2dds_plugin({"allow": {"topics": []}})
    with pytest.raises(BridgeConfigError, match=r"'allow' and 'deny' cannot both be set"):
        check_ros2dds_plugin({"allow": {}, "deny": {}})
    with pytest.raises(BridgeConfigError, match=r"bad regex"):
        check_ros2dds_plugin({"allow": {"publishers": ["(unclosed"]}})
    with pytest.raises(BridgeConfigError, match=r"shm_enabled: unknown key"):
        check_ros2dds_plugin({"shm_enabled": False})  # only with the dds_shm feature


@pytest.mark.parametrize("priority", ["0", "8", "-1", "x", "", "1.5", "9:express"])
def test_plugin_check_refuses_priorities_the_plugin_refuses(priority):
    with pytest.raises(BridgeConfigError, match=r"pub_priorities: .* is not|pub_priorities: priority"):
        check_ros2dds_plugin({"pub_priorities": [f"^/tb4/cmd_vel$={priority}"]})


def test_plugin_check_accepts_priorities_one_to_seven_and_no_other():
    """Judged over the boundary: a check that accepts every entry fails here, as one that refuses all."""

    def accepted(entry: str) -> bool:
        try:
            check_ros2dds_plugin({"pub_priorities": [entry]})
        except BridgeConfigError:
            return False
        return True

    cases = [
        (f"{regex}={p}{mode}", p)
        for regex in ("^/a$", ".*")
        for p in range(-1, 10)
        for mode in ("", ":express")
    ]
    assert [entry for entry, _ in cases if accepted(entry)] == [entry for entry, p in cases if 1 <= p <= 7]


def test_plugin_check_refuses_malformed_entries():
    with pytest.raises(BridgeConfigError, match=r"is not \"<regex>=<priority>"):
        check_ros2dds_plugin({"pub_priorities": ["/tb4/cmd_vel"]})
    with pytest.raises(BridgeConfigError, match=r"bad regex"):
        check_ros2dds_plugin({"pub_priorities": ["(=1"]})
    with pytest.raises(BridgeConfigError, match=r"frequency 'fast'"):
        check_ros2dds_plugin({"pub_max_frequencies": ["^/a$=fast"]})
    check_ros2dds_plugin({"pub_max_frequencies": ["^/a$=10.5"]})


def _session_part(config: dict) -> dict:
    """What an eclipse-zenoh session takes of a bridge config: all but the plugin section."""
    return {k: v for k, v in config.items() if k != "plugins"}


def _exchange(
    robot_config: dict, host_config: dict, key: str, denied_key: str | None = None, timeout_s: float = 10.0
) -> dict[str, list[bytes]]:
    """What the robot's session receives of the host's puts on ``key`` (and on ``denied_key``).

    The host puts on ``denied_key`` then on ``key`` until the robot has one on ``key``, then once more
    on each. The robot declared its ``denied_key`` subscription first and one session's puts arrive
    in order, so once that last put on ``key`` is in, one on ``denied_key`` let through is in too.
    """
    keys = [k for k in (denied_key, key) if k is not None]
    got: dict[str, list[bytes]] = {k: [] for k in keys}
    last = threading.Event()

    def receive(k: str, sample) -> None:
        got[k].append(sample.payload.to_bytes())
        if k == key and got[k][-1] == b"last":
            last.set()

    robot = zenoh.open(zenoh.Config.from_json5(json.dumps(robot_config)))
    try:
        for k in keys:
            robot.declare_subscriber(k, lambda sample, k=k: receive(k, sample))
        host = zenoh.open(zenoh.Config.from_json5(json.dumps(host_config)))
        try:
            publishers = [host.declare_publisher(k) for k in keys]
            deadline = time.monotonic() + timeout_s
            while not got[key] and time.monotonic() < deadline:
                for pub in publishers:
                    pub.put(b"cdr")
                time.sleep(0.1)
            for pub in publishers if got[key] else []:
                pub.put(b"last")
            assert not got[key] or last.wait(timeout_s), (
                f"the last put on {key} did not arrive in {timeout_s} s"
            )
        finally:
            host.close()
    finally:
        robot.close()
    return got


def test_zenoh_peer_bridge_configs_link_over_mutual_tls(keystore):
    """The two peer-mode bridge configs (TLS + ACL) really connect: the host's session dials the
    robot's listener over tls/ with client certificates, and a command key gets through."""
    port = free_port()
    common = {
        "middleware": "zenoh-peer",
        "security": "mtls-acl",
        "keystore": str(keystore),
        "zenoh_port": str(port),
    }
    robot = _session_part(zenoh_bridge_config(cfg("robot", robot_address="127.0.0.1", **common)))
    host = _session_part(zenoh_bridge_config(cfg("host", robot_address="127.0.0.1", **common)))
    robot["listen"]["endpoints"] = [f"tls/127.0.0.1:{port}"]  # loopback only in tests
    got = _exchange(robot, host, "tb4/cmd_vel", denied_key="tb4/fieldtest/cmd_receipts")
    assert got["tb4/cmd_vel"][:1] == [b"cdr"]
    assert got["tb4/fieldtest/cmd_receipts"] == []  # the ACL is live: the host may not publish it


def test_zenoh_router_config_relays_the_bridges_over_mutual_tls(keystore, tmp_path):
    """The router's config, read from its file as zenohd reads it, runs a router that relays the host
    bridge's commands to the robot's bridge over TLS, and not what its ACL denies."""
    port = free_port()
    common = {"middleware": "zenoh-router", "security": "mtls-acl", "keystore": str(keystore)}
    path = tmp_path / "router.json5"
    path.write_text(to_json5(zenoh_router_config(cfg("host", zenoh_port=str(port), **common))))
    router_config = zenoh.Config.from_file(str(path))
    router_config.insert_json5("listen/endpoints", json.dumps([f"tls/127.0.0.1:{port}"]))  # loopback only
    sides = {
        role: {
            **_session_part(zenoh_bridge_config(cfg(role, zenoh_port=str(port), **common))),
            "mode": "client",
        }
        for role in ("robot", "host")
    }
    router = zenoh.open(router_config)
    try:
        got = _exchange(sides["robot"], sides["host"], "tb4/cmd_vel", denied_key="tb4/fieldtest/cmd_receipts")
    finally:
        router.close()
    assert got["tb4/cmd_vel"][:1] == [b"cdr"]
    assert got["tb4/fieldtest/cmd_receipts"] == []


# ------------------------------------------------------------------------------------------- MQTT


def _flatten(prefix: str, value, out: dict) -> dict:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value
    return out


@pytest.mark.parametrize("role", ["host", "robot"])
@pytest.mark.parametrize("security", ["none", "mtls-acl"])
@pytest.mark.parametrize("qos", ["default", "sensor", "fernandez-e"])
def test_mqtt_client_params_follow_its_ros2_layout(keystore, role, security, qos):
    c = cfg(
        role,
        middleware="mqtt-broker",
        broker_address="10.0.0.30",
        security=security,
        keystore=str(keystore),
        qos=qos,
    )
    doc = yaml.safe_load(yaml.safe_dump(mqtt_client_params(c)))
    (node,) = doc
    assert node == "/**"
    params = doc[node]["ros__parameters"]
    assert set(params) == {"broker", "client", "bridge"}
    assert set(params["broker"]) <= MQTT_BROKER_KEYS and params["broker"]["host"] == "10.0.0.30"
    assert set(params["broker"].get("tls", {})) <= MQTT_TLS_BROKER_KEYS
    assert (
        set(params["client"]) <= MQTT_CLIENT_KEYS
        and set(params["client"].get("tls", {})) <= MQTT_CLIENT_TLS_KEYS
    )
    bridge = params["bridge"]
    out, into = bridge["ros2mqtt"], bridge["mqtt2ros"]
    assert out["ros_topics"] and into["mqtt_topics"]
    assert set(out) == {"ros_topics", *out["ros_topics"]}
    assert set(into) == {"mqtt_topics", *into["mqtt_topics"]}
    for topic in out["ros_topics"]:
        block = out[topic]
        assert topic.startswith("/tb4/") and set(block) <= ROS2MQTT_KEYS
        assert block["mqtt_topic"] == topic.lstrip("/")
        for side, keys in ROS2MQTT_ADVANCED.items():
            assert set(block["advanced"][side]) <= keys
        for policy, allowed in ROS_QOS_VALUES.items():
            assert block["advanced"]["ros"]["qos"][policy] in allowed
    for topic in into["mqtt_topics"]:
        block = into[topic]
        assert set(block) <= MQTT2ROS_KEYS and block["ros_topic"] == "/" + topic
        assert block["ros_type"].count("/msg/") == 1  # fixed type (no inject_timestamp here)
        for side, keys in MQTT2ROS_ADVANCED.items():
            assert set(block["advanced"][side]) <= keys
    # the parameter names rclcpp derives from the file: no key contains the separator itself
    names = _flatten("", params, {})
    assert "bridge.ros2mqtt.ros_topics" in names and "broker.port" in names
    sent = {t.topic for t in link_topics(c) if t.sender == role}
    assert {t.removeprefix("/tb4") for t in out["ros_topics"]} == sent


@pytest.mark.parametrize("inject", ["false", "true"])
@pytest.mark.parametrize("distro", ["humble", "jazzy"])
@pytest.mark.parametrize("middleware", ["mqtt-local-broker", "mqtt-broker"])
def test_mqtt_sides_agree_on_every_topic_and_on_the_injected_timestamp(inject, distro, middleware):
    sides = {
        role: mqtt_client_params(
            cfg(role, middleware=middleware, ros_distro=distro, mqtt_inject_timestamp=inject)
        )
        for role in ("host", "robot")
    }
    assert check_mqtt_client_pair(sides["host"], sides["robot"]) == []
    assert check_mqtt_client_pair(sides["robot"], sides["host"]) == []
    receivers = sides["robot"]["/**"]["ros__parameters"]["bridge"]["mqtt2ros"]
    fixed = {"ros_type" in receivers[t] for t in receivers["mqtt_topics"]}
    assert fixed == {inject == "false"}  # fixed types only where no stamp is prepended


def test_mqtt_pair_check_catches_a_fixed_type_receiver_of_stamped_messages():
    stamped = mqtt_client_params(cfg("host", middleware="mqtt-broker", mqtt_inject_timestamp="true"))
    fixed = mqtt_client_params(cfg("robot", middleware="mqtt-broker"))  # a side launched without it
    problems = check_mqtt_client_pair(stamped, fixed)
    assert problems and all("inject_timestamp with a fixed ros_type" in p for p in problems)
    other_ns = mqtt_client_params(cfg("robot", middleware="mqtt-broker", namespace="/tb5"))
    assert any("no mqtt2ros entry receives it" in p for p in check_mqtt_client_pair(stamped, other_ns))


def test_mqtt_qos_follows_the_profile():
    reliable = mqtt_client_params(cfg("host", middleware="mqtt-local-broker", qos="default"))
    best_effort = mqtt_client_params(cfg("host", middleware="mqtt-local-broker", qos="sensor"))
    r = reliable["/**"]["ros__parameters"]["bridge"]["ros2mqtt"]["/tb4/cmd_vel"]["advanced"]
    b = best_effort["/**"]["ros__parameters"]["bridge"]["ros2mqtt"]["/tb4/cmd_vel"]["advanced"]
    assert (r["mqtt"]["qos"], r["ros"]["qos"]["reliability"], r["ros"]["queue_size"]) == (1, "reliable", 10)
    assert (b["mqtt"]["qos"], b["ros"]["qos"]["reliability"], b["ros"]["queue_size"]) == (0, "best_effort", 5)


class Broker:
    def __init__(self, conf: str, port: int, workdir: Path):
        path = workdir / "mosquitto.conf"
        path.write_text(conf)
        self.port = port
        self.proc = subprocess.Popen(
            ["mosquitto", "-c", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )

    def __enter__(self) -> Broker:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"mosquitto exited: {self.proc.stderr.read()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise AssertionError("mosquitto did not listen")

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=5)


def _delivered(publisher: AckedClient, subscriber: AckedClient, topic: str) -> list[tuple[str, bytes]]:
    """What ``subscriber`` gets of ``publisher``'s message on ``topic``, both acknowledged (SUBACK,
    PUBACK): once it is in, anything queued for the subscriber before it is in too."""
    assert subscriber.subscribe(topic) == "Granted QoS 1"
    assert publisher.publish(topic, b"cdr") == "Success"
    got = subscriber.wait_until(lambda got: any(t == topic for t, _ in got))
    subscriber.forget_received()
    return got


def test_broker_sends_small_messages_without_nagles_delay():
    """Without it Mosquitto held forwards for the peer's delayed ACK (a lab rehearsal's clock
    probes: round trip median 79 ms); the twin's broker sets it too."""
    assert "set_tcp_nodelay true" in mosquitto_conf(cfg("host", middleware="mqtt-local-broker")).splitlines()


@pytest.mark.parametrize("euid, user_line", [(0, "user root"), (1000, None)])
def test_broker_launched_as_root_keeps_root_to_read_the_acl(tmp_path, keystore, monkeypatch, euid, user_line):
    """As root Mosquitto drops to the mosquitto user before reading the ACL and keys, which the
    launching user owns ("Error opening acl file" in a rehearsal): the host launch keeps root."""
    monkeypatch.setattr("fieldtest.middleware.mqtt.lab.os.geteuid", lambda: euid)
    c = cfg("host", middleware="mqtt-local-broker", security="mtls-acl", keystore=str(keystore))
    [broker] = [p for p in side_processes(c, tmp_path) if p.name == "mosquitto"]
    users = [line for line in broker.config_files["mosquitto.conf"].splitlines() if line.startswith("user ")]
    assert users == ([user_line] if user_line else [])


def test_plain_broker_config_runs_a_real_mosquitto(tmp_path):
    needs.tools("mosquitto")
    port = free_port()
    c = cfg("host", middleware="mqtt-local-broker", mqtt_port=str(port))
    with Broker(mosquitto_conf(c, bind_address="127.0.0.1"), port, tmp_path):
        with AckedClient(f"pub-{port}", port) as pub, AckedClient(f"sub-{port}", port) as sub:
            assert _delivered(pub, sub, "tb4/cmd_vel") == [("tb4/cmd_vel", b"cdr")]


def test_tls_broker_config_enforces_certificates_and_the_acl(tmp_path, keystore):
    needs.tools("mosquitto")
    port = free_port()
    c = cfg(
        "host",
        middleware="mqtt-local-broker",
        mqtt_port=str(port),
        security="mtls-acl",
        keystore=str(keystore),
    )
    acl = tmp_path / "mosquitto.acl"
    acl.write_text(mosquitto_acl(c))
    with Broker(mosquitto_conf(c, acl, bind_address="127.0.0.1", run_as="root"), port, tmp_path):
        with (
            AckedClient(f"host-{port}", port, **paho_tls_args(keystore, "host")) as host,
            AckedClient(f"robot-{port}", port, **paho_tls_args(keystore, "robot")) as robot,
        ):
            assert _delivered(host, robot, "tb4/cmd_vel") == [("tb4/cmd_vel", b"cdr")]  # host commands
            type_topic = "mqtt_client/ros_msg_type/tb4/cmd_vel"
            assert _delivered(host, robot, type_topic) == [(type_topic, b"cdr")]  # and announces types
            # the robot may not command itself: the broker refuses its cmd_vel, and its clock probe
            # published after it arrives alone
            assert host.subscribe("tb4/cmd_vel") == "Granted QoS 1"
            assert robot.publish("tb4/cmd_vel", b"cdr") == "Not authorized"
            probe = "tb4/fieldtest/clock_probe"
            assert _delivered(robot, host, probe) == [(probe, b"cdr")]
        # no client certificate: refused (plain TCP, and TLS with only the CA)
        assert plain_mqtt_answer(port) in ("reset", "closed")
        ca = paho_tls_args(keystore, "host")["ca_certs"]
        assert tls_alert(port, ca) == "TLSV13_ALERT_CERTIFICATE_REQUIRED"


def test_ros2bag_records_mcap_into_the_trial():
    argv = ros2bag_record_command(cfg("robot", middleware="zenoh-peer", trial_dir="/trials/x", relay="true"))
    assert argv[:7] == ["ros2", "bag", "record", "-s", "mcap", "-o", "/trials/x/ros2bag/robot"]
    assert {"/tb4/fieldtest/cmd_vel", "/tb4/cmd_vel", "/tb4/fieldtest/cmd_receipts", "/tb4/odom"} <= set(argv)
