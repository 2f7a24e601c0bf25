"""The base's calibration per robot over a campaign (UMBmark over its runs in both directions) and
each trial's rest drift split with it (fieldtest.analysis.causes.restsplit; docs/analysis.md, "The
rest drift: the base's own part")."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fieldtest.analysis.campaign.umbmark import Umbmark, return_error_per_lap, umbmark
from fieldtest.analysis.causes.restsplit import REST_CSV, read_rest_curve, split_rest, systematic_displacement
from fieldtest.analysis.loading.trialrobot import BaseCalibration, robot_label
from fieldtest.analysis.metrics.schema import Metrics, RestSplit
from fieldtest.record import ANALYSIS_DIR, TrialRequest


def calibration_from(figures: Umbmark, robot: str) -> BaseCalibration:
    """The base's errors as the split uses them, from UMBmark's figures of one robot."""
    return BaseCalibration(
        robot=robot,
        wheel_diameter_ratio=figures.wheel_diameter_ratio,
        wheelbase_factor=figures.wheelbase_factor,
        alpha_deg=figures.alpha_deg,
        beta_deg=figures.beta_deg,
        runs_cw=figures.runs_cw,
        runs_ccw=figures.runs_ccw,
    )


def rest_return_error(m: Metrics) -> tuple[float, float] | None:
    """The return error per lap the command timing does not explain: the measured closing error less
    the arrival replay's (the nominal model's own, e.g. its last turn's ramp), per lap driven."""
    measured = return_error_per_lap(m)
    replay = m.drift_causes.replay_closing_m if m.drift_causes is not None else None
    laps = m.drift.last_lap
    if measured is None or replay is None or laps is None:
        return measured
    return measured[0] - replay[0] / laps, measured[1] - replay[1] / laps


def campaign_split(
    trials: list[Metrics], requests: dict[str, TrialRequest]
) -> tuple[dict[str, BaseCalibration], dict[str, RestSplit]]:
    """(calibration per robot, base section per trial directory) for the robots whose complete,
    valid trials include both directions. ``requests``: trial directory -> its TrialRequest."""
    requests = {_key(d): r for d, r in requests.items()}
    by_robot: dict[str, list] = {}
    for m in trials:
        if m.valid and _key(m.trial.dir) in requests:
            by_robot.setdefault(robot_label(requests[_key(m.trial.dir)]), []).append(m)
    calibrations: dict[str, BaseCalibration] = {}
    for robot, members in by_robot.items():
        if (u := umbmark(members, error_of=rest_return_error)) is not None:
            calibrations[robot] = calibration_from(u, robot)
    sections: dict[str, RestSplit] = {}
    cache: dict[tuple, np.ndarray] = {}
    for m in trials:
        request = requests.get(_key(m.trial.dir))
        calibration = calibrations.get(robot_label(request)) if request is not None else None
        causes = m.drift_causes
        if request is None or calibration is None or causes is None or not causes.available or not m.valid:
            continue
        if causes.last_lap is None:
            continue
        curve = read_rest_curve(Path(_key(m.trial.dir)) / ANALYSIS_DIR / REST_CSV)
        if curve is None:
            continue
        key = (
            request.plan.model_dump_json(),
            request.twin.safety_override,
            calibration.robot,
            causes.last_lap,
        )
        if key not in cache:
            cache[key] = systematic_displacement(
                request.plan, request.twin.safety_override, calibration, causes.last_lap
            )
        rest_xy, valid = curve
        if len(rest_xy) == len(cache[key]):
            sections[m.trial.dir] = split_rest(calibration, rest_xy, valid, cache[key])
    return calibrations, sections


def _key(trial_dir: str | Path) -> str:
    return str(Path(trial_dir).resolve())


def base_lines(calibrations: dict[str, BaseCalibration], per_trial: list[dict]) -> list[str]:
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
        f"| {c.robot} | {c.runs_cw} / {c.runs_ccw} | {c.wheel_diameter_ratio:.5f} | "
        f"{c.wheelbase_factor:.5f} |"
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
