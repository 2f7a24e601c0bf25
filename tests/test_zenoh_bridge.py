"""The real Zenoh bridge (zenohd + zenoh-plugin-ros2dds 1.10.2) with the configs the kit generates:
the kit's DDS endpoints -> bridge -> Zenoh (peer or router) -> bridge -> DDS, on loopback.

These tests need the bridge built by tools/install_zenoh_bridge.sh; without it they fail with
that message (BridgeMissingError), they are not skipped.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid

import pytest

from fieldtest import rosmsg
from fieldtest.analysis.metrics.schema import Latency, Metrics, TrialInfo
from fieldtest.analysis.rendering.report import _duplicates_note
from fieldtest.middleware.labshared import BridgeConfigError
from fieldtest.middleware.launch import write_config_files
from fieldtest.middleware.registry import open_transport
from fieldtest.middleware.zenoh.bridge import (
    INSTALL_COMMAND,
    ROBOT_DOMAIN_OFFSET,
    BridgeMissingError,
    bridge_argv,
    find_bridge,
    side_domain,
)
from fieldtest.middleware.zenoh.lab import (
    check_ros2dds_plugin,
    run_trial_bridges,
    stop_process,
    to_json5,
    trial_bridge_processes,
    twin_side_launches,
    zenoh_bridge_config,
)
from fieldtest.procs import free_port, lease_dds_domain
from fieldtest.record import CLOCK_PROBE_TOPIC, CMD_VEL_TOPIC
from fieldtest.transport import TransportConfig

WAIT_S = 20.0  # discovery through two bridges on a busy 2-core machine
COUNT = 40

# A DDS domain of this test process's own, leased until it exits: a parallel run on this machine
# (another test worker, a demo) never shares it.
DDS_DOMAIN = lease_dds_domain(1 + os.getpid() % 99, offsets=(0, ROBOT_DOMAIN_OFFSET))  # and the robot side's


@pytest.fixture(scope="module")
def bridge():
    return find_bridge()  # BridgeMissingError names the install command: the test fails, not skips


def trial_transport(middleware: str, **extra) -> TransportConfig:
    return TransportConfig(
        middleware=middleware,
        zenoh_path="bridge",
        domain_id=DDS_DOMAIN.domain_id,
        namespace=f"/t{uuid.uuid4().hex[:8]}",
        zenoh_port=free_port(),
        **extra,
    )


# ---------------------------------------------------------------------- without the bridge


def test_missing_build_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("FIELDTEST_CACHE", str(tmp_path))
    with pytest.raises(BridgeMissingError, match="zenohd.*missing.*" + INSTALL_COMMAND.replace(" ", r"\s")):
        find_bridge()


def test_twin_sides_use_separate_dds_domains_and_the_distro_of_the_command_type():
    transport = trial_transport("zenoh-router")
    host, robot = twin_side_launches(transport, "twist")
    assert (host.domain_id, robot.domain_id) == (
        side_domain(transport, "host"),
        side_domain(transport, "robot"),
    )
    assert host.domain_id != robot.domain_id and 0 <= robot.domain_id <= 232
    assert host.ros_distro == robot.ros_distro == "humble"
    assert twin_side_launches(transport, "twist_stamped")[0].ros_distro == "jazzy"


def test_report_explains_duplicates_only_for_bridged_zenoh():
    def metrics(duplicates: int, path: str) -> Metrics:
        # only the two sections the note reads (model_construct: the rest of a trial is not needed)
        trial = TrialInfo.model_construct(zenoh_path=path)
        return Metrics.model_construct(latency=Latency(duplicates=duplicates), trial=trial)

    assert "adds another DDS reader" in _duplicates_note(metrics(3, "bridge"))[0]
    assert _duplicates_note(metrics(0, "bridge")) == []
    assert _duplicates_note(metrics(3, "direct")) == []
    assert _duplicates_note(metrics(3, "")) == []


# ------------------------------------------------------------------------- with the bridge


def _exchange(transport: TransportConfig, cmd_type: str, count: int = COUNT) -> tuple[list[int], list[int]]:
    """Commands host -> robot and probes robot -> host through the bridges: the sequence numbers
    each side received after the path was up."""
    typename = rosmsg.TWIST if cmd_type == "twist" else rosmsg.TWIST_STAMPED
    host, robot = open_transport(transport, "host"), open_transport(transport, "robot")
    got_cmd: list[int] = []
    got_probe: list[int] = []
    lock = threading.Lock()

    def on_cmd(msg) -> None:
        seq = round(msg.linear.x * 1000) if cmd_type == "twist" else rosmsg.seq_of(msg.header.frame_id)
        with lock:
            got_cmd.append(seq)

    def on_probe(msg) -> None:
        with lock:
            got_probe.append(msg.id)

    try:
        robot.subscribe(CMD_VEL_TOPIC, typename, on_cmd)
        host.subscribe(CLOCK_PROBE_TOPIC, rosmsg.CLOCK_PROBE, on_probe)
        send_cmd = host.publisher(CMD_VEL_TOPIC, typename)
        send_probe = robot.publisher(CLOCK_PROBE_TOPIC, rosmsg.CLOCK_PROBE)
        probe = rosmsg.msg_class(rosmsg.CLOCK_PROBE)

        def command(seq: int):
            if cmd_type == "twist":
                return rosmsg.twist(seq / 1000, 0.0)
            return rosmsg.command(seq, time.time_ns(), 0.1, 0.0)

        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not (got_cmd and got_probe):  # path up, both ways
            send_cmd(command(0))
            send_probe(_probe(probe, 0))
            time.sleep(0.1)
        assert got_cmd and got_probe, (
            f"nothing through the bridges in {WAIT_S:g} s (cmd {got_cmd}, probe {got_probe})"
        )
        time.sleep(0.3)
        with lock:
            got_cmd.clear()
            got_probe.clear()
        for seq in range(1, count + 1):
            send_cmd(command(seq))
            send_probe(_probe(probe, seq))
            time.sleep(0.005)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and (len(got_cmd) < count or len(got_probe) < count):
            time.sleep(0.05)
        time.sleep(0.3)  # duplicates would arrive now
        with lock:
            return list(got_cmd), list(got_probe)
    finally:
        host.close()
        robot.close()


def _probe(cls, seq: int):
    zero = rosmsg.time_msg(0)
    return cls(id=seq, t1=zero, t2=zero, t3=zero)


@pytest.mark.parametrize(
    ("middleware", "cmd_type", "security"),
    [
        ("zenoh-peer", "twist_stamped", "none"),
        ("zenoh-router", "twist", "none"),
        ("zenoh-peer", "twist", "mtls-acl"),
        ("zenoh-router", "twist_stamped", "mtls-acl"),
    ],
)
def test_kit_dds_through_two_real_bridges(
    tmp_path, monkeypatch, bridge, keystore, middleware, cmd_type, security
):
    """Every command and probe arrives exactly once and in order, both ways, with the generated
    configs (peer and router, Humble and Jazzy GIDs, plain and mTLS + ACL)."""
    extra = {"security": security, "keystore": str(keystore)} if security != "none" else {}
    transport = trial_transport(middleware, **extra)
    host, robot = twin_side_launches(transport, cmd_type)
    monkeypatch.setenv("ROS_DISTRO", host.ros_distro)  # the kit's GID size must match the bridges'
    with run_trial_bridges(host, robot, tmp_path / "bridges", bridge=bridge):
        got_cmd, got_probe = _exchange(transport, cmd_type)
    expected = list(range(1, COUNT + 1))
    assert got_cmd == expected, "host -> robot commands through the bridges"
    assert got_probe == expected, "robot -> host probes through the bridges"


def test_kit_dds_without_the_bridges_reaches_nothing(monkeypatch):
    """The two sides' DDS domains are apart: without bridges nothing crosses (the test above is
    not passing by plain DDS)."""
    transport = trial_transport("zenoh-peer")
    monkeypatch.setenv("ROS_DISTRO", "jazzy")
    host, robot = open_transport(transport, "host"), open_transport(transport, "robot")
    try:
        got = []
        robot.subscribe(CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, got.append)
        send = host.publisher(CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED)
        for seq in range(20):
            send(rosmsg.command(seq, 0, 0.1, 0.0))
            time.sleep(0.05)
        assert got == []
    finally:
        host.close()
        robot.close()


def test_client_bridge_waits_for_a_late_router(tmp_path, monkeypatch, bridge):
    """The robot's client bridge starts before the router and keeps retrying (zenoh's client
    default would exit at once); once the router listens, commands flow."""
    transport = trial_transport("zenoh-router")
    host, robot = twin_side_launches(transport, "twist_stamped")
    monkeypatch.setenv("ROS_DISTRO", host.ros_distro)
    folder = tmp_path / "bridges"
    processes = {p.name: p for p in trial_bridge_processes(host, robot, folder, bridge)}
    write_config_files(list(processes.values()), folder)
    started: list[subprocess.Popen] = []
    try:
        for name in ("bridge_robot", "bridge_host", "router"):
            proc = processes[name]
            log = (folder / f"{name}.log").open("w")
            started.append(subprocess.Popen(proc.argv, env={**_env(), **proc.env}, stdout=log, stderr=log))
            if name == "bridge_host":
                time.sleep(3.0)  # the router is not up yet
                assert all(p.poll() is None for p in started), (folder / "bridge_robot.log").read_text()[
                    -500:
                ]
        got_cmd, _ = _exchange(transport, "twist_stamped", count=10)
        assert got_cmd == list(range(1, 11))
    finally:
        for proc in reversed(started):
            stop_process(proc)


def _env() -> dict[str, str]:
    return dict(os.environ)


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("shm_enabled", False, "shm_enabled"),
        ("pub_priorities", ["^/a$=8"], "priority"),
        ("not_a_key", 1, "not_a_key"),
    ],
)
def test_real_plugin_refuses_what_the_kit_check_refuses(tmp_path, bridge, key, value, said):
    """The kit's check is as strict as the plugin: the real bridge refuses these too."""
    transport = trial_transport("zenoh-peer")
    robot = twin_side_launches(transport, "twist_stamped")[1]
    config = zenoh_bridge_config(robot)
    config["plugins"]["ros2dds"][key] = value
    with pytest.raises(BridgeConfigError):
        check_ros2dds_plugin(config["plugins"]["ros2dds"])
    path = tmp_path / "bad.json5"
    path.write_text(to_json5(config))
    log = tmp_path / "bridge.log"
    with log.open("w") as out:
        proc = subprocess.Popen(bridge_argv(bridge, path, "peer"), stdout=out, stderr=out, env=_env())
    try:
        code = proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        stop_process(proc)
    output = log.read_text(errors="replace")
    assert code not in (None, 0), f"the bridge accepted {key}={value!r}: {output[-800:]}"
    assert said in output, output[-800:]


@pytest.mark.parametrize("middleware", ["zenoh-peer", "zenoh-router"])
@pytest.mark.parametrize("cmd_type", ["twist", "twist_stamped"])
@pytest.mark.parametrize("security", ["none", "mtls-acl"])
def test_every_generated_config_runs_under_the_real_bridge(
    tmp_path, bridge, keystore, middleware, cmd_type, security
):
    extra = {"security": security, "keystore": str(keystore)} if security != "none" else {}
    host, robot = twin_side_launches(trial_transport(middleware, **extra), cmd_type)
    try:
        with run_trial_bridges(host, robot, tmp_path / "bridges", bridge=bridge) as running:
            time.sleep(2.0)
            assert all(p.poll() is None for p in running.values())
        for log in (tmp_path / "bridges").glob("*.log"):  # a plugin task that panics leaves zenohd up
            text = log.read_text(errors="replace")
            assert "panicked" not in text and " ERROR " not in text, f"{log.name}: {text[-800:]}"
    except BridgeConfigError as exc:
        pytest.fail(f"a generated config was refused: {exc}")


def test_bridged_twin_trial_without_the_build_ends_with_the_install_hint(tmp_path, monkeypatch):
    from fieldtest.record import TrialRequest
    from fieldtest.runner import QUICK_PLAN, run_twin_trial

    monkeypatch.setenv("FIELDTEST_CACHE", str(tmp_path / "empty-cache"))
    request = TrialRequest(name="no-bridge", plan=QUICK_PLAN, transport={"middleware": "zenoh-peer"})
    result = run_twin_trial(request, tmp_path / "runs")
    assert result.end_reason == "error"
    assert INSTALL_COMMAND in result.detail and "not built" in result.detail
