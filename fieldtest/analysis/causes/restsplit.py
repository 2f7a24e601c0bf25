"""The "rest" drift split into the base's systematic part and what is left (docs/analysis.md,
"The rest drift: the base's own part").

"Drift split into causes" leaves ``rest_m``: what the measured lap-to-lap displacement d_meas(tau)
adds to the arrival replay d_arrival(tau), the robot's own error plus mocap. UMBmark (fieldtest.
analysis.campaign.umbmark) estimates the base's systematic errors from the campaign's clockwise and
counter-clockwise runs of that robot: the wheel-diameter ratio E_d and the wheelbase factor E_b.
The Create 3 model driven by the planned commands with those errors and without them gives the
displacement the base's calibration alone makes, d_syst(tau) = d_plan(E_d, E_b) - d_plan(nominal):

    systematic_m = mean |d_syst|                         (the base's calibration)
    residual_m   = mean |d_meas - d_arrival - d_syst|    (slip, floor, mocap, and what timing and
                                                          calibration do together: second order)

Both over the valid points of the drift grid. A badly calibrated base then shows in
``systematic_m``, and the middleware verdict can rest on the link's part and ``residual_m``.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from fieldtest.analysis.causes.lapreplay import lap_displacement, planned_timeline
from fieldtest.analysis.loading.trialrobot import BaseCalibration
from fieldtest.analysis.metrics.drift import phase_grid
from fieldtest.analysis.metrics.schema import RestSplit
from fieldtest.plan import SquarePlan
from fieldtest.twin.create3model import Imperfections, SafetyOverride

REST_CSV = "drift_causes.csv"


def systematic_displacement(
    plan: SquarePlan, safety_override: SafetyOverride, calibration: BaseCalibration, last_lap: int
) -> np.ndarray:
    """d_syst(tau) (n x 2, start frame): what the base's errors alone add to the planned laps."""
    base = Imperfections(
        wheel_diameter_ratio=calibration.wheel_diameter_ratio,
        wheelbase_ratio=calibration.wheelbase_factor,
    )
    t, v, w = planned_timeline(plan)
    with_errors = lap_displacement(t, v, w, plan, last_lap, safety_override, base)
    nominal = lap_displacement(t, v, w, plan, last_lap, safety_override)
    if with_errors is None or nominal is None:
        raise ValueError("the plan has no moving command to replay")
    systematic: np.ndarray = with_errors - nominal
    return systematic


def split_rest(
    calibration: BaseCalibration, rest_xy: np.ndarray, valid: np.ndarray, systematic_xy: np.ndarray
) -> RestSplit:
    """The calibration used, systematic_m and residual_m over the valid grid points (None without any)."""
    if not valid.any():
        return RestSplit(calibration=calibration, systematic_m=None, residual_m=None)
    return RestSplit(
        calibration=calibration,
        systematic_m=float(np.linalg.norm(systematic_xy[valid], axis=1).mean()),
        residual_m=float(np.linalg.norm((rest_xy - systematic_xy)[valid], axis=1).mean()),
    )


def base_section(
    rest_xy: np.ndarray,
    valid: np.ndarray,
    plan: SquarePlan,
    safety_override: SafetyOverride,
    last_lap: int,
    calibration: BaseCalibration,
) -> RestSplit:
    """``drift_causes.base``: the calibration used and the split of the rest."""
    syst = systematic_displacement(plan, safety_override, calibration, last_lap)
    return split_rest(calibration, rest_xy, valid, syst)


def write_rest_curve(path: Path, plan: SquarePlan, rest_xy: np.ndarray, valid: np.ndarray) -> None:
    """The rest displacement d_meas - d_arrival on the drift grid, for the split after the fact."""
    tau = phase_grid(plan)
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["tau_s", "rest_x_m", "rest_y_m", "valid"])
        for i in range(len(tau)):
            out.writerow([f"{tau[i]:.4f}", f"{rest_xy[i, 0]:.9g}", f"{rest_xy[i, 1]:.9g}", int(valid[i])])


def read_rest_curve(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(rest n x 2, valid) from ``write_rest_curve``'s file; None if it is missing or unreadable."""
    try:
        table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    except (OSError, ValueError):
        return None
    return table[:, 1:3], table[:, 3] > 0.5
