"""What the plots draw, as plain numbers and arrays: no plan, trial or track objects.

The analysis builds a PlotData (``PlotData.of``); the plot worker gets it pickled. The worker is
forked before the analysis imports anything heavy (fieldtest/analysis/plotworker.py), and what it
unpickles comes from numpy and this module only, so it imports matplotlib and nothing else of the
analysis (pydantic, the bag readers) while the analysing process reads the bags and imports evo.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fieldtest.plan import SquarePlan

    from .motion import Motion, Track


@dataclass
class DriftSeries:
    """Phase grid and the distance of every later lap from lap 1 (laps x grid), for the plots."""

    tau_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    distance_m: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # row k: lap k+2 vs lap 1
    corners_first: np.ndarray | None = None  # start frame, (4, 2)
    corners_last: np.ndarray | None = None


@dataclass
class LatencySeries:
    """Per-command series for the plots (stream seconds, milliseconds)."""

    seq: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sent_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    one_way_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    live_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lost_seq: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    lost_sent_s: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass
class PlotData:
    metrics: dict
    faults: list[dict]
    holes: list[tuple[float, float, bool]]  # mocap gaps: start, end, bridged
    # the plan: side and timing, and lap 1 of the ideal square (x, y, yaw at the start of each side
    # and back at the start)
    side_m: float
    side_s: float
    turn_s: float
    lap_s: float
    ideal_corners: np.ndarray
    motion_start_s: float | None
    lap_windows: list[tuple[float, float]]  # completed laps, stream s
    # the ground truth: stream seconds and x, y in the start frame (None without a motion start)
    t_s: np.ndarray | None
    xy: np.ndarray | None
    drift: DriftSeries | None
    latency: LatencySeries

    @classmethod
    def of(
        cls,
        metrics: dict,
        plan: SquarePlan,
        track: Track | None,
        motion: Motion,
        drift: DriftSeries | None,
        latency: LatencySeries,
        holes: list[tuple[float, float, bool]],
        faults: list[dict],
    ) -> PlotData:
        located = track is not None and motion.start_s is not None
        return cls(
            metrics=metrics,
            faults=faults,
            holes=holes,
            side_m=plan.side_m,
            side_s=plan.side_s,
            turn_s=plan.turn_s,
            lap_s=plan.lap_s,
            ideal_corners=plan.segment_start_poses()[: 2 * 4 + 1 : 2],
            motion_start_s=motion.start_s,
            lap_windows=list(motion.lap_windows),
            t_s=track.t_s if located else None,
            xy=motion.to_start_frame(track.xy) if located else None,
            drift=drift,
            latency=latency,
        )
