"""Mocap poses on their frames' capture time instead of their receipt time (docs/analysis.md).

The recorder stamps every frame when it reaches the host, so the receipt stamps carry the mocap
stream's own network and scheduling jitter. Every NatNet frame also carries Motive's timestamp of
the frame (``MocapFrame.mocap_timestamp_s``, Motive's clock). A lower-envelope fit of receipt minus
capture over the recording (``clocksync.fit_one_way_clock``: offset and drift) maps the capture
times onto the host clock; the poses take those times, and receipt minus mapped capture is the
stream's own delay beyond its fastest frame (its jitter). Recordings without usable capture stamps
keep the receipt times, and the ``mocap.time`` section says why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict

from fieldtest.clocksync import fit_one_way_clock
from fieldtest.record import MOCAP_BAG

if TYPE_CHECKING:
    from fieldtest.analysis.loading.mocaptracks import Frames, Poses

CAPTURE, RECEIPT = "capture", "receipt"
MOCAP_TIMES = (CAPTURE, RECEIPT)
FIT_WINDOW_S = 1.0  # lower-envelope window: many frames each at mocap rates, short against clock drift
MIN_MATCHED = 0.99  # poses that must find their frame (same receipt stamp) for capture time to be used
MAX_STEP_BACK_S = 1.0  # a capture clock that goes back further restarted (Motive restarted)


class MocapTime(BaseModel):
    """metrics.json's ``mocap.time``: the axis the poses are on, why not capture time, the fit and
    the stream's own delay beyond its fastest frame."""

    model_config = ConfigDict(extra="allow", frozen=True)

    # in the order the analysis writes them (metrics.json keeps it)
    axis: str
    reason: str = ""  # receipt time: why not capture time
    frames_fitted: int | None = None
    envelope_windows: int | None = None
    drift_ppm: float | None = None
    delay_median_s: float | None = None
    delay_p99_s: float | None = None
    delay_max_s: float | None = None
    poses_without_frame: int | None = None


def retime_poses(
    poses: Poses | None, frames: Frames | None, mode: str = CAPTURE
) -> tuple[Poses | None, MocapTime | None]:
    """``(poses, section)``: the poses on mapped capture time where possible, and the ``mocap.time``
    section of metrics.json (axis used, why not capture, the fit, the stream's delay)."""
    if mode not in MOCAP_TIMES:
        raise ValueError(f"mocap time must be one of {', '.join(MOCAP_TIMES)}, got {mode!r}")
    if poses is None:
        return None, None
    if mode == RECEIPT:
        return poses, _receipt("asked for (--mocap-time receipt)")
    if poses.bag != MOCAP_BAG:
        return poses, _receipt(f"poses from {poses.bag}, not the mocap recorder: their own stamps")
    capture_s = None if frames is None else frames.capture_s
    if frames is None or capture_s is None or not np.any(capture_s > 0):
        return poses, _receipt("no capture stamps in the mocap bag's frames")
    fitted = _fit(frames.t_ns, capture_s)
    if isinstance(fitted, str):
        return poses, _receipt(fitted)
    mapped_ns, section = fitted
    return _move(poses, frames.t_ns, mapped_ns, section)


def _receipt(reason: str) -> MocapTime:
    return MocapTime(axis=RECEIPT, reason=reason)


def _fit(receipt_ns: np.ndarray, capture_s: np.ndarray) -> tuple[np.ndarray, MocapTime] | str:
    """Mapped capture times (host ns) of the frames and the section, or why not (a string)."""
    ok = np.isfinite(capture_s)
    order = np.argsort(receipt_ns, kind="stable")
    steps = np.diff(capture_s[order][ok[order]])
    if len(steps) and steps.min() < -MAX_STEP_BACK_S:
        return f"the capture clock went back {-steps.min():.3g} s during the recording (Motive restarted?)"
    t0 = int(receipt_ns[ok].min())
    receipt_s = (receipt_ns - t0).astype(float) / 1e9
    fit = fit_one_way_clock(capture_s[ok], receipt_s[ok] - capture_s[ok], FIT_WINDOW_S)
    if fit is None:
        return "fewer than two frames with a capture stamp"
    mapped_s = capture_s + fit.receiver_minus_sender_s(capture_s)
    mapped_ns = np.where(ok, t0 + np.round(np.nan_to_num(mapped_s) * 1e9).astype(np.int64), receipt_ns)
    delay_s = (receipt_ns[ok] - mapped_ns[ok]).astype(float) / 1e9
    section = MocapTime(
        axis=CAPTURE,
        frames_fitted=int(np.count_nonzero(ok)),
        envelope_windows=fit.windows,
        drift_ppm=fit.drift * 1e6,
        delay_median_s=float(np.median(delay_s)),
        delay_p99_s=float(np.percentile(delay_s, 99)),
        delay_max_s=float(delay_s.max()),
    )
    return mapped_ns, section


def _move(
    poses: Poses, frame_receipt_ns: np.ndarray, mapped_ns: np.ndarray, section: MocapTime
) -> tuple[Poses, MocapTime]:
    """Each pose takes its frame's mapped time (the recorder writes both with one receipt stamp)."""
    order = np.argsort(frame_receipt_ns, kind="stable")
    sorted_receipt = frame_receipt_ns[order]
    at = np.clip(np.searchsorted(sorted_receipt, poses.t_ns), 0, len(sorted_receipt) - 1)
    matched = sorted_receipt[at] == poses.t_ns
    if np.count_nonzero(matched) < MIN_MATCHED * len(poses.t_ns):
        missing = len(poses.t_ns) - int(np.count_nonzero(matched))
        return poses, _receipt(f"{missing} of {len(poses.t_ns)} poses have no frame with their stamp")
    t = mapped_ns[order][at][matched]
    sort = np.argsort(t, kind="stable")
    keep = np.concatenate([[True], np.diff(t[sort]) > 0])
    pick = sort[keep]
    moved = replace(
        poses,
        t_ns=t[pick],
        xyz=poses.xyz[matched][pick],
        quat_xyzw=poses.quat_xyzw[matched][pick],
    )
    without_frame = int(np.count_nonzero(~matched))
    return moved, section.model_copy(update={"poses_without_frame": without_frame})


def time_axis_line(section: MocapTime | None) -> str | None:
    """The report's sentence on the mocap time axis (None: no ground truth)."""
    if section is None:
        return None
    if section.axis != CAPTURE:
        return f"Time axis: receipt time ({section.reason})."
    return (
        f"Time axis: the frames' capture time mapped to the host clock ({section.frames_fitted} frames, "
        f"clock drift {_num(section.drift_ppm, 1)} ppm); the stream's own delay beyond its fastest frame "
        f"(receipt minus mapped capture): median {_num(section.delay_median_s, 2, 1e3)} ms, "
        f"p99 {_num(section.delay_p99_s, 2, 1e3)} ms."
    )


def _num(value: float | None, digits: int, scale: float = 1.0) -> str:
    return "n/a" if value is None else f"{value * scale:.{digits}f}"
