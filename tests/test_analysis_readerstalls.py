"""A lost command is put down to the reader's own stall only where its KEEP_LAST history filled
while it took nothing: the command ``depth`` after the span had arrived by the reader's next take.
A reader that drops commands while taking the rest at once, a record without take times, a KEEP_ALL
history or a span with no take after it explain nothing."""

from __future__ import annotations

import numpy as np
import pytest

from fieldtest.analysis import analyze_trial
from fieldtest.analysis.metrics.readerstalls import history_room_ms, lost_to_reader_stalls
from fieldtest.analysis.metrics.schema import read_metrics
from fieldtest.analysis.metrics.summarystats import spans
from fieldtest.analysis.rendering.report import report_lines
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize

PERIOD_NS = 50_000_000  # 20 Hz
DEPTH = 10
TAKE_NS = 200_000  # a prompt reader's take, after the arrival


def _reader(n: int, lost: set[int], stall_end_ns: dict[int, int] | None = None):
    """(seq, received, taken) of a reader of n commands at 20 Hz that never took ``lost``; the seqs
    in ``stall_end_ns`` it took at that time instead of promptly."""
    seq = np.array([s for s in range(n) if s not in lost], dtype=np.int64)
    received = seq * PERIOD_NS
    taken = np.array(
        [(stall_end_ns or {}).get(int(s), int(r) + TAKE_NS) for s, r in zip(seq, received, strict=True)]
    )
    return seq, received, taken


def _stalled_after(last_taken: int, lost: int, extra_ns: int = TAKE_NS) -> tuple[set[int], dict[int, int]]:
    """A reader that took nothing after ``last_taken`` until the command ``DEPTH`` after its
    ``lost`` overwritten ones had arrived (plus ``extra_ns``), then took the history at once."""
    first_kept = last_taken + 1 + lost
    end_ns = (first_kept + DEPTH - 1) * PERIOD_NS + extra_ns
    return set(range(last_taken + 1, first_kept)), {
        s: end_ns + s for s in range(first_kept, first_kept + DEPTH)
    }


def test_a_stall_longer_than_the_history_explains_what_it_overwrote():
    lost, stall = _stalled_after(29, 5)
    reader = _reader(200, lost, stall)
    assert lost_to_reader_stalls(spans(sorted(lost)), *reader, DEPTH) == [[30, 34]]
    assert history_room_ms([30, 34], *reader, DEPTH) == pytest.approx(-(TAKE_NS + 35) / 1e6)


def test_a_reader_that_took_before_its_history_filled_explains_nothing():
    """The take after the span one microsecond before the command DEPTH on arrived: room for it."""
    lost, stall = _stalled_after(29, 5, extra_ns=-1000 - 35)
    reader = _reader(200, lost, stall)
    assert lost_to_reader_stalls(spans(sorted(lost)), *reader, DEPTH) == []
    assert history_room_ms([30, 34], *reader, DEPTH) == pytest.approx(0.001)


def test_a_reader_that_drops_every_50th_command_explains_none_of_them():
    lost = set(range(49, 400, 50))
    reader = _reader(400, lost)
    assert len(lost) == 8 and lost_to_reader_stalls(spans(sorted(lost)), *reader, DEPTH) == []


def test_takes_logged_on_arrival_a_keep_all_history_or_nothing_taken_after_explain_nothing():
    lost, stall = _stalled_after(29, 5)
    seq, received, taken = _reader(200, lost, stall)
    assert lost_to_reader_stalls([[30, 34]], seq, received, received, DEPTH) == []  # older records
    assert lost_to_reader_stalls([[30, 34]], seq, received, taken, None) == []
    seq, received, taken = _reader(30, set())
    assert lost_to_reader_stalls([[30, 34]], seq, received, taken, DEPTH) == []
    assert history_room_ms([30, 34], seq, received, taken, DEPTH) is None


def test_the_analysis_reports_the_robot_readers_own_stalls(tmp_path):
    """The robot bag's take times (the receipts' log times) against their arrivals: five commands
    overwritten while the receiver stalled are the robot's, a sixth lost on the link is not."""
    plan = SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=1, start_delay_s=0.5)
    period_s = 1.0 / plan.command_rate_hz
    # 35..44 waited in the history until 44 arrived, then were taken at once
    late = {35 + i: (DEPTH - 1 - i) * period_s + 0.001 for i in range(DEPTH)}
    spec = SynthSpec(plan=plan, lost_seqs=(30, 31, 32, 33, 34, 70), taken_late_of=late)
    synthesize(tmp_path / "trial", spec)
    latency = analyze_trial(tmp_path / "trial", plots=False).latency
    assert latency.lost == 6 and latency.lost_to_reader_stalls == 5
    assert latency.lost_to_reader_stalls_spans == [(30, 34)]
    lines = report_lines(read_metrics(tmp_path / "trial" / "analysis" / "metrics.json"))
    assert any(
        "5 of the 6 lost commands were overwritten in the robot's own reader" in line for line in lines
    )
