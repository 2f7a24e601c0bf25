"""What the plots draw, as plain numbers and arrays: no plan, trial or track objects.

The analysis builds a PlotData (``PlotData.of``); the plot worker gets it pickled. The worker is
forked before the analysis imports anything heavy (fieldtest/analysis/rendering/plotprocess.py), and
what it unpickles comes from numpy, this module and fieldtest.analysis.metrics.series only, so it
imports matplotlib and nothing else of the analysis (pydantic, the bag readers) while the analyzing
process reads the bags and imports evo.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fieldtest.analysis.metrics.series import DriftSeries, LatencySeries

if TYPE_CHECKING:
    from fieldtest.analysis.metrics.motion import Motion, Track
    from fieldtest.plan import SquarePlan


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
        located = track if track is not None and motion.start_s is not None else None
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
            t_s=located.t_s if located is not None else None,
            xy=motion.to_start_frame(located.xy) if located is not None else None,
            drift=drift,
            latency=latency,
        )
