"""Trial analysis: drift between laps, error against the ideal square (evo), link latency and loss.

``analyze_trial(trial_dir)`` writes ``<trial>/analysis/{metrics.json, report.md, *.png}`` and returns
the metrics; ``compare_trials(dirs, out_dir)`` tabulates many trials per middleware x security x
network. Definitions: docs/analysis.md.

The analysis runs in stages, each a sub-package that imports only the ones before it: ``loading``,
``metrics`` (per trial), ``causes`` (of the drift), ``prediction``, ``campaign``, ``rendering``.
``pipeline`` alone crosses them (a trial: loading -> metrics -> causes -> rendering; a campaign:
each trial's analysis, then the campaign's tables and page); ``cli`` and ``predictcli`` are the
commands (docs/architecture.md). Modules outside the package import only the package's names
below, never a stage module.

Importing the package is cheap: the analysis (numpy, pydantic, evo) loads on first use, so
``fieldtest analyze`` can fork its plot worker before that (fieldtest/analysis/rendering/plotprocess.py).
"""

from typing import TYPE_CHECKING

from fieldtest.analysis.loading import DEFAULT_MAX_GAP_S
from fieldtest.lazy import lazy_attributes

# The package's public names, each loaded from its stage module on first use: modules outside the
# package import these, never a stage module (tests/test_import_cycles.py).
_LAZY = {
    "METRICS_FILE": ".metrics.schema",
    "METRICS_VERSION": ".metrics.schema",
    "Metrics": ".metrics.schema",
    "MetricsError": ".metrics.schema",
    "read_metrics": ".metrics.schema",
    "link_behind_reasons": ".causes.stackfaults",
    "ALPHA": ".campaign.power",
    "POWER": ".campaign.power",
    "pooled_sd": ".campaign.power",
    "repetitions_needed": ".campaign.power",
    "smallest_difference": ".campaign.power",
    "differ": ".campaign.intervals",
    "add_base_record": ".pipeline",
    "analyze_trial": ".pipeline",
    "AnalysisError": ".loading.trialdata",
    "compare_trials": ".pipeline",
}
__all__ = ["DEFAULT_MAX_GAP_S", *_LAZY]
__getattr__ = lazy_attributes(__name__, _LAZY, globals())

if TYPE_CHECKING:
    from .campaign.intervals import differ as differ
    from .campaign.power import ALPHA as ALPHA
    from .campaign.power import POWER as POWER
    from .campaign.power import pooled_sd as pooled_sd
    from .campaign.power import repetitions_needed as repetitions_needed
    from .campaign.power import smallest_difference as smallest_difference
    from .causes.stackfaults import link_behind_reasons as link_behind_reasons
    from .loading.trialdata import AnalysisError as AnalysisError
    from .metrics.schema import METRICS_FILE as METRICS_FILE
    from .metrics.schema import METRICS_VERSION as METRICS_VERSION
    from .metrics.schema import Metrics as Metrics
    from .metrics.schema import MetricsError as MetricsError
    from .metrics.schema import read_metrics as read_metrics
    from .pipeline import add_base_record as add_base_record
    from .pipeline import analyze_trial as analyze_trial
    from .pipeline import compare_trials as compare_trials
