"""The twin runner: one trial (``twintrial``), batches and re-runs (``batches``), the stack
verdict (``verdict``), the command lines (``cli``). The lifecycle it shares with the lab runner
and the perf runners is ``fieldtest.lifecycle``."""

from fieldtest.lifecycle import TrialResult
from fieldtest.runner.batches import parallel_from_headroom
from fieldtest.runner.cli import campaign_main, demo_main, trial_main
from fieldtest.runner.twintrial import DEFAULT_RUNS_DIR, QUICK_PLAN, run_twin_trial
from fieldtest.runner.verdict import STACK_DRIFT_LIMIT_M, invalid_trials, stack_drift_check, verdict_lines

__all__ = [
    "DEFAULT_RUNS_DIR",
    "QUICK_PLAN",
    "STACK_DRIFT_LIMIT_M",
    "TrialResult",
    "campaign_main",
    "demo_main",
    "invalid_trials",
    "parallel_from_headroom",
    "run_twin_trial",
    "stack_drift_check",
    "trial_main",
    "verdict_lines",
]
