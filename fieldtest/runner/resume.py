"""``fieldtest campaign --resume``: a campaign's trials that already have a record worth keeping
in its folder are not run again (a campaign that was interrupted, or whose repetitions were raised).

A record is kept for a planned trial when it asked for the same trial (``twintrial.as_asked``: the
same name, seed, plan, network, middleware, settings and twin, whatever addresses and ports the
runner chose), completed, and was analyzed and not found invalid by the machine's own timing. Of
several such records the newest is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fieldtest.analysis import METRICS_FILE, Metrics, read_metrics
from fieldtest.record import TrialRequest
from fieldtest.record.recordnames import ANALYSIS_DIR
from fieldtest.record.trial import read_trial
from fieldtest.runner.twintrial import as_asked
from fieldtest.runner.verdict import invalid_trials


@dataclass(frozen=True)
class KeptTrial:
    request: TrialRequest
    trial_dir: Path
    metrics: Metrics


def _worth_keeping(trial_dir: Path) -> tuple[TrialRequest, Metrics] | None:
    try:
        record = read_trial(trial_dir)
        metrics = read_metrics(trial_dir / ANALYSIS_DIR / METRICS_FILE)
    except (OSError, ValueError):
        return None  # not analyzed, or not a record this kit reads: run the trial again
    if record.outcome.end_reason != "completed" or invalid_trials([metrics]):
        return None
    return record.request, metrics


def kept_trials(requests: list[TrialRequest], out: Path) -> tuple[list[TrialRequest], list[KeptTrial]]:
    """(the requests still to run, the records kept for the others), both in request order."""
    found: dict[str, tuple[Path, Metrics]] = {}
    for trial_yaml in sorted(out.glob("*/trial.yaml")):  # trial ids start with their time: newest last
        worth = _worth_keeping(trial_yaml.parent)
        if worth is not None:
            asked, metrics = worth
            found[as_asked(asked).model_dump_json()] = (trial_yaml.parent, metrics)
    left, kept = [], []
    for request in requests:
        record = found.get(as_asked(request).model_dump_json())
        if record is None:
            left.append(request)
        else:
            kept.append(KeptTrial(request, *record))
    return left, kept
