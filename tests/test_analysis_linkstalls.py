"""Link stalls and the segment changes they hold (drift_causes.segment_changes, phase_spread).

Synthetic trials whose robot is the Create 3 model driven at the commands' arrival times, with a
stall as an in-order link gives it (a lost datagram or segment repaired while every later command
waits): the first held command arrives ``stall`` late, the ones behind it together with it. A
stall that holds a turn's or a side's start makes lap drift; the same stall inside a segment
makes none (shorter than the base's 0.5 s watchdog). The analysis must name the held change and
replay the drift without it.
"""

import numpy as np
import pytest

from fieldtest.analysis import analyze_trial
from fieldtest.analysis.causes.linkstalls import STALL_EXCESS_S
from fieldtest.analysis.metrics.schema import as_json
from fieldtest.analysis.pipeline import compare_trials
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize

PLAN = SquarePlan(side_duration_s=2.0, laps=3, start_delay_s=0.5)
BASE_LATENCY_S = 0.06
# ticks of the plan above (20 Hz): a side starts at 10, 110, 210, ..., a turn at 50, 150, 250, ...
WHERE = {
    "turn start": (150, "turn"),
    "side start": (210, "side"),
    "mid side": (230, None),
    "mid turn": (180, None),
}


def _stall(first_seq: int, stall_s: float) -> dict[int, float]:
    """Latencies of an in-order stall: command ``first_seq`` arrives ``stall_s`` late and every command
    sent while it was held arrives with it."""
    held = int(np.ceil(stall_s / PLAN.tick_s))
    return {first_seq + j: BASE_LATENCY_S + stall_s - j * PLAN.tick_s for j in range(held)}


def _causes(tmp_path, latency_of: dict[int, float], jitter_s: float = 0.0) -> dict:
    spec = SynthSpec(
        plan=PLAN,
        truth_from_commands=True,
        mocap_rate_hz=240.0,
        latency_s=BASE_LATENCY_S,
        latency_jitter_s=jitter_s,
        latency_of=latency_of,
    )
    synthesize(tmp_path / "t", spec)
    metrics = analyze_trial(tmp_path / "t", plots=False)
    return {**as_json(metrics.drift_causes), "received": metrics.latency.one_way_ms.count}


@pytest.mark.parametrize("stall_s", [0.17, 0.42])
@pytest.mark.parametrize("where", list(WHERE))
def test_a_stall_drifts_only_where_it_holds_a_segment_change(tmp_path, where, stall_s):
    seq, kind = WHERE[where]
    causes = _causes(tmp_path, _stall(seq, stall_s))
    changes = causes["segment_changes"]
    link_m = causes["replay_drift_m"]["arrival"]
    print(where, stall_s, link_m, changes)
    assert changes["count"] == 25  # 3 laps of 4 sides and 4 turns, the first side, the stop
    assert changes["stall_excess_ms"] == pytest.approx(STALL_EXCESS_S * 1e3)
    assert changes["stalled_commands_fraction"] == pytest.approx(
        sum(1 for lat in _stall(seq, stall_s).values() if lat > BASE_LATENCY_S + STALL_EXCESS_S)
        / causes["received"]
    )
    if kind is None:
        assert changes["stalled"] == []
        assert link_m < 1e-3
        assert changes["drift_if_on_time_m"] == pytest.approx(link_m, abs=1e-9)
        return
    (held,) = changes["stalled"]
    assert held["seq"] == seq and held["kind"] == kind
    assert held["excess_ms"] == pytest.approx(stall_s * 1e3, abs=0.01)
    # a turn started or ended late by the stall turns the rest of the run by w * stall
    assert link_m > 0.05 * stall_s
    assert changes["drift_if_on_time_m"] < 0.01 * link_m


MID_SEGMENT = (25, 70, 125, 170, 230, 270, 330, 370)  # mid side and mid turn, four of each


def test_the_phase_spread_shows_stalls_that_missed_every_change(tmp_path):
    """Stalls inside segments drift nothing here; shifted against the plan, they hit changes."""
    stalls = {}
    for seq in MID_SEGMENT:
        stalls.update(_stall(seq, 0.3))
    causes = _causes(tmp_path, stalls, jitter_s=0.002)
    spread = causes["phase_spread"]
    recorded = causes["replay_drift_m"]["arrival"]
    print(recorded, spread)
    assert causes["segment_changes"]["stalled"] == []
    assert recorded < 2e-3  # the 2 ms jitter alone
    assert spread["shifts"] == 20
    assert spread["p10_m"] <= spread["median_m"] <= spread["p90_m"]
    assert spread["p90_m"] > 20 * max(recorded, 1e-4)


def test_the_phase_spread_of_a_stall_on_a_turn_start_lies_below_it(tmp_path):
    causes = _causes(tmp_path, _stall(150, 0.42))
    spread = causes["phase_spread"]
    assert spread["median_m"] < 0.5 * causes["replay_drift_m"]["arrival"]


def test_compare_sets_the_held_changes_and_the_shifted_drift_beside_the_drift(tmp_path):
    for name, seq in (("dds-held", 150), ("dds-missed", 230)):
        spec = SynthSpec(
            name=name,
            plan=PLAN,
            truth_from_commands=True,
            mocap_rate_hz=240.0,
            latency_s=BASE_LATENCY_S,
            latency_of=_stall(seq, 0.42),
            network="4g",
            repetition=int(seq),
        )
        synthesize(tmp_path / "runs" / name, spec)
    result = compare_trials([tmp_path / "runs"], tmp_path / "out")
    trials = {t["name"]: t for t in result["trials"]}
    assert trials["dds-held"]["stalled_changes"] == 1 and trials["dds-missed"]["stalled_changes"] == 0
    for t in trials.values():
        assert t["drift_shifted"] > 0
    assert trials["dds-held"]["drift_mean"] > 2 * trials["dds-held"]["drift_shifted"]
    (row,) = result["rows"]
    assert row["metrics"]["stalled_changes"]["max"] == 1
    text = (tmp_path / "out" / "compare.md").read_text()
    assert "changes held by a stall (count)" in text and "drift, latencies shifted (mm)" in text


@pytest.mark.parametrize("stray", ["none", "rising", "falling", "random"])
@pytest.mark.parametrize("seq", [150, 210])  # a stall holding a turn's start, a side's start
def test_the_phase_spread_delivers_an_in_order_links_commands_in_send_order(seq, stray):
    """Each stall's held commands arrive at one instant; their latencies are measured from send
    times that stray ~0.1 ms from the ticks. Shifted against the plan, every replay must still get
    the commands in send order (a burst's last command last), as the link delivered them."""
    from fieldtest.analysis.causes.linkstalls import Arrivals, phase_spread

    sched = PLAN.schedule()
    t = np.append(sched.t_s, PLAN.n_ticks() * PLAN.tick_s)
    ticks = np.arange(len(t))
    send_stray_s = {
        "none": np.zeros(len(ticks)),
        "rising": ticks % 4 * 5e-5,
        "falling": -(ticks % 4) * 5e-5,
        "random": np.random.default_rng(3).uniform(-1e-4, 1e-4, len(ticks)),
    }[stray]
    sent = t + send_stray_s
    arrival = sent + BASE_LATENCY_S
    for first in (seq, *MID_SEGMENT):
        held = list(_stall(first, 0.28))  # released 20 ms before the next command arrives
        arrival[held] = t[first] + BASE_LATENCY_S + 0.28  # a burst's delivery: one instant
    # each command's own number in its linear speed, so the replay can see the order it gets
    arrivals = Arrivals(seq=ticks, sent_s=sent, arrival_s=arrival, linear=ticks.astype(float), angular=0 * t)
    replays = []

    def replay(times, linear, angular):
        applied = linear[np.argsort(times, kind="stable")]  # the model's order (lap_displacement)
        replays.append(applied)
        return 0.0

    assert phase_spread(arrivals, PLAN.n_ticks(), PLAN.tick_s, replay).shifts == 20
    for applied in replays:
        assert sorted(applied) == list(applied)
