"""MQTT ports of lab trials and the separate broker machine: a TLS trial
dials the TLS port unless the campaign names a port, so a campaign with security off and on
reaches one broker machine whose Mosquitto (``fieldtest lab broker-config``) has a plain and a
TLS listener; a campaign that names one port for both is refused before anything starts."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from fieldtest.labrun.cli import lab_main
from fieldtest.labrun.configuration.launchsettings import (
    LaunchArgError,
    launch_args_for_trial,
    parse_launch_args,
    with_lab_defaults,
)
from fieldtest.labrun.orchestration.preflight import refuse_before_start
from fieldtest.middleware import registry
from fieldtest.middleware.mqtt.lab import mqtt_client_params
from fieldtest.middleware.mqtt.security import paho_tls_args
from fieldtest.middleware.mqtt.settings import MQTT_PORT, MQTT_TLS_PORT
from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
from fieldtest.procs import ProcessGroup, free_port
from fieldtest.testkit import needs
from fieldtest.testkit.mqttacked import AckedClient
from fieldtest.testkit.refusal import tls_alert
from fieldtest.trialcampaign import load_trials

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "trials" / "seed-study.yaml"
GUIDE_HOST = {"network_interface": "wlp2s0", "relay": "true"}
GUIDE_ROBOT = {"base_interface": "usb0", "network_interface": "wlan0", "relay": "true"}


def _port_on_both_sides(request) -> set[int]:
    ports = set()
    for role in ("host", "robot"):
        args = launch_args_for_trial(
            request, role, ros_distro="jazzy", trial_dir="/t", extra={"relay": "true"}
        )
        ports.add(parse_launch_args(args, role, environ={}).settings(MqttSettings).port)
    return ports


@pytest.mark.parametrize("middleware", ["mqtt-local-broker", "mqtt-broker"])
def test_tls_trials_dial_the_tls_port_unless_the_campaign_names_one(middleware):
    _, trials = load_trials(SEED, ros_distro="jazzy")
    cases = [t for t in trials if t.transport.middleware == middleware]
    assert {t.transport.security for t in cases} == {"none", "mtls-acl"}
    for request in cases:
        want = MQTT_PORT if request.transport.security == "none" else MQTT_TLS_PORT
        assert _port_on_both_sides(request) == {want}, request.name
        recorded = with_lab_defaults(request)  # what trial.yaml records
        assert recorded.transport.settings(MqttSettings).port == want and _port_on_both_sides(recorded) == {
            want
        }
        named = request.model_copy(
            update={"transport": request.transport.with_settings(MqttSettings, port=1999)}
        )
        assert _port_on_both_sides(named) == {1999}


def test_one_named_port_for_plain_and_tls_on_a_separate_broker_is_refused(tmp_path):
    text = SEED.read_text().replace(
        "    # mqtt_port left out", "    mqtt_port: 1883\n    # mqtt_port left out"
    )
    path = tmp_path / "named-port.yaml"
    path.write_text(text)
    _, trials = load_trials(path)
    with pytest.raises(LaunchArgError) as info:
        refuse_before_start(trials, "jazzy", GUIDE_HOST, GUIDE_ROBOT)
    message = str(info.value)
    assert "\n" not in message and message.startswith("mqtt_port: 1883 for both plain and TLS trials")
    # the host-started broker (mqtt-local-broker) is one per trial: one port serves either
    local = [t for t in trials if t.transport.middleware != "mqtt-broker"]
    refuse_before_start(local, "jazzy", GUIDE_HOST, GUIDE_ROBOT)
    _, shipped = load_trials(SEED)
    refuse_before_start(shipped, "jazzy", GUIDE_HOST, GUIDE_ROBOT)


# ----------------------------------------------------------------- the broker machine, for real


COMMANDS, PROBES = "tb4/fieldtest/cmd_vel", "tb4/fieldtest/clock_probe"  # the relay's topics on the wire


def _host_commands_the_robot(host: AckedClient, robot: AckedClient) -> None:
    assert robot.subscribe(COMMANDS) == "Granted QoS 1"
    assert host.publish(COMMANDS, b"cmd") == "Success"
    assert robot.wait_until(lambda got: len(got) > 0) == [(COMMANDS, b"cmd")]


def _robot_commanding_is_refused(host: AckedClient, robot: AckedClient) -> None:
    """The ACL's refusal is the broker's answer to the publish; the robot's permitted clock probe
    published after it closes the window in which a command let through would have arrived."""
    assert host.subscribe(COMMANDS) == "Granted QoS 1" and host.subscribe(PROBES) == "Granted QoS 1"
    assert robot.publish(COMMANDS, b"cmd") == "Not authorized"
    assert robot.publish(PROBES, b"probe") == "Success"
    assert host.wait_until(lambda got: len(got) > 0) == [(PROBES, b"probe")]


def _wait_listening(proc: subprocess.Popen, *ports: int) -> None:
    import socket

    deadline = time.monotonic() + 10
    for port in ports:
        while True:
            assert proc.poll() is None, proc.stderr.read()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, f"mosquitto is not listening on {port}"
            time.sleep(0.05)


def test_one_broker_machine_serves_plain_and_tls_trials(keystore, tmp_path, capsys):
    """`fieldtest lab broker-config` writes one Mosquitto with both listeners; the mqtt_client
    configs of a plain and a TLS trial dial the ports it listens on, and each listener keeps its
    own rules: anonymous in on the plain one, kit certificates and the ACL on the TLS one."""
    needs.tools("mosquitto")
    plain, tls = free_port(), free_port()
    args = [
        f"keystore:={keystore}",
        "namespace:=/tb4",
        "ros_distro:=jazzy",
        "relay:=true",
        f"mqtt_port:={tls}",
    ]
    assert lab_main(["broker-config", *args, "--plain-port", str(plain), "--out", str(tmp_path / "b")]) == 0
    assert f"plain on {plain}, TLS on {tls}" in capsys.readouterr().out
    for security, port in (("none", plain), ("mtls-acl", tls)):
        cfg = parse_launch_args(
            {
                "middleware": "mqtt-broker",
                "security": security,
                "keystore": str(keystore),
                "namespace": "/tb4",
            }
            | {"ros_distro": "jazzy", "relay": "true", "mqtt_port": str(port)},
            "robot",
            environ={},
        )
        params = mqtt_client_params(cfg)
        assert next(iter(params.values()))["ros__parameters"]["broker"]["port"] == port
    proc = subprocess.Popen(
        ["mosquitto", "-c", str(tmp_path / "b" / "mosquitto.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_listening(proc, plain, tls)
        with AckedClient("plain-host", plain) as host, AckedClient("plain-robot", plain) as robot:
            _host_commands_the_robot(host, robot)
        host_tls, robot_tls = paho_tls_args(keystore, "host"), paho_tls_args(keystore, "robot")
        with AckedClient("host", tls, **host_tls) as host, AckedClient("robot", tls, **robot_tls) as robot:
            _host_commands_the_robot(host, robot)
        with AckedClient("robot", tls, **robot_tls) as robot, AckedClient("host", tls, **host_tls) as host:
            _robot_commanding_is_refused(host, robot)  # the ACL: the robot never commands
        # the TLS listener's own refusal of a client without a certificate
        assert tls_alert(tls, host_tls["ca_certs"]) == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def test_the_rehearsals_broker_machine_is_the_mqtt_familys_own(keystore, tmp_path):
    """``Middleware.rehearsal_machine_process``: mqtt-broker's broker machine (the kit's config and
    ACL) is a real Mosquitto that takes the host's commands to the robot and refuses the reverse;
    only an MQTT side whose host starts no broker has such a machine."""
    needs.tools("mosquitto")
    args = {"keystore": str(keystore), "namespace": "/tb4", "ros_distro": "jazzy", "relay": "true"}
    for name in registry.names(lab=True):  # a dry run: rmw-zenoh is refused without one
        for start_broker in ("true", "false"):
            plain = parse_launch_args(
                {**args, "middleware": name, "start_broker": start_broker, "dry_run": "true"},
                "host",
                environ={},
            )
            machine = registry.get(plain.middleware).rehearsal_machine_process(plain, tmp_path / "plain")
            assert (machine is not None) == (
                registry.get(plain.middleware).family == "mqtt" and start_broker == "false"
            ), name
    port = free_port()
    cfg = parse_launch_args(
        {**args, "middleware": "mqtt-broker", "security": "mtls-acl", "mqtt_port": str(port)},
        "host",
        environ={},
    )
    proc, ready = registry.get(cfg.middleware).rehearsal_machine_process(cfg, tmp_path / "machine")
    assert proc.name == "broker" and (tmp_path / "machine" / "mosquitto.acl").is_file()
    procs = ProcessGroup(tmp_path / "logs")
    try:
        procs.start(proc.name, proc.argv)
        procs.wait_ready(proc.name, marker=ready, timeout_s=10.0)
        host_tls, robot_tls = paho_tls_args(keystore, "host"), paho_tls_args(keystore, "robot")
        with AckedClient("host", port, **host_tls) as host, AckedClient("robot", port, **robot_tls) as robot:
            _host_commands_the_robot(host, robot)
        with AckedClient("robot", port, **robot_tls) as robot, AckedClient("host", port, **host_tls) as host:
            _robot_commanding_is_refused(host, robot)
    finally:
        procs.stop_all()
