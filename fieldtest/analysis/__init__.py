"""Trial analysis: drift between laps, error against the ideal square (evo), link latency and loss.

``analyze_trial(trial_dir)`` writes ``<trial>/analysis/{metrics.json, report.md, *.png}`` and returns
the metrics; ``compare_trials(dirs, out_dir)`` tabulates many trials per middleware x security x
network. Definitions: docs/analysis.md.

Importing the package is cheap: the analysis (numpy, pydantic, evo) loads on first use, so
``fieldtest analyze`` can fork its plot worker before that (fieldtest/analysis/plotworker.py).
"""

from fieldtest.lazy import lazy_attributes

DEFAULT_MAX_GAP_S = 0.1  # longest mocap gap bridged by interpolation (docs/analysis.md)

_LAZY = {
    "METRICS_VERSION": ".metrics",
    "Metrics": ".metrics",
    "MetricsError": ".metrics",
    "read_metrics": ".metrics",
    "analyze_trial": ".analyze",
    "AnalysisError": ".loading",
    "compare_trials": ".compare",
}
__all__ = ["DEFAULT_MAX_GAP_S", *_LAZY]
__getattr__ = lazy_attributes(__name__, _LAZY, globals())
