"""Campaigns on a real Dask cluster (``fieldtest campaign --cluster``, docs/cluster.md): a
scheduler and workers, each in a network namespace of its own, talking TCP across them behind the
guide's firewall, set up by the guide's own steps (``fieldtest.testkit.labcluster``).

The workers: ``a`` offers everything but ns-3; ``b`` offers neither namespaces nor ns-3; ``other``
runs a kit with one file changed (and offers everything). Each runs one trial at a time. The
scheduler gives up a worker silent for 10 s (the guide's worker TTL shortened), and each worker
judges the trials of a campaign named ``judged-invalid`` invalid (tests/clusterhooks)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings
from fieldtest.record import RECEIPTS_TOPIC, read_bag, read_trial
from fieldtest.runner import QUICK_PLAN
from fieldtest.runner.cluster import INCOMING, SCHEDULER_LOST
from fieldtest.testkit.labcluster import SCHEDULER, LabCluster, WorkerSpec

WORKERS = [
    WorkerSpec("a", ["--trials", "1", "--without", "ns3"]),
    WorkerSpec("b", ["--trials", "1", "--without", "netns", "--without", "ns3"]),
    WorkerSpec("other", ["--trials", "1"], other_kit=True),
]
CAMPAIGN_S = 600
WORKER_TTL_S = 10
START_TO_STREAM_S = 90  # a trial's set-up on a loaded machine, until its host streams
HOOKS = Path(__file__).parent / "clusterhooks"
# One 8 s lap where the plan's length is not judged (a --quick trial's two laps at 30 deg/s take
# 32 s); Ctrl-C keeps --quick's, to stop two trials running at once
ONE_LAP = "  plan: {side_duration_s: 1.0, turn_rate_dps: 90.0, laps: 1, start_delay_s: 0.5}\n"
# Where a lost worker's re-run is judged: a trial the machine's load made invalid is not re-run too
NO_INVALID_RERUN = ["--rerun-invalid", "0"]


@pytest.fixture(scope="module")
def lab_cluster(tmp_path_factory):
    with LabCluster(tmp_path_factory.mktemp("cluster"), WORKERS, WORKER_TTL_S, HOOKS) as cluster:
        yield cluster


@pytest.fixture
def cluster(lab_cluster):
    """The module's cluster with the scheduler and every worker up (a test may have killed one)."""
    if not lab_cluster.alive(SCHEDULER):
        for name in lab_cluster.specs:  # each worker closes without its scheduler: let it end first
            _wait_until(lambda name=name: not lab_cluster.alive(name), f"{name} stayed up", None, 90)
        lab_cluster.start_scheduler()
    for name in lab_cluster.specs:
        if not lab_cluster.alive(name):
            lab_cluster.start_worker(name)
    return lab_cluster


def _campaign_file(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f"campaign: {name}\n{body}")
    return path


def _finish(proc: subprocess.Popen, timeout_s: float = CAMPAIGN_S) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return out


def _trial_dirs(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if (p / "trial.yaml").exists())


def _wait_until(done, what: str, proc: subprocess.Popen | None, timeout_s: float = CAMPAIGN_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert proc is None or proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def _wait_streaming(cluster: LabCluster, names: list[str], proc: subprocess.Popen) -> None:
    _wait_until(
        lambda: all(cluster.streaming_trials(n) for n in names), f"no trial streamed on each of {names}", proc
    )


def _streaming_names(cluster: LabCluster, name: str) -> set[str]:
    return {read_trial(d).request.name for d in cluster.streaming_trials(name)}


def test_a_campaign_spreads_over_the_workers_that_can_run_each_trial(cluster, tmp_path):
    """The namespaced trial goes to the worker with namespaces, the loopback one to the other;
    the worker of another kit gets nothing; each directory comes home whole, as from a local run."""
    campaign = _campaign_file(
        tmp_path,
        "spread",
        f"base:\n{ONE_LAP}matrix:\n  network: [ethernet, loopback]\nrepetitions: 1\norder: grouped\n",
    )
    # placement is judged on each trial's one run: a re-run of an invalid one goes to any free worker
    proc = cluster.campaign(campaign, ["--rerun-invalid", "0", "--out", str(tmp_path / "runs")])
    out = _finish(proc)
    assert proc.returncode == 0, out
    assert "worker other: another kit" in out and "refused, it gets no trials" in out
    home = tmp_path / "runs" / "spread"
    trials = {read_trial(d).request.network: read_trial(d) for d in _trial_dirs(home)}
    assert set(trials) == {"ethernet", "loopback"}, out
    assert trials["ethernet"].outcome.worker["name"] == "a"
    assert trials["loopback"].outcome.worker["name"] == "b", out  # a was busy: spread
    for record in trials.values():
        worker = record.outcome.worker
        assert record.outcome.end_reason == "completed"
        assert worker["kit"] == trials["ethernet"].outcome.worker["kit"]
        assert {"hostname", "cores", "platform", "capabilities", "trials_at_once"} <= set(worker)
        assert worker["address"].startswith("tcp://10.77.0.")  # a worker's namespace, not this one's
    assert "netns" not in trials["loopback"].outcome.worker["capabilities"]
    # as a local campaign leaves them: analyzed, compared; nothing half unpacked
    assert all((d / "analysis" / "metrics.json").is_file() for d in _trial_dirs(home))
    assert (home / "compare" / "compare.md").is_file()
    assert not (home / INCOMING).exists()
    assert not list(cluster.scratch("a").rglob("trial.yaml")), "the worker kept its copy"


def test_a_trial_no_worker_of_this_kit_can_run_stops_the_campaign_before_it_starts(cluster, tmp_path):
    """An 802.11 trial needs ns-3: a and b withhold it, and the worker that has it runs another kit."""
    campaign = _campaign_file(tmp_path, "air", "base:\n  network: wifi-80211\n")
    proc = cluster.campaign(campaign, ["--quick", "--out", str(tmp_path / "runs")])
    out = _finish(proc, 120)
    assert proc.returncode == 2, out
    assert "no worker of this kit can run air-r0 (needs root, netns, ns3)" in out
    assert "a: root, netns, zenoh-bridge" in out and "b: root, zenoh-bridge" in out
    assert not (tmp_path / "runs" / "air").exists() or not _trial_dirs(tmp_path / "runs" / "air")


def test_a_worker_killed_mid_trial_costs_only_that_trials_rerun(cluster, tmp_path):
    campaign = _campaign_file(
        tmp_path, "crash", f"base:\n{ONE_LAP}matrix:\n  middleware: [dds, zenoh-peer]\n"
    )
    proc = cluster.campaign(campaign, [*NO_INVALID_RERUN, "--out", str(tmp_path / "runs")])
    _wait_streaming(cluster, ["a"], proc)  # killed as soon as its trial runs; b runs the other
    (lost,) = cluster.streaming_trials("a")
    cluster.kill_worker("a")
    out = _finish(proc)
    assert proc.returncode == 0, out
    home = tmp_path / "runs" / "crash"
    records = [read_trial(d) for d in _trial_dirs(home)]
    assert sorted(r.request.name for r in records) == ["crash-dds-r0", "crash-zenoh-peer-r0"], out
    assert all(r.outcome.end_reason == "completed" for r in records)
    assert {r.outcome.worker["name"] for r in records} == {"b"}
    (zenoh,) = [r for r in records if r.request.transport.middleware == "zenoh-peer"]
    # the twin's default, as on this machine
    assert zenoh.request.transport.settings(ZenohSettings).path == "bridge"
    assert f"{read_trial(lost).request.name}: completed on b (re-run: a lost mid-trial)" in out
    assert lost.name not in {d.name for d in _trial_dirs(home)}  # the cut-off attempt stayed away
    assert not (home / INCOMING).exists()


def test_a_worker_cut_off_mid_trial_costs_only_that_trials_rerun_and_its_late_result_is_dropped(
    cluster, tmp_path
):
    """The cable of the worker running the trial pulled mid-trial: the scheduler gives that worker
    up after its worker TTL and re-runs the trial on the other; the cut one runs its attempt to the
    end meanwhile, and when the cable is back what it sends is dropped (it learns it was given up
    and closes): the trial comes home once, from the other worker."""
    campaign = _campaign_file(tmp_path, "cut", f"base:\n{ONE_LAP}matrix:\n  middleware: [dds]\n")
    proc = cluster.campaign(campaign, [*NO_INVALID_RERUN, "--out", str(tmp_path / "runs")])
    _wait_until(lambda: any(cluster.streaming_trials(n) for n in ("a", "b")), "no trial streamed", proc)
    (cut_off,) = [n for n in ("a", "b") if cluster.streaming_trials(n)]
    other = "b" if cut_off == "a" else "a"
    (lost,) = cluster.streaming_trials(cut_off)
    cluster.cut_link(cut_off)
    try:
        # given up within two TTLs (the scheduler checks once a TTL), then the trial's start to its stream
        rerun_s = 2 * WORKER_TTL_S + START_TO_STREAM_S
        _wait_until(
            lambda: "cut-dds-r0" in _streaming_names(cluster, other),
            f"not re-run on {other} within {rerun_s} s",
            proc,
            rerun_s,
        )
        _wait_until(lambda: not lost.exists(), f"{cut_off}'s attempt did not end", proc)  # its result waits
    finally:
        cluster.cut_link(cut_off, cut=False)
    out = _finish(proc)
    assert proc.returncode == 0, out
    home = tmp_path / "runs" / "cut"
    (record,) = [read_trial(d) for d in _trial_dirs(home)]
    assert record.outcome.end_reason == "completed" and record.outcome.worker["name"] == other, out
    assert out.count("cut-dds-r0: completed") == 1, out
    assert f"cut-dds-r0: completed on {other} (re-run: {cut_off} lost mid-trial)" in out
    assert lost.name not in {d.name for d in _trial_dirs(home)}
    assert not (home / INCOMING).exists()
    _wait_until(lambda: not cluster.alive(cut_off), f"{cut_off}, given up, did not close once back", None, 60)


def test_an_invalid_trial_is_re_run_on_a_worker_and_both_records_are_kept(cluster, tmp_path):
    """As with --rerun-invalid on one machine: the re-run's record joins the first one's, both
    compared, and the verdict counts the re-run."""
    campaign = _campaign_file(tmp_path, "judged-invalid", f"base:\n  network: loopback\n{ONE_LAP}")
    proc = cluster.campaign(campaign, ["--rerun-invalid", "1", "--out", str(tmp_path / "runs")])
    out = _finish(proc)
    assert proc.returncode == 0, out
    home = tmp_path / "runs" / "judged-invalid"
    records = [read_trial(d) for d in _trial_dirs(home)]
    assert [r.request.name for r in records] == ["judged-invalid-r0"] * 2, out
    assert all(
        r.outcome.end_reason == "completed" and r.outcome.worker["name"] in ("a", "b") for r in records
    )
    assert "re-running 1 invalid trial(s) on any worker" in out
    assert out.count("judged-invalid-r0: completed on ") == 2, out
    assert "lost mid-trial" not in out  # a re-run of an invalid trial is not a lost worker's
    assert "verdict: NOT VALID for judged-invalid-r0 (1 re-run(s) of invalid trials)" in out
    assert "judged invalid by the test cluster's worker" in out
    assert "| 2 (2 invalid) |" in (home / "compare" / "compare.md").read_text()  # both compared


def test_ctrl_c_stops_every_running_trial_on_every_worker_with_its_stop_burst(cluster, tmp_path):
    campaign = _campaign_file(
        tmp_path, "halt", "matrix:\n  middleware: [dds, zenoh-peer, mqtt-local-broker]\n"
    )
    proc = cluster.campaign(campaign, ["--quick", "--out", str(tmp_path / "runs")])
    _wait_streaming(cluster, ["a", "b"], proc)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    out = _finish(proc, 180)
    assert proc.returncode == 130, out
    assert "stopping every trial on every worker" in out
    home = tmp_path / "runs" / "halt"
    records = {d: read_trial(d) for d in _trial_dirs(home)}
    assert {r.outcome.worker["name"] for r in records.values()} == {"a", "b"}, out
    for trial_dir, record in records.items():
        assert record.outcome.end_reason == "interrupted", out
        receipts = read_bag(trial_dir / "robot").messages(RECEIPTS_TOPIC)
        assert any(m.seq >= QUICK_PLAN.n_ticks() for _, m in receipts), "no stop burst reached the robot"
        assert receipts[-1][1].twist.linear.x == 0 and receipts[-1][1].twist.angular.z == 0
    (left,) = {"halt-dds-r0", "halt-zenoh-peer-r0", "halt-mqtt-local-broker-r0"} - {
        r.request.name for r in records.values()
    }
    assert f"not run (interrupted by the user (Ctrl-C)): {left}" in out
    assert all(cluster.alive(name) for name in cluster.specs)  # the workers stay up for the next campaign


def test_a_lost_scheduler_keeps_what_came_home_and_each_worker_stops_its_trial(cluster, tmp_path):
    """The scheduler killed while a long trial runs on one worker and a short one has come home:
    the campaign says so in one line and keeps the short one; the worker stops the long one with
    the host's stop burst and keeps it, its result having no one to go to."""
    long_laps = 8
    campaign = _campaign_file(
        tmp_path,
        "orphan",
        f"base:\n{ONE_LAP}matrix:\n  plan.laps: [{long_laps}, 1]\norder: grouped\n",
    )
    proc = cluster.campaign(campaign, ["--out", str(tmp_path / "runs")])
    home = tmp_path / "runs" / "orphan"
    _wait_until(
        lambda: home.is_dir() and len(_trial_dirs(home)) == 1, "the short trial did not come home", proc
    )
    (runner,) = [n for n in ("a", "b") if cluster.streaming_trials(n)]
    cluster.kill_scheduler()
    out = _finish(proc, 120)
    assert proc.returncode == 1, out
    (short,) = [read_trial(d) for d in _trial_dirs(home)]
    assert short.request.plan.laps == 1 and short.outcome.end_reason == "completed"
    (lost_line,) = [line for line in out.splitlines() if "the scheduler at" in line]
    assert "was lost: the 1 trial(s) that came home are kept" in lost_line, out
    assert "not run (the scheduler was lost): " in out
    _wait_until(lambda: not cluster.alive(runner), f"{runner} did not close without its scheduler", None, 90)
    # (an earlier test's cut worker may have kept its own attempt there too)
    (kept,) = [d for d in cluster.unshipped_trials(runner) if read_trial(d).request.name.startswith("orphan")]
    record = read_trial(kept)
    assert record.request.plan.laps == long_laps
    assert (record.outcome.end_reason, record.outcome.end_detail) == ("interrupted", SCHEDULER_LOST)
    receipts = read_bag(kept / "robot").messages(RECEIPTS_TOPIC)
    assert any(m.seq >= record.request.plan.n_ticks() for _, m in receipts), "no stop burst reached the robot"
    assert receipts[-1][1].twist.linear.x == 0 and receipts[-1][1].twist.angular.z == 0
    assert f"{record.request.name} (interrupted) not shipped" in cluster.log(runner).read_text()
