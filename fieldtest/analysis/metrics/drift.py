"""Drift between the first and the last lap (definitions in docs/analysis.md, "Drift")."""

from __future__ import annotations

import math

import numpy as np

from fieldtest.analysis.metrics.motion import Motion, Track
from fieldtest.analysis.metrics.schema import Closing, Corner, Drift, LapDrift
from fieldtest.analysis.metrics.series import DriftSeries
from fieldtest.analysis.metrics.summarystats import (
    circular_mean,
    finite_or_none,
    interp_with_gaps,
    summary,
    wrap_angle,
)
from fieldtest.plan import REST_AFTER_S, SquarePlan

GRID_STEP_S = 0.01
# A lap boundary is a step change of speed: position from a line fitted to the samples before it (the
# in-place turn, or the rest before the start), heading from those after it (the next side, or the rest
# after the run), each window this far from the boundary so a start a few ms off stays on its side.
BOUNDARY_FIT_S = 0.1
BOUNDARY_GUARD_S = 0.02


def phase_grid(plan: SquarePlan, step_s: float = GRID_STEP_S) -> np.ndarray:
    """tau = 0, step, ..., lap_s (both ends included)."""
    n = int(round(plan.lap_s / step_s))
    return np.linspace(0.0, plan.lap_s, n + 1)


def _side_mask(plan: SquarePlan, tau: np.ndarray) -> np.ndarray:
    """Grid points on a side (driving straight), where the heading does not depend on turn timing."""
    pair = plan.side_s + plan.turn_s
    on_side: np.ndarray = np.mod(tau, pair) <= plan.side_s + 1e-9
    return on_side


def drift_metrics(
    track: Track, motion: Motion, plan: SquarePlan, max_gap_s: float, step_s: float = GRID_STEP_S
) -> tuple[Drift, DriftSeries]:
    laps = motion.laps_completed
    series = DriftSeries()
    if motion.start_s is None or laps < 2:
        return Drift(available=False, reason=f"needs two complete laps, found {laps}"), series
    t0 = motion.start_s
    tau = phase_grid(plan, step_s)
    xy, yaw, ok = [], [], []
    for lap in range(laps):
        q = t0 + lap * plan.lap_s + tau
        p, valid = interp_with_gaps(track.t_s, track.xy, q, max_gap_s)
        y, _ = interp_with_gaps(track.t_s, track.yaw, q, max_gap_s)
        xy.append(p)
        yaw.append(y)
        ok.append(valid)
    ends_xy, ends_yaw = lap_boundary_poses(track, t0 + plan.lap_s * np.arange(laps + 1), max_gap_s)
    for lap in range(laps):  # the grid's first and last point: lap boundaries, fitted one-sided
        for i, k in ((0, lap), (-1, lap + 1)):
            xy[lap][i], yaw[lap][i] = ends_xy[k], ends_yaw[k]
            ok[lap][i] = bool(np.all(np.isfinite(ends_xy[k])) and np.isfinite(ends_yaw[k]))
    dist = np.array([np.linalg.norm(xy[k] - xy[0], axis=1) for k in range(1, laps)])
    for k in range(1, laps):
        dist[k - 1][~(ok[k] & ok[0])] = np.nan
    last = laps - 1
    d = dist[-1]
    valid = np.isfinite(d)
    heading = wrap_angle(yaw[last] - yaw[0])
    on_side = _side_mask(plan, tau) & valid
    corners_first = _corners(track, motion, plan, 0)
    corners_last = _corners(track, motion, plan, last)
    whole = summary(d)
    out = Drift(
        available=True,
        first_lap=1,
        last_lap=laps,
        grid_step_s=step_s,
        grid_points=int(len(tau)),
        excluded_points=int(np.count_nonzero(~valid)),
        mean_m=whole["mean"],
        rms_m=whole["rms"],
        max_m=whole["max"],
        at_lap_end_m=finite_or_none(d[-1]),
        heading_change_deg=_deg(circular_mean(heading[on_side])),
        heading_change_at_lap_end_deg=_deg(finite_or_none(heading[-1])),
        per_lap=[_lap_drift(k + 1, dist[k - 1]) for k in range(1, laps)],
        corners=_corner_displacements(corners_first, corners_last, motion),
        closing=_closing(track, motion, plan, laps, ends_xy, ends_yaw),
    )
    series.tau_s, series.distance_m = tau, dist
    series.corners_first = motion.to_start_frame(corners_first)
    series.corners_last = motion.to_start_frame(corners_last)
    return out, series


def _lap_drift(lap: int, distance_m: np.ndarray) -> LapDrift:
    """One lap against lap 1 over the grid."""
    figures = summary(distance_m)
    return LapDrift(
        lap=lap,
        mean_m=figures["mean"],
        rms_m=figures["rms"],
        max_m=figures["max"],
        at_lap_end_m=finite_or_none(distance_m[-1]),
    )


def lap_boundary_poses(track: Track, times: np.ndarray, max_gap_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Position (k x 2) and unwrapped heading (k) at lap boundaries, NaN where a window lacks samples."""
    xy = np.full((len(times), 2), np.nan)
    yaw = np.full(len(times), np.nan)
    for i, t_b in enumerate(times):
        before = (t_b - BOUNDARY_GUARD_S - BOUNDARY_FIT_S, t_b - BOUNDARY_GUARD_S)
        after = (t_b + BOUNDARY_GUARD_S, t_b + BOUNDARY_GUARD_S + BOUNDARY_FIT_S)
        xy[i] = _line_at(track.t_s, track.xy, t_b, before, max_gap_s)
        yaw[i] = _line_at(track.t_s, track.yaw, t_b, after, max_gap_s)
    return xy, yaw


def _line_at(
    t: np.ndarray, values: np.ndarray, t_b: float, window: tuple[float, float], max_gap_s: float
) -> np.ndarray:
    """Least-squares line through the samples in ``window``, evaluated at ``t_b``; NaN unless the
    samples cover the window without a gap longer than ``max_gap_s``."""
    inside = np.flatnonzero((t >= window[0]) & (t <= window[1]))
    nan = np.full(np.shape(values)[1:], np.nan)
    if len(inside) < 3:
        return nan
    edges = np.concatenate([[window[0]], t[inside], [window[1]]])
    if np.max(np.diff(edges)) > max_gap_s:
        return nan
    value: np.ndarray = np.polyfit(t[inside] - t_b, values[inside], 1)[1]
    return value


def _deg(rad: float | None) -> float | None:
    return None if rad is None else math.degrees(rad)


def _corners(track: Track, motion: Motion, plan: SquarePlan, lap: int) -> np.ndarray:
    """Mean ground-truth position during each in-place turn of ``lap`` (NaN if no sample in it)."""
    out = np.full((4, 2), np.nan)
    shift = motion.found_start_s() - plan.start_delay_s
    for c, corner_s in enumerate(plan.corner_times_s(lap)):
        lo, hi = corner_s + shift, corner_s + shift + plan.turn_s
        inside = (track.t_s >= lo) & (track.t_s <= hi)
        if np.any(inside):
            out[c] = track.xy[inside].mean(axis=0)
    return out


def _corner_displacements(first: np.ndarray, last: np.ndarray, motion: Motion) -> list[Corner]:
    out = []
    for c in range(4):
        vec = last[c] - first[c]
        if not np.all(np.isfinite(vec)):
            out.append(Corner(corner=c + 1, dx_m=None, dy_m=None, distance_m=None))
            continue
        local = motion.rotate_to_start_frame(vec)
        out.append(
            Corner(
                corner=c + 1,
                dx_m=float(local[0]),
                dy_m=float(local[1]),
                distance_m=float(np.hypot(*vec)),
            )
        )
    return out


def _closing(
    track: Track, motion: Motion, plan: SquarePlan, laps: int, ends_xy: np.ndarray, ends_yaw: np.ndarray
) -> Closing:
    """End pose of the run against the pose at motion start (the lap boundary fit at ``t0``).

    After a complete run the end pose is the robot's rest pose (mean over REST_AFTER_S after the planned
    end, so neither noise nor a sample falling on the last turn's end biases it); otherwise, or without
    ground truth there, the lap boundary fit at the end of the last complete lap.
    """
    t_end = motion.found_start_s() + laps * plan.lap_s
    p0, y0 = ends_xy[0], ends_yaw[0]
    lo, hi = t_end + REST_AFTER_S[0], t_end + REST_AFTER_S[1]
    rest = (track.t_s >= lo) & (track.t_s <= hi)
    if laps == plan.laps and np.count_nonzero(rest) >= 3:
        p1, y1, where = (
            track.xy[rest].mean(axis=0),
            circular_mean(wrap_angle(track.yaw[rest])),
            "rest after the run",
        )
    else:
        p1, y1 = ends_xy[laps], ends_yaw[laps]
        where = f"end of lap {laps}" if np.all(np.isfinite(p1)) and np.isfinite(y1) else "n/a"
    if not (np.all(np.isfinite(p0)) and np.isfinite(y0)) or where == "n/a":
        return Closing(end_pose=where, distance_m=None, dx_m=None, dy_m=None, heading_deg=None)
    local = motion.rotate_to_start_frame(p1 - p0)
    return Closing(
        end_pose=where,
        distance_m=float(np.hypot(*(p1 - p0))),
        dx_m=float(local[0]),
        dy_m=float(local[1]),
        heading_deg=math.degrees(float(wrap_angle(y1 - y0))),
    )
