"""`fieldtest lab perf`: the main side on the host, the relay on the robot over the lab's ssh.

The two-machine tests run it as the lab user on the host against the robot's own login behind a
real sshd, across an emulated Wi-Fi link between two network namespaces
(fieldtest.testkit.twomachines). The rehearsal's robot reads the kit at its own path; its ROS 2
environment has no CycloneDDS binding, so the relay runs the kit's .venv Python (--robot-python,
as a lab names the robot's Python that has the kit and the middleware's library)."""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from test_perf import processes_under, said

from fieldtest.middleware import registry
from fieldtest.middleware.mqtt.settings import MQTT_TLS_PORT
from fieldtest.netem.profiles import load_profiles
from fieldtest.testkit import needs
from fieldtest.testkit.hangup import as_from_a_terminal
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
def lab(keyed_lab):
    """The two machines of this file (built once, below), with the lab user's and the robot login's
    work of the previous test removed: only the keystore and their dotfiles stay."""
    for home in (keyed_lab.host_user.home, keyed_lab.robot_user.home):
        _remove_work(home)
    yield keyed_lab
    for home in (keyed_lab.host_user.home, keyed_lab.robot_user.home):
        _remove_work(home)


def _remove_work(home: Path) -> None:
    for path in home.iterdir():
        if path.name == "fieldtest":
            for inner in path.iterdir():
                if inner.name != "keystore":
                    shutil.rmtree(inner) if inner.is_dir() else inner.unlink()
        elif not path.name.startswith("."):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


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


def _check_one_way(row: dict, source: str, row_dir: Path) -> None:
    """One-way figures of a lab row from its estimated clock offset. Both namespaces read one kernel
    clock, so the true host - robot offset is 0: the estimate must lie within its own stated bound
    of it. Out, back and the relay's turn-around add up to the round trip (the offset cancels), and
    neither direction's fastest message comes out below 0 by more than the bound. The row's own
    records with the robot's clock set far off (``_robot_clock_off``) give that offset back, within
    the bound, and the same one-way figures."""
    figures = row["figures"]
    assert figures["clock_offset_source"] == source, figures
    assert figures["clock_probes"] >= 10, figures
    bound_ms = figures["ntp_error_bound_ms"]
    assert bound_ms == pytest.approx(figures["min_delay_s"] * 500) and bound_ms > 0, figures
    assert abs(figures["clock_offset_s"]) * 1e3 <= bound_ms, figures
    out, back = figures["one_way_mean (ms)"], figures["one_way_back_mean (ms)"]
    turnaround = figures["relay_decode_mean (ms)"] + figures["relay_echo_mean (ms)"]
    assert out + back + turnaround == pytest.approx(figures["round_trip_mean (ms)"], abs=1e-3), figures
    assert out + back <= figures["round_trip_mean (ms)"]
    assert figures["one_way_min (ms)"] >= -bound_ms and figures["one_way_back_min (ms)"] >= -bound_ms, figures
    assert "one-way figures on the host's clock" in row["link"]["clocks"], row["link"]
    _robot_clock_off(row, source, row_dir)


ROBOT_CLOCK_AHEAD_NS = 86_400_123_456_789  # a robot whose clock reads a day and 123 ms ahead


def _robot_clock_off(row: dict, source: str, row_dir: Path) -> None:
    from fieldtest.perf.labperf import RELAY, estimate_offset, on_host_clock
    from fieldtest.perf.messages import parse_message
    from fieldtest.perf.run import PerfCase
    from fieldtest.perf.stats import reduce_row

    main = json.loads((row_dir / "main.json").read_text())
    relay = json.loads((row_dir / "robot" / f"{RELAY}.json").read_text())
    ahead = ROBOT_CLOCK_AHEAD_NS
    relay["arrivals"] = [[seq, sent, *(t + ahead for t in robot)] for seq, sent, *robot in relay["arrivals"]]
    relay["clock_probes"] = [
        [t1 + ahead, t2, t3, t4 + ahead] for t1, t2, t3, t4 in relay.get("clock_probes", [])
    ]
    main["echoes"] = {k: [[s, sent + ahead, got] for s, sent, got in v] for k, v in main["echoes"].items()}
    records = {"main": main, RELAY: relay}
    clock = estimate_offset(source, records, [])
    assert abs(clock.offset_s + ahead / 1e9) * 1e3 <= row["figures"]["ntp_error_bound_ms"], clock
    case = PerfCase(**row["case"])
    again = reduce_row(case, parse_message(case.message), on_host_clock(records, clock.offset_s)).figures
    for name in ("one_way_mean (ms)", "one_way_back_mean (ms)", "one_way_min (ms)", "round_trip_mean (ms)"):
        assert again[name] == pytest.approx(row["figures"][name], abs=1e-3), name


def test_a_lab_perf_row_runs_its_relay_on_the_robot_and_reports_round_trips(lab):
    campaign = lab.campaign("trials/rehearsal.yaml")
    packets = _link_packets(lab)
    done = lab.host(_lab_perf(lab, campaign, *ROW, "--out", "perf"), timeout_s=300, env=OWN_CACHE)
    report = _output(done)
    assert done.returncode == 0, report
    assert "one-way figures on the host's clock: host - robot offset" in done.stdout, report
    (row,) = json.loads((lab.host_user.home / "perf" / "perf.json").read_text())["rows"]
    assert (row["status"], row["case"]["middleware"], row["case"]["network"]) == ("ok", "dds", "lab"), row
    figures = row["figures"]
    assert figures["sent"] == 20 and figures["received"] == 20, figures
    assert (
        0 < figures["round_trip_min (ms)"] <= figures["latency_mean (ms)"] == figures["round_trip_mean (ms)"]
    )
    # the wifi profile's delay both ways is in the round trips: 4 ms each way, with 2 ms of jitter
    # (one round trip may come out near 1 ms; the mean of 20 is 0.6 ms wide)
    link_rtt_ms = load_profiles({"wifi-no-loss": WIFI})["wifi-no-loss"].expected_rtt_ms()
    assert figures["round_trip_mean (ms)"] > 0.5 * link_rtt_ms, figures
    _check_one_way(row, "link", lab.host_user.home / "perf" / "rows" / "000")  # dds: probes over the link
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
        (
            ["--middleware", "mqtt-local-broker", "--security", "on"],
            "security mtls-acl: security 'mtls-acl' but no keystore path in the trial",
        ),
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
    from fieldtest.perf.labperf import _lab_parser, lab_link

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


def _local_relay_row(tmp_path: Path, row: str) -> tuple:
    """A lab perf link whose robot side is this machine's shell (no --robot), one zenoh-peer
    round-trip row's spec sent to it; the link and the robot side's folder."""
    from fieldtest.labrun.orchestration.remote import RemoteShell, RobotSide
    from fieldtest.linkconfig import TransportConfig
    from fieldtest.perf.labperf import LabLink
    from fieldtest.procs import free_port

    remote_root = tmp_path / "robot"
    robot = RobotSide(shell=RemoteShell(None), setup="", remote_root=str(remote_root))
    config = TransportConfig(
        middleware="zenoh-peer", host_address="127.0.0.1", robot_address="127.0.0.1", zenoh_port=free_port()
    )
    lab = LabLink(config, robot, KIT_PYTHON)
    spec = {"transport": config.model_dump(), "message": "Array1k", "rate_hz": 10.0, "duration_s": 1.0,
            "mode": "roundtrip", "relays": 1, "discovery_s": 1.0, "drain_s": 1.0, "relay_addresses": {}}  # fmt: skip
    lab.send_spec(row, spec)
    return lab, remote_root


def test_the_relays_guard_on_the_robot_stops_it_when_no_stop_comes(tmp_path):
    """A dead link leaves sshd's session, and so the relay's parent, alive: no stop script and no
    parent watch reach the relay. Its guard on the robot (here a local shell) stops it after the
    row's limit; the relay writes its record on the way out and the guard ends with it."""
    lab, remote_root = _local_relay_row(tmp_path, "lost")
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
    assert processes_under(remote_root) == []


def test_the_relays_guard_ends_with_the_relay_before_its_parent_reaps_it(tmp_path):
    """With the robot's side on this machine (no --robot) the relay is the runner's child: once it
    has stopped it stays a zombie until the runner reaps it, after the stop script. The guard, in
    the relay's process group that the stop script waits for, must end then: one that took the
    zombie for a running relay held every such row's stop for the script's whole wait."""
    import psutil

    lab, remote_root = _local_relay_row(tmp_path, "zombie")
    log = tmp_path / "relay.log"
    with log.open("w") as out:
        relay = subprocess.Popen(lab.relay_argv("zombie", limit_s=600), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "PERF READY" not in log.read_text():
            assert relay.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        relay.send_signal(signal.SIGINT)  # as the stop script; the relay is not reaped yet
        left = processes_under(remote_root, wait_s=30)
        assert psutil.Process(relay.pid).status() == psutil.STATUS_ZOMBIE
        assert left == []  # the guard ended with the relay
    finally:
        if relay.poll() is None:
            relay.kill()
        relay.wait()


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


def test_lab_perf_refuses_dds_security_where_the_robots_binding_has_no_security_plugins(tmp_path):
    """The relay's CycloneDDS binding must load the DDS Security plugins: the robot's answer to the
    probe names those it lacks (a PyPI wheel's bundled libddsc has none), and the row is refused
    with them before anything starts on the robot. This machine's binding (built against Debian's
    libddsc, tools/install.sh) has all three, so a DDS Security row is refused only on the keystore."""
    from fieldtest.labrun.orchestration.remote import RemoteShell, RobotSide
    from fieldtest.linkconfig import TransportConfig
    from fieldtest.perf.labperf import LabLink, run_lab_row
    from fieldtest.perf.run import PerfCase

    remote_root = tmp_path / "robot"
    robot = RobotSide(shell=RemoteShell(None), setup="", remote_root=str(remote_root))
    lab = LabLink(TransportConfig(namespace="/tb4"), robot, KIT_PYTHON)
    lab.probe()
    check = registry.get("dds").security_plugin_check
    assert lab.robot_modules["cyclonedds"] and lab.missing_plugins == {check: []}, lab
    case = PerfCase(middleware="dds", security="sros2", network="lab", duration_s=1)
    row = run_lab_row(case, tmp_path / "out" / "rows" / "000", lab)
    assert (row.status, row.error) == (
        "refused",
        "security sros2: security 'sros2' but no keystore path in the trial",
    )
    lab.missing_plugins = {
        check: ["dds_security_auth", "dds_security_ac", "dds_security_crypto"]
    }  # a PyPI wheel's binding
    for setting in ("sros2", "rtps-sign"):
        row = run_lab_row(replace(case, security=setting), tmp_path / "out" / "rows" / "001", lab)
        assert row.status == "refused", row
        assert row.error == (
            f"security {setting}: the robot's {KIT_PYTHON} cyclonedds binding cannot load the security "
            "plugins (libdds_security_auth.so, libdds_security_ac.so, libdds_security_crypto.so): build it "
            "against the robot's cyclonedds C library with them, as tools/install.sh does here"
        )
    assert not remote_root.exists(), "a refused row started something on the robot"


def test_a_fast_dds_lab_perf_row_builds_the_helper_on_the_robot_and_runs_its_relay(lab):
    """The robot's login builds the kit's Fast DDS helper into its own cache as the probe loads it,
    and the row's pings cross the emulated link to its relay and back, one-way figures included."""
    campaign = lab.campaign("trials/rehearsal.yaml")
    for built in (lab.robot_user.home / ".cache" / "fieldtest").glob("fastddsstamp-*"):
        built.unlink()  # built by the robot's login in this test, not found from an earlier one
    done = lab.host(
        _lab_perf(lab, campaign, "--middleware", "fastdds", *ROW, "--out", "perf"),
        timeout_s=400,
        env=OWN_CACHE,
    )
    report = _output(done)
    assert done.returncode == 0, report
    (row,) = json.loads((lab.host_user.home / "perf" / "perf.json").read_text())["rows"]
    assert (row["status"], row["case"]["middleware"]) == ("ok", "fastdds"), row
    assert row["figures"]["sent"] == 20 and row["figures"]["received"] == 20, row["figures"]
    (helper,) = (lab.robot_user.home / ".cache" / "fieldtest").glob("fastddsstamp-*.so")
    assert helper.stat().st_uid == lab.robot_user.uid, "the helper was not built by the robot's login"
    _check_one_way(row, "link", lab.host_user.home / "perf" / "rows" / "000")
    assert lab.robot_login_processes() == []


def test_lab_perf_refuses_fast_dds_where_the_robot_cannot_build_its_helper(tmp_path):
    """The probe builds and loads the Fast DDS helper on the robot and says why it could not; the row
    is then refused with that reason before anything starts on the robot."""
    from fieldtest.labrun.orchestration.remote import RemoteShell, RobotSide
    from fieldtest.linkconfig import TransportConfig
    from fieldtest.perf.labperf import LabLink, run_lab_row
    from fieldtest.perf.run import PerfCase

    remote_root = tmp_path / "robot"
    no_compiler = f"export FIELDTEST_CACHE={tmp_path / 'cache'} PATH={tmp_path / 'empty'}"
    robot = RobotSide(shell=RemoteShell(None), setup=no_compiler, remote_root=str(remote_root))
    lab = LabLink(TransportConfig(namespace="/tb4"), robot, KIT_PYTHON)
    lab.probe(["dds", "fastdds"])
    (problem,) = lab.helper_problems.values()
    assert "g++" in problem, lab.helper_problems
    case = PerfCase(middleware="fastdds", network="lab", duration_s=1)
    row = run_lab_row(case, tmp_path / "out" / "rows" / "000", lab)
    assert row.status == "refused" and row.error == (
        f"middleware fastdds: the robot's {KIT_PYTHON} cannot build or load the kit's fastdds helper "
        f"(fieldtest.middleware.fastdds.stamp): {problem}"
    ), row
    assert not remote_root.exists(), "a refused row started something on the robot"


# ------------------------------------------------------------------------------ security on two machines
GUIDE_KEYSTORE = "~/fieldtest/keystore"  # the lab guide's keys step makes it and copies it to the Pi


@pytest.fixture(scope="module")
def keyed_lab():
    """The two machines with the keystore the lab guide's keys step made on the host and copied to
    the robot's login (section 6), as a lab perf day after the keys are in place. The rows without
    security run on them too (``lab``): a keystore they do not name changes nothing for them."""
    from fieldtest.testkit.guide import REHEARSAL_KEYS, adapted, for_machines, guide_steps

    with needs.two_machines(WIFI, hardware=False) as machines:
        script = adapted(guide_steps()["keys"], REHEARSAL_KEYS, "keys")
        script = for_machines(
            script, machines.robot_login, {"robot": machines.robot_address, "host": machines.host_address}
        )
        done = machines.host(f"mkdir -p ~/fieldtest && cd ~/fieldtest\n{script}")
        if done.returncode != 0:
            pytest.fail(f"the guide's keys step failed: {_output(done)}", pytrace=False)
        yield machines


def _captured(lab, path: Path, argv: list[str]) -> tuple[subprocess.CompletedProcess, list[bytes], dict]:
    """``argv`` as the lab user with the robot's link captured (tcpdump in its namespace): its
    result, the captured frames and their summary by kind."""
    from fieldtest.netem.linktraffic import LinkCapture, read_pcap
    from fieldtest.netem.topology import IFACE

    capture = LinkCapture(lab.topology.command("robot", []), IFACE, path)
    capture.start()
    try:
        done = lab.host(argv, timeout_s=400, env=OWN_CACHE)
    finally:
        summary = capture.stop()
    return done, [frame.data for frame in read_pcap(path)], summary


def _tls_records(frames: list[bytes]) -> int:
    """TCP segments that start a TLS application-data record (type 23, version 3.3)."""
    count = 0
    for data in frames:
        if len(data) < 34 or data[12:14] != b"\x08\x00" or data[23] != 6:  # IPv4, TCP
            continue
        tcp = 14 + (data[14] & 0x0F) * 4
        payload = data[tcp + (data[tcp + 12] >> 4) * 4 :]
        count += payload[:3] == b"\x17\x03\x03"
    return count


def test_secured_lab_perf_rows_run_over_tls_on_the_guides_keystore(keyed_lab, tmp_path):
    """Zenoh peer to peer over mutual TLS (the one-way figures' offset over the link) and MQTT through
    the host's broker over TLS (the offset over the UDP clock channel, as MQTT lab trials take it),
    on the keystore of the lab guide's keys step: every message back, the robot's relay on its own
    copy of the keystore, and on the robot's link TLS records where the plain rows show the topic's
    name in the clear."""
    lab = keyed_lab
    campaign = lab.campaign("trials/rehearsal-bridged.yaml", keystore=GUIDE_KEYSTORE)
    rows = ["--middleware", "zenoh-peer", "zenoh-router", "mqtt-local-broker", *ROW]
    plain, plain_frames, _ = _captured(
        lab, tmp_path / "plain.pcap", _lab_perf(lab, campaign, *rows, "--out", "plain")
    )
    assert plain.returncode == 0, _output(plain)
    assert any(b"cmd_stamp" in f for f in plain_frames), "the control: plain rows show the topic on the link"
    done, frames, _ = _captured(
        lab, tmp_path / "tls.pcap", _lab_perf(lab, campaign, *rows, "--security", "on", "--out", "tls")
    )
    report = _output(done)
    assert done.returncode == 0, report
    rows_out = json.loads((lab.host_user.home / "tls" / "perf.json").read_text())["rows"]
    assert [(r["case"]["middleware"], r["case"]["security"], r["status"]) for r in rows_out] == [
        ("zenoh-peer", "mtls-acl", "ok"),
        ("zenoh-router", "mtls-acl", "ok"),  # the router the lab's host side starts, on the host
        ("mqtt-local-broker", "mtls-acl", "ok"),
    ], report
    robot_keystore = str(lab.robot_home_path("fieldtest/keystore"))
    for i, (row, source) in enumerate(zip(rows_out, ("link", "link", "udp"), strict=True)):
        assert row["figures"]["sent"] == 20 and row["figures"]["received"] == 20, row["figures"]
        assert row["link"]["keystore"] == str(lab.host_user.home / "fieldtest" / "keystore"), row["link"]
        assert row["link"]["robot_keystore"] == robot_keystore, row["link"]
        _check_one_way(row, source, lab.host_user.home / "tls" / "rows" / f"{i:03d}")
    spec = json.loads((lab.host_user.home / "tls" / "rows" / "002" / "spec.json").read_text())
    assert spec["transport"]["mqtt"]["port"] == MQTT_TLS_PORT, (
        spec
    )  # the lab's TLS port, as a lab trial takes it
    broker = (lab.host_user.home / "tls" / "rows" / "002" / "broker" / "mosquitto.conf").read_text()
    assert "require_certificate true" in broker and f"listener {MQTT_TLS_PORT}" in broker, broker
    assert not any(b"cmd_stamp" in f for f in frames), "a topic name crossed the link in the clear"
    assert _tls_records(frames) >= 6 * 20, "fewer TLS records than pings and echoes on the link"
    assert lab.robot_login_processes() == [], report


def test_a_dds_security_lab_perf_row_runs_where_the_robots_binding_loads_the_plugins(keyed_lab, tmp_path):
    """The relay's Python here is the kit's, whose CycloneDDS binding loads Debian's DDS Security
    plugins: an SROS2 row runs on the guide's keystore, its RTPS protected on the robot's link."""
    lab = keyed_lab
    campaign = lab.campaign("trials/rehearsal.yaml", folder="dds-campaigns")
    # rehearsal.yaml names no keystore: the guide's, as the checklist has the campaign point at it
    # (its namespace the stock robot's, as Lab.campaign set it)
    text = (
        (lab.host_user.home / campaign)
        .read_text()
        .replace('    namespace: ""\n', f'    namespace: ""\n    keystore: {GUIDE_KEYSTORE}\n')
    )
    lab.host_user.write(campaign, text)
    argv = _lab_perf(lab, campaign, "--security", "sros2", *ROW, "--out", "sros2")
    done, _frames, summary = _captured(lab, tmp_path / "sros2.pcap", argv)
    report = _output(done)
    assert done.returncode == 0, report
    (row,) = json.loads((lab.host_user.home / "sros2" / "perf.json").read_text())["rows"]
    assert (row["status"], row["case"]["security"], row["figures"]["received"]) == ("ok", "sros2", 20), report
    assert summary["kinds"]["rtps_protected"]["packets"] > 0, summary
    _check_one_way(row, "link", lab.host_user.home / "sros2" / "rows" / "000")
    assert lab.robot_login_processes() == [], report


def test_a_lab_perf_row_without_a_clock_offset_keeps_round_trips_and_says_why(tmp_path):
    """MQTT rows take the offset over the UDP clock channel, as MQTT lab trials do: with its port
    on the host taken, the row still runs and gives its round trips, and its one-way figures are
    left empty with the reason (the robot here is this machine's shell)."""
    import socket

    from fieldtest.labrun.orchestration.remote import RemoteShell, RobotSide
    from fieldtest.linkconfig import TransportConfig
    from fieldtest.middleware.launch import CLOCK_UDP_PORT
    from fieldtest.perf.labperf import LabLink, run_lab_row
    from fieldtest.perf.run import PerfCase
    from fieldtest.procs import free_port

    robot = RobotSide(shell=RemoteShell(None), setup="", remote_root=str(tmp_path / "robot"))
    config = TransportConfig(namespace="/tb4", mqtt_port=free_port())
    lab = LabLink(config, robot, KIT_PYTHON)
    lab.probe()
    taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        taken.bind(("0.0.0.0", CLOCK_UDP_PORT))
    except OSError:
        pass  # taken by another process: the same case
    try:
        case = PerfCase(middleware="mqtt-local-broker", network="lab", duration_s=1, zenoh_path="")
        row = run_lab_row(case, tmp_path / "out" / "rows" / "000", lab)
    finally:
        taken.close()
    assert row.status == "ok", row.error
    figures = row.figures
    assert figures["received"] == 10 and figures["round_trip_mean (ms)"] > 0, figures
    assert all(v is None for k, v in figures.items() if k.startswith("one_way_")), figures
    assert (figures["clock_offset_source"], figures["clock_offset_s"], figures["clock_probes"]) == (
        "udp",
        None,
        0,
    )
    assert row.link["clocks"].startswith(
        f"one-way latency not measured: the UDP clock channel's port {CLOCK_UDP_PORT} on this host: "
    ), row.link


# ------------------------------------------------------------------------------ stop signals (lifecycle)
def _local_lab_perf(tmp_path: Path, robot_setup: str, *extra: str) -> list[str]:
    """``fieldtest lab perf`` with this machine's shell as the robot (no --robot), one zenoh-peer
    campaign on a free port."""
    import yaml

    from fieldtest.procs import free_port

    campaign = tmp_path / "lab.yaml"
    addresses = {f"{side}_address": "127.0.0.1" for side in ("host", "robot", "router", "broker")}
    campaign.write_text(
        yaml.safe_dump(
            {
                "campaign": "stop",
                "base": {"transport": {"namespace": "/tb4", **addresses, "zenoh": {"port": free_port()}}},
                "matrix": {"middleware": ["zenoh-peer"]},
                "lab": {"ros_distro": "jazzy"},
            }
        )
    )
    return [sys.executable, "-m", "fieldtest.cli", "lab", "perf", str(campaign), "--robot-setup", robot_setup,
            "--robot-python", KIT_PYTHON, "--remote-root", str(tmp_path / "robot"), "--out", str(tmp_path / "out"),
            *extra]  # fmt: skip


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["int", "term", "hup"])
def test_a_stop_signal_ends_a_lab_perf_run_as_it_ends_a_trial_run(tmp_path, sig):
    """Ctrl-C, kill and a closed terminal alike, while row 0's relay answers on the robot and its
    main side runs: the relay is stopped and its record collected, no further row starts (those
    left are listed), the files are written, nothing of the run is left running, exit 130. The old
    runner exited 143 after SIGTERM and 129 after SIGHUP, and listed no row it left."""
    argv = _local_lab_perf(tmp_path, "true", "--message", "Array1k", "Array4k", "--duration", "30")
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal
    )
    row = tmp_path / "out" / "rows" / "000"
    deadline = time.monotonic() + 90
    while not (row / "logs" / "main.log").exists():  # the relay answered; the main side runs
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert f"not run ({said(sig)}): zenoh-peer direct/none/default/lab Array4k 10 Hz roundtrip" in err, err
    assert not (tmp_path / "out" / "rows" / "001").exists()  # no row started after the signal
    written = json.loads((tmp_path / "out" / "perf.json").read_text())
    assert written["interrupted"] is True and written["rows"] == []
    assert "arrivals" in json.loads((row / "robot" / "relay1.json").read_text())  # written as it stopped
    assert processes_under(tmp_path) == []


def test_a_stop_signal_while_the_robot_is_probed_starts_no_row(tmp_path):
    """SIGTERM while the robot's Python is probed (here its setup sends it): the probe ends, then
    no row starts and nothing runs on the robot; the (empty) files are written, exit 130. The old
    runner probed outside its stop signals: SIGTERM killed it with no files."""
    argv = _local_lab_perf(tmp_path, "kill -TERM $PPID", "--message", "Array1k", "--duration", "1")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, preexec_fn=as_from_a_terminal)
    assert done.returncode == 130, _output(done)
    expected = "not run (interrupted by SIGTERM): zenoh-peer direct/none/default/lab Array1k 10 Hz roundtrip"
    assert expected in done.stderr, _output(done)
    written = json.loads((tmp_path / "out" / "perf.json").read_text())
    assert written["interrupted"] is True and written["rows"] == []
    assert not (tmp_path / "robot").exists() and not (tmp_path / "out" / "rows").exists()


def test_a_stop_signal_during_a_lab_perf_rows_start_up_starts_no_further_process(tmp_path, monkeypatch):
    """A stop signal that lands as the relay starts on the robot: the main side never starts, the
    relay is stopped (its record collected), the row comes back interrupted. The old runner
    started the main side regardless and only then saw the signal."""
    from fieldtest.labrun.orchestration.remote import RemoteShell, RobotSide
    from fieldtest.linkconfig import TransportConfig
    from fieldtest.perf.labperf import LabLink, run_lab_row
    from fieldtest.perf.run import PerfCase
    from fieldtest.procs import free_port

    robot = RobotSide(shell=RemoteShell(None), setup="", remote_root=str(tmp_path / "robot"))
    config = TransportConfig(
        middleware="zenoh-peer", host_address="127.0.0.1", robot_address="127.0.0.1", zenoh_port=free_port()
    )
    lab = LabLink(config, robot, KIT_PYTHON)
    lab.probe()
    stop = threading.Event()
    real_argv = lab.relay_argv

    def relay_argv_then_signal(*args, **kwargs):
        stop.set()  # as the stop signals do (procs.run_stop_event), as the relay starts
        return real_argv(*args, **kwargs)

    monkeypatch.setattr(lab, "relay_argv", relay_argv_then_signal)
    row_dir = tmp_path / "out" / "rows" / "000"
    row = run_lab_row(PerfCase(middleware="zenoh-peer", network="lab", duration_s=1), row_dir, lab, stop=stop)
    assert (row.status, row.error) == ("interrupted", "interrupted by the user (Ctrl-C)"), row
    assert (row_dir / "logs" / "ssh-relay1.log").exists() and not (row_dir / "logs" / "main.log").exists()
    assert "arrivals" in json.loads((row_dir / "robot" / "relay1.json").read_text())
    assert processes_under(tmp_path) == []
