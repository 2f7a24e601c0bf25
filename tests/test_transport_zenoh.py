"""Zenoh transport and router: real eclipse-zenoh sessions, the robot in its own process."""

import contextlib
import json
import socket
import threading
import time
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
import zenoh
from transport_exchange import (
    CMD_VEL,
    check_exchange,
    command_for,
    exchange_commands,
    send_while_holding_gil,
)

from fieldtest import rosmsg
from fieldtest.endpoints.clock import MonotonicClock
from fieldtest.middleware.registry import open_transport
from fieldtest.middleware.zenoh.infra import RouterError, ZenohRouter
from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings
from fieldtest.middleware.zenoh.transport import (
    MAX_STAMP_AGE_NS,
    ZenohTransportError,
    deep_merge,
    open_session,
    open_zenoh,
    zenoh_config,
    zenoh_key,
)
from fieldtest.procs import free_port, port_accepts
from fieldtest.transport import TransportConfig

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
    endpoint = f"tcp/10.0.0.2:{peer.settings(ZenohSettings).port}"
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
        assert client["connect"]["endpoints"] == [f"tcp/127.0.0.3:{routed.settings(ZenohSettings).port}"]
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
        assert router.running() and port_accepts(config.router_address, config.settings(ZenohSettings).port)
        check_exchange(exchange_commands(config, COUNT), COUNT)
    assert router.proc.returncode is not None
    assert not psutil.pid_exists(router.pid)
    assert not port_accepts(config.router_address, config.settings(ZenohSettings).port)


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
        with pytest.raises(RouterError, match="Address already in use"):
            with ZenohRouter(config):
                pass


def test_security_that_cannot_apply_is_refused():
    from fieldtest.security import KeystoreError, SecuritySettingError

    with pytest.raises(SecuritySettingError, match="'sros2' does not apply to middleware 'zenoh-peer'"):
        open_transport(peer_config(security="sros2"), "host")
    with pytest.raises(KeystoreError, match="needs a keystore"):
        open_transport(peer_config(security="mtls-acl"), "host")


# The host in a process of its own, stamping each command with CLOCK_MONOTONIC (shared by all
# processes) just before its put; the subscribing process below keeps its GIL busy.
MONOTONIC_SENDER = r"""
import random, sys, time
from fieldtest import rosmsg
from fieldtest.transport import TransportConfig
from fieldtest.middleware.zenoh.transport import open_zenoh
from transport_exchange import CMD_VEL, command_for

config = TransportConfig.model_validate_json(sys.argv[1])
count, seed = int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
host = open_zenoh(config, "host")
try:
    assert host.wait_matched(CMD_VEL, 10), "the robot never subscribed"
    publish = host.publisher(CMD_VEL, rosmsg.TWIST_STAMPED)
    for i in range(count):
        time.sleep(rng.uniform(0.005, 0.03))  # arrivals at every phase of the subscriber's GIL holds
        cmd = command_for(i)
        cmd.header.stamp = rosmsg.time_msg(time.monotonic_ns())
        publish(cmd)
finally:
    host.close()
"""


def _latencies_under_gil_holds(config: TransportConfig, gil_hold_s: float, count: int = 40) -> list[float]:
    """One-way latencies (s) of ``count`` commands to a robot in this process whose main thread holds
    the GIL for ``gil_hold_s`` at a time with short breaks."""
    latencies: list[float] = []
    robot = open_zenoh(config, "robot")
    robot.timed_subscribe(
        CMD_VEL,
        rosmsg.TWIST_STAMPED,
        lambda msg, arrival_ns: latencies.append((arrival_ns - rosmsg.ns_of(msg.header.stamp)) / 1e9),
        MonotonicClock(),  # the sender's stamps are CLOCK_MONOTONIC too
    )
    send_while_holding_gil(MONOTONIC_SENDER, config, count, gil_hold_s, latencies, robot.close)
    return latencies


@pytest.mark.parametrize("gil_hold_s", [0.004, 0.01, 0.03])
@pytest.mark.parametrize("middleware", ["zenoh-peer", "zenoh-router"])
def test_arrival_stamps_are_taken_before_the_callback_gets_the_gil(middleware, gil_hold_s):
    """The robot's arrival stamp is when zenoh's router layer decoded the sample (its own session's
    timestamp), not when the binding's callback thread next got the GIL: most commands here arrive
    while the GIL is held, and their latency must stay well below the hold. Through the kit's router
    too, which must leave the stamping to the robot."""
    config = peer_config() if middleware == "zenoh-peer" else router_config()
    with ZenohRouter(config) if middleware == "zenoh-router" else contextlib.nullcontext():
        latencies = _latencies_under_gil_holds(config, gil_hold_s)
    assert min(latencies) > 0, sorted(latencies)
    assert float(np.median(latencies)) < gil_hold_s / 4, sorted(latencies)


def test_a_stamp_made_elsewhere_or_implausibly_old_is_not_taken_as_the_arrival():
    """Only this session's own stamp moves the arrival back: a sender's or a router's stamp (another
    id), none, or one from a stepped wall clock (in the future, or older than MAX_STAMP_AGE_NS) leaves
    the callback's own clock reading."""
    config = peer_config()
    robot = open_zenoh(config, "robot")
    try:
        own = robot.session.new_timestamp().get_id()
        other = open_session(zenoh_config(peer_config(), "robot"))  # another robot: another id
        try:
            elsewhere = other.new_timestamp().get_id()
        finally:
            other.close()

        now_ns = time.time_ns()  # the age is taken against this, not against the clock read later

        def sample_stamped(stamp_id, age_ns: int) -> SimpleNamespace:
            ntp = zenoh.NTP64(*divmod(now_ns - age_ns, 1_000_000_000))
            return SimpleNamespace(timestamp=zenoh.Timestamp(ntp, stamp_id))

        def age(sample: SimpleNamespace) -> int:
            return robot.stamp_age_ns(sample, wall_now_ns=now_ns)

        ms = 1_000_000
        # the stamp's own age, to NTP64's 2**-32 s fraction
        assert age(sample_stamped(own, 5 * ms)) == pytest.approx(5 * ms, abs=1)
        assert age(sample_stamped(own, MAX_STAMP_AGE_NS)) == pytest.approx(MAX_STAMP_AGE_NS, abs=1)
        assert age(sample_stamped(elsewhere, 5 * ms)) == 0
        assert age(SimpleNamespace(timestamp=None)) == 0
        assert age(sample_stamped(own, -50 * ms)) == 0
        assert age(sample_stamped(own, MAX_STAMP_AGE_NS + 50 * ms)) == 0
    finally:
        robot.close()
