"""Trial analysis: drift between laps, error against the ideal square (evo), link latency and loss.

``analyze_trial(trial_dir)`` writes ``<trial>/analysis/{metrics.json, report.md, *.png}`` and returns
the metrics; ``compare_trials(dirs, out_dir)`` tabulates many trials per middleware x security x
network. Definitions: docs/analysis.md.

The analysis runs in stages, each a sub-package that imports only the ones before it: ``loading``,
``metrics`` (per trial), ``causes`` (of the drift), ``prediction``, ``campaign``, ``rendering``.
``pipeline`` alone crosses them (a trial: loading -> metrics -> causes -> rendering; a campaign:
each trial's analysis, then the campaign's tables and page); ``cli`` and ``predictcli`` are the
commands (docs/architecture.md).

Importing the package is cheap: the analysis (numpy, pydantic, evo) loads on first use, so
``fieldtest analyze`` can fork its plot worker before that (fieldtest/analysis/rendering/plotprocess.py).
"""

from typing import TYPE_CHECKING

from fieldtest.analysis.loading import DEFAULT_MAX_GAP_S
from fieldtest.lazy import lazy_attributes

_LAZY = {
    "METRICS_VERSION": ".metrics.schema",
    "Metrics": ".metrics.schema",
    "MetricsError": ".metrics.schema",
    "read_metrics": ".metrics.schema",
    "analyze_trial": ".pipeline",
    "AnalysisError": ".loading.trialdata",
    "compare_trials": ".pipeline",
}
__all__ = ["DEFAULT_MAX_GAP_S", *_LAZY]
__getattr__ = lazy_attributes(__name__, _LAZY, globals())

if TYPE_CHECKING:
    from .loading.trialdata import AnalysisError as AnalysisError
    from .metrics.schema import METRICS_VERSION as METRICS_VERSION
    from .metrics.schema import Metrics as Metrics
    from .metrics.schema import MetricsError as MetricsError
    from .metrics.schema import read_metrics as read_metrics
    from .pipeline import analyze_trial as analyze_trial
    from .pipeline import compare_trials as compare_trials
