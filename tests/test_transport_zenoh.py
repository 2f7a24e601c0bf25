"""Zenoh transport and router: real eclipse-zenoh sessions, the robot in its own process."""

import json
import socket
import threading

import psutil
import pytest
import zenoh
from transport_exchange import CMD_VEL, check_exchange, command_for, exchange_commands

from fieldtest import rosmsg
from fieldtest.middleware.registry import open_transport
from fieldtest.procs import free_port, port_accepts
from fieldtest.transport import TransportConfig
from fieldtest.transport.broker import BrokerError, ZenohRouter
from fieldtest.transport.zenoh_ import (
    ZenohTransportError,
    deep_merge,
    open_session,
    open_zenoh,
    zenoh_config,
    zenoh_key,
)

COUNT = 50
CDR_LITTLE_ENDIAN = b"\x00\x01\x00\x00"


@pytest.fixture(autouse=True)
def no_leftover_processes():
    yield
    assert psutil.Process().children(recursive=True) == []


def peer_config(**kw) -> TransportConfig:
    return TransportConfig(middleware="zenoh-peer", zenoh_port=free_port(), **kw)


def router_config(**kw) -> TransportConfig:
    # A loopback address other than the host's, so the router address is really the one used.
    return TransportConfig(
        middleware="zenoh-router", router_address="127.0.0.3", zenoh_port=free_port(), **kw
    )


def test_keys_follow_zenoh_bridge_ros2dds():
    assert zenoh_key("", "/cmd_vel") == "cmd_vel"
    assert zenoh_key("/tb4", "/cmd_vel") == "tb4/cmd_vel"
    assert zenoh_key("tb4/", "fieldtest/cmd_receipts") == "tb4/fieldtest/cmd_receipts"


def test_session_configs_are_what_zenoh_accepts():
    peer = peer_config(robot_address="10.0.0.2")
    robot, host = zenoh_config(peer, "robot"), zenoh_config(peer, "host")
    endpoint = f"tcp/10.0.0.2:{peer.zenoh_port}"
    assert (robot["mode"], robot["listen"]["endpoints"], robot["connect"]["endpoints"]) == (
        "peer",
        [endpoint],
        [],
    )
    assert (host["mode"], host["listen"]["endpoints"], host["connect"]["endpoints"]) == (
        "peer",
        [],
        [endpoint],
    )
    routed = router_config()
    for role in ("host", "robot"):
        client = zenoh_config(routed, role)
        assert client["mode"] == "client"
        assert client["connect"]["endpoints"] == [f"tcp/127.0.0.3:{routed.zenoh_port}"]
    assert host["scouting"]["multicast"]["enabled"] is False
    tls = {"transport": {"link": {"tls": {"root_ca_certificate": "/k/ca.pem", "enable_mtls": True}}}}
    merged = deep_merge(host, tls)
    assert merged["connect"] == host["connect"] and merged["transport"]["link"]["tls"]["enable_mtls"] is True
    for cfg in (robot, host, client, merged):
        zenoh.Config.from_json5(json.dumps(cfg))  # zenoh rejects unknown or mistyped keys
    with pytest.raises(zenoh.ZError):
        zenoh.Config.from_json5(json.dumps(deep_merge(host, {"transport": {"link": {"tls": {"bogus": 1}}}})))


def test_peer_delivers_commands_in_order_between_processes():
    check_exchange(exchange_commands(peer_config(namespace="/tb4"), COUNT), COUNT)


def test_router_delivers_commands_in_order_and_stops_cleanly():
    config = router_config(namespace="/tb4")
    with ZenohRouter(config) as router:
        assert router.running() and port_accepts(config.router_address, config.zenoh_port)
        check_exchange(exchange_commands(config, COUNT), COUNT)
    assert router.proc.returncode is not None
    assert not psutil.pid_exists(router.pid)
    assert not port_accepts(config.router_address, config.zenoh_port)


def _raw_exchange(config: TransportConfig, raw_session_config: dict) -> None:
    """A plain zenoh session stands in for zenoh-bridge-ros2dds on the robot side."""
    key = "tb4/cmd_vel"
    received: list[bytes] = []
    got_three = threading.Event()
    raw = open_session(raw_session_config)
    host = None
    try:

        def on_sample(sample):
            received.append(sample.payload.to_bytes())
            if len(received) == 3:
                got_three.set()

        raw.declare_subscriber(key, on_sample)  # exact key: proves the mapping, not a wildcard match
        host = open_zenoh(config, "host")
        assert host.wait_matched(CMD_VEL, 10)
        publish = host.publisher(CMD_VEL, rosmsg.TWIST_STAMPED)
        sent = [command_for(i) for i in range(3)]
        for cmd in sent:
            publish(cmd)
        assert got_three.wait(10)
        for cmd, data in zip(sent, received, strict=True):
            assert data == bytes(rosmsg.typestore().serialize_cdr(cmd, rosmsg.TWIST_STAMPED))
            assert data[:4] == CDR_LITTLE_ENDIAN

        # The other way: CDR put by the "bridge" arrives decoded at a kit subscriber.
        decoded: list = []
        arrived = threading.Event()
        host.subscribe(CMD_VEL, rosmsg.TWIST_STAMPED, lambda m: (decoded.append(m), arrived.set()))
        raw_pub = raw.declare_publisher(key)
        for _ in range(100):  # until the subscription has propagated
            raw_pub.put(rosmsg.serialize(command_for(7), rosmsg.TWIST_STAMPED))
            if arrived.wait(0.05):
                break
        assert decoded and decoded[0].header.frame_id == "seq:7"
    finally:
        if host is not None:
            host.close()
        raw.close()


def test_peer_wire_is_bridge_key_and_ros2_cdr():
    config = peer_config(namespace="/tb4")
    _raw_exchange(config, zenoh_config(config, "robot"))


def test_router_wire_is_bridge_key_and_ros2_cdr():
    config = router_config(namespace="/tb4")
    with ZenohRouter(config):
        _raw_exchange(config, zenoh_config(config, "robot"))


def test_router_behind_a_command_prefix_is_ready_from_its_log():
    config = router_config()
    with ZenohRouter(config, prefix=["env"]) as router:  # "env" stands in for "ip netns exec <ns>"
        assert not router.check_port and "zenoh-router ready" in router.output()
        open_zenoh(config, "host").close()
    assert router.proc.returncode is not None


def test_close_twice_and_dispatch_through_open_transport():
    config = router_config()
    with ZenohRouter(config):
        transport = open_transport(config, "robot")
        transport.close()
        transport.close()
        assert transport.session.is_closed()


def test_unreachable_peer_or_router_is_a_clear_error():
    for config in (peer_config(), router_config()):
        with pytest.raises(ZenohTransportError, match="cannot open Zenoh session"):
            open_zenoh(config, "host", connect_timeout_s=0.5)


def test_router_that_cannot_listen_is_reported_and_reaped():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = TransportConfig(middleware="zenoh-router", zenoh_port=taken.getsockname()[1])
        with pytest.raises(BrokerError, match="Address already in use"):
            with ZenohRouter(config):
                pass


def test_security_that_cannot_apply_is_refused():
    from fieldtest.security import KeystoreError, SecuritySettingError

    with pytest.raises(SecuritySettingError, match="'sros2' does not apply to middleware 'zenoh-peer'"):
        open_transport(peer_config(security="sros2"), "host")
    with pytest.raises(KeystoreError, match="needs a keystore"):
        open_transport(peer_config(security="mtls-acl"), "host")
