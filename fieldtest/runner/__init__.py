"""The twin runner: one trial (``twintrial``), batches and re-runs, the stack verdict, the command lines."""

from fieldtest.runner.twintrial import (
    DEFAULT_RUNS_DIR,
    QUICK_PLAN,
    STACK_DRIFT_LIMIT_M,
    TrialResult,
    campaign_main,
    demo_main,
    invalid_trials,
    parallel_from_headroom,
    run_twin_trial,
    stack_drift_check,
    trial_main,
    verdict_lines,
)

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
