"""Mosquitto with the generated TLS listener and ACL: client certificates in, anonymous and strangers out."""

from __future__ import annotations

import getpass
import socket
import subprocess
import time

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
from fieldtest.testkit.mqttacked import AckedClient
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
        AckedClient("robot", broker, **paho_tls_args(keystore, "robot")) as robot,
        AckedClient("host", broker, **paho_tls_args(keystore, "host")) as host,
    ):
        assert robot.subscribe("cmd_vel") == "Granted QoS 1"
        assert host.subscribe("cmd_vel") == "Granted QoS 1"  # the ACL gives the host no read on it
        assert host.subscribe("fieldtest/clock_probe") == "Granted QoS 1"  # the robot writes here
        # the broker's own refusal: the ACL gives the robot no write on cmd_vel
        assert robot.publish("cmd_vel", b"robot-cmd") == "Not authorized"
        assert host.publish("cmd_vel", b"host-cmd") == "Success"
        assert robot.publish("fieldtest/clock_probe", b"robot-probe") == "Success"
        # Each publish was acknowledged, so queued for its subscribers, before the next was sent: a
        # message let through would have arrived before the permitted one that follows it.
        assert robot.wait_until(lambda got: ("cmd_vel", b"host-cmd") in got) == [("cmd_vel", b"host-cmd")]
        assert host.wait_until(lambda got: len(got) > 0) == [("fieldtest/clock_probe", b"robot-probe")]


def test_type_announcements_pass_the_acl(keystore, broker):
    """The kit's MQTT transport and mqtt_client announce each topic's type (retained) on
    mqtt_client/ros_msg_type/<topic>; the one ACL writer lets the sender write it and the receiver
    read it (the twin's ACL used to deny it, silently, while the lab's allowed it)."""
    type_topic = MQTT_TYPE_ANNOUNCEMENT_PREFIX + "cmd_vel"
    with (
        AckedClient("robot-types", broker, **paho_tls_args(keystore, "robot")) as robot,
        AckedClient("host-types", broker, **paho_tls_args(keystore, "host")) as host,
    ):
        assert robot.subscribe(type_topic) == "Granted QoS 1"
        assert host.publish(type_topic, b"geometry_msgs/msg/TwistStamped", retain=True) == "Success"
        got = robot.wait_until(lambda got: len(got) > 0)
        assert got == [(type_topic, b"geometry_msgs/msg/TwistStamped")]


def test_only_clients_with_a_kit_certificate_get_in(keystore, broker, tmp_path):
    ca = str(keystore / "tls/ca.pem")
    rogue = create_rogue_tls(tmp_path / "rogue")["host"]
    with AckedClient("host", broker, **paho_tls_args(keystore, "host")) as host:  # the kit's get in
        assert host.connack is not None and host.connack.getName() == "Success"
    assert tls_alert(broker, ca) == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    assert tls_alert(broker, ca, str(rogue.cert), str(rogue.key)) == "TLSV1_ALERT_UNKNOWN_CA"
