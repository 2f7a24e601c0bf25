"""``fieldtest perf`` on real transports over loopback and an emulated lossy link.

Semantics, not speed: every round trip contains its one-way trip, counts add up exactly, the
CSV carries performance_test's column names, bad input is one line, Ctrl-C keeps finished rows.
"""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fieldtest.cli import main
from fieldtest.perf.node import PING_TOPIC, PONG_TOPIC
from fieldtest.perf.results import write_all
from fieldtest.perf.run import PerfCase, check_case, run_row
from fieldtest.testkit.hangup import as_from_a_terminal

TWIN = ("dds", "zenoh-peer", "zenoh-router", "mqtt-local-broker", "mqtt-broker", "fastdds")
PERF_TEST_COLUMNS = [  # performance_test's AnalysisResult::csv_header, the ones a row has
    "T_experiment", "T_loop", "received", "sent", "lost", "relative_loss", "data_received",
    "latency_min (ms)", "latency_max (ms)", "latency_mean (ms)", "latency_variance (ms)",
    "ru_utime", "ru_stime", "ru_maxrss", "cpu_usage (%)",
]  # fmt: skip


def _raw(row_dir: Path, name: str) -> dict:
    return json.loads((row_dir / f"{name}.json").read_text())


def _by_seq(entries: list) -> dict[int, int]:
    out: dict[int, int] = {}
    for seq, _sent, arrival, *_stages in entries:
        out.setdefault(seq, arrival)
    return out


@pytest.mark.parametrize("middleware", TWIN)
def test_round_trip_contains_its_one_way_trip(middleware, tmp_path):
    case = PerfCase(middleware=middleware, message="Array4k", rate_hz=20, duration_s=1.5)
    row = run_row(case, tmp_path)
    assert row.status == "ok", row.error
    sent = _raw(tmp_path, "main")["sends"]
    assert len(sent) == 30 == row.figures["sent"]
    there = _by_seq(_raw(tmp_path, "relay1")["arrivals"])
    back = _by_seq(_raw(tmp_path, "main")["echoes"]["1"])
    assert set(there) == set(back) == set(range(30))  # reliable, loopback: every message, once each
    for seq, sent_ns in enumerate(sent):
        assert sent_ns < there[seq] < back[seq]  # out, arrived at the relay, back: in that order
    f = row.figures
    assert f["received"] == 30 and f["lost"] == 0 and f["relative_loss"] == 0
    assert f["data_received"] == 30 * 4096
    assert f["latency_mean (ms)"] == f["round_trip_mean (ms)"] >= f["one_way_mean (ms)"] > 0
    assert f["round_trip_min (ms)"] >= f["one_way_min (ms)"]
    # the echo's own trip back: out, the relay's turn-around and back make the round trip
    assert f["one_way_back_min (ms)"] > 0
    stages = f["one_way_mean (ms)"] + f["relay_decode_mean (ms)"] + f["relay_echo_mean (ms)"]
    assert stages + f["one_way_back_mean (ms)"] == pytest.approx(f["round_trip_mean (ms)"], abs=1e-6)
    assert f["throughput_sent (B/s)"] == pytest.approx(
        30 * 4096 / f["T_loop"], rel=1e-3
    )  # T_loop rounded to ms
    assert f["ru_maxrss"] > 0 and set(row.processes) >= {"main", "relay1"}


def test_one_way_mode_sends_no_echoes(tmp_path):
    row = run_row(
        PerfCase(middleware="dds", message="Array1k", rate_hz=20, duration_s=1.0, mode="one-way"), tmp_path
    )
    assert row.status == "ok", row.error
    assert _raw(tmp_path, "main")["echoes"]["1"] == []  # only the warm-up pings came back
    assert (
        row.figures["received"] == 20 and row.figures["latency_mean (ms)"] == row.figures["one_way_mean (ms)"]
    )
    assert row.figures["round_trip_mean (ms)"] is None


@pytest.mark.parametrize("middleware", ["dds", "zenoh-router", "mqtt-broker"])
def test_several_subscribers_each_get_every_message(middleware, tmp_path):
    case = PerfCase(middleware=middleware, message="Array1k", rate_hz=20, duration_s=1.0, subscribers=3)
    row = run_row(case, tmp_path)
    assert row.status == "ok", row.error
    assert [s["subscriber"] for s in row.subscribers] == [1, 2, 3]
    for sub in row.subscribers:
        raw = _by_seq(_raw(tmp_path, f"relay{sub['subscriber']}")["arrivals"])
        assert sub["received"] == len(raw) == 20 and sub["lost"] == 0 and sub["echoed"] == 20
        assert sub["round_trip_mean (ms)"] >= sub["one_way_mean (ms)"] > 0
    assert row.figures["received"] == 60 and row.figures["lost"] == 0  # 3 echoes of each of 20
    write_all([row], tmp_path / "out", {}, plots=False)  # plots: test_csv_has_performance_test_columns
    with (tmp_path / "out" / "subscribers.csv").open() as f:
        lines = list(csv.DictReader(f))
    assert [(line["subscriber"], line["received"], line["lost"]) for line in lines] == [
        (str(i), "20", "0") for i in (1, 2, 3)
    ]


def test_several_subscribers_on_an_emulated_link(tmp_path):
    from fieldtest.testkit import needs

    needs.netns()
    case = PerfCase(
        middleware="dds", network="ethernet", message="Array1k", rate_hz=20, duration_s=1, subscribers=2
    )
    row = run_row(case, tmp_path)
    assert row.status == "ok", row.error
    assert row.link["emulated"] is True
    spec = json.loads((tmp_path / "spec.json").read_text())
    own = spec["relay_addresses"]["2"]["robot_address"]
    assert own != spec["transport"]["robot_address"]  # robot2 in a namespace of its own
    assert [s["received"] for s in row.subscribers] == [20, 20]
    assert all(s["one_way_mean (ms)"] > 0 for s in row.subscribers)
    kinds = row.link["traffic"]["kinds"]  # the robot link's capture, as a trial's
    assert kinds["user_data"]["packets"] > 0 and (tmp_path / "link.pcap").exists()


@pytest.mark.parametrize("middleware", ["zenoh-peer", "zenoh-router"])
def test_zenoh_payloads_cross_the_emulated_link(middleware, tmp_path):
    """Every echoed 16 KB message crosses the robot's link twice: none through /dev/shm, which every
    namespace shares (Zenoh's default would pass payloads over 3 KB that way)."""
    from fieldtest.testkit import needs

    needs.netns()
    case = PerfCase(middleware=middleware, network="ethernet", message="Array16k", rate_hz=20, duration_s=1)
    row = run_row(case, tmp_path)
    assert row.status == "ok", row.error
    tcp = row.link["traffic"]["kinds"]["tcp"]["bytes"] + row.link["traffic"]["kinds"]["ip_fragment"]["bytes"]
    assert row.figures["received"] > 0
    assert tcp >= 2 * row.figures["received"] * row.figures["size (B)"]


def test_an_80211_row_keeps_the_simulated_links_record(tmp_path):
    """Retries per frame-size class and MAC drops explain loss on the 802.11 link (docs/perf.md)."""
    from fieldtest.testkit import needs

    needs.netns()
    case = PerfCase(middleware="dds", network="wifi-80211", message="Array1k", rate_hz=20, duration_s=1)
    row = run_row(case, tmp_path)
    assert row.status == "ok", row.error
    unicast = row.link["simulator"]["tx"]["unicast"]
    assert unicast["frames"] >= row.figures["received"] > 0  # every echo crossed the air, at least once
    assert sum(c["frames"] for c in unicast["by_size"].values()) == unicast["frames"]
    assert json.loads(json.dumps(row.to_json()))["link"]["simulator"]["lag_ms"]  # perf.json keeps it


def test_an_80211_row_whose_simulator_lag_passes_the_bound_is_kept_invalid_and_re_run(tmp_path):
    """Rows are judged by the trial's bounds on their real ns-3 record: here a profile whose bound is
    below any lag a real-time simulator has (1 us at p99), so the re-run is invalid too."""
    from fieldtest.testkit import needs

    needs.netns()
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("tight: {extends: wifi-80211, wifi80211: {lag_bound_ms: 0.001}}\n")
    argv = ["--middleware", "dds", "--network", "tight", "--profiles", str(profiles), "--message", "Array1k",
            "--rate", "20", "--duration", "1", "--rerun-invalid", "1", "--out", str(tmp_path / "out")]  # fmt: skip
    done = _perf(*argv)
    assert "invalid: dds/none/default/tight" in done.stdout, done.stdout + done.stderr
    rows = json.loads((tmp_path / "out" / "perf.json").read_text())["rows"]
    assert [(r["status"], r["valid"]) for r in rows] == [("ok", False), ("ok", False)]  # both kept
    assert all(r["link"]["simulator"]["lag_ms"]["p99"] > 0.001 for r in rows)
    assert rows[0]["invalid_reasons"][0].startswith("the ns-3 802.11 link fell behind real time")
    lines = list(csv.DictReader((tmp_path / "out" / "perf.csv").open()))
    assert [line["valid"] for line in lines] == ["False", "False"] and lines[0]["round_trip_mean (ms)"]
    (summary,) = csv.DictReader((tmp_path / "out" / "cases.csv").open())
    counts = [summary[k] for k in ("runs", "ok", "invalid", "latency_mean (ms)")]
    assert counts == ["2", "0", "2", ""]  # kept, counted as invalid, in no mean


def test_an_echo_after_the_rows_planned_end_is_received_late_not_lost(tmp_path):
    """A relay that spends 0.1 s on each of 20 messages sent in 1 s echoes the last ones well after
    the send end + 0.5 s drain; the grace after that planned end keeps them, counted late."""
    case = PerfCase(middleware="zenoh-peer", message="Array1k", rate_hz=20, duration_s=1)
    row = run_row(case, tmp_path, drain_s=0.5, late_grace_s=3.0, relay_work_s=0.1)
    assert row.status == "ok", row.error
    main = _raw(tmp_path, "main")
    late = [a for a in _by_seq(main["echoes"]["1"]).values() if a > main["planned_end_ns"]]
    assert row.figures["received"] == row.figures["sent"] == 20 and row.figures["lost"] == 0
    assert row.figures["received_late"] == len(late) > 0


def test_lossy_link_counts_add_up(tmp_path):
    from fieldtest.netem import get_profile
    from fieldtest.testkit import needs

    needs.netns()
    # 20 % each way loses some of 40 messages (all 40 crossing: p < 2e-4) and holds up discovery
    # less than 30 % (up to 11 s); the lost echoes are waited for 1 s, not the default 5 s
    lossy = {"lossy": get_profile({"name": "lossy", "up": {"loss_pct": 20}, "down": {"loss_pct": 20}})}
    case = PerfCase(
        middleware="dds", qos="sensor", network="lossy", message="Array1k", rate_hz=20, duration_s=2
    )
    row = run_row(case, tmp_path, profiles=lossy, drain_s=0.5, late_grace_s=0.5)
    assert row.status == "ok", row.error
    assert row.link["emulated"] is True
    sent = len(_raw(tmp_path, "main")["sends"])
    there = _by_seq(_raw(tmp_path, "relay1")["arrivals"])
    back = _by_seq(_raw(tmp_path, "main")["echoes"]["1"])
    sub = row.subscribers[0]
    assert sub["sent"] == sent == 40
    assert sub["received"] == len(there) and sub["lost"] == sent - len(there) > 0  # best effort loses
    assert sub["echoed"] == len(back) <= len(there) and set(back) <= set(there)
    assert row.figures["lost"] == sent - len(back) and row.figures["relative_loss"] == pytest.approx(
        (sent - len(back)) / sent
    )


def test_a_relay_that_never_answers_fails_the_row_naming_the_warm_up(tmp_path):
    """A link that carries nothing host -> robot: the warm-up pings go unanswered for the row's
    discovery time, and the row fails saying how long it waited and what to try."""
    from fieldtest.netem import get_profile
    from fieldtest.testkit import needs

    needs.netns()
    cut = {"cut": get_profile({"name": "cut", "up": {"loss_pct": 100}, "down": {"loss_pct": 0}})}
    case = PerfCase(
        middleware="dds", qos="sensor", network="cut", message="Array1k", rate_hz=20, duration_s=1
    )
    row = run_row(case, tmp_path, profiles=cut, discovery_s=2.0)
    assert row.status == "failed", row
    assert "relay(s) [1] never answered in 2" in row.error and "--discovery-timeout" in row.error, row.error


def test_csv_has_performance_test_columns(tmp_path):
    rows = [run_row(PerfCase(middleware="dds", message=m, rate_hz=20, duration_s=0.5), tmp_path / m)
            for m in ("Array1k", "PointCloud512k")]  # fmt: skip
    refused = run_row(PerfCase(network="wifi", message="Array2m", rate_hz=10), tmp_path / "refused")
    write_all([*rows, refused], tmp_path / "out", {})
    with (tmp_path / "out" / "perf.csv").open() as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        lines = list(reader)
    positions = [header.index(c) for c in PERF_TEST_COLUMNS]
    assert positions == sorted(positions)  # performance_test's order
    assert [line["message"] for line in lines] == ["Array1k", "PointCloud512k", "Array2m"]
    assert [line["status"] for line in lines] == ["ok", "ok", "refused"]
    assert lines[1]["data_received"] == str(10 * 524288)
    table = (tmp_path / "out" / "table2.md").read_text()
    assert "| Array2m | - |" in table and "| PointCloud512k |" in table
    assert (tmp_path / "out" / "table2.png").stat().st_size > 0
    assert (tmp_path / "out" / "throughput.png").stat().st_size > 0


def _perf(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fieldtest.cli", "perf", *argv], capture_output=True,
                          text=True, timeout=120, **kwargs)  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--message", "Array3x"], "message 'Array3x': unknown"),
        (["--message", "PointCloud100"], "multiple of 16"),
        (["--middleware", "fastrtps"], "unknown middleware 'fastrtps'"),
        (["--rate", "0"], "rate: 0.0 Hz"),
        (["--qos", "fastest"], "fastest"),
        (["--network", "moon"], "unknown link profile 'moon'"),
        (["--subscribers", "2", "--middleware", "zenoh-peer"], "use a middleware with a router or broker"),
    ],
)
def test_bad_input_is_one_line(argv, says, tmp_path, capsys):
    # the command's own entry point, in this process: a Python start per refusal is no part of it
    assert main(["perf", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], err
    assert not (tmp_path / "rows").exists()  # refused before anything ran


def test_rate_the_link_cannot_hold_is_a_refused_row():
    case = PerfCase(middleware="dds", network="wifi", message="Array2m", rate_hz=10)
    with pytest.raises(ValueError, match="more than the wifi link's up rate"):
        check_case(case)
    row = run_row(case, Path("/nonexistent/never-written"))
    assert row.status == "refused" and "kbit/s" in row.error and "\n" not in row.error


MESSAGES = ["Array1k", "Array4k", "Array16k", "Array64k"]


def interrupt_after_first_row(out_dir: Path, *flags: str, sig: int = signal.SIGINT) -> tuple[int, str]:
    """``fieldtest perf`` over four sizes into ``out_dir``, ``sig`` (Ctrl-C by default) once row 0
    is done and row 1's main side runs: its exit code and stderr."""
    argv = [sys.executable, "-m", "fieldtest.cli", "perf", "--middleware", "dds", "--duration", "1", *flags,
            "--message", *MESSAGES, "--out", str(out_dir)]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal
    )
    deadline = time.monotonic() + 90
    while not (out_dir / "rows" / "001" / "logs" / "main.log").exists():  # row 0 finished, row 1 under way
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=60)
    return proc.returncode, err


def processes_under(path: Path, wait_s: float = 5.0) -> list[str]:
    """The command lines of the processes that name ``path`` or run in it, still there after up to
    ``wait_s`` (a stopped process may take a moment to go)."""
    import psutil

    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for proc in psutil.process_iter(["cmdline", "cwd"]):
            line = " ".join(proc.info["cmdline"] or [])
            if str(path) in line or str(path) in (proc.info["cwd"] or ""):
                found.append(line)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def said(sig: int) -> str:
    """How the runners name what stopped them (``procs.interruption``)."""
    return (
        "interrupted by the user (Ctrl-C)"
        if sig == signal.SIGINT
        else f"interrupted by {signal.Signals(sig).name}"
    )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["int", "term", "hup"])
def test_a_stop_signal_keeps_the_finished_rows_and_starts_no_further_row(tmp_path, sig):
    """Ctrl-C, kill and a closed terminal alike end a sweep as the lifecycle ends a run: the row
    under way stops, no further row starts (those left are listed), the finished rows are written
    and readable, nothing of the run is left running, exit 130. The old runner exited 143 after
    SIGTERM and 129 after SIGHUP, and listed no row it left."""
    returncode, err = interrupt_after_first_row(tmp_path, sig=sig)
    assert returncode == 130, err
    assert "kept the" in err
    assert f"not run ({said(sig)}): dds/none/default/loopback Array16k 10 Hz roundtrip, " in err, err
    assert not (tmp_path / "rows" / "002").exists()  # no row started after the signal
    with (tmp_path / "perf.csv").open() as f:
        lines = list(csv.DictReader(f))
    assert [(line["message"], line["status"]) for line in lines] == [("Array1k", "ok")]  # row 1 cut short
    written = json.loads((tmp_path / "perf.json").read_text())
    assert written["interrupted"] is True and len(written["rows"]) == 1
    assert processes_under(tmp_path) == []


def test_a_stop_signal_during_a_rows_start_up_starts_no_further_process(tmp_path, monkeypatch):
    """A stop signal that lands while a row starts (its relay is up, its main side not yet): the
    main side never starts, the relay is stopped, the row comes back interrupted. The old runner
    started the main side regardless and only then saw the signal."""
    import threading

    import fieldtest.perf.run as run

    stop = threading.Event()
    real_start = run._start_node

    def start_then_signal(procs, name, *args):
        real_start(procs, name, *args)
        if name == "relay1":
            stop.set()  # as the stop signals do (procs.run_stop_event)

    monkeypatch.setattr(run, "_start_node", start_then_signal)
    row = run_row(PerfCase(middleware="dds", duration_s=1), tmp_path / "row", stop=stop)
    assert (row.status, row.error) == ("interrupted", "interrupted by the user (Ctrl-C)"), row
    logs = tmp_path / "row" / "logs"
    assert (logs / "relay1.log").exists() and not (logs / "main.log").exists()
    assert processes_under(tmp_path) == []


WRITE_UNDER_A_SIGNAL = """
import os, signal, sys, time
import fieldtest.perf.cli as cli
real = cli.write_all
def write_under_a_signal(*args, **kwargs):
    os.kill(os.getpid(), signal.SIG{name})
    time.sleep(0.5)  # the signal lands while the files are written
    return real(*args, **kwargs)
cli.write_all = write_under_a_signal
from fieldtest.cli import main
sys.exit(main(["perf", *sys.argv[1:]]))
"""


@pytest.mark.parametrize("name", ["TERM", "INT"])
def test_a_signal_while_the_files_are_written_lets_the_write_finish(tmp_path, name):
    """SIGTERM or Ctrl-C as the finished sweep writes its files: they are written whole and the
    exit code is 130, as the trial runners do with their analysis. The old runner wrote outside
    its stop signals: SIGTERM killed it with no files, Ctrl-C ended it before writing them."""
    done = subprocess.run(
        [sys.executable, "-c", WRITE_UNDER_A_SIGNAL.replace("{name}", name), "--middleware", "dds"]
        + ["--duration", "0.5", "--message", "Array1k", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=as_from_a_terminal,
    )
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-2000:]
    (row,) = json.loads((tmp_path / "perf.json").read_text())["rows"]
    assert row["status"] == "ok", row
    assert len(list(csv.DictReader((tmp_path / "perf.csv").open()))) == 1
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("middleware", ["dds", "zenoh-router", "mqtt-broker", "fastdds"])
def test_secured_rows_run_on_the_trial_keystore(middleware, tmp_path):
    from fieldtest.middleware import registry

    setting = registry.get(middleware).secure_default
    row = run_row(
        PerfCase(middleware=middleware, security=setting, message="Array4k", rate_hz=20, duration_s=1),
        tmp_path,
    )
    assert row.status == "ok", row.error
    assert (tmp_path / "keystore").is_dir()  # made and checked as a trial's
    assert json.loads((tmp_path / "spec.json").read_text())["transport"]["security"] == setting
    assert row.figures["received"] == 20 and row.figures["lost"] == 0


@pytest.mark.parametrize("qos", ["fernandez-a", "fernandez-b", "fernandez-c", "fernandez-d", "fernandez-e"])
def test_fernandez_qos_profiles_run(qos, tmp_path):
    row = run_row(
        PerfCase(middleware="dds", qos=qos, message="Array256k", rate_hz=20, duration_s=1), tmp_path
    )
    assert row.status == "ok", row.error
    assert json.loads((tmp_path / "spec.json").read_text())["transport"]["qos"] == qos
    sub = row.subscribers[0]
    assert sub["received"] + sub["lost"] == sub["sent"] == 20


def test_a_combination_that_cannot_run_is_a_refused_row_and_the_sweep_goes_on(tmp_path):
    done = _perf("--middleware", "zenoh-peer", "dds", "--subscribers", "2", "--message", "Array1k",
                 "--duration", "0.5", "--rate", "20", "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 1, done.stderr
    with (tmp_path / "perf.csv").open() as f:
        lines = {line["middleware"]: line for line in csv.DictReader(f)}
    assert (
        lines["zenoh-peer"]["status"] == "refused"
        and "use a middleware with a router or broker" in lines["zenoh-peer"]["error"]
    )
    assert lines["dds"]["status"] == "ok" and lines["dds"]["received"] == "20"  # 2 subscribers x 10
    assert "refused: zenoh-peer" in done.stdout


def test_a_rate_not_held_fails_the_row():
    from fieldtest.perf.stats import rate_not_held

    case = PerfCase(message="Array1m", rate_hz=10, duration_s=3)
    assert rate_not_held(case, {"sent": 30, "T_loop": 3.0, "late_sends": 0}) == ""
    assert rate_not_held(case, {"sent": 30, "T_loop": 3.1, "late_sends": 2}) == ""  # a hiccup
    assert rate_not_held(case, {"sent": 30, "T_loop": 4.0, "late_sends": 8}) == ""  # a busy machine's pause
    held = rate_not_held(case, {"sent": 30, "T_loop": 7.5, "late_sends": 25})
    assert held.startswith("rate not held: 30 messages at 10 Hz took 7.5 s instead of 3.0 s")


@pytest.mark.parametrize(
    ("middleware", "side", "security", "network"),
    [
        ("zenoh-peer", set(), "none", "loopback"),
        ("zenoh-router", {"router"}, "mtls-acl", "loopback"),
        ("zenoh-router", {"router"}, "none", "ethernet"),  # host, robot and router in namespaces
    ],
)
def test_a_bridged_zenoh_row_runs_through_the_real_bridges(middleware, side, security, network, tmp_path):
    """The twin's default Zenoh path: each side's DDS -> zenohd + ros2dds plugin -> Zenoh -> bridge
    -> DDS, the sides in DDS domains of their own, so only the bridges can carry the messages."""
    from fieldtest.middleware.zenoh.bridge import find_bridge
    from fieldtest.testkit import needs

    find_bridge()  # BridgeMissingError names the install command: the test fails, it is not skipped
    if network != "loopback":
        needs.netns()
    case = PerfCase(
        middleware=middleware,
        security=security,
        network=network,
        zenoh_path="bridge",
        message="Array64k",
        rate_hz=20,
        duration_s=1,
    )
    row = run_row(case, tmp_path)
    assert row.status == "ok", row.error
    assert json.loads((tmp_path / "spec.json").read_text())["transport"]["zenoh"]["path"] == "bridge"
    assert row.link.get("emulated", False) == (network != "loopback")
    assert row.figures["received"] == 20 and row.figures["lost"] == 0
    bridges = {"bridge_host", "bridge_robot", *side}
    assert set(row.processes) == {"main", "relay1", *bridges}  # the bridged path's router is zenohd
    for name in bridges:  # each bridge process's own CPU and memory, beside the nodes'
        assert row.processes[name]["rss_max_kb"] > 0 and row.processes[name]["cpu_s"] >= 0
    for role, sends in (("host", PING_TOPIC), ("robot", PONG_TOPIC)):  # each bridge takes its side's topic
        text = (tmp_path / "bridges" / f"zenoh_bridge_{role}.json5").read_text()
        config = json.loads(text.split("\n", 1)[1])
        assert sends in config["plugins"]["ros2dds"]["allow"]["publishers"]
        assert ("tls" in json.dumps(config.get("transport", {}))) == (security != "none")  # the Zenoh hop


def test_zenoh_path_is_a_sweep_axis_of_the_zenoh_rows_only():
    from fieldtest.perf.cli import _parser, planned_rows

    args = _parser().parse_args(
        ["--middleware", "dds", "zenoh-peer", "--zenoh-path", "direct", "bridge", "--message", "Array1k"]
    )
    rows = [(case.middleware, case.zenoh_path) for case, _ in planned_rows(args)]
    assert rows == [("dds", ""), ("zenoh-peer", "direct"), ("zenoh-peer", "bridge")]
    bridged_fanout = PerfCase(middleware="zenoh-router", zenoh_path="bridge", subscribers=2)
    with pytest.raises(ValueError, match="the bridged path carries one robot's DDS"):
        check_case(bridged_fanout)
