"""What the twin host and robot processes share: reading the request, outcome updates, closing the link."""

from __future__ import annotations

import fcntl
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from fieldtest.record import TRIAL_FILE, TrialOutcome, TrialRequest, read_trial, write_trial

# A middleware thread waiting for the GIL gets it within this long (Python's default is 5 ms,
# which shows up as millisecond spikes in the measured latency and in when commands apply).
GIL_SWITCH_S = 0.0002
LOCK_FILE = ".trial.lock"  # every process that rewrites trial.yaml mid-trial holds this lock


class TwinConfigError(ValueError):
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


def warm_up_codecs(*typenames: str) -> None:
    """Build rosbags' (de)serializers now: the first use of a type compiles them (10-20 ms),
    which would otherwise land inside the first command's measured latency."""
    from fieldtest import rosmsg

    samples = {
        rosmsg.TWIST_STAMPED: rosmsg.command(0, 0, 0.0, 0.0),
        rosmsg.TWIST: rosmsg.twist(0.0, 0.0),
        rosmsg.HEADER: rosmsg.header(0, "seq:0"),
        rosmsg.POSE_STAMPED: rosmsg.pose_stamped(0, "w", (0, 0, 0), (0, 0, 0, 1)),
        rosmsg.CLOCK_PROBE: rosmsg.msg_class(rosmsg.CLOCK_PROBE)(
            id=0, t1=rosmsg.time_msg(0), t2=rosmsg.time_msg(0), t3=rosmsg.time_msg(0)
        ),
        rosmsg.COMMAND_RECEIPT: rosmsg.msg_class(rosmsg.COMMAND_RECEIPT)(
            seq=0,
            sent=rosmsg.time_msg(0),
            received=rosmsg.time_msg(0),
            clock_offset_s=0.0,
            latency_s=0.0,
            twist=rosmsg.twist(0.0, 0.0),
        ),
    }
    for typename in typenames:
        msg = samples.get(typename)
        if msg is None:
            continue
        rosmsg.deserialize(rosmsg.serialize(msg, typename), typename)


def update_outcome(trial_dir: Path, change: Callable[[TrialOutcome], None]) -> bool:
    """Apply ``change`` to trial.yaml's outcome under the trial lock; False if there is no trial.yaml."""
    if not (trial_dir / TRIAL_FILE).is_file():
        return False
    with (trial_dir / LOCK_FILE).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            record = read_trial(trial_dir)
            change(record.outcome)
            write_trial(trial_dir, record)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return True


def write_status(path: Path, status: dict[str, Any]) -> None:
    """A small JSON summary next to the bag (atomic), readable even without trial.yaml."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(status, indent=2, default=str) + "\n")
    tmp.replace(path)


TRANSPORT_CLOSE_TIMEOUT_S = 5.0


def close_transport(transport: Any, who: str, timeout_s: float = TRANSPORT_CLOSE_TIMEOUT_S) -> bool:
    """Leave the link, giving up after ``timeout_s``: a middleware that hangs on close must not keep
    the process from closing its bag and status. False (and a warning line) if it hung; the caller
    then ends with ``os._exit`` after its own shutdown, as the hung library threads may block exit."""
    closer = threading.Thread(target=transport.close, name=f"{who}-transport-close", daemon=True)
    closer.start()
    closer.join(timeout_s)
    if closer.is_alive():
        say(f"WARNING {who}: the middleware did not close within {timeout_s:g} s; recording kept")
        return False
    return True


def say(line: str) -> None:
    """One status line on stdout, flushed at once (the runner watches the process log)."""
    print(line, flush=True)
