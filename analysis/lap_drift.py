"""Per trial: the drift of every lap against lap 1, latency, loss and validity (an API example).

    .venv/bin/python analysis/lap_drift.py TRIAL_OR_FOLDER... [--reanalyze]

Trials are found below the given folders as ``fieldtest compare`` finds them; a trial without a
current ``analysis/metrics.json`` is analyzed first (no plots), so running this twice is fast.
"""

from __future__ import annotations

import argparse
import sys

from fieldtest.analysis import AnalysisError, Metrics, analyze_trial
from fieldtest.analysis.campaign.compare import current_metrics, find_trials
from fieldtest.record import BagError, TrialFormatError


def trial_line(metrics: Metrics) -> str:
    """One line: name, middleware/security/network, per-lap drift (mm), latency (ms), loss, validity."""
    drift, latency = metrics.drift, metrics.latency
    if drift.available:
        laps = " ".join(f"L{lap.lap}:{lap.mean_m * 1000:.1f}" for lap in drift.per_lap)
    else:
        laps = f"no drift ({drift.reason or 'not available'})"
    median = latency.one_way_ms.median if latency.one_way_ms else None
    median = "-" if median is None else f"{median:.2f}"
    loss = "-" if latency.loss_ratio is None else f"{latency.loss_ratio * 100:.1f}%"
    valid = "valid" if metrics.valid else "INVALID"
    config = "/".join(metrics.config)
    return f"{metrics.trial.name:<28} {config:<30} drift mm vs lap 1 {laps}  latency median {median} ms  loss {loss}  {valid}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", help="trial directories or folders holding them")
    parser.add_argument("--reanalyze", action="store_true", help="analyze every trial again")
    args = parser.parse_args(argv)
    try:
        trials = find_trials(args.dirs)
    except AnalysisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for trial_dir in trials:
        metrics = None if args.reanalyze else current_metrics(trial_dir)
        try:
            metrics = metrics or Metrics.model_validate(analyze_trial(trial_dir, plots=False))
        except (TrialFormatError, AnalysisError, BagError) as exc:
            print(f"{trial_dir.name:<28} skipped: {exc}")
            continue
        print(trial_line(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
