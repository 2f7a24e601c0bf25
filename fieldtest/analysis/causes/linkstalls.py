"""Which commands carry a trial's link drift: segment changes that arrived in a stall.

The robot holds each command until the next arrives, so of a stream of equal commands only the
first of each segment (a turn's start, a side's start, the stop) sets when the motion changes. A
stall of the link (a lost datagram or segment repaired while every later command waits behind it,
as reliable DDS and TCP both deliver in order) moves the motion only where it holds a segment
change: a turn started 0.3 s late at 30 deg/s turns 9 deg short. ``segment_changes`` names the
changes that arrived more than ``STALL_EXCESS_S`` after the trial's median latency and replays the
model with them at the median; ``phase_spread`` replays the trial's own latencies shifted against
the plan, the drift the same link gives wherever its stalls fall. Formulas and figures:
docs/analysis.md, "Drift split into causes".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fieldtest.analysis.metrics.schema import PhaseSpread, SegmentChanges, StalledChange

# A command this much later than the trial's median latency arrived in a stall: two command
# periods at 20 Hz, 3 deg of a 30 deg/s turn, 33 mm of a 0.33 m/s side; above a link's jitter.
STALL_EXCESS_S = 0.1
PHASE_SHIFTS = 20  # replays of the shifted latencies (each one replay of the whole run)

Replay = Callable[[np.ndarray, np.ndarray, np.ndarray], float | None]  # (times, linear, angular) -> drift m


@dataclass(frozen=True)
class Arrivals:
    """First arrival of every numbered command, in seq order; stream seconds on the host clock."""

    seq: np.ndarray
    sent_s: np.ndarray
    arrival_s: np.ndarray
    linear: np.ndarray
    angular: np.ndarray

    @property
    def latency_s(self) -> np.ndarray:
        latency: np.ndarray = self.arrival_s - self.sent_s
        return latency


def in_delivery_order(arrival_s: np.ndarray, delivered_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(arrival s made non-decreasing in delivery order, that order) of commands whose arrival times
    were rebuilt as a send time plus a latency (NaN = never).

    ``delivered_s`` is when the link delivered each command's latency sample, ties in send order. A
    backlog released at one instant has equal delivery times, but its latencies were measured from
    send times that stray from the ticks by the host's jitter (~0.1 ms): sorted by the rebuilt times
    alone, that jitter reorders the burst and applies a stale command last."""
    order = np.lexsort((np.arange(len(arrival_s)), delivered_s))  # NaN (lost) last
    arrival = np.array(arrival_s, float)
    arrived = order[np.isfinite(arrival[order])]
    arrival[arrived] = np.maximum.accumulate(arrival[arrived])
    return arrival, order


def segment_starts(arrivals: Arrivals) -> np.ndarray:
    """Indices of the commands that change the motion: the first moving one and every later change."""
    v, w = arrivals.linear, arrivals.angular
    changed = np.r_[bool(v[:1].any() or w[:1].any()), (np.diff(v) != 0) | (np.diff(w) != 0)]
    return np.flatnonzero(changed)


def _kind(linear: float, angular: float) -> str:
    return "turn" if angular != 0 else ("side" if linear != 0 else "stop")


def segment_changes(arrivals: Arrivals, replay: Replay) -> SegmentChanges:
    """The segment changes, those that arrived in a stall, and the drift with them on time."""
    latency = arrivals.latency_s
    median = float(np.median(latency))
    starts = segment_starts(arrivals)
    ends = np.r_[starts[1:], len(latency)]
    # a change takes effect when the first command of its segment arrives (any, if reordered)
    took_effect = np.array([arrivals.arrival_s[a:b].min() for a, b in zip(starts, ends, strict=True)])
    excess = took_effect - arrivals.sent_s[starts] - median
    stalled = starts[excess > STALL_EXCESS_S]
    return SegmentChanges(
        count=int(len(starts)),
        median_latency_ms=median * 1e3,
        stall_excess_ms=STALL_EXCESS_S * 1e3,
        stalled_commands_fraction=float(np.mean(latency > median + STALL_EXCESS_S)),
        stalled=[
            StalledChange(
                seq=int(arrivals.seq[i]),
                kind=_kind(arrivals.linear[i], arrivals.angular[i]),
                excess_ms=float(e * 1e3),
            )
            for i, e in zip(starts, excess, strict=True)
            if e > STALL_EXCESS_S
        ],
        drift_if_on_time_m=replay(*_with_changes_on_time(arrivals, stalled, ends, median)),
    )


def _with_changes_on_time(
    arrivals: Arrivals, stalled: np.ndarray, ends: np.ndarray, median_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The arrival timeline without the stalls that held a segment change: the change and the
    commands of its segment held with it arrive at their send time plus the median latency, and
    the previous segment's commands that would then arrive after the change are dropped."""
    times = arrivals.arrival_s.copy()
    late = arrivals.latency_s > median_s + STALL_EXCESS_S
    keep = np.ones(len(times), dtype=bool)
    for i in stalled:
        segment = np.arange(i, ends[np.searchsorted(ends, i, side="right")])
        held = segment[late[segment] | (segment == i)]
        times[held] = arrivals.sent_s[held] + median_s
        keep[:i] &= times[:i] <= times[i]
    return times[keep], arrivals.linear[keep], arrivals.angular[keep]


def phase_spread(
    arrivals: Arrivals, n_ticks: int, tick_s: float, replay: Replay, shifts: int = PHASE_SHIFTS
) -> PhaseSpread | None:
    """Drift of the arrival replay with the plan ticks' latencies shifted cyclically by ``shifts``
    equally spaced offsets: the same link's stalls falling on other phases of the plan, delivered in
    the order the link delivered them (a released backlog stays in send order)."""
    ticks = arrivals.seq < n_ticks
    if ticks.sum() < 2:
        return None
    latency = arrivals.latency_s
    drifts = []
    for k in np.linspace(0, ticks.sum(), shifts, endpoint=False).astype(int):
        shifted, delivered = latency.copy(), arrivals.arrival_s.copy()
        shifted[ticks] = np.roll(latency[ticks], -k)
        # the source's delivery moved by the plan's own offset between the two ticks (no jitter)
        source_seq = np.roll(arrivals.seq[ticks], -k)
        delivered[ticks] = (
            np.roll(arrivals.arrival_s[ticks], -k) - (source_seq - arrivals.seq[ticks]) * tick_s
        )
        times, order = in_delivery_order(arrivals.sent_s + shifted, delivered)
        drift = replay(times[order], arrivals.linear[order], arrivals.angular[order])
        if drift is not None:
            drifts.append(drift)
    if not drifts:
        return None
    return PhaseSpread(
        shifts=len(drifts),
        median_m=float(np.median(drifts)),
        p10_m=float(np.percentile(drifts, 10)),
        p90_m=float(np.percentile(drifts, 90)),
    )
