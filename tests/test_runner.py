"""End to end through the trial runner: every process separate, real middlewares, real NatNet."""

import inspect
import json
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from fieldtest import rosmsg
from fieldtest.analysis import analyze_trial, read_metrics
from fieldtest.analysis.metrics.schema import Drift, Metrics, Stack
from fieldtest.catalog import TWIN_MIDDLEWARES as MIDDLEWARES
from fieldtest.middleware import registry
from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings
from fieldtest.natnet.feed import PoseFeedReceiver
from fieldtest.netem import get_profile
from fieldtest.plan import SquarePlan
from fieldtest.record import (
    CMD_VEL_TOPIC,
    MOCAP_FRAMES_TOPIC,
    MOCAP_POSE_TOPIC,
    RECEIPTS_TOPIC,
    TWIN_TRUTH_TOPIC,
    TrialRequest,
    read_bag,
    read_trial,
)
from fieldtest.runner import (
    QUICK_PLAN,
    TrialResult,
    invalid_trials,
    parallel_from_headroom,
    run_twin_trial,
    stack_drift_check,
    verdict_lines,
)
from fieldtest.testkit import needs
from fieldtest.testkit.hangup import as_from_a_terminal, hangup_not_ignored
from fieldtest.testkit.sched import realtime_permitted
from fieldtest.testkit.synth import SynthSpec, synthesize
from fieldtest.twin.robot import PHYSICS_HZ, TRUTH_LOG_HZ

FEED_STALE_S = inspect.signature(PoseFeedReceiver).parameters["stale_s"].default

SHORT_PLAN = SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=1, start_delay_s=0.5)


def _request(middleware: str) -> TrialRequest:
    return TrialRequest(name=f"e2e-{middleware}", plan=SHORT_PLAN, transport={"middleware": middleware})


# The quick demo with 90 deg/s turns: its two laps take 16 s of commands instead of 32 s (the plan's
# length is not what the demo's tests check; each trial records the plan it ran).
DEMO_PLAN = SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=2, start_delay_s=0.5)
DEMO_WITH_THE_DEMO_PLAN = """
import sys
import fieldtest.runner.cli
from fieldtest.plan import SquarePlan
fieldtest.runner.cli.QUICK_PLAN = SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=2, start_delay_s=0.5)
from fieldtest.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def quick_demo(tmp_path_factory):
    """The main command's quick variant, as a user runs it: every middleware at once, analyzed, compared."""
    out = tmp_path_factory.mktemp("runs")
    done = subprocess.run(
        # as many at once as the machine has room for (auto); no re-runs, to bound the time
        [sys.executable, "-c", DEMO_WITH_THE_DEMO_PLAN, "demo", "--quick", "--rerun-invalid", "0"]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    return out, done


@pytest.fixture(scope="module")
def all_middleware_trials(quick_demo):
    out, done = quick_demo
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trials = {}
    for trial_dir in sorted(p for p in out.iterdir() if (p / "trial.yaml").exists()):
        record = read_trial(trial_dir)
        trials[record.request.transport.middleware] = TrialResult(
            trial_dir, record.outcome.end_reason, record.outcome.end_detail
        )
    assert sorted(trials) == sorted(MIDDLEWARES)
    return trials


def test_demo_prints_every_report_the_comparison_and_the_stack_check(quick_demo, all_middleware_trials):
    out, done = quick_demo
    for result in all_middleware_trials.values():
        assert f"{result.trial_dir}/analysis/report.md" in done.stdout
        assert (result.trial_dir / "analysis" / "report.md").exists()
    (compare,) = out.glob("compare-*/compare.md")
    assert f"comparison report: {compare}" in done.stdout
    assert all(m in compare.read_text() for m in MIDDLEWARES)
    (check,) = [line for line in done.stdout.splitlines() if line.startswith("stack check")]
    assert all(m in check for m in MIDDLEWARES), check
    # the verdict says what the trials' own metrics say: valid, or which trials are not or unknown
    validity = {
        read_trial(r.trial_dir).request.name: read_metrics(r.trial_dir / "analysis" / "metrics.json").stack
        for r in all_middleware_trials.values()
    }
    invalid = {name for name, stack in validity.items() if stack is not None and stack.valid is False}
    unknown = {name for name, stack in validity.items() if stack is None or stack.valid is None}
    verdict = [line for line in done.stdout.splitlines() if line.startswith("verdict: ")]

    def named(prefix: str) -> set[str]:  # the trials a verdict line names, e.g. "NOT VALID for a, b:"
        lines = [line.removeprefix(prefix) for line in verdict if line.startswith(prefix)]
        return set(re.split(r"[:(]", lines[0], maxsplit=1)[0].strip().split(", ")) if lines else set()

    assert verdict, done.stdout[-2000:]
    assert verdict[0].startswith("verdict: VALID - ") == (not invalid and not unknown), (verdict, validity)
    assert (named("verdict: NOT VALID for "), named("verdict: validity unknown for ")) == (
        invalid,
        unknown,
    ), verdict
    assert "trial(s) at once" in done.stderr  # the parallelism came from the measured headroom


@pytest.mark.parametrize("middleware", MIDDLEWARES)
def test_every_command_arrives_and_mocap_records(all_middleware_trials, middleware):
    result = all_middleware_trials[middleware]
    assert result.end_reason == "completed", result.detail
    record = read_trial(result.trial_dir)
    sent = read_bag(result.trial_dir / "host").messages(CMD_VEL_TOPIC)
    receipts = read_bag(result.trial_dir / "robot").messages(RECEIPTS_TOPIC)
    sent_seqs = {rosmsg.seq_of(m.header.frame_id) for _, m in sent}
    assert record.request.plan == DEMO_PLAN
    assert sent_seqs >= set(range(DEMO_PLAN.n_ticks()))
    assert {m.seq for _, m in receipts} == sent_seqs
    mocap = read_bag(result.trial_dir / "mocap")
    assert not mocap.truncated
    duration_s = (mocap.messages(MOCAP_FRAMES_TOPIC)[-1][0] - mocap.messages(MOCAP_FRAMES_TOPIC)[0][0]) / 1e9
    # frames missing only where the emulator itself woke too late to send them (outcome.stack)
    skipped = record.outcome.stack["mocap"]["frames_skipped_late"]
    assert mocap.count(MOCAP_FRAMES_TOPIC) > 0.8 * 120 * duration_s - skipped
    # Frames before the robot feeds its pose, and after its process has stopped (it stops before the
    # recorder), are tracking-invalid; while the host streams (nearly) all are valid. The exceptions
    # are frames where the machine held the robot's physics loop (which sends the feed) past the
    # emulator's staleness limit: no true pose logged (50 Hz, as the feed's steps) in that window
    # before the frame's nominal time, with 20 ms margins for the nominal time read off the arrivals.
    start_ns, host_stop_ns = record.outcome.stream_start_ns, record.outcome.stopped_ns["host"]
    frames = mocap.messages(MOCAP_FRAMES_TOPIC)
    stream = [(t, m) for t, m in frames if start_ns <= t <= host_stop_ns]
    nominal_base_s = min(t / 1e9 - m.mocap_timestamp_s for t, m in frames)  # the earliest arrival's
    robot_shift_ns = round(record.request.twin.robot_clock_offset_s * 1e9)
    truth_s = np.array(
        [
            (t - robot_shift_ns) / 1e9
            for t, _ in read_bag(result.trial_dir / "robot").messages(TWIN_TRUTH_TOPIC)
        ]
    )

    def robot_held(frame_s: float) -> bool:
        lo, hi = np.searchsorted(truth_s, [frame_s - FEED_STALE_S + 0.02, frame_s - 0.02])
        return lo == hi

    invalid_s = [nominal_base_s + m.mocap_timestamp_s for t, m in stream if not m.tracking_valid]
    unexplained = [round(s - start_ns / 1e9, 3) for s in invalid_s if not robot_held(s)]
    # A hold is in the robot's own record too: a stretch of the stream without a true pose long
    # enough to excuse a frame means its physics loop skipped that stretch's steps, less the few
    # run between two logged poses. A robot that logged no pose would otherwise excuse every frame.
    lo_s, hi_s = start_ns / 1e9, host_stop_ns / 1e9
    gaps_s = np.diff(np.concatenate(([lo_s], truth_s[(truth_s > lo_s) & (truth_s < hi_s)], [hi_s])))
    holds_s = gaps_s[gaps_s >= FEED_STALE_S - 0.04]
    steps_held = float(np.sum(holds_s * PHYSICS_HZ - 3 * PHYSICS_HZ / TRUTH_LOG_HZ))
    skipped_steps = record.outcome.stack["robot"]["steps_skipped"]
    assert skipped_steps >= steps_held, (
        f"{len(holds_s)} stretches without a true pose ({np.sum(holds_s):.2f} s), but the robot's loop"
        f" skipped only {skipped_steps} steps"
    )
    assert len(stream) > 100 and len(unexplained) <= 0.02 * len(stream), (
        f"{len(invalid_s)}/{len(stream)} frames invalid, {len(unexplained)} while the robot fed its pose,"
        f" at s after stream start: {unexplained}"
    )
    assert mocap.count(MOCAP_POSE_TOPIC) == sum(
        m.tracking_valid for _, m in mocap.messages(MOCAP_FRAMES_TOPIC)
    )
    assert set(record.outcome.cpu) >= {"host", "robot", "natnet", "recorder"}
    infra = registry.get(middleware).infra_process
    forwarders = [infra] if infra else []  # routers, brokers, bridges: real-time where permitted
    if middleware.startswith("zenoh"):  # the lab's path: two real bridges (and zenohd as the router)
        assert record.request.transport.settings(ZenohSettings).path == "bridge"
        bridges = forwarders = ["bridge_host", "bridge_robot"] + ([infra] if infra else [])
        assert all(record.outcome.cpu[name]["cpu_s"] > 0 for name in bridges), record.outcome.cpu
        assert (result.trial_dir / "bridges" / "zenoh_bridge_robot.json5").is_file()
    elif infra is not None:  # the router or broker: its CPU recorded, its output kept
        assert record.outcome.cpu[infra]["cpu_s"] > 0
        log = (result.trial_dir / "logs" / f"{infra}.log").read_text()
        assert log.startswith("# fieldtest: ") and ("zenoh-router ready" in log or " running" in log), log
    if infra is not None:  # its own forwarding delay, probed on its node for the whole trial
        forwarding = record.outcome.stack["forwarding"]
        assert forwarding["samples"] >= 50 and forwarding["lost"] == 0, forwarding
        assert 0 < forwarding["rtt_p50_ms"] <= forwarding["rtt_max_ms"], forwarding
    else:
        assert "forwarding" not in record.outcome.stack
    assert record.outcome.stack.get("realtime", {}) == dict.fromkeys(forwarders, realtime_permitted())
    assert record.outcome.stream_start_ns is not None


def test_killed_host_stops_the_robot_within_the_watchdog(tmp_path):
    result = run_twin_trial(_request("zenoh-peer"), tmp_path, kill_host_at_s=4.0)
    assert result.end_reason == "host-killed"
    record = read_trial(result.trial_dir)
    assert (
        any("host bag was cut off" in w for w in record.outcome.warnings)
        or not read_bag(result.trial_dir / "host").truncated
    )
    receipts = read_bag(result.trial_dir / "robot").messages(RECEIPTS_TOPIC)
    last_command_ns = rosmsg.ns_of(receipts[-1][1].received)  # the model's last command arrived then
    assert receipts[-1][1].twist.linear.x != 0 or receipts[-1][1].twist.angular.z != 0  # no stop burst came
    truth = read_bag(result.trial_dir / "robot").messages(TWIN_TRUTH_TOPIC)
    t = np.array([ts for ts, _ in truth], dtype=np.int64)
    xy = np.array([[m.pose.position.x, m.pose.position.y] for _, m in truth])
    yaw = np.unwrap(
        [
            rosmsg.quaternion_yaw(
                m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z, m.pose.orientation.w
            )
            for _, m in truth
        ]
    )
    settled = t > last_command_ns + int(0.5e9) + int(0.45e9)  # watchdog + deceleration from full speed
    assert settled.sum() > 5
    assert np.ptp(xy[settled], axis=0).max() < 1e-4 and np.ptp(yaw[settled]) < 1e-4
    assert len(read_bag(result.trial_dir / "host").messages(CMD_VEL_TOPIC)) > 20


MOCAP_LAG_S = 10.0  # the ground truth behind the host by far more than any fixed grace, within the bound


def test_a_ground_truth_lagging_the_host_is_recorded_until_the_rest_after_the_run(tmp_path):
    """The NatNet emulator's frames leave MOCAP_LAG_S after their exposure: the runner keeps the robot
    and the recorder going until the ground truth holds the rest after the planned end, so the drift
    closes on the rest pose with the replay's closing beside it."""
    request = TrialRequest(
        name="mocap-lag",
        # two laps at 90 deg/s (the drift needs two), 16 s of commands instead of --quick's 32 s
        plan=SHORT_PLAN.model_copy(update={"laps": 2}),
        transport={"middleware": "zenoh-peer"},
        twin={"mocap_latency_s": MOCAP_LAG_S},
    )
    result = run_twin_trial(request, tmp_path)
    assert result.end_reason == "completed", result.detail
    analyze_trial(result.trial_dir, plots=False)
    metrics = json.loads((result.trial_dir / "analysis" / "metrics.json").read_text())
    record = read_trial(result.trial_dir)
    drift = metrics["drift"]
    assert drift.get("closing", {}).get("end_pose") == "rest after the run", (drift, record.outcome.warnings)
    assert metrics["drift_causes"]["replay_closing_m"] is not None
    assert metrics["motion"]["start_lag_s"] > MOCAP_LAG_S  # the ground truth did lag the commands


@pytest.mark.parametrize("middleware", ["dds", "fastdds"])
def test_trial_over_emulated_wifi_with_an_outage(tmp_path, middleware):
    needs.netns()
    request = TrialRequest(
        name="e2e-wifi",
        plan=SHORT_PLAN,  # its 8 s hold the outage and the watchdog's stops after it
        network="wifi",
        transport={"middleware": middleware},
        faults=[{"kind": "outage", "at_s": 5.0, "duration_s": 1.5}],
    )
    result = run_twin_trial(request, tmp_path)
    assert result.end_reason == "completed", result.detail
    record = read_trial(result.trial_dir)
    assert record.request.transport.robot_address != "127.0.0.1"  # ran in its own namespace
    assert record.outcome.nodes["host"] == record.outcome.nodes["robot"] == "wifi"  # the seed's topology
    low, high = _wifi_rtt_median_bounds_ms(record)
    assert low < record.outcome.link["rtt_median_ms"] < high, (record.outcome.link, record.outcome.stack)
    (fault,) = record.outcome.faults
    assert fault["kind"] == "outage" and fault["start_ns"] == record.outcome.stream_start_ns + 5_000_000_000
    assert any("watchdog" in w for w in record.outcome.warnings)  # the outage outlasts the 0.5 s watchdog
    receipts = read_bag(result.trial_dir / "robot").messages(RECEIPTS_TOPIC)
    latencies = np.array([m.latency_s for _, m in receipts])
    assert np.nanmedian(latencies) > 0.002  # the emulated link's delay shows in the robot's log
    assert read_bag(result.trial_dir / "mocap").count(MOCAP_POSE_TOPIC) > 500  # truth crossed namespaces


def _wifi_rtt_median_bounds_ms(record) -> tuple[float, float]:
    """Where the pre-trial probes' median round trip must fall: the wifi profile's delays on both
    stations' legs, each way, within four standard errors of a median of their normal jitter; above
    it, by at most four probe wake-ups (client and echo server, each way) as late as the machine's
    reference timer was at its 90th percentile over the trial."""
    profile = get_profile("wifi")
    legs = [profile.up, profile.down] * 2  # the host's station and the robot's
    spread = sum(leg.jitter_ms**2 for leg in legs) ** 0.5
    error = 4 * 1.2533 * spread / record.outcome.link["received"] ** 0.5
    expected = sum(leg.delay_ms for leg in legs)
    late = 4 * record.outcome.stack["machine"]["timer_late_p90_ms"]
    return expected - error, expected + error + late


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory) -> Metrics:
    """A real metrics.json (a synthetic trial, analyzed) as the readers get it."""
    trial = tmp_path_factory.mktemp("analyzed")
    synthesize(trial, SynthSpec(plan=SHORT_PLAN))
    analyze_trial(trial, plots=False)
    return read_metrics(trial / "analysis" / "metrics.json")


@pytest.fixture
def _drift(analyzed):
    def drift(mean_m: float | None) -> Metrics:
        return analyzed.model_copy(update={"drift": Drift(available=mean_m is not None, mean_m=mean_m)})

    return drift


def test_stack_check_says_which_middleware_adds_drift(_drift):
    requests = [_request(m) for m in ("dds", "mqtt-broker")]
    met = stack_drift_check(requests, [_drift(0.0003), _drift(0.0009)])
    assert met.startswith("stack check: lap drift within 1 mm") and "dds 0.3, mqtt-broker 0.9" in met
    over = stack_drift_check(requests, [_drift(0.0003), _drift(0.0021)])
    assert over.startswith("stack check NOT met") and "for mqtt-broker (" in over and "2.1" in over
    unmeasured = stack_drift_check(requests, [_drift(None), _drift(0.0002)])
    assert "NOT met" in unmeasured and "for dds (" in unmeasured and "dds n/a" in unmeasured


def test_stack_check_only_where_the_stack_alone_should_not_drift(_drift):
    wifi = _request("dds").model_copy(update={"network": "wifi"})
    assert stack_drift_check([wifi], [_drift(0.01)]) is None
    biased = TrialRequest(name="b", plan=SHORT_PLAN, twin={"heading_bias_dps": 0.1})
    assert stack_drift_check([biased], [_drift(0.01)]) is None
    faulted = _request("dds").model_copy(update={"faults": [{"kind": "outage", "at_s": 1, "duration_s": 1}]})
    assert stack_drift_check([faulted], [_drift(0.01)]) is None


def _wait_for_streaming(runner: subprocess.Popen, out, count: int = 1) -> None:
    deadline = time.monotonic() + 60
    while sum("STREAM start_ns" in p.read_text() for p in out.glob("*/logs/host.log")) < count:
        assert time.monotonic() < deadline and runner.poll() is None, "the host never streamed"
        time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_stops_the_trial_and_the_stop_burst_still_crosses_the_broker(tmp_path, sig):
    """Ctrl-C (or a SIGTERM: `kill`, `timeout`) reaches the runner's main thread while the trial
    runs in a worker thread; the broker must outlive the host so that the host's stop burst
    reaches the robot through it."""
    runner = subprocess.Popen(
        [sys.executable, "-m", "fieldtest.cli", "trial", "--middleware", "mqtt-local-broker", "--quick"]
        + ["--out", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    try:
        _wait_for_streaming(runner, tmp_path)
        time.sleep(2.0)
        runner.send_signal(sig)
        out, _ = runner.communicate(timeout=30)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 130, out
    (trial_dir,) = [p for p in tmp_path.iterdir() if (p / "trial.yaml").exists()]
    outcome = read_trial(trial_dir).outcome
    assert outcome.end_reason == "interrupted"
    assert outcome.end_detail == (
        "interrupted by the user (Ctrl-C)" if sig == signal.SIGINT else "interrupted by SIGTERM"
    )
    receipts = read_bag(trial_dir / "robot").messages(RECEIPTS_TOPIC)
    assert any(m.seq >= QUICK_PLAN.n_ticks() for _, m in receipts), "the stop burst never reached the robot"
    assert receipts[-1][1].twist.linear.x == 0 and receipts[-1][1].twist.angular.z == 0
    assert "interrupted" in (trial_dir / "analysis" / "report.md").read_text()


CAMPAIGN_OF_TWO = """
campaign: interrupt
base:
  plan: {side_duration_s: 1.0, turn_rate_dps: 90.0, laps: 1, start_delay_s: 0.5}
matrix:
  middleware: [dds, zenoh-peer]
"""


def test_a_hangup_mid_campaign_ends_the_campaign_not_just_the_trial(tmp_path):
    """SIGHUP (a closed terminal) during the first of two trials: that trial stops as with Ctrl-C,
    the second never starts, and the exit code says the campaign was interrupted."""
    (tmp_path / "c.yaml").write_text(CAMPAIGN_OF_TWO)
    out = tmp_path / "runs"
    runner = subprocess.Popen(
        [sys.executable, "-m", "fieldtest.cli", "campaign", str(tmp_path / "c.yaml"), "--out", str(out)]
        + ["--rerun-invalid", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    try:
        _wait_for_streaming(runner, out / "interrupt")
        runner.send_signal(signal.SIGHUP)
        stdout, stderr = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 130, stdout + stderr
    trials = [read_trial(p) for p in (out / "interrupt").iterdir() if (p / "trial.yaml").exists()]
    assert [t.request.name for t in trials] == ["interrupt-dds-r0"]
    assert trials[0].outcome.end_detail == "interrupted by SIGHUP"
    assert "not run (interrupted by SIGHUP): interrupt-zenoh-peer-r0" in stderr
    assert "0/2 trials completed" in stdout


def test_no_batch_or_re_run_starts_after_an_interruption(tmp_path, monkeypatch, analyzed):
    """The runner's loop over batches and re-runs, with the trials faked: after the batch that was
    interrupted nothing more runs, whatever the parallelism or the re-runs allowed."""
    import fieldtest.runner.batches as runner

    invalid = analyzed.model_copy(update={"stack": Stack(valid=False)})  # each would be re-run
    monkeypatch.setattr(runner, "analyze_all", lambda results: [invalid] * len(results))
    requests = [_request("dds").model_copy(update={"name": f"t{i}"}) for i in range(6)]

    def run(parallel, interrupted_at, reruns):
        started: list[str] = []

        def fake_run(requests, out, stop, interrupted_at=interrupted_at, started=started):
            batch = []
            for r in requests:
                index = len(started)
                started.append(r.name)
                reason = "interrupted" if index == interrupted_at else "completed"
                if reason == "interrupted":
                    stop.set()  # as a stop signal does before any trial ends interrupted
                batch.append(TrialResult(tmp_path / r.name, reason, ""))
            return batch

        monkeypatch.setattr(runner, "run_with_progress", fake_run)
        return started, runner.run_and_rerun(requests, tmp_path, parallel, reruns)

    for parallel, interrupted_at, reruns in [(1, 0, 0), (1, 1, 2), (2, 2, 1), (2, 3, 3), (3, 4, 1)]:
        started, (results, metrics, every, count) = run(parallel, interrupted_at, reruns)
        batch_end = (interrupted_at // parallel + 1) * parallel
        assert started == [r.name for r in requests[:batch_end]], (parallel, interrupted_at)
        assert len(results) == len(metrics) == batch_end and count == 0 and every == results
    for parallel in (1, 2, 6):  # the second re-run is interrupted: no third, the invalid trial kept
        started, (results, metrics, every, count) = run(parallel, interrupted_at=7, reruns=3)
        assert started == [r.name for r in requests] + ["t0", "t1"]
        assert count == 2 and len(every) == 8 and every[-1].end_reason == "interrupted"
        assert results[1] is every[1] and results[0] is every[6]


def test_a_signal_the_run_was_told_to_ignore_stays_ignored():
    """Under nohup SIGHUP is ignored and must not stop the run; SIGTERM still does."""
    from fieldtest.procs import run_stop_event

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with run_stop_event() as stop:
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
            signal.raise_signal(signal.SIGTERM)
            assert stop.wait(5.0) and stop.received == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_parallel_trials_follow_the_cores_left_free():
    quiet = {"busy_pct": 5.0, "steal_pct": 0.0}
    assert parallel_from_headroom(5, quiet, cores=2) == 3  # 1.9 free cores / 0.5 per trial
    assert parallel_from_headroom(2, quiet, cores=2) == 2  # never more than wanted
    assert parallel_from_headroom(5, {"busy_pct": 70.0, "steal_pct": 10.0}, cores=2) == 1
    assert parallel_from_headroom(5, {"busy_pct": 100.0, "steal_pct": 20.0}, cores=2) == 1  # at least one


def test_verdict_names_invalid_trials_why_and_what_to_do(analyzed):
    def _metrics(valid, reasons=(), advice=""):
        return analyzed.model_copy(
            update={"stack": Stack(valid=valid, invalid_reasons=list(reasons), advice=advice)}
        )

    requests = [_request(m) for m in ("dds", "zenoh-peer", "mqtt-broker")]
    ok = [_metrics(True)] * 3
    assert invalid_trials(ok) == []
    assert verdict_lines(requests, ok)[0].startswith("verdict: VALID")
    bad = [
        _metrics(True),
        _metrics(
            False, ["the machine's own timing explains 2.60 mm of lap drift (bound 1 mm)"], "re-run the trial"
        ),
        _metrics(None),
    ]
    assert invalid_trials(bad) == [1]
    lines = verdict_lines(requests, bad, reruns=2)
    assert lines[0] == "verdict: NOT VALID for e2e-zenoh-peer (2 re-run(s) of invalid trials):"
    assert "2.60 mm" in lines[1] and lines[2] == "  what to do: re-run the trial"
    assert lines[3].startswith("verdict: validity unknown for e2e-mqtt-broker")
    assert verdict_lines(requests[:1], [None])[0].startswith(
        "verdict: validity unknown for e2e-dds"
    )  # not analyzed
    stolen = analyzed.model_copy(update={"stack": Stack(valid=True, cautions=["the hypervisor took 3.0 %"])})
    lines = verdict_lines(requests, [ok[0], stolen, ok[0]])
    assert lines[0].startswith("verdict: VALID") and len(lines) == 2
    assert lines[1].startswith("  caution: e2e-zenoh-peer ran under CPU steal")


@pytest.mark.parametrize("middleware", ["dds", "zenoh-peer", "mqtt-local-broker"])
def test_a_stop_signal_during_the_start_up_starts_no_further_process(tmp_path, middleware):
    """A stop signal that lands while a trial starts (another trial of its batch is still starting
    when the user presses Ctrl-C): no process starts after it, the host least of all, and the trial
    is recorded as interrupted. The old runner started every process and the host's stream, and
    only then saw the signal."""
    import threading

    stop = threading.Event()
    stop.set()
    request = TrialRequest(name="stopped", plan=QUICK_PLAN, transport={"middleware": middleware})
    result = run_twin_trial(request, tmp_path, stop=stop)
    assert result.end_reason == "interrupted", result.detail
    logs = result.trial_dir / "logs"
    assert not any((logs / f"{name}.log").exists() for name in ("host", "robot", "recorder", "natnet"))
    outcome = read_trial(result.trial_dir).outcome
    assert outcome.end_reason == "interrupted" and outcome.software


def test_a_signal_after_a_trial_completed_still_ends_the_campaign_with_130(tmp_path, monkeypatch):
    """SIGHUP as the first of two trials completes (parallel 1): the second never starts, and the
    exit code says the campaign was interrupted. The old runner returned 0: every trial that ran
    had completed, so a script went on as if the campaign had run in full."""
    import os

    import fieldtest.runner.batches as batches
    from fieldtest.runner.cli import campaign_main

    real_run = batches.run_twin_trial

    def run_then_hang_up(request, out, progress, domain_id=0, stop=None):
        result = real_run(request, out, progress, domain_id=domain_id, stop=stop)
        os.kill(os.getpid(), signal.SIGHUP)  # the trial has completed; the terminal closes
        assert stop.wait(5.0)  # the relay thread sets it (procs.run_stop_event)
        return result

    monkeypatch.setattr(batches, "run_twin_trial", run_then_hang_up)
    (tmp_path / "c.yaml").write_text(CAMPAIGN_OF_TWO)
    out = tmp_path / "runs"
    with hangup_not_ignored():
        code = campaign_main([str(tmp_path / "c.yaml"), "--out", str(out), "--parallel", "1"])
    trials = [read_trial(p) for p in (out / "interrupt").iterdir() if (p / "trial.yaml").exists()]
    assert [(t.request.name, t.outcome.end_reason) for t in trials] == [("interrupt-dds-r0", "completed")]
    assert code == 130


ANALYZE_THEN_SIGNAL = """
import os, signal, sys, time
import fieldtest.analysis
real = fieldtest.analysis.analyze_trial
def analyze_under_a_signal(trial_dir, **kwargs):
    os.kill(os.getpid(), signal.SIG{name})
    time.sleep(0.5)  # the signal lands while the analysis runs
    return real(trial_dir, **kwargs)
fieldtest.analysis.analyze_trial = analyze_under_a_signal
import fieldtest.runner.cli
from fieldtest.plan import SquarePlan
# one short lap: the plan's length is not what is tested
fieldtest.runner.cli.QUICK_PLAN = SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=1, start_delay_s=0.5)
from fieldtest.runner import trial_main
sys.exit(trial_main(sys.argv[1:]))
"""


@pytest.mark.parametrize("name", ["TERM", "INT"])
def test_a_signal_during_the_analysis_of_a_trial_lets_it_finish(tmp_path, name):
    """``fieldtest trial``: SIGTERM or Ctrl-C while the completed trial is analyzed: the report is
    written and the exit code is 130, as in a demo or campaign. The old runner analyzed outside its
    stop signals: SIGTERM killed it with no report, Ctrl-C ended it with a traceback."""
    done = subprocess.run(
        [sys.executable, "-c", ANALYZE_THEN_SIGNAL.replace("{name}", name), "--middleware", "dds"]
        + ["--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    assert done.returncode == 130, done.stdout[-2000:] + done.stderr[-2000:]
    (trial_dir,) = [p for p in tmp_path.iterdir() if (p / "trial.yaml").exists()]
    assert read_trial(trial_dir).outcome.end_reason == "completed"
    assert (trial_dir / "analysis" / "report.md").exists() and "Traceback" not in done.stderr
