"""trajectory.csv: the ground truth in the start frame, thinned, for pages that overlay many trials.

Columns ``t_s`` (seconds after the motion start), ``x_m`` (forward at the start), ``y_m`` (left):
the first pose in every ``STEP_S`` from the motion start to the end of the last completed lap (to
the last pose when no lap was completed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fieldtest.analysis.rendering.figuredata import PlotData

TRAJECTORY_CSV = "trajectory.csv"
STEP_S = 0.05


def write_trajectory(out_dir: Path, data: PlotData) -> list[str]:
    if data.t_s is None or data.xy is None or data.motion_start_s is None:
        return []
    t = data.t_s - data.motion_start_s
    end = data.lap_windows[-1][1] - data.motion_start_s if data.lap_windows else t[-1]
    inside = (t >= 0) & (t <= end)
    t, xy = t[inside], data.xy[inside]
    if len(t) == 0:
        return []
    keep = np.r_[True, np.diff(np.floor(t / STEP_S)) > 0]
    rows = np.column_stack([t[keep], xy[keep]])
    np.savetxt(out_dir / TRAJECTORY_CSV, rows, delimiter=",", header="t_s,x_m,y_m", comments="", fmt="%.6f")
    return [TRAJECTORY_CSV]


def read_trajectory(analysis_dir: Path) -> np.ndarray | None:
    """(n, 3) rows of t_s, x_m, y_m, or None when the trial has no such file."""
    path = analysis_dir / TRAJECTORY_CSV
    if not path.is_file():
        return None
    rows = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return rows if rows.shape[1] == 3 else None
