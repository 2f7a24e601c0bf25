"""Per-trial figures compare tabulates beside drift and latency: command timing classes (and, from
the relative-error section, relative error per distance)."""

from __future__ import annotations

from fieldtest.analysis.metrics.schema import Lateness, Relative


def _percent(fraction: float | None) -> float | None:
    return None if fraction is None else fraction * 100.0


def lateness_values(lateness: Lateness | None) -> dict[str, float | None]:
    """Late and too-late commands in % of those sent (None for files written before the classes)."""
    if lateness is None:
        return {"late": None, "too_late": None}
    return {"late": _percent(lateness.late_fraction), "too_late": _percent(lateness.too_late_fraction)}


def relative_values(relative: Relative | None) -> dict[str, float | None]:
    """RPE per side and per lap (translation RMSE, mm), relative error per side (mean, % of the side)
    and rotation per metre over a side (mean, deg/m); None where not computed."""
    side = relative.at("side") if relative is not None else None
    lap = relative.at("lap") if relative is not None else None
    return {
        "rpe_side": None
        if side is None or side.translation_m is None
        else side.translation_m["rmse"] * 1000.0,
        "rpe_lap": None if lap is None or lap.translation_m is None else lap.translation_m["rmse"] * 1000.0,
        "rel_side": None if side is None or side.translation_pct is None else side.translation_pct["mean"],
        "rot_per_m": None
        if side is None or side.rotation_deg_per_m is None
        else side.rotation_deg_per_m["mean"],
    }
