"""The "rest" drift split into the base's systematic part and what is left (docs/analysis.md,
"The rest drift: the base's own part").

"Drift split into causes" leaves ``rest_m``: what the measured lap-to-lap displacement d_meas(tau)
adds to the arrival replay d_arrival(tau), the robot's own error plus mocap. UMBmark (fieldtest.
analysis.umbmark) estimates the base's systematic errors from the campaign's clockwise and
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
from typing import Any

import numpy as np

from fieldtest.plan import SquarePlan
from fieldtest.record import ANALYSIS_DIR
from fieldtest.twin.create3 import Imperfections

from .drift import phase_grid

REST_CSV = "drift_causes.csv"
CALIBRATION_FILE = "base_calibration.json"


def robot_label(request: Any) -> str:
    """Which robot a trial drove: its model, and in the twin its drawn instance or set errors. The
    base's calibration is pooled over the trials of one robot, whatever the middleware."""
    label = request.robot_model
    twin = request.twin
    if request.robot_model != "twin-create3":
        return label
    if twin.robot_variation is not None:
        return f"{label} variation {twin.robot_variation}"
    if twin.wheel_diameter_ratio != 1.0 or twin.wheelbase_ratio != 1.0 or twin.turn_slip:
        return (
            f"{label} E_d {twin.wheel_diameter_ratio:g} E_b {twin.wheelbase_ratio:g} "
            f"turn slip {twin.turn_slip:g}"
        )
    return label


def calibration_from(umbmark: dict, robot: str) -> dict:
    """The base's errors as the split uses them, from UMBmark's figures of one robot."""
    return {
        "robot": robot,
        "wheel_diameter_ratio": umbmark["wheel_diameter_ratio"],
        "wheelbase_factor": umbmark["wheelbase_factor"],
        "alpha_deg": umbmark["alpha_deg"],
        "beta_deg": umbmark["beta_deg"],
        "runs_cw": umbmark["runs_cw"],
        "runs_ccw": umbmark["runs_ccw"],
    }


def planned_timeline(plan: SquarePlan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stream seconds, linear, angular) of the plan's ticks, with the stop at the first tick after."""
    sched = plan.schedule()
    return (
        np.append(sched.t_s, plan.n_ticks() * plan.tick_s),
        np.append(sched.linear_mps, 0.0),
        np.append(sched.angular_rps, 0.0),
    )


def systematic_displacement(
    plan: SquarePlan, safety_override: str, calibration: dict, last_lap: int
) -> np.ndarray:
    """d_syst(tau) (n x 2, start frame): what the base's errors alone add to the planned laps."""
    from .causes import lap_displacement

    base = Imperfections(
        wheel_diameter_ratio=calibration["wheel_diameter_ratio"],
        wheelbase_ratio=calibration["wheelbase_factor"],
    )
    t, v, w = planned_timeline(plan)
    with_errors = lap_displacement(t, v, w, plan, last_lap, safety_override, base)
    nominal = lap_displacement(t, v, w, plan, last_lap, safety_override)
    return with_errors - nominal


def split_rest(rest_xy: np.ndarray, valid: np.ndarray, systematic_xy: np.ndarray) -> dict[str, float | None]:
    """systematic_m and residual_m over the valid grid points (None without any)."""
    if not valid.any():
        return {"systematic_m": None, "residual_m": None}
    return {
        "systematic_m": float(np.linalg.norm(systematic_xy[valid], axis=1).mean()),
        "residual_m": float(np.linalg.norm((rest_xy - systematic_xy)[valid], axis=1).mean()),
    }


def base_section(
    rest_xy: np.ndarray,
    valid: np.ndarray,
    plan: SquarePlan,
    safety_override: str,
    last_lap: int,
    calibration: dict,
) -> dict[str, Any]:
    """``drift_causes.base``: the calibration used and the split of the rest."""
    syst = systematic_displacement(plan, safety_override, calibration, last_lap)
    return {"calibration": calibration, **split_rest(rest_xy, valid, syst)}


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


def rest_return_error(m: Any) -> tuple[float, float] | None:
    """The return error per lap the command timing does not explain: the measured closing error less
    the arrival replay's (the nominal model's own, e.g. its last turn's ramp), per lap driven."""
    from .umbmark import return_error_per_lap

    measured = return_error_per_lap(m)
    replay = m.drift_causes.replay_closing_m if m.drift_causes is not None else None
    if measured is None or replay is None:
        return measured
    laps = m.drift.last_lap
    return measured[0] - replay[0] / laps, measured[1] - replay[1] / laps


def campaign_split(trials: list, requests: dict[str, Any]) -> tuple[dict[str, dict], dict[str, dict]]:
    """(calibration per robot, base section per trial directory) for the robots whose complete,
    valid trials include both directions. ``requests``: trial directory -> its TrialRequest."""
    from .umbmark import umbmark

    requests = {_key(d): r for d, r in requests.items()}
    by_robot: dict[str, list] = {}
    for m in trials:
        if m.valid and _key(m.trial.dir) in requests:
            by_robot.setdefault(robot_label(requests[_key(m.trial.dir)]), []).append(m)
    calibrations = {}
    for robot, members in by_robot.items():
        if (u := umbmark(members, error_of=rest_return_error)) is not None:
            calibrations[robot] = calibration_from(u, robot)
    sections: dict[str, dict] = {}
    cache: dict[tuple, np.ndarray] = {}
    for m in trials:
        request = requests.get(_key(m.trial.dir))
        calibration = calibrations.get(robot_label(request)) if request is not None else None
        causes = m.drift_causes
        if calibration is None or causes is None or not causes.available or not m.valid:
            continue
        curve = read_rest_curve(Path(_key(m.trial.dir)) / ANALYSIS_DIR / REST_CSV)
        if curve is None:
            continue
        key = (
            request.plan.model_dump_json(),
            request.twin.safety_override,
            calibration["robot"],
            causes.last_lap,
        )
        if key not in cache:
            cache[key] = systematic_displacement(
                request.plan, request.twin.safety_override, calibration, causes.last_lap
            )
        rest_xy, valid = curve
        if len(rest_xy) == len(cache[key]):
            sections[m.trial.dir] = {"calibration": calibration, **split_rest(rest_xy, valid, cache[key])}
    return calibrations, sections


def _key(trial_dir: str | Path) -> str:
    return str(Path(trial_dir).resolve())


def requests_of(trial_dirs: list[Path]) -> dict[str, Any]:
    """trial directory (as metrics name it) -> its TrialRequest, for the trials whose trial.yaml reads."""
    from fieldtest.record import TrialFormatError, read_trial

    out = {}
    for d in trial_dirs:
        try:
            out[str(d)] = read_trial(d).request
        except (TrialFormatError, OSError):
            continue
    return out


def base_lines(calibrations: dict[str, dict], per_trial: list[dict]) -> list[str]:
    """compare.md section: each robot's calibration and every trial's rest split."""
    if not calibrations:
        return []
    out = [
        "## The rest drift: the base's own part",
        "",
        "Per robot, UMBmark over its complete, valid runs in both directions (all configurations): the "
        "right/left wheel diameter ratio E_d and the wheelbase factor E_b. Per trial, the rest of the "
        "drift by cause split into what those errors make of the planned laps (systematic) and what is "
        "left (slip, floor, mocap). Definitions: docs/analysis.md.",
        "",
        "| robot | runs cw / ccw | E_d (D_right / D_left) | E_b (wheelbase) |",
        "| --- | --- | --- | --- |",
    ]
    out += [
        f"| {c['robot']} | {c['runs_cw']} / {c['runs_ccw']} | {c['wheel_diameter_ratio']:.5f} | "
        f"{c['wheelbase_factor']:.5f} |"
        for c in calibrations.values()
    ]
    split = [t for t in per_trial if t.get("base")]
    if split:
        out += ["", "| trial | configuration | rest (mm) | systematic (mm) | residual (mm) |"]
        out += ["| --- | --- | --- | --- | --- |"]
        for t in sorted(split, key=lambda t: t["name"]):
            b = t["base"]
            out.append(
                f"| {t['name']} | {t['middleware']} / {t['security']} / {t['network']} | "
                f"{_mm(t.get('rest'))} | {_mm(b['systematic_m'])} | {_mm(b['residual_m'])} |"
            )
    return out + [""]


def _mm(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1000:.2f}"


def load_calibration(path: str | Path, trial_dir: str | Path) -> dict:
    """The calibration of the trial's robot from a base_calibration.json (compare writes it: robot ->
    calibration) or one calibration object; AnalysisError (one line naming the file) otherwise."""
    import json

    from fieldtest.record import read_trial

    from .loading import AnalysisError

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise AnalysisError(f"{path}: not a readable JSON file ({exc})") from None
    if isinstance(data, dict) and "wheel_diameter_ratio" in data:
        entry = data
    else:
        robot = robot_label(read_trial(trial_dir).request)
        entry = data.get(robot) if isinstance(data, dict) else None
        if entry is None:
            known = ", ".join(data) if isinstance(data, dict) else "none"
            raise AnalysisError(f"{path}: no calibration for robot {robot!r} (it has: {known})")
    for key in ("wheel_diameter_ratio", "wheelbase_factor"):
        if not isinstance(entry.get(key), (int, float)) or not 0.5 < entry[key] < 2:
            raise AnalysisError(f"{path}: {key} missing or not a ratio near 1")
    return {"robot": entry.get("robot", ""), **entry}


def record_split(trial_dir: str | Path, section: dict) -> bool:
    """Write the split into the trial's metrics.json (``drift_causes.base``) and report.md, as
    ``fieldtest analyze --base-calibration`` would; False if its analysis cannot be rewritten."""
    import json

    from .analyze import REPORT_FILE
    from .metrics import METRICS_FILE, MetricsError, metrics_from
    from .report import write_report

    path = Path(_key(trial_dir)) / ANALYSIS_DIR / METRICS_FILE
    try:
        data = json.loads(path.read_text())
        data["drift_causes"]["base"] = section
        written = metrics_from(data, path)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1, allow_nan=False))
        tmp.replace(path)
        if (path.parent / REPORT_FILE).exists():
            write_report(path.parent / REPORT_FILE, written)
    except (OSError, ValueError, KeyError, TypeError, MetricsError):
        return False
    return True
