"""Status an endpoint leaves behind: a line on stdout, a JSON status file, its part of trial.yaml."""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fieldtest.record import TRIAL_FILE, TrialOutcome, read_trial, write_trial

LOCK_FILE = ".trial.lock"  # every process that rewrites trial.yaml mid-trial holds this lock


def say(line: str) -> None:
    """One status line on stdout, flushed at once (the runner watches the process log)."""
    print(line, flush=True)


def write_status(path: Path, status: dict[str, Any]) -> None:
    """A small JSON summary next to the bag (atomic), readable even without trial.yaml."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(status, indent=2, default=str) + "\n")
    tmp.replace(path)


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
