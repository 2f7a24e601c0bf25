"""Mosquitto with the generated TLS listener and ACL: client certificates in, anonymous and strangers out."""

from __future__ import annotations

import getpass
import socket
import subprocess
import threading
import time

import paho.mqtt.client as mqtt
import pytest

from fieldtest.middleware.mqtt.infra import mosquitto_conf
from fieldtest.middleware.mqtt.security import (
    MQTT_TYPE_ANNOUNCEMENT_PREFIX,
    mosquitto_acl,
    mosquitto_tls_lines,
    paho_tls_args,
    twin_link_flows,
)
from fieldtest.names import HOST_ENCLAVE, ROBOT_ENCLAVE
from fieldtest.procs import free_port
from fieldtest.security.keystore import create_rogue_tls
from fieldtest.testkit import needs
from fieldtest.testkit.refusal import tls_alert


@pytest.fixture(autouse=True)
def _installed_tools():
    needs.tools("mosquitto")


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mosquitto exited: {proc.stderr.read()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError("mosquitto did not start listening")


@pytest.fixture(scope="module")
def broker(keystore, tmp_path_factory):
    port = free_port()
    folder = tmp_path_factory.mktemp("broker")
    acl, conf = folder / "acl", folder / "mosquitto.conf"
    acl.write_text(mosquitto_acl(twin_link_flows()))
    conf.write_text(mosquitto_conf(mosquitto_tls_lines(keystore, acl, port=port), run_as=getpass.getuser()))
    proc = subprocess.Popen(
        ["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_listening(port, proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=5)


class Client:
    """A paho client that records its connection result and received payloads, and waits on the
    broker's acknowledgements (SUBACK, PUBACK) rather than on time."""

    def __init__(self, name: str, port: int, **tls):
        self.connected = threading.Event()
        self.reason = None
        self.received: list[bytes] = []
        self._changed = threading.Condition()
        self._subacks: set[int] = set()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name)
        self.client.tls_set(**tls)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.port = port

    def _on_connect(self, client, userdata, flags, reason, properties):
        self.reason = reason
        if not reason.is_failure:
            self.connected.set()

    def _on_message(self, client, userdata, message):
        with self._changed:
            self.received.append(message.payload)
            self._changed.notify_all()

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):
        with self._changed:
            self._subacks.add(mid)
            self._changed.notify_all()

    def subscribe(self, topic: str) -> None:
        """Subscribe and return once the broker has acknowledged it (SUBACK)."""
        _, mid = self.client.subscribe(topic, qos=1)
        with self._changed:
            assert self._changed.wait_for(lambda: mid in self._subacks, 5), f"no SUBACK for {topic}"

    def publish(self, topic: str, payload: bytes, retain: bool = False) -> None:
        """Publish at QoS 1 and return once the broker has acknowledged it (PUBACK): mosquitto queues
        a message for its subscribers before it acknowledges it."""
        self.client.publish(topic, payload, qos=1, retain=retain).wait_for_publish(5)

    def wait_for(self, payload: bytes, timeout_s: float = 5.0) -> None:
        with self._changed:
            arrived = self._changed.wait_for(lambda: payload in self.received, timeout_s)
        assert arrived, f"{payload!r} not delivered in {timeout_s} s (received {self.received})"

    def __enter__(self):
        self.client.connect("127.0.0.1", self.port, keepalive=10)
        self.client.loop_start()
        return self

    def __exit__(self, *exc):
        self.client.disconnect()
        self.client.loop_stop()


def test_acl_gives_each_identity_its_direction():
    acl = mosquitto_acl(twin_link_flows("tb4")).splitlines()

    def block(user: str) -> list[str]:  # that user's lines, up to the next "user" line
        rest = acl[acl.index(f"user {user}") + 1 :]
        return rest[: next((i for i, line in enumerate(rest) if line.startswith("user ")), len(rest))]

    host, robot = block(HOST_ENCLAVE), block(ROBOT_ENCLAVE)
    assert "topic write tb4/fieldtest/cmd_vel" in host and "topic read tb4/fieldtest/cmd_vel" in robot
    assert "topic write tb4/cmd_vel" in host and "topic read tb4/cmd_vel" in robot
    assert "topic read tb4/fieldtest/clock_probe" in host and "topic write tb4/fieldtest/clock_probe" in robot


def test_certificate_clients_exchange_and_acl_blocks_the_robot_commanding(keystore, broker):
    with (
        Client("robot", broker, **paho_tls_args(keystore, "robot")) as robot,
        Client("host", broker, **paho_tls_args(keystore, "host")) as host,
    ):
        assert robot.connected.wait(5) and host.connected.wait(5)
        robot.subscribe("cmd_vel")
        host.subscribe("cmd_vel")  # the ACL gives the host no read on cmd_vel
        host.subscribe("fieldtest/clock_probe")  # the host reads what the robot sends here
        robot.publish("cmd_vel", b"robot-cmd")  # the ACL gives the robot no write on cmd_vel
        host.publish("cmd_vel", b"host-cmd")
        robot.publish("fieldtest/clock_probe", b"robot-probe")
        # Each publish was acknowledged before the next was sent, and the broker hands a subscriber
        # its messages in the order it accepted them: a denied message that got through would have
        # arrived before the permitted one that follows it on the same connection.
        robot.wait_for(b"host-cmd")
        host.wait_for(b"robot-probe")
        assert robot.received == [b"host-cmd"]
        assert host.received == [b"robot-probe"]


def test_type_announcements_pass_the_acl(keystore, broker):
    """The kit's MQTT transport and mqtt_client announce each topic's type (retained) on
    mqtt_client/ros_msg_type/<topic>; the one ACL writer lets the sender write it and the receiver
    read it (the twin's ACL used to deny it, silently, while the lab's allowed it)."""
    type_topic = MQTT_TYPE_ANNOUNCEMENT_PREFIX + "cmd_vel"
    with (
        Client("robot-types", broker, **paho_tls_args(keystore, "robot")) as robot,
        Client("host-types", broker, **paho_tls_args(keystore, "host")) as host,
    ):
        assert robot.connected.wait(5) and host.connected.wait(5)
        robot.subscribe(type_topic)
        host.publish(type_topic, b"geometry_msgs/msg/TwistStamped", retain=True)
        robot.wait_for(b"geometry_msgs/msg/TwistStamped")
        assert robot.received == [b"geometry_msgs/msg/TwistStamped"]


def connects(port: int, name: str, timeout: float = 3.0, **tls) -> bool:
    """Whether a client with these TLS settings gets a successful CONNACK."""
    client = Client(name, port, **tls)
    try:
        client.client.connect("127.0.0.1", port, keepalive=10)
        deadline = time.monotonic() + timeout
        while not client.connected.is_set() and time.monotonic() < deadline:
            if client.client.loop(0.1) != mqtt.MQTT_ERR_SUCCESS:
                break
    finally:
        client.client.disconnect()
    return client.connected.is_set()


def test_only_clients_with_a_kit_certificate_get_in(keystore, broker, tmp_path):
    ca = str(keystore / "tls/ca.pem")
    rogue = create_rogue_tls(tmp_path / "rogue")["host"]
    assert connects(broker, "host", **paho_tls_args(keystore, "host"))
    assert tls_alert(broker, ca) == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    assert tls_alert(broker, ca, str(rogue.cert), str(rogue.key)) == "TLSV1_ALERT_UNKNOWN_CA"
