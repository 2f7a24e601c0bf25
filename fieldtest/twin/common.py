"""What the twin host and robot processes share: reading the request and the GIL switch.

The endpoint logic both processes run (and the lab runs too) is in ``fieldtest.endpoints``."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from fieldtest.errors import FieldtestError
from fieldtest.record import TrialRequest, read_trial

# A middleware thread waiting for the GIL gets it within this long (Python's default is 5 ms,
# which shows up as millisecond spikes in the measured latency and in when commands apply).
GIL_SWITCH_S = 0.0002


class TwinConfigError(FieldtestError, ValueError):
    """A request file the twin processes cannot use; the message names the file."""


def load_request(trial_dir: Path, config: Path | None) -> TrialRequest:
    """The TrialRequest from ``config`` (JSON or YAML) if given, else from ``trial_dir/trial.yaml``."""
    if config is None:
        return read_trial(trial_dir).request  # raises TrialFormatError naming the file
    try:
        raw = yaml.safe_load(config.read_text())  # JSON is YAML too
    except OSError as exc:
        raise TwinConfigError(f"{config}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise TwinConfigError(f"{config}: not valid JSON or YAML ({str(exc).splitlines()[0]})") from None
    if isinstance(raw, dict) and "request" in raw and "format_version" in raw:
        raw = raw["request"]  # a whole trial.yaml given as --config
    if not isinstance(raw, dict):
        raise TwinConfigError(f"{config}: expected a mapping of TrialRequest fields")
    try:
        return TrialRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise TwinConfigError(f"{config}: {where}: {first['msg']}") from None
    except ValueError as exc:  # PlanError raised inside a validator
        raise TwinConfigError(f"{config}: {exc}") from None
