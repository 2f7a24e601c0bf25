"""What a link trace does to the square: the Create 3 model driven by the plan's commands at the
times the trace would deliver them (docs/analysis.md, "Predicting drift from a link trace").

Each plan command (tick ``k`` at ``k / rate``, and the stop one tick after the motion) takes the
trace sample nearest its send time: it arrives that sample's latency later, or never if the sample
was lost. The nominal model (``fieldtest.twin.create3model``, as the drift-by-cause replay uses it)
drives that timeline; the lap drift, the closing error and the watchdog stops come from its path.

The envelope searches synthetic traces for the largest single outage and the largest p99 latency
that keep the lap drift under a bound for the plan (``envelope``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fieldtest.analysis.causes.lapreplay import lap_displacement
from fieldtest.analysis.causes.linkstalls import in_delivery_order
from fieldtest.analysis.prediction.linktrace import LinkTrace
from fieldtest.plan import SquarePlan
from fieldtest.twin.create3model import Create3Model, SafetyOverride, drive

SETTLE_S = 3.0  # after the last arrival: the base has stopped (watchdog 0.5 s plus the ramp down)
OUTAGE_STEP_S = 0.1  # the outage envelope's grid, refined by bisection to ENVELOPE_RESOLUTION
P99_STEP_S = 0.05
ENVELOPE_RESOLUTION_S = 0.005
ENVELOPE_MAX_S = 5.0
JITTER_SEEDS = (1, 2, 3)
# The search integrates in pieces of up to 50 ms (commands split them at every tick anyway): within
# 1 um of the 5 ms default on the kit's plans, and several times faster.
SEARCH_SUBSTEP_S = 0.05
# Where a single outage starts, as fractions of its length before each segment boundary: the worst
# cases straddle a boundary (the change arrives late); 1.0 ends it exactly on the boundary.
OUTAGE_PHASES = (0.0, 0.25, 0.5, 0.75, 1.0)


def plan_commands(plan: SquarePlan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(send s, linear, angular) of the plan's ticks plus the stop at the first tick after motion,
    as the drift-by-cause replay's plan timeline."""
    sched = plan.schedule()
    return (
        np.append(sched.t_s, plan.n_ticks() * plan.tick_s),
        np.append(sched.linear_mps, 0.0),
        np.append(sched.angular_rps, 0.0),
    )


def _nearest_samples(trace: LinkTrace, t_s: np.ndarray, offset_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Index of the trace sample nearest each time ``t_s + offset_s`` and that sample's send time (a
    trace shorter than the times repeats from its start, so a repeat's send time runs on)."""
    q = np.asarray(t_s, float) + offset_s
    step = float(np.median(np.diff(trace.t_s))) if len(trace.t_s) > 1 else 1.0
    period = float(trace.t_s[-1] - trace.t_s[0]) + step
    repeats = np.floor((q - trace.t_s[0]) / period)
    q = trace.t_s[0] + (q - trace.t_s[0]) - repeats * period
    mids = (trace.t_s[1:] + trace.t_s[:-1]) / 2
    index = np.searchsorted(mids, q, side="left")
    return index, trace.t_s[index] + repeats * period


def trace_latency_at(trace: LinkTrace, t_s: np.ndarray, offset_s: float = 0.0) -> np.ndarray:
    """Latency (NaN = lost) of the trace sample nearest each time ``t_s + offset_s``; a trace shorter
    than the times repeats from its start."""
    index, _ = _nearest_samples(trace, t_s, offset_s)
    latency: np.ndarray = trace.latency_s[index]
    return latency


def trace_arrivals(trace: LinkTrace, t_s: np.ndarray, offset_s: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(arrival s, NaN = never; the order of arrival) of commands sent at ``t_s``, each delayed by
    its nearest trace sample's latency, in the order those samples arrived (``in_delivery_order``)."""
    index, sample_sent_s = _nearest_samples(trace, t_s, offset_s)
    latency = trace.latency_s[index]
    return in_delivery_order(np.asarray(t_s, float) + latency, sample_sent_s + latency)


def replay(
    plan: SquarePlan,
    arrival_s: np.ndarray,
    linear: np.ndarray,
    angular: np.ndarray,
    safety_override: SafetyOverride = "full",
) -> dict:
    """The model driven by commands at ``arrival_s`` (NaN = never arrives): drift, closing, stops."""
    got = np.isfinite(arrival_s)
    t, v, w = arrival_s[got], linear[got], angular[got]
    last_lap = plan.laps
    disp = lap_displacement(t, v, w, plan, last_lap, safety_override) if last_lap >= 2 else None
    model = Create3Model(safety_override)
    end_s = float(np.max(t)) + SETTLE_S if len(t) else 0.0
    path_t = np.arange(0.0, end_s, 0.01)
    poses = drive(model, t, v, w, np.append(path_t, end_s))
    end = poses[-1]
    trips = [_where(plan, trip, t) for trip in model.watchdog_trips]
    out = {
        "commands": int(len(arrival_s)),
        "commands_lost": int(np.count_nonzero(~got)),
        "watchdog_stops": len(trips),
        "watchdog_stop_at": trips,
        "path_length_m": float(np.sum(np.linalg.norm(np.diff(poses[:, :2], axis=0), axis=1))),
        "end_pose": [float(end[0]), float(end[1]), float(end[2])],
        "closing_m": float(np.hypot(end[0], end[1])),
        "closing_heading_deg": math.degrees(math.remainder(float(end[2]), math.tau)),
    }
    if disp is None:
        out.update(drift_available=False, drift_reason=f"needs two laps, the plan has {plan.laps}")
        return out
    norms = np.linalg.norm(disp, axis=1)
    out.update(
        drift_available=True,
        last_lap=last_lap,
        drift_mean_m=float(norms.mean()),
        drift_max_m=float(norms.max()),
        drift_at_lap_end_m=float(norms[-1]),
    )
    return out


def replay_drift(
    plan: SquarePlan,
    arrival_s: np.ndarray,
    linear: np.ndarray,
    angular: np.ndarray,
    safety_override: SafetyOverride,
) -> float:
    """The lap drift alone (mean over the lap grid, metres), as the envelope search needs it."""
    got = np.isfinite(arrival_s)
    disp = lap_displacement(
        arrival_s[got],
        linear[got],
        angular[got],
        plan,
        plan.laps,
        safety_override,
        max_substep_s=SEARCH_SUBSTEP_S,
    )
    return math.inf if disp is None else float(np.linalg.norm(disp, axis=1).mean())


def _where(plan: SquarePlan, trip_s: float, arrivals: np.ndarray) -> dict:
    """A watchdog stop: model time, and the lap and segment of the plan at that time (counted from
    the first arrival, as the base sees the plan)."""
    first = float(arrivals[0]) if len(arrivals) else 0.0
    stream_s = trip_s - first
    for seg in plan.segments():
        if seg.start_s <= stream_s < seg.end_s:
            return {"t_s": trip_s, "lap": seg.lap + 1, "segment": f"{seg.kind} {seg.index + 1}"}
    return {"t_s": trip_s, "lap": None, "segment": "after the run"}


def predict(
    plan: SquarePlan, trace: LinkTrace, offset_s: float = 0.0, safety_override: SafetyOverride = "full"
) -> dict:
    """The prediction for ``trace`` beside the ideal link's (the plan's own timing)."""
    t, v, w = plan_commands(plan)
    arrival, order = trace_arrivals(trace, t, offset_s)
    link = replay(plan, arrival[order], v[order], w[order], safety_override)
    ideal = replay(plan, t.copy(), v, w, safety_override)
    d = np.array(link["end_pose"][:2]) - np.array(ideal["end_pose"][:2])
    link["closing_added_m"] = float(np.hypot(*d))
    link["travel_lost_m"] = ideal["path_length_m"] - link["path_length_m"]
    return {"trace": trace.summary(), "offset_s": offset_s, "predicted": link, "ideal_link": ideal}


# Envelope ----------------------------------------------------------------------------------------
def two_lap(plan: SquarePlan) -> SquarePlan:
    """The plan with two laps: the envelope compares one disturbed lap with a clean first lap."""
    return plan.model_copy(update={"laps": 2})


def outage_drift(
    plan: SquarePlan, outage_s: float, base_latency_s: float = 0.0, safety_override: SafetyOverride = "full"
) -> tuple[float, float]:
    """Worst lap drift (mean over the lap, metres) of one outage of ``outage_s`` placed in the second
    lap across every segment boundary (``OUTAGE_PHASES``); returns (drift, start phase s)."""
    plan2 = two_lap(plan)
    t, v, w = plan_commands(plan2)
    worst, where = 0.0, 0.0
    boundaries = [s.start_s for s in plan2.segments() if s.lap == 1] + [plan2.total_s]
    starts = sorted({b - f * outage_s for b in boundaries[:-1] for f in OUTAGE_PHASES})
    for start in starts:
        arrival = t + base_latency_s
        arrival[(t >= start - 1e-9) & (t < start + outage_s - 1e-9)] = np.nan
        drift = replay_drift(plan2, arrival, v, w, safety_override)
        if drift > worst:
            worst, where = drift, start - plan2.lap_start_s(1)
    return worst, where


def jitter_latency(n: int, p99_s: float, base_s: float, seed: int) -> np.ndarray:
    """Per-command latency: ``base_s`` plus exponential jitter scaled so the 99th percentile of the
    distribution is ``p99_s`` (exponential: p99 = base + scale * ln 100)."""
    scale = max(p99_s - base_s, 0.0) / math.log(100.0)
    return base_s + np.random.default_rng(seed).exponential(scale, n) if scale else np.full(n, base_s)


def jitter_drift(
    plan: SquarePlan, p99_s: float, base_latency_s: float = 0.0, safety_override: SafetyOverride = "full"
) -> float:
    """Worst lap drift over ``JITTER_SEEDS`` of i.i.d. exponential jitter with that p99."""
    plan2 = two_lap(plan)
    t, v, w = plan_commands(plan2)
    worst = 0.0
    for seed in JITTER_SEEDS:
        arrival = t + jitter_latency(len(t), p99_s, base_latency_s, seed)
        worst = max(worst, replay_drift(plan2, arrival, v, w, safety_override))
    return worst


def _largest_under(
    f: Callable[[float], float], bound_m: float, step_s: float, lo_s: float
) -> tuple[float | None, list[tuple[float, float]]]:
    """Scan ``f`` upward from ``lo_s`` in ``step_s`` until it exceeds the bound, then bisect; returns
    the largest x with f(x) <= bound (None if even ``lo_s`` exceeds it) and the scanned curve."""
    curve = []
    x, good = lo_s, None
    while x <= ENVELOPE_MAX_S + 1e-9:
        y = f(x)
        curve.append((x, y))
        if y > bound_m:
            break
        good, x = x, x + step_s
    else:
        return good, curve
    if good is None:
        return None, curve
    bad = x
    while bad - good > ENVELOPE_RESOLUTION_S:
        mid = (good + bad) / 2
        y = f(mid)
        curve.append((mid, y))
        good, bad = (mid, bad) if y <= bound_m else (good, mid)
    return good, sorted(curve)


def envelope(
    plan: SquarePlan, bound_m: float, base_latency_s: float = 0.0, safety_override: SafetyOverride = "full"
) -> dict:
    """The largest single outage and the largest p99 latency that keep the lap drift under ``bound_m``."""
    outage, outage_curve = _largest_under(
        lambda d: outage_drift(plan, d, base_latency_s, safety_override)[0], bound_m, OUTAGE_STEP_S, 0.0
    )
    p99, p99_curve = _largest_under(
        lambda p: jitter_drift(plan, p, base_latency_s, safety_override), bound_m, P99_STEP_S, base_latency_s
    )
    return {
        "bound_m": bound_m,
        "base_latency_s": base_latency_s,
        "max_outage_s": outage,
        "max_p99_latency_s": p99,
        "searched_up_to_s": ENVELOPE_MAX_S,
        "resolution_s": ENVELOPE_RESOLUTION_S,
        "outage_curve": [{"outage_s": x, "drift_m": y} for x, y in outage_curve],
        "p99_curve": [{"p99_latency_s": x, "drift_m": y} for x, y in p99_curve],
    }
