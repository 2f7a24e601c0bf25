"""Mocap gaps: frames lost in transit, tracking-invalid frames, and holes in the valid ground truth.

Nothing is filled in here. The drift grid interpolates linearly only across holes no longer than
``max_gap_s`` (counted as bridged); grid points in longer holes are excluded (counted).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fieldtest.analysis.loading.trialdata import Frames
from fieldtest.analysis.metrics.motion import Track
from fieldtest.analysis.metrics.schema import Mocap
from fieldtest.analysis.metrics.summarystats import spans

# The recorder's frame-number rule (fieldtest/natnet/protocol.py, not imported: the natnet package
# costs 0.15 s to import); tests/test_analysis_synthetic.py checks they agree.
REORDER_WINDOW_FRAMES = 64
MAX_FRAME_RATE_HZ = 1000.0


def nominal_period_s(times_s: np.ndarray) -> float | None:
    d = np.diff(times_s)
    d = d[d > 0]
    return float(np.median(d)) if len(d) else None


def holes(
    track: Track, period_s: float, lo: float = -np.inf, hi: float = np.inf
) -> list[tuple[float, float]]:
    """Spans (last valid time, next valid time) longer than 1.5 nominal periods, overlapping [lo, hi]."""
    t = track.t_s
    if len(t) < 2:
        return []
    d = np.diff(t)
    idx = np.flatnonzero(d > 1.5 * period_s)
    return [(float(t[i]), float(t[i + 1])) for i in idx if t[i + 1] >= lo and t[i] <= hi]


def mocap_metrics(
    track: Track,
    frames: Frames | None,
    stream_start_ns: int,
    max_gap_s: float,
    window: tuple[float, float] | None,
) -> tuple[Mocap, list[tuple[float, float, bool]]]:
    """The ``mocap`` section of metrics.json and the holes (start, end, bridged) for the plots."""
    # the section's fields as they are found; only these are written (metrics.json keeps them)
    out: dict[str, Any] = {"valid_poses": int(len(track))}
    period = None
    if frames is not None and len(frames.t_ns):
        order = np.argsort(frames.t_ns, kind="stable")
        numbers, valid = frames.frame_number[order], frames.valid[order]
        steps = np.diff(numbers)
        loss = _plausible_loss(steps, np.diff(frames.t_ns[order]) / 1e9)
        out["frames"] = int(len(numbers))
        out["tracking_valid"] = int(np.count_nonzero(valid))
        out["tracking_invalid"] = int(np.count_nonzero(~valid))
        out["lost_in_transit"] = int(np.sum(steps[loss] - 1))
        out["frame_number_resets"] = int(np.count_nonzero(steps <= 0))
        out["frame_number_jumps"] = int(np.count_nonzero((steps > 1) & ~loss))
        invalid_runs = spans(np.flatnonzero(~valid))
        out["invalid_runs"] = len(invalid_runs)
        out["longest_invalid_run_frames"] = max((b - a + 1 for a, b in invalid_runs), default=0)
        frame_t = (frames.t_ns[order] - stream_start_ns) / 1e9
        period = nominal_period_s(frame_t)
    if period is None and len(track) > 1:
        period = nominal_period_s(track.t_s)
    out["rate_hz"] = 1.0 / period if period else None
    if period is None:
        return Mocap(**out), []
    all_holes = holes(track, period)
    out.update(_hole_stats(all_holes, period, max_gap_s, "all"))
    marked = [(a, b, (b - a) <= max_gap_s) for a, b in all_holes]
    if window is not None:
        lo, hi = window
        inside = [(max(a, lo), min(b, hi)) for a, b in all_holes if b >= lo and a <= hi]
        out.update(_hole_stats(inside, period, max_gap_s, "in_analysis"))
        out["analysis_window_s"] = [lo, hi]
    out["max_bridged_gap_s"] = max_gap_s
    return Mocap(**out), marked


def _plausible_loss(steps: np.ndarray, elapsed_s: np.ndarray) -> np.ndarray:
    """Forward frame-number steps that can be frames lost in the arrival time between them (the
    recorder's rule, ``natnet.protocol.frame_step_is_loss``); a larger one is a jump, not loss."""
    limit = elapsed_s * MAX_FRAME_RATE_HZ + REORDER_WINDOW_FRAMES + 1
    return (steps > 1) & (steps <= limit)


def _hole_stats(
    hole_list: list[tuple[float, float]], period: float, max_gap_s: float, prefix: str
) -> dict[str, float | int]:
    lengths = np.array([b - a for a, b in hole_list])
    bridged = lengths <= max_gap_s if len(lengths) else np.zeros(0, bool)
    missing = np.maximum(np.round(lengths / period) - 1, 0) if len(lengths) else np.zeros(0)
    return {
        f"{prefix}_gaps": int(len(lengths)),
        f"{prefix}_missing_samples": int(missing.sum()),
        f"{prefix}_bridged_gaps": int(np.count_nonzero(bridged)),
        f"{prefix}_excluded_gaps": int(np.count_nonzero(~bridged)),
        f"{prefix}_excluded_s": float(lengths[~bridged].sum()) if len(lengths) else 0.0,
        f"{prefix}_longest_gap_s": float(lengths.max()) if len(lengths) else 0.0,
    }
