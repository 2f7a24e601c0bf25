"""Stack validity: the bounds on the machine's own faults, each swept across its edge."""

from types import SimpleNamespace

import pytest

from fieldtest.analysis.stack import (
    STACK_DRIFT_BOUND_M,
    STEAL_BOUND_PCT,
    STEAL_BURST_BOUND_PCT,
    stack_metrics,
)


def _judge(machine: dict | None, stack_drift_m: float = 0.0002) -> dict:
    """stack_metrics of a trial whose bags hold no commands (no timing errors): only the recorded
    stack figures and the drift split are judged."""
    outcome = SimpleNamespace(stack={"machine": machine} if machine is not None else {})
    data = SimpleNamespace(record=SimpleNamespace(outcome=outcome), commands=None, receipts=None)
    return stack_metrics(
        data, clock=None, causes={"available": True, "stack_m": stack_drift_m}, link_emulated=False
    )


def _machine(steal_pct: float, steal_max_pct: float) -> dict:
    return {"steal_pct": steal_pct, "steal_max_pct": steal_max_pct, "busy_pct": 20.0, "cpu_pressure_pct": 1.0}


@pytest.mark.parametrize("factor", [0.0, 0.5, 0.99, 1.01, 1.5, 10.0])
def test_steal_over_the_trial_beyond_its_bound_makes_the_trial_invalid(factor):
    steal = factor * STEAL_BOUND_PCT
    out = _judge(_machine(steal, steal))  # a steady share: the worst half second is the average
    assert out["valid"] is (factor <= 1)
    if factor > 1:
        assert out["invalid_reasons"] == [
            f"the hypervisor took {steal:.1f} % of CPU time (up to {steal:.0f} % in half a second; "
            f"bounds {STEAL_BOUND_PCT:g} % and {STEAL_BURST_BOUND_PCT:g} %)"
        ]
        assert "CPU steal" in out["advice"] and "re-run" in out["advice"]


@pytest.mark.parametrize("factor", [0.5, 0.99, 1.01, 2.0, 5.0])
def test_a_burst_of_steal_beyond_its_bound_makes_the_trial_invalid_even_when_the_average_is_low(factor):
    out = _judge(_machine(0.5, factor * STEAL_BURST_BOUND_PCT))
    assert out["valid"] is (factor <= 1)
    assert (
        out["bound"]["steal_pct"] == STEAL_BOUND_PCT
        and out["bound"]["steal_max_pct"] == STEAL_BURST_BOUND_PCT
    )


def test_steal_and_drift_are_judged_apart_and_both_reasons_given():
    assert _judge(_machine(0.0, 0.0), stack_drift_m=2 * STACK_DRIFT_BOUND_M)["valid"] is False
    out = _judge(_machine(3 * STEAL_BOUND_PCT, 50.0), stack_drift_m=2 * STACK_DRIFT_BOUND_M)
    assert len(out["invalid_reasons"]) == 2 and "hypervisor" in out["invalid_reasons"][1]


def test_a_trial_without_a_machine_monitor_is_not_judged_on_steal():
    assert _judge(None)["valid"] is True
    assert _judge({})["valid"] is True
