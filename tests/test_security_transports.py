"""The kit's own transports with security on: TransportConfig(security=..., keystore=...) end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from fieldtest import rosmsg
from fieldtest.middleware.dds.security import security_xml as cyclonedds_security_xml
from fieldtest.middleware.mqtt.security import configure_client as mqtt_configure_client
from fieldtest.middleware.mqtt.security import listener_lines as mosquitto_listener_lines
from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
from fieldtest.middleware.zenoh.security import config_overrides as zenoh_config_overrides
from fieldtest.procs import free_port
from fieldtest.security import (
    KeystoreError,
    SecuritySettingError,
    require_tls_name,
)
from fieldtest.testkit import needs
from fieldtest.transport import TransportConfig

# The secured DDS transport joins domain 0, the keystore's: leased for each test (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("dds_domain_zero")


class Received:
    def __init__(self):
        self.seqs: list[int] = []
        self.event = threading.Event()

    def __call__(self, msg) -> None:
        self.seqs.append(rosmsg.seq_of(msg.header.frame_id))
        if len(self.seqs) >= 3:
            self.event.set()


# One DDS process per role: a secure identity is per process (one Cyclone domain config).
DDS_ROLE = r"""
import json, sys, threading, time
from fieldtest import rosmsg
from fieldtest.transport import TransportConfig
from fieldtest.middleware.registry import open_transport
role, cfg = sys.argv[1], TransportConfig(**json.loads(sys.argv[2]))
t = open_transport(cfg, role)
try:
    if role == "robot":
        got, done = [], threading.Event()
        def on_cmd(msg):
            got.append(rosmsg.seq_of(msg.header.frame_id))
            if len(got) >= 3: done.set()
        t.subscribe("/cmd_vel", rosmsg.TWIST_STAMPED, on_cmd)
        done.wait(15)  # the host stays up until this side has reported (the test tells it)
        try:
            t.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
            denied = False
        except Exception as exc:
            denied = "NOT_ALLOWED_BY_SECURITY" in str(exc)
        print(json.dumps({"received": sorted(set(got)), "cmd_vel_writer_denied": denied}), flush=True)
    else:
        pub = t.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
        matched = t.wait_for_match("/cmd_vel", timeout_s=15)
        for seq in range(10):
            pub(rosmsg.command(seq, time.time_ns(), 0.33, 0.0)); time.sleep(0.03)
        print(json.dumps({"matched": matched}), flush=True)
        sys.stdin.readline()  # closed once the robot has reported what it received
finally:
    t.close()
"""


def run_role(role: str, config: TransportConfig) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", DDS_ROLE, role, config.model_dump_json()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> tuple[int, dict, str]:
    """Close the role's stdin (the host then leaves) and collect its report."""
    try:
        out, err = proc.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return proc.returncode, json.loads(lines[-1]) if lines else {}, err


@pytest.mark.parametrize("setting", ["sros2", "rtps-encrypt"])
def test_dds_transport_with_security(keystore, setting):
    config = TransportConfig(middleware="dds", security=setting, keystore=str(keystore))
    robot = run_role("robot", config)
    host = run_role("host", config)
    robot_rc, robot_out, robot_err = finish(robot)  # the host's commands in, before it leaves
    host_rc, host_out, host_err = finish(host)
    assert host_rc == 0 and host_out == {"matched": True}, host_err[-2000:]
    assert robot_rc == 0, robot_err[-2000:]
    assert len(robot_out["received"]) >= 3
    assert robot_out["cmd_vel_writer_denied"] is True


def test_dds_glue_rejects_wrong_domain_missing_keystore_and_wrong_setting(keystore, tmp_path):
    with pytest.raises(KeystoreError, match="made for domain \\[0\\], the trial uses domain 5"):
        cyclonedds_security_xml(
            TransportConfig(middleware="dds", security="sros2", keystore=str(keystore), domain_id=5), "host"
        )
    with pytest.raises(KeystoreError, match="needs a keystore"):
        cyclonedds_security_xml(TransportConfig(middleware="dds", security="sros2"), "host")
    with pytest.raises(KeystoreError, match="keystore directory not found"):
        cyclonedds_security_xml(
            TransportConfig(middleware="dds", security="sros2", keystore=str(tmp_path / "none")), "host"
        )
    with pytest.raises(SecuritySettingError, match="does not apply to middleware 'zenoh-peer'"):
        zenoh_config_overrides(
            TransportConfig(middleware="zenoh-peer", security="sros2", keystore=str(keystore)), "host", {}
        )


def test_zenoh_transport_with_mtls_acl(keystore):
    from fieldtest.middleware.zenoh.transport import open_zenoh, zenoh_config

    config = TransportConfig(
        middleware="zenoh-peer", security="mtls-acl", keystore=str(keystore), zenoh_port=free_port()
    )

    def overrides(role):
        return zenoh_config_overrides(config, role, zenoh_config(config, role))

    robot = open_zenoh(config, "robot", config_overrides=overrides("robot"))
    host = open_zenoh(config, "host", config_overrides=overrides("host"))
    try:
        received = Received()
        robot.subscribe("/cmd_vel", rosmsg.TWIST_STAMPED, received)
        publish = host.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
        assert host.wait_matched("/cmd_vel", 5)
        for seq in range(5):
            publish(rosmsg.command(seq, time.time_ns(), 0.33, 0.0))
        assert received.event.wait(5)
        assert received.seqs[:3] == [0, 1, 2]
    finally:
        host.close()
        robot.close()


def test_zenoh_listener_address_must_be_in_the_certificate(keystore):
    with pytest.raises(KeystoreError, match=r"robot.crt: does not name 10.9.8.7 .*--tls-name 10.9.8.7"):
        require_tls_name(keystore, "robot", "10.9.8.7")
    require_tls_name(keystore, "robot", "127.0.0.1")
    require_tls_name(keystore, "robot", "localhost")


def test_mqtt_transport_with_tls_broker(keystore, tmp_path):
    needs.tools("mosquitto")
    from fieldtest.middleware.mqtt.infra import MosquittoBroker
    from fieldtest.middleware.mqtt.transport import open_mqtt

    config = TransportConfig(
        middleware="mqtt-local-broker", security="mtls-acl", keystore=str(keystore), mqtt_port=free_port()
    )
    lines = mosquitto_listener_lines(
        config, "127.0.0.1", config.settings(MqttSettings).port, tmp_path / "acl"
    )
    with MosquittoBroker(config, tmp_path, listener_lines=lines):
        robot = open_mqtt(config, "robot", configure_client=mqtt_configure_client(config, "robot"))
        host = open_mqtt(config, "host", configure_client=mqtt_configure_client(config, "host"))
        try:
            received = Received()
            robot.subscribe("/cmd_vel", rosmsg.TWIST_STAMPED, received)  # returns at the broker's SUBACK
            publish = host.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
            for seq in range(5):
                publish(rosmsg.command(seq, time.time_ns(), 0.33, 0.0))
            assert received.event.wait(5)
            assert received.seqs[:3] == [0, 1, 2]
        finally:
            host.close()
            robot.close()


# The robot's side of a TLS MQTT link: its message callback takes a lock that its main thread holds
# while it publishes (as the clock probes do: send under the probes' lock, replies taken under it).
MQTT_SHARED_LOCK_ROLE = r"""
import json, sys, threading, time
from fieldtest import rosmsg
from fieldtest.middleware.mqtt.security import configure_client as mqtt_configure_client
from fieldtest.transport import TransportConfig
from fieldtest.middleware.mqtt.transport import open_mqtt
cfg, count = TransportConfig(**json.loads(sys.argv[1])), int(sys.argv[2])
robot = open_mqtt(cfg, "robot", configure_client=mqtt_configure_client(cfg, "robot"))
shared, heard = threading.Lock(), []
def on_command(msg):
    with shared:
        heard.append(rosmsg.seq_of(msg.header.frame_id))
robot.subscribe("/cmd_vel", rosmsg.TWIST_STAMPED, on_command)
publish = robot.publisher("/robot_out", rosmsg.TWIST_STAMPED)
print("READY", flush=True)
sent = 0
deadline = time.monotonic() + 20
while time.monotonic() < deadline and len(heard) < count:
    with shared:
        publish(rosmsg.command(sent, time.time_ns(), 0.0, 0.0))
    sent += 1
    time.sleep(0.001)  # paced: unpaced QoS 1 publishes pile up unacked, and paho walks them all per ack
print(json.dumps({"heard": len(heard), "sent": sent}), flush=True)
robot.close()
"""


def test_mqtt_tls_callbacks_never_run_under_the_connections_lock(keystore, tmp_path):
    """Over TLS the network loop reads under the lock that publishes take; a message callback run
    inside that read, waiting for a lock the publishing thread held, deadlocked both (the robot
    stopped hearing the host mid-trial in the security proof). Callbacks now run after the read."""
    from fieldtest.middleware.mqtt.infra import MosquittoBroker
    from fieldtest.middleware.mqtt.transport import open_mqtt

    config = TransportConfig(
        middleware="mqtt-local-broker", security="mtls-acl", keystore=str(keystore), mqtt_port=free_port()
    )
    count = 2000
    lines = mosquitto_listener_lines(
        config, "127.0.0.1", config.settings(MqttSettings).port, tmp_path / "acl"
    )
    with MosquittoBroker(config, tmp_path, listener_lines=lines):
        robot = subprocess.Popen(
            [sys.executable, "-c", MQTT_SHARED_LOCK_ROLE, config.model_dump_json(), str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        host = open_mqtt(config, "host", configure_client=mqtt_configure_client(config, "host"))
        try:
            # READY comes after the subscribe returned, which waits for the broker's SUBACK
            assert robot.stdout.readline().strip() == "READY"
            publish = host.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
            for seq in range(count):
                publish(rosmsg.command(seq, time.time_ns(), 0.33, 0.0))
            out, _ = robot.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            robot.kill()
            out, _ = robot.communicate()
            pytest.fail(f"the robot side hung (deadlock): {out[-1000:]}")
        finally:
            host.close()
            if robot.poll() is None:
                robot.kill()
    report = json.loads(out.strip().splitlines()[-1])
    assert report["heard"] == count, report
    assert report["sent"] > 0
