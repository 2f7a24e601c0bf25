"""Zenoh mutual TLS + access control from the kit's keystore, with real sessions on loopback."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import pytest
import zenoh

from fieldtest.middleware.zenoh.security import (
    bridge_route_tokens,
    tls_endpoint,
    zenoh_access_control,
    zenoh_security_overrides,
)
from fieldtest.names import HOST_ENCLAVE, ROBOT_ENCLAVE, ROUTER_IDENTITY
from fieldtest.procs import free_port
from fieldtest.security.keystore import create_rogue_tls, tls_files
from fieldtest.security.securitysettings import SecuritySettingError
from fieldtest.testkit.refusal import tls_alert

NO_SCOUTING = {"multicast": {"enabled": False}, "gossip": {"enabled": False}}


def merge(base: dict, overrides: dict) -> dict:
    merged = dict(base)
    for key, value in overrides.items():
        merged[key] = (
            merge(merged[key], value)
            if isinstance(value, dict) and isinstance(merged.get(key), dict)
            else value
        )
    return merged


def session_config(mode: str, listen: list[str], connect: list[str]) -> dict:
    return {
        "mode": mode,
        "listen": {"endpoints": listen},
        "connect": {"endpoints": connect, "timeout_ms": 3000, "exit_on_failure": bool(connect)},
        "scouting": NO_SCOUTING,
    }


def secured(keystore: Path, role: str, base: dict) -> dict:
    return merge(base, zenoh_security_overrides(keystore, role, session_config=base))


def open_session(config: dict):
    return zenoh.open(zenoh.Config.from_json5(json.dumps(config)))


class Inbox:
    def __init__(self):
        self.items: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, sample) -> None:
        with self.lock:
            self.items.append(sample.payload.to_bytes())

    def wait_for(self, count: int, timeout: float = 5.0) -> list[bytes]:
        return self._wait(lambda items: len(items) >= count, timeout)

    def wait_until(self, last: bytes, timeout: float = 5.0) -> list[bytes]:
        """What arrived up to ``last`` (or the timeout): a count would also count warm-up puts."""
        return self._wait(lambda items: last in items, timeout)

    def _wait(self, done, timeout: float) -> list[bytes]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if done(self.items):
                    break
            time.sleep(0.02)
        with self.lock:
            return list(self.items)


def wait_matching(publisher, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not publisher.matching_status.matching and time.monotonic() < deadline:
        time.sleep(0.02)
    return publisher.matching_status.matching


@contextlib.contextmanager
def sessions(*configs: dict):
    opened = []
    try:
        for config in configs:
            opened.append(open_session(config))
        yield opened
    finally:
        for session in reversed(opened):
            session.close()


def test_generated_configs_are_accepted_by_zenoh(keystore):
    for role in ("host", "robot", "router"):
        base = session_config("peer", ["tcp/127.0.0.1:7447"], [])
        config = zenoh.Config.from_json5(json.dumps(secured(keystore, role, base)))
        tls = json.loads(config.get_json("transport/link/tls"))
        assert tls["enable_mtls"] is True
        assert tls["listen_certificate"] == str(tls_files(keystore, role).cert.absolute())
        assert json.loads(config.get_json("listen/endpoints")) == ["tls/127.0.0.1:7447"]
        acl = json.loads(config.get_json("access_control"))
        assert acl["enabled"] is True and acl["default_permission"] == "deny"
    with pytest.raises(SecuritySettingError):
        zenoh_security_overrides(keystore, "host", "sros2")
    assert zenoh_security_overrides(keystore, "host", "none") == {}


def test_acl_grants_follow_the_link_flows():
    acl = zenoh_access_control("/tb4")
    rules = {r["id"]: r for r in acl["rules"]}
    host_to_robot = [
        "tb4/cmd_vel",
        "tb4/fieldtest/clock_probe_reply",
        "tb4/fieldtest/cmd_stamp",
        "tb4/fieldtest/cmd_vel",
    ]
    assert rules["host-puts"]["key_exprs"] == host_to_robot
    assert rules["robot-puts"]["key_exprs"] == ["tb4/fieldtest/clock_probe"]
    assert rules["robot-subscribes"]["key_exprs"] == host_to_robot
    subjects = {s["id"]: s["cert_common_names"] for s in acl["subjects"]}
    assert subjects == {
        "host": [HOST_ENCLAVE],
        "robot": [ROBOT_ENCLAVE],
        "router": [ROUTER_IDENTITY],
    }
    assert tls_endpoint("tcp/10.0.0.2:7447") == "tls/10.0.0.2:7447"


def test_peer_tls_link_delivers_only_permitted_flows(keystore):
    endpoint = f"tcp/127.0.0.1:{free_port()}"
    robot_cfg = secured(keystore, "robot", session_config("peer", [endpoint], []))
    host_cfg = secured(keystore, "host", session_config("peer", [], [endpoint]))
    with sessions(robot_cfg, host_cfg) as (robot, host):
        assert host.info.peers_zid(), "host did not connect over TLS"
        robot_cmd, host_cmd, host_probe = Inbox(), Inbox(), Inbox()
        subs = [
            robot.declare_subscriber("cmd_vel", robot_cmd),
            host.declare_subscriber("cmd_vel", host_cmd),
            host.declare_subscriber("fieldtest/clock_probe", host_probe),
        ]
        host_pub = host.declare_publisher("cmd_vel")
        robot_probe = robot.declare_publisher("fieldtest/clock_probe")
        robot_cmd_pub = robot.declare_publisher("cmd_vel")
        assert wait_matching(robot_probe)
        deadline = time.monotonic() + 5
        while not robot_cmd.items and time.monotonic() < deadline:  # until the robot's subscription is known
            host_pub.put(b"host-warmup")
            time.sleep(0.05)
        for i in range(5):
            host_pub.put(b"host-%d" % i)
            robot_probe.put(b"probe-%d" % i)
            robot_cmd_pub.put(b"robot-%d" % i)  # forbidden: only the host commands
        # The robot's puts reach the host in order over their one link: once the last permitted one
        # has arrived, a forbidden one let through would have arrived before it.
        robot_probe.put(b"probe-last")
        got_robot = robot_cmd.wait_until(b"host-4", 10)
        got_probe = host_probe.wait_until(b"probe-last", 6)
        assert [b"host-%d" % i for i in range(5)] == [
            m for m in got_robot if m.startswith(b"host-") and m != b"host-warmup"
        ]
        assert got_probe == [b"probe-%d" % i for i in range(5)] + [b"probe-last"]
        assert not [m for m in host_cmd.items if m.startswith(b"robot-")], (
            "ACL let the robot publish cmd_vel to the host"
        )
        for sub in subs:
            sub.undeclare()


def test_client_with_certificate_from_another_ca_is_refused(keystore, tmp_path):
    """The robot's listener refuses a stranger with the TLS alert for its CA, and a client without
    a certificate with the one for its missing certificate, while it lets the kit's host in at the
    same moment: a listener that is merely slow or down fails here."""
    rogue = create_rogue_tls(tmp_path / "rogue")["host"]
    port = free_port()
    robot_cfg = secured(keystore, "robot", session_config("peer", [f"tcp/127.0.0.1:{port}"], []))
    host_cfg = secured(keystore, "host", session_config("peer", [], [f"tcp/127.0.0.1:{port}"]))
    ca = str(tls_files(keystore, "robot").ca)
    with sessions(robot_cfg) as (robot,):
        assert tls_alert(port, ca, str(rogue.cert), str(rogue.key)) == "TLSV1_ALERT_UNKNOWN_CA"
        assert tls_alert(port, ca) == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
        with sessions(host_cfg) as (host,):
            assert host.info.peers_zid(), "the kit's host did not get in over TLS"
            assert [str(z) for z in robot.info.peers_zid()] == [str(host.info.zid())]


def test_router_relays_host_to_robot_over_mtls(keystore):
    endpoint = f"tcp/127.0.0.1:{free_port()}"
    router_cfg = secured(keystore, "router", session_config("router", [endpoint], []))
    robot_cfg = secured(keystore, "robot", session_config("client", [], [endpoint]))
    host_cfg = secured(keystore, "host", session_config("client", [], [endpoint]))
    with sessions(router_cfg, robot_cfg, host_cfg) as (_router, robot, host):
        inbox = Inbox()
        sub = robot.declare_subscriber("cmd_vel", inbox)
        pub = host.declare_publisher("cmd_vel")
        assert wait_matching(pub), "the host never learned of the robot's subscription"
        for i in range(5):
            pub.put(b"cmd-%d" % i)
        assert inbox.wait_for(5) == [b"cmd-%d" % i for i in range(5)]
        sub.undeclare()


class KeyInbox(Inbox):
    def __call__(self, sample) -> None:
        with self.lock:
            self.items.append(str(sample.key_expr))


def _route_token(zid: str, kind: str, key: str) -> str:
    """A token as zenoh-plugin-ros2dds declares it for a route (liveliness_mgt.rs)."""
    return f"@/{zid}/@ros2_lv/{kind}/{key.replace('/', '§')}/geometry_msgs§msg§TwistStamped/0:1:1,10"


@pytest.mark.parametrize("topology", ["peer", "router"])
def test_bridge_route_announcements_cross_the_acl_for_trial_keys_only(keystore, topology):
    """The bridges' liveliness tokens of the trial's routes pass the ACL; others stay denied."""
    endpoint = f"tcp/127.0.0.1:{free_port()}"
    if topology == "peer":
        configs = [
            secured(keystore, "robot", session_config("peer", [endpoint], [])),
            secured(keystore, "host", session_config("peer", [], [endpoint])),
        ]
    else:
        configs = [
            secured(keystore, "router", session_config("router", [endpoint], [])),
            secured(keystore, "robot", session_config("client", [], [endpoint])),
            secured(keystore, "host", session_config("client", [], [endpoint])),
        ]
    with sessions(*configs) as opened:
        robot, host = opened[-2], opened[-1]
        seen = KeyInbox()
        watcher = robot.liveliness().declare_subscriber("@/*/@ros2_lv/**", seen, history=True)
        zid = str(host.info.zid())
        wanted = _route_token(zid, "MP", "fieldtest/clock_probe_reply")  # secured(): no namespace
        tokens = [host.liveliness().declare_token(f"@/{zid}/@ros2_lv")]
        # once the bridge's own token is seen, the robot's watch is in place: later tokens reach it
        # in the order declared, so the denied one, declared first, would arrive before the permitted
        assert seen.wait_for(1, timeout=8.0) == [f"@/{zid}/@ros2_lv"]
        tokens.append(host.liveliness().declare_token(_route_token(zid, "MP", "fieldtest/not_a_trial_topic")))
        tokens.append(host.liveliness().declare_token(wanted))
        got = seen.wait_for(2, timeout=8.0)
        assert sorted(seen.items) == sorted([f"@/{zid}/@ros2_lv", wanted]), seen.items
        for token in tokens:
            token.undeclare()
        watcher.undeclare()
    assert got


def test_route_token_expressions_escape_slashes():
    assert bridge_route_tokens("tb4/cmd_vel") == [
        "@/*/@ros2_lv/MP/tb4§cmd_vel/**",
        "@/*/@ros2_lv/MS/tb4§cmd_vel/**",
    ]
