"""Which robot drove a trial, and that robot's base calibration from compare's base_calibration.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fieldtest.analysis.loading.trialdata import AnalysisError
from fieldtest.plan import validation_message
from fieldtest.record import TrialFormatError, TrialRequest, read_trial

CALIBRATION_FILE = "base_calibration.json"


class BaseCalibration(BaseModel):
    """One robot's base errors as the rest split uses them: the right/left wheel diameter ratio E_d
    and the wheelbase factor E_b, with the UMBmark figures they came from when compare found them."""

    # a hand-written calibration may carry more keys; they stay in what is written back
    model_config = ConfigDict(extra="allow", frozen=True)

    robot: str = ""
    # ratios near 1: anything else is a wrong entry, not a base
    wheel_diameter_ratio: float = Field(gt=0.5, lt=2)
    wheelbase_factor: float = Field(gt=0.5, lt=2)
    alpha_deg: float | None = None
    beta_deg: float | None = None
    runs_cw: int | None = None
    runs_ccw: int | None = None

    def as_json(self) -> dict[str, Any]:
        """The JSON object (base_calibration.json entry, metrics.json): only the keys it was given."""
        return self.model_dump(exclude_unset=True)


def robot_label(request: TrialRequest) -> str:
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


def requests_of(trial_dirs: list[Path]) -> dict[str, TrialRequest]:
    """trial directory (as metrics name it) -> its TrialRequest, for the trials whose trial.yaml reads."""
    out = {}
    for d in trial_dirs:
        try:
            out[str(d)] = read_trial(d).request
        except (TrialFormatError, OSError):
            continue
    return out


def load_calibration(path: str | Path, trial_dir: str | Path) -> BaseCalibration:
    """The calibration of the trial's robot from a base_calibration.json (compare writes it: robot ->
    calibration) or one calibration object; AnalysisError (one line naming the file) otherwise."""
    try:
        data: object = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise AnalysisError(f"{path}: not a readable JSON file ({exc})") from None
    entry = data if isinstance(data, dict) and "wheel_diameter_ratio" in data else None
    if entry is None:
        robot = robot_label(read_trial(trial_dir).request)
        entry = data.get(robot) if isinstance(data, dict) else None
        if not isinstance(entry, dict):
            known = ", ".join(data) if isinstance(data, dict) else "none"
            raise AnalysisError(f"{path}: no calibration for robot {robot!r} (it has: {known})")
    try:
        return BaseCalibration.model_validate({"robot": entry.get("robot", ""), **entry})
    except ValidationError as exc:
        raise AnalysisError(f"{path}: not a calibration ({validation_message(exc)})") from None
