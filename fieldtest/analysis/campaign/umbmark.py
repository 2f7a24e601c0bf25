"""Both directions: the base's systematic odometry error from clockwise and counter-clockwise runs, as
UMBmark (Borenstein and Feng, "Measurement and correction of systematic odometry errors in mobile
robots", IEEE Trans. Robotics and Automation 12(6), 1996) measures it (docs/analysis.md, "Both
directions (UMBmark)").

The robot believes it returns to its start after every lap; the ground truth says where it really
is. Per trial the return error per lap is the closing error (start frame: x forward along the first
side, y left) divided by the laps driven; per direction its centre of gravity over the valid,
complete repetitions. To first order in the two systematic errors

    alpha: every turn goes alpha too far (rad; a wheelbase error),
    beta:  every side curves by beta to the left (rad; unequal wheel diameters),

a lap of side L ends at  ccw: (2 L (alpha + beta), -2 L (alpha + beta)),  cw: (2 L (alpha - beta),
2 L (alpha - beta)), so

    alpha = (x_cw + x_ccw) / (4 L),   beta = (x_ccw - x_cw) / (4 L)

(the same from y: alpha = (y_cw - y_ccw) / (4 L), beta = -(y_cw + y_ccw) / (4 L); both are given, and
their mean is used). Corrections, as UMBmark derives them: the turns come out (90 deg + alpha) /
90 deg as large, so the wheelbase the base assumes should be multiplied by E_b = 90 deg / (90 deg +
alpha); a side of length L curving by beta has the radius R = (L / 2) / sin(beta / 2), so the
effective wheel diameters are in the ratio E_d = D_right / D_left = (R + b/2) / (R - b/2) with b the
wheel separation. E_max,syst = the larger distance of the two centres of gravity from the start.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from fieldtest.analysis.metrics.schema import Metrics

DIRECTIONS = {"left": "ccw", "right": "cw"}


class Umbmark(BaseModel):
    """UMBmark's figures of one configuration (compare.json's ``umbmark``); the base calibration
    is built from them, so a misspelt figure fails the type check, not a look-up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs_cw: int
    runs_ccw: int
    side_m: float
    cg_cw_m: tuple[float, float]  # centre of gravity of the return errors per lap (x, y)
    cg_ccw_m: tuple[float, float]
    e_max_syst_m: float
    alpha_deg: float
    beta_deg: float
    wheelbase_factor: float
    curve_radius_m: float | None  # None: the sides do not curve
    wheel_diameter_ratio: float
    wheel_separation_m: float


def return_error_per_lap(m: Metrics) -> tuple[float, float] | None:
    """(x, y) in metres where one lap ends against where it started; None if not measured."""
    closing, laps = m.drift.closing, m.drift.last_lap
    if not m.valid or not m.progress.complete or closing is None or not laps:
        return None
    if closing.dx_m is None or closing.dy_m is None:
        return None
    return closing.dx_m / laps, closing.dy_m / laps


def umbmark(
    members: list[Metrics],
    wheel_separation_m: float | None = None,
    error_of: Callable[[Metrics], tuple[float, float] | None] = return_error_per_lap,
) -> Umbmark | None:
    """UMBmark's figures from one configuration's trials, or None unless both directions have one.
    ``wheel_separation_m``: default the Create 3's (fieldtest.twin.create3model); ``error_of``: a trial's
    return error per lap (default the measured one)."""
    if wheel_separation_m is None:
        from fieldtest.twin.create3model import WHEEL_SEPARATION_M

        wheel_separation_m = WHEEL_SEPARATION_M
    errors: dict[str, list[tuple[float, float]]] = {"cw": [], "ccw": []}
    side_m = None
    for m in members:
        error = error_of(m)
        if error is not None:
            errors[DIRECTIONS[m.trial.plan.turn_direction]].append(error)
            side_m = m.trial.plan.side_m
    if not errors["cw"] or not errors["ccw"] or not side_m:
        return None
    return systematic_errors(errors["cw"], errors["ccw"], side_m, wheel_separation_m)


def systematic_errors(
    cw: Sequence[tuple[float, float]],
    ccw: Sequence[tuple[float, float]],
    side_m: float,
    wheel_separation_m: float,
) -> Umbmark:
    """The figures from the return errors per lap ((x, y) in metres, start frame) of each direction."""
    (x_cw, y_cw), (x_ccw, y_ccw) = np.mean(cw, axis=0), np.mean(ccw, axis=0)
    four_l = 4 * side_m
    alpha = ((x_cw + x_ccw) + (y_cw - y_ccw)) / 2 / four_l
    beta = ((x_ccw - x_cw) - (y_cw + y_ccw)) / 2 / four_l
    radius = math.inf if beta == 0 else (side_m / 2) / math.sin(beta / 2)
    half_b = wheel_separation_m / 2
    return Umbmark(
        runs_cw=len(cw),
        runs_ccw=len(ccw),
        side_m=side_m,
        cg_cw_m=(float(x_cw), float(y_cw)),
        cg_ccw_m=(float(x_ccw), float(y_ccw)),
        e_max_syst_m=float(max(math.hypot(x_cw, y_cw), math.hypot(x_ccw, y_ccw))),
        alpha_deg=math.degrees(alpha),
        beta_deg=math.degrees(beta),
        wheelbase_factor=90.0 / (90.0 + math.degrees(alpha)),
        curve_radius_m=float(radius) if math.isfinite(radius) else None,
        wheel_diameter_ratio=1.0
        if not math.isfinite(radius)
        else float((radius + half_b) / (radius - half_b)),
        wheel_separation_m=wheel_separation_m,
    )


def umbmark_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(head, cells) of the configurations with both directions (no cells when there is none)."""
    head = [
        "configuration",
        "runs cw / ccw",
        "c.g. cw (mm)",
        "c.g. ccw (mm)",
        "E_max,syst (mm)",
        "alpha (deg)",
        "beta (deg)",
        "wheelbase x",
        "D_right / D_left",
    ]
    body = []
    for r in rows:
        if not (u := r.get("umbmark")):
            continue
        cw, ccw = (", ".join(f"{v * 1000:.1f}" for v in u[k]) for k in ("cg_cw_m", "cg_ccw_m"))
        body.append(
            [
                f"{r['middleware']} / {r['security']} / {r['network']}",
                f"{u['runs_cw']} / {u['runs_ccw']}",
                cw,
                ccw,
                f"{u['e_max_syst_m'] * 1000:.1f}",
                f"{u['alpha_deg']:.3f}",
                f"{u['beta_deg']:.3f}",
                f"{u['wheelbase_factor']:.5f}",
                f"{u['wheel_diameter_ratio']:.5f}",
            ]
        )
    return head, body


UMBMARK_NOTE = (
    "Configurations with clockwise and counter-clockwise runs: the centre of gravity of the return error per "
    "lap in each direction, E_max,syst, the turn error alpha and the curvature per side beta, and the "
    "corrections (wheelbase factor, right/left wheel diameter ratio). Definitions: docs/analysis.md."
)


def umbmark_lines(rows: list[dict]) -> list[str]:
    """compare.md section: per configuration with both directions, UMBmark's figures."""
    head, body = umbmark_table(rows)
    if not body:
        return []
    out = ["## Both directions (UMBmark)", "", UMBMARK_NOTE, "", "| " + " | ".join(head) + " |"]
    out += ["|" + " --- |" * len(head)] + ["| " + " | ".join(cells) + " |" for cells in body]
    return out + [""]
