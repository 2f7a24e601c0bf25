"""Lap drift split into its causes along the chain plan -> send -> arrival -> motion.

The Create 3 model (fieldtest.twin.create3model) is driven three times with the same commands: at their
planned times, at the times the host sent them, and at the times the robot logged their arrival
(on the host clock). Each replay gives a lap-to-lap displacement d(tau) at every phase tau of the
lap grid; the measured ground truth gives one more. The differences between consecutive links of
the chain are what host emission timing, the link and everything after arrival (robot, model,
mocap) add. Formulas: docs/analysis.md, "Drift split into causes".
"""

from __future__ import annotations

import math

import numpy as np

from fieldtest.analysis.causes.lapreplay import closing_displacement, lap_displacement, planned_timeline
from fieldtest.analysis.causes.linkstalls import Arrivals, phase_spread, segment_changes
from fieldtest.analysis.causes.restsplit import base_section
from fieldtest.analysis.loading.trialdata import TrialData
from fieldtest.analysis.loading.trialrobot import BaseCalibration
from fieldtest.analysis.metrics.drift import phase_grid
from fieldtest.analysis.metrics.latency import ClockModel
from fieldtest.analysis.metrics.motion import Motion, Track
from fieldtest.analysis.metrics.schema import Drift, DriftCauses, PhaseSpread, SegmentChanges
from fieldtest.analysis.metrics.summarystats import interp_with_gaps
from fieldtest.plan import SquarePlan
from fieldtest.record import TrialRequest
from fieldtest.twin.create3model import SafetyOverride

# The nominal model integrates piecewise exactly (wheel speeds linear within a piece), so the stall
# replays, twenty-odd per trial, step at 20 ms: their drift moved by under 1e-6 mm on 4g trials.
STALL_SUBSTEP_S = 0.02

RestCurve = tuple[np.ndarray, np.ndarray]  # the rest displacement (n x 2, start frame), valid points


def measured_displacement(
    track: Track, motion: Motion, plan: SquarePlan, last_lap: int, max_gap_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """The same d(tau) from the ground truth, turned into the start frame (driving direction = +x)."""
    start_s = motion.found_start_s()
    tau = phase_grid(plan)
    p0, ok0 = interp_with_gaps(track.t_s, track.xy, start_s + tau, max_gap_s)
    p1, ok1 = interp_with_gaps(track.t_s, track.xy, start_s + (last_lap - 1) * plan.lap_s + tau, max_gap_s)
    c, s = math.cos(-motion.start_heading), math.sin(-motion.start_heading)
    d = p1 - p0
    return np.column_stack([c * d[:, 0] - s * d[:, 1], s * d[:, 0] + c * d[:, 1]]), ok0 & ok1


def _mean_norm(d: np.ndarray, valid: np.ndarray) -> float | None:
    norms = np.linalg.norm(d, axis=1)[valid]
    return float(norms.mean()) if len(norms) else None


def command_timelines(
    data: TrialData, clock: ClockModel
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] | str:
    """(stream seconds, linear, angular) of the commands at planned, send and arrival times; or why not."""
    plan = data.plan
    if data.commands is None or not len(data.commands.seq):
        return "no sent commands (host bag)"
    if data.receipts is None or not len(data.receipts.seq):
        return "no command receipts (robot bag)"
    start = data.stream_start_ns
    planned = planned_timeline(plan)
    cmds = data.commands
    keep = cmds.seq >= 0
    sent = ((cmds.sent_ns[keep] - start) / 1e9, cmds.linear[keep], cmds.angular[keep])
    arrivals = first_arrivals(data, clock)
    arrived = (arrivals.arrival_s, arrivals.linear, arrivals.angular)
    return {"plan": planned, "send": sent, "arrival": arrived}


def first_arrivals(data: TrialData, clock: ClockModel) -> Arrivals:
    """Every numbered command at its first arrival (a duplicate delivery acts once, when first
    seen), moved to the host clock; stream seconds."""
    rec = data.receipts
    if rec is None:
        raise ValueError("no command receipts (robot bag)")
    seq, first = np.unique(rec.seq, return_index=True)
    first = first[seq >= 0]
    start = data.stream_start_ns
    return Arrivals(
        seq=rec.seq[first],
        sent_s=(rec.sent_ns[first] - start) / 1e9,
        arrival_s=(clock.to_host_ns(rec.received_ns[first]) - start) / 1e9,
        linear=rec.linear[first],
        angular=rec.angular[first],
    )


def drift_causes(
    data: TrialData,
    clock: ClockModel,
    track: Track | None,
    motion: Motion,
    drift: Drift,
    max_gap_s: float,
    link_emulated: bool,
    base_calibration: BaseCalibration | None = None,
) -> tuple[DriftCauses, RestCurve | None]:
    """The drift split along plan -> send -> arrival -> motion (metres, mean over the lap grid);
    with the base's calibration (fieldtest.analysis.causes.restsplit) the rest split once more. The
    rest's curve (the rest displacement on the drift grid and where it is valid) goes beside it, for
    drift_causes.csv."""
    if not drift.available or drift.last_lap is None or track is None:
        return DriftCauses(available=False, reason=f"no measured drift ({drift.reason or 'unknown'})"), None
    timelines = command_timelines(data, clock)
    if isinstance(timelines, str):
        return DriftCauses(available=False, reason=timelines), None
    last_lap = drift.last_lap
    request = data.record.request
    d = {}
    for name, (t, v, w) in timelines.items():
        disp = lap_displacement(
            np.asarray(t, float),
            np.asarray(v, float),
            np.asarray(w, float),
            data.plan,
            last_lap,
            request.twin.safety_override,
        )
        if disp is None:
            return DriftCauses(available=False, reason=f"no moving command at {name} times"), None
        d[name] = disp
    d_meas, valid = measured_displacement(track, motion, data.plan, last_lap, max_gap_s)
    changes, spread = _stall_sections(data, clock, last_lap, request.twin.safety_override)
    everywhere = np.ones(len(valid), dtype=bool)
    emission = _mean_norm(d["send"] - d["plan"], everywhere)
    link = _mean_norm(d["arrival"] - d["send"], everywhere)
    stack = emission if link_emulated else _mean_norm(d["arrival"] - d["plan"], everywhere)
    rest = d_meas - d["arrival"]
    base = None
    if base_calibration is not None:
        base = base_section(rest, valid, data.plan, request.twin.safety_override, last_lap, base_calibration)
    causes = DriftCauses(
        available=True,
        first_lap=1,
        last_lap=last_lap,
        replay_drift_m={name: _mean_norm(disp, everywhere) for name, disp in d.items()},
        measured_drift_m=_mean_norm(d_meas, valid),
        host_emission_m=emission,
        link_m=link,
        rest_m=_mean_norm(d_meas - d["arrival"], valid),
        # what the machine running the stack added: host timing, plus the whole path on loopback
        # (no emulated link there, so every arrival-time error is the stack's own)
        stack_m=stack,
        stack_includes_link=not link_emulated,
        base=base,
        replay_closing_m=_replay_closing(timelines["arrival"], drift, data.plan, request),
        segment_changes=changes,
        phase_spread=spread,
    )
    return causes, (rest, valid)


def _replay_closing(
    arrival: tuple[np.ndarray, np.ndarray, np.ndarray], drift: Drift, plan: SquarePlan, request: TrialRequest
) -> list[float] | None:
    """The arrival replay's closing error, where the measured one is the rest after a complete run."""
    if drift.closing is None or drift.closing.end_pose != "rest after the run":
        return None
    t, v, w = (np.asarray(x, float) for x in arrival)
    return closing_displacement(t, v, w, plan.laps * plan.lap_s, request.twin.safety_override)


def _stall_sections(
    data: TrialData, clock: ClockModel, last_lap: int, safety_override: SafetyOverride
) -> tuple[SegmentChanges, PhaseSpread | None]:
    """segment_changes and phase_spread (fieldtest.analysis.causes.linkstalls) with the nominal model's replay."""
    everywhere = np.ones(len(phase_grid(data.plan)), dtype=bool)

    def replay(t: np.ndarray, v: np.ndarray, w: np.ndarray) -> float | None:
        disp = lap_displacement(t, v, w, data.plan, last_lap, safety_override, max_substep_s=STALL_SUBSTEP_S)
        return None if disp is None else _mean_norm(disp, everywhere)

    arrivals = first_arrivals(data, clock)
    return (
        segment_changes(arrivals, replay),
        phase_spread(arrivals, data.plan.n_ticks(), data.plan.tick_s, replay),
    )
