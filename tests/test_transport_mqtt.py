"""MQTT transport and Mosquitto broker: a real mosquitto, paho clients, the robot in its own process."""

import os
import threading
import time

import numpy as np
import paho.mqtt.client as paho
import psutil
import pytest
from transport_exchange import (
    CMD_VEL,
    check_exchange,
    command_for,
    exchange_commands,
    send_while_holding_gil,
)

from fieldtest import rosmsg
from fieldtest.middleware import registry
from fieldtest.middleware.mqtt.infra import (
    BrokerError,
    MosquittoBroker,
    mosquitto_conf,
    mqtt_broker_address,
    plain_listener_lines,
)
from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
from fieldtest.middleware.mqtt.transport import (
    STAMP_LENGTH,
    MqttTransportError,
    mqtt_qos,
    mqtt_topic,
    open_mqtt,
    parse_ros_msg_type,
    ros_msg_type_payload,
    split_stamped_payload,
    stamped_payload,
)
from fieldtest.procs import free_port, port_accepts
from fieldtest.testkit.sched import realtime_permitted
from fieldtest.transport import TransportConfig
from fieldtest.transport.base import SecurityFragmentMissing

COUNT = 50


@pytest.fixture(autouse=True)
def no_leftover_processes():
    yield
    assert psutil.Process().children(recursive=True) == []


def local_broker_config(**kw) -> TransportConfig:
    return TransportConfig(middleware="mqtt-local-broker", mqtt_port=free_port(), **kw)


def separate_broker_config(**kw) -> TransportConfig:
    # A loopback address other than the host's, so the broker address is really the one used.
    return TransportConfig(middleware="mqtt-broker", broker_address="127.0.0.2", mqtt_port=free_port(), **kw)


class RawClient:
    """A plain paho client recording every message on every topic, as a sniffer on the broker."""

    def __init__(self, config: TransportConfig):
        self.messages: list[tuple[str, bytes, bool]] = []
        self.subscribed = threading.Event()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="raw-sniffer")
        self.client.on_message = lambda c, u, m: self.messages.append((m.topic, bytes(m.payload), m.retain))
        self.client.on_subscribe = lambda *args: self.subscribed.set()
        self.client.connect(mqtt_broker_address(config), config.settings(MqttSettings).port)
        self.client.loop_start()
        self.client.subscribe("#", qos=1)
        assert self.subscribed.wait(5)

    def wait_for(self, topic: str, n: int, timeout_s: float = 10.0) -> list[bytes]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            payloads = [p for t, p, _ in self.messages if t == topic]
            if len(payloads) >= n:
                return payloads
            time.sleep(0.02)
        raise AssertionError(f"{len(payloads)} of {n} messages on {topic}: {self.messages}")

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def test_topics_and_qos_follow_mqtt_client():
    assert mqtt_topic("", "/cmd_vel") == "cmd_vel"
    assert mqtt_topic("/tb4", "/cmd_vel") == "tb4/cmd_vel"
    assert mqtt_qos("default") == 1 and mqtt_qos("fernandez-c") == 1
    assert mqtt_qos("sensor") == 0 and mqtt_qos("fernandez-a") == 0


def test_type_announcement_and_stamp_layout():
    payload = ros_msg_type_payload(rosmsg.TWIST_STAMPED, stamped=True)
    assert parse_ros_msg_type(payload) == (rosmsg.TWIST_STAMPED, True)
    data = rosmsg.serialize(command_for(3), rosmsg.TWIST_STAMPED)
    stamped = stamped_payload(data, 1_700_000_123_456_789_012)
    assert len(stamped) == STAMP_LENGTH + len(data) and stamped[:4] == b"\x00\x01\x00\x00"
    assert split_stamped_payload(stamped) == (1_700_000_123_456_789_012, data)


def test_broker_address_and_conf(tmp_path):
    local, separate = local_broker_config(host_address="10.0.0.1"), separate_broker_config()
    assert mqtt_broker_address(local) == "10.0.0.1"
    assert mqtt_broker_address(separate) == "127.0.0.2"
    conf = mosquitto_conf(plain_listener_lines("127.0.0.2", 1884)).splitlines()
    assert "listener 1884 127.0.0.2" in conf and "allow_anonymous true" in conf
    assert "set_tcp_nodelay true" in conf
    with pytest.raises(ValueError, match="'sros2' does not apply to middleware 'mqtt-broker'"):
        registry.infrastructure(separate_broker_config(security="sros2"), tmp_path)
    with pytest.raises(SecurityFragmentMissing, match="open it through fieldtest.middleware.registry"):
        MosquittoBroker(separate_broker_config(security="mtls-acl"), tmp_path)
    with pytest.raises(BrokerError, match="not an MQTT middleware"):
        mqtt_broker_address(TransportConfig(middleware="dds"))


@pytest.mark.parametrize(
    "make_config", [local_broker_config, separate_broker_config], ids=["local", "separate"]
)
def test_commands_delivered_in_order_between_processes(tmp_path, make_config):
    config = make_config(namespace="/tb4")
    with MosquittoBroker(config, tmp_path) as broker:
        assert port_accepts(mqtt_broker_address(config), config.settings(MqttSettings).port)
        check_exchange(exchange_commands(config, COUNT), COUNT)
    assert broker.proc.returncode is not None
    assert not psutil.pid_exists(broker.pid)
    assert not port_accepts(mqtt_broker_address(config), config.settings(MqttSettings).port)


def test_publish_is_on_the_wire_when_it_returns(tmp_path):
    config = local_broker_config()
    with MosquittoBroker(config, tmp_path):
        host = open_mqtt(config, "host", announce_type=False)
        writers: list[str] = []
        loop_write = host.client.loop_write

        def recording_loop_write():
            if host.client.want_write():
                writers.append(threading.current_thread().name)
            return loop_write()

        host.client.loop_write = recording_loop_write
        try:
            for i in range(20):
                host.loop.publish("probe/topic", b"x%d" % i, 1)
                assert not host.client.want_write()  # nothing left for the network thread
        finally:
            host.close()
    # The publishing thread writes (the network thread may write a packet first, if it is awake
    # between paho queueing it and the publisher taking the write lock: the packet is out either way).
    assert writers.count(threading.current_thread().name) >= 10, writers


def test_publishers_on_two_threads_lose_and_reorder_nothing(tmp_path):
    config = local_broker_config()
    per_thread = 300
    with MosquittoBroker(config, tmp_path):
        sniffer = RawClient(config)
        host = open_mqtt(config, "host", announce_type=False)
        try:

            def publish_all(name: str) -> None:
                for i in range(per_thread):
                    host.loop.publish(f"load/{name}", str(i).encode(), 1)

            threads = [threading.Thread(target=publish_all, args=(name,)) for name in "ab"]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            for name in "ab":
                payloads = sniffer.wait_for(f"load/{name}", per_thread)
                assert [int(p) for p in payloads] == list(range(per_thread))
        finally:
            host.close()
            sniffer.close()


def test_wire_is_bridge_payload_and_type_announcement(tmp_path):
    config = separate_broker_config(namespace="/tb4")
    with MosquittoBroker(config, tmp_path):
        sniffer = RawClient(config)
        host = open_mqtt(config, "host")
        try:
            publish = host.publisher(CMD_VEL, rosmsg.TWIST_STAMPED)
            sent = [command_for(i) for i in range(3)]
            for cmd in sent:
                publish(cmd)
            data = sniffer.wait_for("tb4/cmd_vel", 3)
            types = sniffer.wait_for("mqtt_client/ros_msg_type/tb4/cmd_vel", 3)
        finally:
            host.close()
            sniffer.close()
    for cmd, payload in zip(sent, data, strict=True):
        assert payload == bytes(rosmsg.typestore().serialize_cdr(cmd, rosmsg.TWIST_STAMPED))
    assert {parse_ros_msg_type(t) for t in types} == {(rosmsg.TWIST_STAMPED, False)}
    assert {t for t, _, _ in sniffer.messages} == {"tb4/cmd_vel", "mqtt_client/ros_msg_type/tb4/cmd_vel"}


def test_inject_timestamp_prepends_send_time_and_reports_latency(tmp_path):
    config = local_broker_config()
    latencies: list[float] = []
    received: list = []
    with MosquittoBroker(config, tmp_path):
        sniffer = RawClient(config)
        robot = open_mqtt(
            config, "robot", inject_timestamp=True, on_latency=lambda topic, s: latencies.append(s)
        )
        host = open_mqtt(config, "host", inject_timestamp=True)
        try:
            robot.subscribe(CMD_VEL, rosmsg.TWIST_STAMPED, received.append)
            before = time.time_ns()
            publish = host.publisher(CMD_VEL, rosmsg.TWIST_STAMPED)
            for i in range(5):
                publish(command_for(i))
            payloads = sniffer.wait_for("cmd_vel", 5)
            types = sniffer.wait_for("mqtt_client/ros_msg_type/cmd_vel", 1)
            deadline = time.monotonic() + 10
            while len(received) < 5 and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            host.close()
            robot.close()
            sniffer.close()
    assert [m.header.frame_id for m in received] == [f"seq:{i}" for i in range(5)]
    assert len(latencies) == 5 and all(0 <= s < 10 for s in latencies)
    for i, payload in enumerate(payloads):
        stamp_ns, data = split_stamped_payload(payload)
        assert stamp_ns >= before
        assert data == rosmsg.serialize(command_for(i), rosmsg.TWIST_STAMPED)
    assert parse_ros_msg_type(types[0]) == (rosmsg.TWIST_STAMPED, True)


def test_subscriptions_survive_a_broker_restart(tmp_path):
    config = local_broker_config()
    received: list = []
    first = MosquittoBroker(config, tmp_path)
    first.start()
    try:
        robot = open_mqtt(config, "robot")
        host = open_mqtt(config, "host")
        robot.subscribe(CMD_VEL, rosmsg.TWIST_STAMPED, received.append)
    finally:
        first.stop()  # the new broker knows no subscriptions: the robot must renew its own
    try:
        with MosquittoBroker(config, tmp_path):  # same address and port: both clients reconnect
            publish = host.publisher(CMD_VEL, rosmsg.TWIST_STAMPED)
            deadline = time.monotonic() + 15
            while not received and time.monotonic() < deadline:
                publish(command_for(1))
                time.sleep(0.1)
    finally:
        host.close()
        robot.close()
    assert received and received[0].header.frame_id == "seq:1"


def test_broker_behind_a_command_prefix_is_ready_from_its_log(tmp_path):
    config = separate_broker_config()
    with MosquittoBroker(config, tmp_path, prefix=["env"]) as broker:  # stands in for "ip netns exec <ns>"
        assert not broker.check_port and " running" in broker.output()
        open_mqtt(config, "host").close()
    assert broker.proc.returncode is not None


@pytest.mark.parametrize("realtime_env", ["1", "0"])
def test_broker_asked_for_realtime_gets_it_where_permitted(tmp_path, monkeypatch, realtime_env):
    monkeypatch.setenv("FIELDTEST_REALTIME", realtime_env)  # "0": the kit's switch to turn it off
    expected = realtime_permitted()  # after the switch is set: it reads it
    with MosquittoBroker(local_broker_config(), tmp_path, realtime=True) as broker:
        assert broker.realtime is expected
        assert os.sched_getscheduler(broker.pid) == (os.SCHED_FIFO if expected else os.SCHED_OTHER)
    with MosquittoBroker(local_broker_config(), tmp_path) as plain:
        assert plain.realtime is False
    assert broker.realtime is False  # ended


def test_missing_mosquitto_and_unreachable_broker_are_clear_errors(tmp_path):
    with pytest.raises(BrokerError, match="Mosquitto is not installed"):
        with MosquittoBroker(local_broker_config(), tmp_path, binary="/nonexistent/mosquitto"):
            pass
    with pytest.raises(MqttTransportError, match="cannot reach MQTT broker"):
        open_mqtt(local_broker_config(), "host", connect_timeout_s=0.5)
    with pytest.raises(ValueError, match="'sros2' does not apply to middleware 'mqtt-local-broker'"):
        registry.open_transport(local_broker_config(security="sros2"), "host")


def test_a_missing_stamping_helper_fails_the_open_at_once_with_the_reason(tmp_path, monkeypatch):
    """Not the network thread's first wait: that would end the loop and look like a silent broker."""
    from fieldtest.transport import pollstamp

    def unavailable():
        raise pollstamp.PollStampError(
            "the MQTT arrival-stamping helper is unavailable (needs gcc): no compiler"
        )

    monkeypatch.setattr(pollstamp, "library", unavailable)
    config = local_broker_config()
    with MosquittoBroker(config, tmp_path):
        start, connect_timeout_s = time.monotonic(), 30.0
        with pytest.raises(MqttTransportError, match="arrival-stamping helper is unavailable"):
            open_mqtt(config, "robot", connect_timeout_s=connect_timeout_s)
        # at once: not after waiting for the connection (judged against that wait, not a speed)
        assert time.monotonic() - start < connect_timeout_s / 2


def _wait_until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_an_error_inside_the_network_loop_ends_in_a_reconnect_not_a_dead_loop(tmp_path, caplog):
    config = local_broker_config()
    got = []
    with MosquittoBroker(config, tmp_path):
        robot, host = open_mqtt(config, "robot"), open_mqtt(config, "host")
        try:
            robot.subscribe(CMD_VEL, rosmsg.TWIST_STAMPED, lambda msg: got.append(msg.header.frame_id))
            loop_misc, failed = robot.client.loop_misc, []

            def failing_once():
                if not failed:
                    failed.append(True)
                    raise RuntimeError("injected loop failure")
                return loop_misc()

            robot.client.loop_misc = failing_once
            robot.loop.wake()
            _wait_until(lambda: failed and robot.client.is_connected() and robot.client.socket() is not None)
            publish = host.publisher(CMD_VEL, rosmsg.TWIST_STAMPED)
            _wait_until(lambda: publish(command_for(len(got))) or len(got) >= 1, timeout_s=10.0)
        finally:
            host.close()
            robot.close()
    assert failed and got, caplog.text
    assert "injected loop failure" in caplog.text


# The host in a process of its own: the subscribing process below keeps its GIL busy.
STAMPED_SENDER = r"""
import json, random, sys, time
from fieldtest import rosmsg
from fieldtest.transport import TransportConfig
from fieldtest.middleware.mqtt.transport import open_mqtt
from transport_exchange import CMD_VEL, command_for

config = TransportConfig.model_validate_json(sys.argv[1])
count, seed = int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
host = open_mqtt(config, "host", inject_timestamp=True)
publish = host.publisher(CMD_VEL, rosmsg.TWIST_STAMPED)
try:
    for i in range(count):
        time.sleep(rng.uniform(0.005, 0.03))  # arrivals at every phase of the subscriber's GIL holds
        publish(command_for(i))
finally:
    host.close()
"""


@pytest.mark.parametrize("gil_hold_s", [0.004, 0.01])
def test_arrival_stamps_are_taken_before_the_network_thread_gets_the_gil_back(tmp_path, gil_hold_s):
    """The robot's arrival stamp is when its socket woke the network thread, not when that thread
    next got the GIL: here the main thread holds it for ``gil_hold_s`` at a time with short breaks
    (the twin robot's physics loop and bag writer hold it for shorter spells), so most messages
    arrive while the GIL is held, and their latency must stay well below the hold. Without Nagle's
    algorithm: its wait for an acknowledgement is the link's delay, not the stamp's."""
    config = local_broker_config(mqtt_nagle=False)
    latencies: list[float] = []
    count = 40
    with MosquittoBroker(config, tmp_path):
        robot = open_mqtt(
            config, "robot", inject_timestamp=True, on_latency=lambda _t, s: latencies.append(s)
        )
        robot.subscribe(CMD_VEL, rosmsg.TWIST_STAMPED, lambda _msg: None)
        send_while_holding_gil(STAMPED_SENDER, config, count, gil_hold_s, latencies, robot.close)
    assert float(np.median(latencies)) < gil_hold_s / 4, sorted(latencies)
