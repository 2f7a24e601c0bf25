"""`fieldtest lab perf`: the main side on the host, the relay on the robot over the lab's ssh.

The two-machine tests run it as the lab user on the host against the robot's own login behind a
real sshd, across an emulated Wi-Fi link between two network namespaces
(fieldtest.testkit.twomachines). The rehearsal's robot reads the kit at its own path; its ROS 2
environment has no CycloneDDS binding, so the relay runs the kit's .venv Python (--robot-python,
as a lab names the robot's Python that has the kit and the middleware's library)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fieldtest.testkit import needs
from fieldtest.testkit.twomachines import KIT_ROOT, ROS_VENV

WIFI = {"name": "wifi-no-loss", "extends": "wifi", "loss_pct": 0.0}  # as tests/test_lab_two_machines.py
KIT_PYTHON = str(KIT_ROOT / ".venv" / "bin" / "python")
ROW = ["--message", "Array1k", "--rate", "10", "--duration", "2"]
# Both logins' environments point FIELDTEST_CACHE at the builder's cache for the Zenoh bridge, which
# neither may write: the kit's DDS helper (ddsstamp.c) is built into each login's own ~/.cache, as
# on real machines.
OWN_CACHE = {"FIELDTEST_CACHE": ""}
ROBOT_SETUP = "source /opt/ros/jazzy/setup.bash && unset FIELDTEST_CACHE"


@pytest.fixture
def lab():
    with needs.two_machines(WIFI, hardware=False) as machines:
        yield machines


def _lab_perf(lab, campaign: str, *extra: str) -> list[str]:
    return [
        "fieldtest", "lab", "perf", campaign, "--robot", lab.robot_login, "--robot-python", KIT_PYTHON,
        "--robot-setup", ROBOT_SETUP, *extra,
    ]  # fmt: skip


def _output(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def _link_packets(lab) -> int:
    robot = lab.topology.link_stats()["robot"]
    return robot["a2b"]["tx"] + robot["b2a"]["tx"]


def test_a_lab_perf_row_runs_its_relay_on_the_robot_and_reports_round_trips(lab):
    campaign = lab.campaign("trials/rehearsal.yaml")
    packets = _link_packets(lab)
    done = lab.host(_lab_perf(lab, campaign, *ROW, "--out", "perf"), timeout_s=300, env=OWN_CACHE)
    report = _output(done)
    assert done.returncode == 0, report
    assert "one-way latency not measured" in done.stdout, report
    (row,) = json.loads((lab.host_user.home / "perf" / "perf.json").read_text())["rows"]
    assert (row["status"], row["case"]["middleware"], row["case"]["network"]) == ("ok", "dds", "lab"), row
    figures = row["figures"]
    assert figures["sent"] == 20 and figures["received"] == 20, figures
    assert (
        0 < figures["round_trip_min (ms)"] <= figures["latency_mean (ms)"] == figures["round_trip_mean (ms)"]
    )
    # the wifi profile's delay both ways is in every round trip
    assert figures["round_trip_min (ms)"] > 2.0, figures
    assert all(v is None for k, v in figures.items() if k.startswith("one_way_")), figures
    assert figures["throughput_received (B/s)"] > 0 and figures["cpu_usage (%)"] is not None
    # the relay's CPU and RSS: its own getrusage, written on the robot and copied back
    relay = row["processes"]["relay1"]
    assert relay["machine"] == "robot" and relay["cpu_s"] > 0 and relay["rss_max_kb"] > 0, relay
    assert relay["realtime"] is False, relay  # the robot's login has no rtprio limit here
    assert figures["relay_ru_maxrss"] == relay["rss_max_kb"] and figures["relay_cpu_usage (%)"] is not None
    on_robot = lab.robot_home_path("fieldtest/perf/perf-000/relay1.json")
    assert on_robot.stat().st_uid == lab.robot_user.uid, "the relay did not run as the robot's login"
    assert json.loads(on_robot.read_text()) == json.loads(
        (lab.host_user.home / "perf" / "rows" / "000" / "robot" / "relay1.json").read_text()
    )
    assert f"Accepted publickey for {lab.robot_user.name}" in lab.sshd_log()
    assert _link_packets(lab) - packets > 2 * 20, "the pings did not cross the emulated link"
    assert lab.robot_login_processes() == []


def test_an_interrupted_lab_perf_row_leaves_no_relay_on_the_robot(lab):
    campaign = lab.campaign("trials/rehearsal.yaml")
    command = shlex.join(
        _lab_perf(lab, campaign, "--message", "Array1k", "--duration", "120", "--out", "perf")
    )
    # Ctrl-C once the relay answers on the robot (job control on: a background job would ignore SIGINT)
    script = f"""set -m
{command} > perf.out 2>&1 &
pid=$!
for i in $(seq 900); do grep -q "PERF READY" perf/rows/000/logs/ssh-relay1.log 2>/dev/null && break; sleep 0.1; done
sleep 1
echo "robot before: $(ps -o args= -u {lab.robot_user.name} | grep -v ^bash | grep -c fieldtest.perf.node)"
kill -INT $pid
rc=0; wait $pid || rc=$?
echo "exit $rc"
"""
    done = lab.host(script, timeout_s=300, env=OWN_CACHE)
    report = _output(done) + (lab.host_user.home / "perf.out").read_text()[-2000:]
    assert "robot before: 1" in done.stdout, report  # the relay ran on the robot when Ctrl-C came
    assert "exit 130" in done.stdout, report
    assert lab.robot_login_processes() == [], report
    # stopped by the runner's stop script (SIGINT): the relay wrote its record on the way out
    assert lab.robot_home_path("fieldtest/perf/perf-000/relay1.json").is_file(), report


def test_a_lab_perf_row_whose_ssh_session_dies_fails_and_leaves_no_relay_on_the_robot(lab):
    campaign = lab.campaign("trials/rehearsal.yaml")
    command = shlex.join(
        _lab_perf(lab, campaign, "--message", "Array1k", "--duration", "120", "--out", "perf")
    )
    # the relay's ssh session dies under the row: its ssh client (a child of fieldtest) is killed
    script = f"""{command} > perf.out 2>&1 &
pid=$!
for i in $(seq 900); do grep -q "PERF READY" perf/rows/000/logs/ssh-relay1.log 2>/dev/null && break; sleep 0.1; done
sleep 1
echo "robot before: $(ps -o args= -u {lab.robot_user.name} | grep -v ^bash | grep -c fieldtest.perf.node)"
kill -KILL $(ps -o pid=,args= --ppid $pid | awk '$2 == "ssh" {{print $1}}')
rc=0; wait $pid || rc=$?
echo "exit $rc"
"""
    done = lab.host(script, timeout_s=300, env=OWN_CACHE)
    report = _output(done) + (lab.host_user.home / "perf.out").read_text()[-2000:]
    assert "robot before: 1" in done.stdout and "exit 1" in done.stdout, report
    (row,) = json.loads((lab.host_user.home / "perf" / "perf.json").read_text())["rows"]
    assert row["status"] == "failed" and row["error"].startswith("ssh-relay1 exited"), row["error"]
    assert lab.robot_login_processes() == [], report


@pytest.mark.parametrize(
    "extra, reason",
    [
        (["--middleware", "dds"], "middleware dds: the robot's {python} has no cyclonedds"),
        (
            ["--middleware", "zenoh-peer", "--mode", "one-way"],
            "mode one-way: the host's and the robot's clocks",
        ),
        (["--middleware", "zenoh-router", "--subscribers", "2"], "subscribers 2: the lab has one robot"),
        (["--middleware", "mqtt-local-broker", "--security", "on"], "security mtls"),
        (["--middleware", "zenoh-peer", "--zenoh-path", "bridge"], "zenoh_path bridge: lab perf rows"),
    ],
)
def test_lab_perf_refuses_rows_the_lab_cannot_run_with_one_line(tmp_path, extra, reason):
    """The robot here is this machine's shell (no --robot) with the ROS 2 environment's Python:
    the kit, Zenoh and paho, no CycloneDDS binding."""
    python = str(ROS_VENV / "bin" / "python")
    argv = ["lab", "perf", str(KIT_ROOT / "trials" / "rehearsal.yaml"), "--robot-setup", "true"]
    argv += [
        "--robot-python",
        python,
        "--remote-root",
        str(tmp_path / "robot"),
        "--out",
        str(tmp_path / "out"),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "fieldtest.cli", *argv, *extra, *ROW],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, _output(done)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("refused: ")]
    assert reason.format(python=python) in line, line
    assert not (tmp_path / "robot").exists(), "a refused row started something on the robot"
    (row,) = json.loads((tmp_path / "out" / "perf.json").read_text())["rows"]
    assert row["status"] == "refused" and "\n" not in row["error"]


def test_the_lab_perf_campaign_gives_the_addresses(tmp_path):
    from fieldtest.perf.lab import _lab_parser, lab_link

    args = _lab_parser().parse_args(
        [str(KIT_ROOT / "trials" / "rehearsal.yaml"), "--robot", "ubuntu@10.0.0.2"]
    )
    link, middlewares = lab_link(args)
    assert middlewares == ["dds"]
    assert (link.base.host_address, link.base.robot_address, link.base.namespace) == (
        "127.0.0.1",
        "127.0.0.1",
        "/tb4",
    )
    assert link.robot.shell.target == "ubuntu@10.0.0.2" and "/opt/ros/jazzy/setup.bash" in link.robot.setup
    assert Path(link.robot.remote_root) == Path("~/fieldtest/perf")


def test_the_relays_guard_on_the_robot_stops_it_when_no_stop_comes(tmp_path):
    """A dead link leaves sshd's session, and so the relay's parent, alive: no stop script and no
    parent watch reach the relay. Its guard on the robot (here a local shell) stops it after the
    row's limit; the relay writes its record on the way out and the guard ends with it."""
    import psutil

    from fieldtest.labrun.orchestration.remote import RemoteShell, RobotSide
    from fieldtest.linkconfig import TransportConfig
    from fieldtest.perf.lab import LabLink
    from fieldtest.procs import free_port

    remote_root = tmp_path / "robot"
    robot = RobotSide(shell=RemoteShell(None), setup="", remote_root=str(remote_root))
    config = TransportConfig(
        middleware="zenoh-peer", host_address="127.0.0.1", robot_address="127.0.0.1", zenoh_port=free_port()
    )
    lab = LabLink(config, robot, KIT_PYTHON)
    spec = {"transport": config.model_dump(), "message": "Array1k", "rate_hz": 10.0, "duration_s": 1.0,
            "mode": "roundtrip", "relays": 1, "discovery_s": 1.0, "drain_s": 1.0, "relay_addresses": {}}  # fmt: skip
    lab.send_spec("lost", spec)
    log = tmp_path / "relay.log"
    with log.open("w") as out:
        relay = subprocess.Popen(lab.relay_argv("lost", limit_s=3), stdout=out, stderr=subprocess.STDOUT)
    try:
        relay.wait(timeout=90)
    finally:
        if relay.poll() is None:
            relay.kill()
    assert "PERF READY" in log.read_text(), log.read_text()
    assert json.loads((remote_root / "lost" / "relay1.json").read_text())["arrivals"] == []

    def left() -> list[str]:
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            if str(remote_root) in " ".join(proc.info["cmdline"] or []):
                found.append(" ".join(proc.info["cmdline"]))
        return found

    deadline = time.monotonic() + 5.0
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left() == []


def test_lab_perf_says_in_one_line_when_the_robots_python_cannot_run_the_relay(tmp_path):
    argv = ["lab", "perf", str(KIT_ROOT / "trials" / "rehearsal.yaml"), "--robot-setup", "true"]
    argv += ["--robot-python", str(tmp_path / "no-python"), "--out", str(tmp_path / "out"), *ROW]
    done = subprocess.run(
        [sys.executable, "-m", "fieldtest.cli", *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, _output(done)
    (line,) = done.stderr.strip().splitlines()
    assert "cannot run the kit's perf node with" in line and "no-python" in line, line
    assert not (tmp_path / "out").exists()
