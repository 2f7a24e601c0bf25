"""Trial analysis: drift between laps, error against the ideal square (evo), link latency and loss.

``analyze_trial(trial_dir)`` writes ``<trial>/analysis/{metrics.json, report.md, *.png}`` and returns
the metrics; ``compare_trials(dirs, out_dir)`` tabulates many trials per middleware x security x
network. Definitions: docs/analysis.md.
"""

from .analyze import METRICS_VERSION, analyze_trial, read_metrics
from .loading import AnalysisError

__all__ = ["METRICS_VERSION", "AnalysisError", "analyze_trial", "compare_trials", "read_metrics"]


def compare_trials(dirs, out_dir, **kwargs):
    from .compare import compare_trials as _compare

    return _compare(dirs, out_dir, **kwargs)
