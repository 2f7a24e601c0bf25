"""Stage 1, loading: a trial's record, bags and mocap read into arrays (``trialdata.TrialData``), and
which robot drove it. Imports no other stage.

Only plain constants here: ``fieldtest analyze`` reads them before it forks its plot worker.
"""

DEFAULT_MAX_GAP_S = 0.1  # longest mocap gap bridged by interpolation (docs/analysis.md)
