"""The emulated link's own lateness in a real twin trial: the userspace forwarders (linkfwd) of the
4g link are paused now and then while the square streams, as a busy machine would hold them off
their core. Frames waiting out the link's delay in a forwarder then leave late, which the robot
would read as the middleware's latency: the trial records each forwarder's lateness per node and
direction, counted from the stream's start, and the stack check calls the trial invalid, naming the
link emulator. (Frames that reach a forwarder while it is held are stamped when it reads them:
that part of its lateness is not seen, docs/analysis.md.)"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from fieldtest.analysis.causes.stackfaults import LINK_FORWARDER_LATE_BOUND_MS
from fieldtest.analysis.metrics.schema import read_metrics
from fieldtest.analysis.pipeline import analyze_trial
from fieldtest.netem.forwarder import build_forwarder
from fieldtest.plan import SquarePlan
from fieldtest.record import TrialRequest, read_trial
from fieldtest.runner import run_twin_trial
from fieldtest.testkit import needs

PAUSE_S = 0.06  # each pause: 30 times the bound, so the frames queued behind it are late beyond it
EVERY_S = 0.5  # 12 % of the time paused: far more than 1 % of the frames are held


def _forwarders() -> list[int]:
    """This process's linkfwd children (the trial's own links, not another test's)."""
    name = build_forwarder().name[:15]
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
            if comm == name and int(rest[1]) == os.getpid():
                pids.append(int(entry.name))
    return pids


def _pause_forwarders(done: threading.Event) -> None:
    while not done.wait(EVERY_S):
        pids = _forwarders()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(PAUSE_S)
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def _trial(tmp_path: Path, pause: bool):
    needs.netns()
    request = TrialRequest(
        name="forwarder-paused" if pause else "forwarder",
        plan=SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=1, start_delay_s=0.5),
        network="4g",  # frames wait 25-35 ms in the forwarder: a pause holds some back
        transport={"middleware": "zenoh-peer"},
    )
    done = threading.Event()
    pauser = threading.Thread(target=_pause_forwarders, args=(done,), daemon=True)
    if pause:
        pauser.start()
    try:
        result = run_twin_trial(request, tmp_path)
    finally:
        done.set()
        if pause:
            pauser.join()
            for pid in _forwarders():
                os.kill(pid, signal.SIGCONT)
    assert result.end_reason == "completed", result.detail
    analyze_trial(result.trial_dir, plots=False)
    return result.trial_dir


def test_a_trial_records_its_link_forwarders_frames_and_lateness_per_node(tmp_path):
    trial = _trial(tmp_path, pause=False)
    recorded = read_trial(trial).outcome.stack["link_forwarder"]
    assert {"robot", "host"} <= set(recorded), recorded
    robot = recorded["robot"]
    # the stream's commands went down to the robot and its link-monitor traffic up: both counted
    assert robot["b2a"]["tx"] > 0 and robot["a2b"]["tx"] > 0, robot
    stack = read_metrics(trial / "analysis" / "metrics.json").stack
    assert stack.link_forwarder["robot"]["b2a"]["frames"] == robot["b2a"]["tx"]
    assert "| link emulator, robot downlink" in (trial / "analysis" / "report.md").read_text()


def test_a_paused_link_forwarder_makes_the_trial_invalid_and_says_so(tmp_path):
    trial = _trial(tmp_path, pause=True)
    stack = read_metrics(trial / "analysis" / "metrics.json").stack
    worst = max(
        figures["late_p99_ms"]
        for node, directions in stack.link_forwarder.items()
        if isinstance(directions, dict)
        for figures in directions.values()
    )
    assert worst > LINK_FORWARDER_LATE_BOUND_MS, stack.link_forwarder
    assert stack.valid is False
    assert any(reason.startswith("the link emulator sent frames late") for reason in stack.invalid_reasons), (
        stack.invalid_reasons
    )
