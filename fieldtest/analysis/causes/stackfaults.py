"""The stack's own timing faults, apart from the link, and whether a trial is valid.

Inputs: the host bag (send times against the plan), the robot bag (arrival times), the drift split
into causes (fieldtest.analysis.causes.attribution) and what the trial's processes recorded in
``outcome.stack`` (machine monitor, robot receive-to-apply and physics steps, mocap emulator).
Definitions and bounds: docs/analysis.md, "Stack faults and the machine".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fieldtest.analysis.loading.trialdata import TrialData
from fieldtest.analysis.metrics.latency import ClockModel
from fieldtest.analysis.metrics.schema import DriftCauses, LatenessSummary, Stack, TimingError
from fieldtest.machine import lateness_summary

# A trial is invalid when the machine running the stack explains more lap drift than this (the
# loopback stack target, fieldtest.runner.STACK_DRIFT_LIMIT_M) ...
STACK_DRIFT_BOUND_M = 0.001
# ... or when the mocap emulator could not send this share of its frames on time (the ground
# truth then has holes that are the machine's, not the lab's)
MOCAP_SKIPPED_BOUND = 0.01
# The hypervisor's share of CPU time (steal) over the trial or in its worst half second beyond these
# is a caution, not a reason: what its pauses did to the trial's motion is in the stack drift
# (host send times and arrival times replayed), judged by its own bound above; trials with more
# steal had larger stack drift (docs/benchmarks.md), which that bound then catches. Its pauses may
# still sit in the trial's latency tails (p99, max), so the report says so beside them.
STEAL_BOUND_PCT = 2.0
STEAL_BURST_BOUND_PCT = 20.0
# ... or when a simulated link (the ns-3 802.11 model) fell behind real time: its lag adds to the
# delay of every frame in flight. The bound applies to the 99th percentile of its lag samples (one
# per simulated millisecond and one per frame): behind by more than this for over 1 % of the time.
# It is the profile's ``lag_bound_ms``; this default is the order of the 802.11 link's own one-way
# delay near the access point (docs/networks.md)
LINK_LAG_BOUND_MS = 2.0
# ... or when the userspace link forwarder (fieldtest/netem/linkfwd.c, the emulated wired, wifi and
# 4g links) sent frames late: its lateness adds to every frame's delay as a simulator's lag does and
# would be read as the middleware's latency. Same bound, on the 99th percentile of its frames'
# lateness over the stream, per node and direction.
LINK_FORWARDER_LATE_BOUND_MS = LINK_LAG_BOUND_MS


def _timing_errors(data: TrialData, clock: ClockModel) -> dict[str, np.ndarray] | None:
    """Per command (plan ticks that arrived): emission = sent - planned, path = arrival - sent (s)."""
    if data.commands is None or data.receipts is None:
        return None
    plan, start = data.plan, data.stream_start_ns
    n = plan.n_ticks()
    sent = {
        int(s): int(t) for s, t in zip(data.commands.seq, data.commands.sent_ns, strict=True) if 0 <= s < n
    }
    seq, first = np.unique(data.receipts.seq, return_index=True)
    arrived = clock.to_host_ns(data.receipts.received_ns[first])
    rows = [(s, sent[s], a) for s, a in zip(seq.tolist(), arrived.tolist(), strict=True) if s in sent]
    if not rows:
        return None
    s, t_sent, t_arr = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
    planned = start + s * plan.tick_s * 1e9
    return {"emission": (t_sent - planned) / 1e9, "path": (t_arr - t_sent) / 1e9}


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x)))) if len(x) else 0.0


def timing_error_split(errors: dict[str, np.ndarray], link_emulated: bool) -> TimingError:
    """How much of the commanded timing error (arrival - planned, its variation about the median:
    a constant delay moves every lap alike) came from the machine rather than the link."""
    emission = errors["emission"] - np.median(errors["emission"])
    path = errors["path"] - np.median(errors["path"])
    total = emission + path
    machine = total if not link_emulated else emission
    total_rms = _rms(total)
    return TimingError(
        commands=len(total),
        total_rms_ms=1e3 * total_rms,
        host_emission_rms_ms=1e3 * _rms(emission),
        path_rms_ms=1e3 * _rms(path),
        machine_rms_ms=1e3 * _rms(machine),
        # share of the error's mean square: the parts are independent to first order
        machine_share=None if total_rms == 0 else min(1.0, _rms(machine) ** 2 / total_rms**2),
        path_counted_as_machine=not link_emulated,
    )


def stack_metrics(data: TrialData, clock: ClockModel, causes: DriftCauses, link_emulated: bool) -> Stack:
    """The ``stack`` section of metrics.json: faults per part, the machine's share, validity."""
    recorded = dict(data.record.outcome.stack)
    parts = Stack(
        bound={
            "stack_drift_m": STACK_DRIFT_BOUND_M,
            "mocap_skipped_share": MOCAP_SKIPPED_BOUND,
            "steal_pct": STEAL_BOUND_PCT,
            "steal_max_pct": STEAL_BURST_BOUND_PCT,
        },
        machine=recorded.get("machine"),
        robot=recorded.get("robot"),
        mocap=recorded.get("mocap"),
        forwarding=recorded.get("forwarding"),
        link_simulator=_simulator_summary(recorded.get("link_simulator")),
        link_forwarder=_forwarder_summary(recorded.get("link_forwarder")),
        link_emulated=link_emulated,
    )
    errors = _timing_errors(data, clock)
    if errors is not None:
        late_ms = [max(0.0, 1e3 * float(v)) for v in errors["emission"]]
        parts = parts.model_copy(
            update={
                "host_emission_late": LatenessSummary.model_validate(lateness_summary(late_ms)),
                "timing_error": timing_error_split(errors, link_emulated),
            }
        )
    parts = parts.model_copy(update={"stack_drift_m": causes.stack_m if causes.available else None})
    valid, reasons, advice = _verdict(parts)
    judged = {"valid": valid, "invalid_reasons": reasons, "advice": advice, "cautions": _cautions(parts)}
    return parts.model_copy(update=judged)


def _cautions(out: Stack) -> list[str]:
    """What the machine did that the trial's validity does not judge, for whoever reads its tails."""
    machine = out.machine or {}
    if not _steal_exceeded(machine):
        return []
    return [
        f"the hypervisor took {machine['steal_pct']:.1f} % of CPU time (up to {machine['steal_max_pct']:.0f} % "
        f"in half a second; above {STEAL_BOUND_PCT:g} % and {STEAL_BURST_BOUND_PCT:g} %): what its pauses did "
        "to the motion is in the stack drift; the latency tails (p99, max) may hold them"
    ]


def _verdict(out: Stack) -> tuple[bool | None, list[str], str]:
    reasons = []
    drift = out.stack_drift_m
    if drift is not None and drift > STACK_DRIFT_BOUND_M:
        where = "host send times and arrival times" if not out.link_emulated else "host send times"
        reasons.append(
            f"the machine's own timing ({where}) explains {drift * 1e3:.2f} mm of lap drift "
            f"(bound {STACK_DRIFT_BOUND_M * 1e3:g} mm)"
        )
    robot = out.robot or {}
    if robot.get("late_commands_applied"):
        reasons.append(f"the robot applied {robot['late_commands_applied']} commands later than they arrived")
    reasons += _link_behind_reasons(out.link_simulator, out.link_forwarder)
    mocap = out.mocap or {}
    if mocap.get("frames_generated"):
        share = mocap["frames_skipped_late"] / mocap["frames_generated"]
        if share > MOCAP_SKIPPED_BOUND:
            reasons.append(
                f"the mocap emulator skipped {100 * share:.1f} % of its frames, too late to send them"
            )
    if reasons:
        return False, reasons, _advice(out)
    if drift is None:
        return None, [], "validity unknown: the drift could not be split into causes (see drift_causes)"
    return True, [], ""


def link_behind_reasons(simulator: dict[str, Any] | None, forwarder: dict[str, Any] | None) -> list[str]:
    """Why a run on this link is invalid, from what its link recorded (the ns-3 link's
    ``simulator_record``, the forwarders' ``link_stats``): empty when neither fell behind. Perf rows
    are judged by this too, so a row and a trial on the same link share one set of bounds."""
    return _link_behind_reasons(_simulator_summary(simulator), _forwarder_summary(forwarder))


def _link_behind_reasons(sim: dict[str, Any] | None, forwarder: dict[str, Any] | None) -> list[str]:
    reasons = []
    if sim is not None and _simulator_behind(sim):
        reasons.append(
            f"the ns-3 802.11 link fell behind real time: lag p99 {sim['lag_ms']['p99']:.1f} ms, max "
            f"{sim['lag_ms']['max']:.1f} ms (bound {sim['lag_bound_ms']:g} ms at p99)"
        )
    if late := _forwarder_late(forwarder):
        where, p99, worst = late
        reasons.append(
            f"the link emulator sent frames late ({where}): p99 {p99:.1f} ms, max {worst:.1f} ms "
            f"(bound {LINK_FORWARDER_LATE_BOUND_MS:g} ms at p99)"
        )
    return reasons


def _steal_exceeded(machine: dict[str, Any]) -> bool:
    return (machine.get("steal_pct") or 0) > STEAL_BOUND_PCT or (
        machine.get("steal_max_pct") or 0
    ) > STEAL_BURST_BOUND_PCT


def _simulator_summary(sim: dict[str, Any] | None) -> dict[str, Any] | None:
    if not sim:
        return None
    keys = ("lag_ms", "cpu_pct", "realtime", "error")
    return {k: sim[k] for k in keys if k in sim} | {
        "lag_bound_ms": sim.get("lag_bound_ms", LINK_LAG_BOUND_MS)
    }


def _simulator_behind(sim: dict[str, Any] | None) -> bool:
    if sim is None:
        return False
    p99 = (sim.get("lag_ms") or {}).get("p99")
    return p99 is not None and p99 > sim["lag_bound_ms"]


def _forwarder_summary(recorded: dict[str, Any] | None) -> dict[str, Any] | None:
    """Per emulated node and direction (a2b: the node's uplink), its frames' lateness in ms."""
    if not recorded:
        return None
    return {
        node: {
            direction: {
                "frames": figures.get("tx", 0),
                **{
                    f"late_{q}_ms": figures.get(f"late_{q}_us", 0) / 1000.0
                    for q in ("p50", "p90", "p99", "max")
                },
            }
            for direction, figures in directions.items()
            if isinstance(figures, dict)
        }
        for node, directions in recorded.items()
        if isinstance(directions, dict)  # not a dead forwarder's {"error": ...}
    } | {"late_bound_ms": LINK_FORWARDER_LATE_BOUND_MS}


def _forwarder_late(summary: dict[str, Any] | None) -> tuple[str, float, float] | None:
    """The node and direction whose p99 lateness is the worst, if beyond the bound."""
    worst = None
    for node, directions in (summary or {}).items():
        if not isinstance(directions, dict):
            continue
        for direction, figures in directions.items():
            if figures["frames"] and (worst is None or figures["late_p99_ms"] > worst[1]):
                worst = (
                    f"{node} {'uplink' if direction == 'a2b' else 'downlink'}",
                    figures["late_p99_ms"],
                    figures["late_max_ms"],
                )
    return worst if worst is not None and worst[1] > LINK_FORWARDER_LATE_BOUND_MS else None


def _advice(out: Stack) -> str:
    machine = out.machine or {}
    hints = []
    if _steal_exceeded(machine):
        hints.append(
            "run on a machine without CPU steal (not a shared virtual machine), or re-run when its host is quieter"
        )
    if (machine.get("cpu_pressure_pct") or 0) >= 20 or (machine.get("busy_pct") or 0) >= 80:
        hints.append(
            "other programs kept the cores busy: close them or run fewer trials at once (--parallel 1)"
        )
    if _simulator_behind(out.link_simulator):
        hints.append("give the ns-3 link simulator a free core: run one trial at a time (--parallel 1)")
    if _forwarder_late(out.link_forwarder):
        hints.append(
            "the link emulator needs a core on time: run one trial at a time (--parallel 1) on a quiet machine"
        )
    hints.append("re-run the trial; invalid trials are kept but left out of comparisons")
    return "; ".join(hints)
