"""Stack validity: the bounds on the machine's own faults, each swept across its edge."""

from types import SimpleNamespace

import pytest

from fieldtest.analysis.causes.stackfaults import (
    LINK_FORWARDER_LATE_BOUND_MS,
    LINK_LAG_BOUND_MS,
    STACK_DRIFT_BOUND_M,
    STEAL_BOUND_PCT,
    STEAL_BURST_BOUND_PCT,
    stack_metrics,
)
from fieldtest.analysis.metrics.schema import DriftCauses, Stack


def _judge(
    machine: dict | None,
    stack_drift_m: float = 0.0002,
    link_simulator: dict | None = None,
    link_forwarder: dict | None = None,
) -> Stack:
    """stack_metrics of a trial whose bags hold no commands (no timing errors): only the recorded
    stack figures and the drift split are judged."""
    stack = {"machine": machine} if machine is not None else {}
    if link_simulator is not None:
        stack["link_simulator"] = link_simulator
    if link_forwarder is not None:
        stack["link_forwarder"] = link_forwarder
    outcome = SimpleNamespace(stack=stack)
    data = SimpleNamespace(record=SimpleNamespace(outcome=outcome), commands=None, receipts=None)
    return stack_metrics(
        data, clock=None, causes=DriftCauses(available=True, stack_m=stack_drift_m), link_emulated=False
    )


def _machine(steal_pct: float, steal_max_pct: float) -> dict:
    return {"steal_pct": steal_pct, "steal_max_pct": steal_max_pct, "busy_pct": 20.0, "cpu_pressure_pct": 1.0}


@pytest.mark.parametrize("factor", [0.0, 0.5, 0.99, 1.01, 1.5, 10.0])
def test_steal_beyond_its_bound_is_a_caution_the_motion_is_judged_by_the_stack_drift(factor):
    """What the hypervisor's pauses did to the motion is in the stack drift; steal alone does not
    make a trial invalid, but its report says the latency tails may hold the pauses."""
    steal = factor * STEAL_BOUND_PCT
    out = _judge(_machine(steal, steal))  # a steady share: the worst half second is the average
    assert out.valid is True and out.invalid_reasons == []
    if factor > 1:
        assert out.cautions == [
            f"the hypervisor took {steal:.1f} % of CPU time (up to {steal:.0f} % in half a second; above "
            f"{STEAL_BOUND_PCT:g} % and {STEAL_BURST_BOUND_PCT:g} %): what its pauses did to the motion is in "
            "the stack drift; the latency tails (p99, max) may hold them"
        ]
    else:
        assert out.cautions == []


@pytest.mark.parametrize("factor", [0.5, 0.99, 1.01, 2.0, 5.0])
def test_a_burst_of_steal_beyond_its_bound_is_a_caution_even_when_the_average_is_low(factor):
    out = _judge(_machine(0.5, factor * STEAL_BURST_BOUND_PCT))
    assert out.valid is True and bool(out.cautions) is (factor > 1)
    assert out.bound["steal_pct"] == STEAL_BOUND_PCT and out.bound["steal_max_pct"] == STEAL_BURST_BOUND_PCT


@pytest.mark.parametrize("drift_factor", [0.5, 2.0])
def test_under_steal_the_stack_drift_decides_and_the_advice_names_the_steal(drift_factor):
    out = _judge(_machine(3 * STEAL_BOUND_PCT, 50.0), stack_drift_m=drift_factor * STACK_DRIFT_BOUND_M)
    assert out.valid is (drift_factor <= 1) and out.cautions
    if drift_factor > 1:
        assert len(out.invalid_reasons) == 1 and "machine's own timing" in out.invalid_reasons[0]
        assert "CPU steal" in out.advice and "re-run" in out.advice


def test_a_trial_without_a_machine_monitor_is_not_judged_on_steal():
    assert _judge(None).valid is True
    assert _judge({}).valid is True


def _simulator(p99_ms: float, max_ms: float, bound_ms: float | None) -> dict:
    """What the ns-3 802.11 link records (fieldtest.netem.wifi80211.Wifi80211Link.record)."""
    record = {
        "lag_ms": {"samples": 30000, "p50": 0.05, "p90": 0.2, "p99": p99_ms, "max": max_ms},
        "cpu_pct": 12.0,
    }
    return record | ({"lag_bound_ms": bound_ms} if bound_ms is not None else {})


@pytest.mark.parametrize("bound_ms", [None, 0.5, 5.0])
@pytest.mark.parametrize("factor", [0.0, 0.5, 0.99, 1.01, 2.0, 20.0])
def test_a_link_simulator_behind_real_time_beyond_its_bound_makes_the_trial_invalid(factor, bound_ms):
    bound = LINK_LAG_BOUND_MS if bound_ms is None else bound_ms
    p99 = factor * bound
    out = _judge(_machine(0.0, 0.0), link_simulator=_simulator(p99, 3 * p99, bound_ms))
    assert out.valid is (factor <= 1)
    assert out.link_simulator["lag_bound_ms"] == bound and out.link_simulator["cpu_pct"] == 12.0
    if factor > 1:
        assert out.invalid_reasons == [
            f"the ns-3 802.11 link fell behind real time: lag p99 {p99:.1f} ms, max {3 * p99:.1f} ms "
            f"(bound {bound:g} ms at p99)"
        ]
        assert "--parallel 1" in out.advice


def test_a_single_late_wake_up_of_the_link_simulator_is_not_judged_a_fall_behind():
    """One spike (the hypervisor's, judged by the steal bounds) leaves the 99th percentile alone."""
    out = _judge(_machine(0.0, 0.0), link_simulator=_simulator(0.4, 40.0, None))
    assert out.valid is True and out.link_simulator["lag_ms"]["max"] == 40.0


def test_links_without_a_simulator_are_not_judged_on_lag():
    assert _judge(_machine(0.0, 0.0)).link_simulator is None


def _forwarder(p99_ms: float, max_ms: float, frames: int = 4000) -> dict:
    """What a trial records of the userspace link forwarders (linkfwd's stats, per node)."""
    way = {"tx": frames, "late_p50_us": 40, "late_p90_us": 90, "late_p99_us": int(1000 * p99_ms)}
    quiet = way | {"late_p99_us": 100, "late_max_us": 300}
    return {
        "robot": {"a2b": quiet, "b2a": way | {"late_max_us": int(1000 * max_ms)}},
        "host": {"a2b": quiet, "b2a": quiet},
    }


@pytest.mark.parametrize("factor", [0.0, 0.5, 0.99, 1.01, 2.0, 50.0])
def test_a_link_forwarder_sending_late_beyond_its_bound_makes_the_trial_invalid(factor):
    """The emulated link's own lateness adds to every frame's delay, as a simulator's lag does: the
    middleware would be charged with the machine's fault."""
    p99 = factor * LINK_FORWARDER_LATE_BOUND_MS
    out = _judge(_machine(0.0, 0.0), link_forwarder=_forwarder(p99, 4 * p99 + 1))
    assert out.valid is (factor <= 1)
    assert out.link_forwarder["robot"]["b2a"]["late_p99_ms"] == pytest.approx(int(1000 * p99) / 1000)
    assert out.link_forwarder["late_bound_ms"] == LINK_FORWARDER_LATE_BOUND_MS
    if factor > 1:
        assert out.invalid_reasons == [
            f"the link emulator sent frames late (robot downlink): p99 {int(1000 * p99) / 1000:.1f} ms, "
            f"max {int(1000 * (4 * p99 + 1)) / 1000:.1f} ms (bound {LINK_FORWARDER_LATE_BOUND_MS:g} ms at p99)"
        ]
        assert "link emulator" in out.advice


def test_one_late_frame_of_the_forwarder_is_not_judged_and_links_without_one_are_not_either():
    assert _judge(_machine(0.0, 0.0), link_forwarder=_forwarder(0.3, 80.0)).valid is True
    assert _judge(_machine(0.0, 0.0)).link_forwarder is None
    idle = _forwarder(50.0, 50.0, frames=0)  # a direction that carried nothing is not judged
    assert _judge(_machine(0.0, 0.0), link_forwarder=idle).valid is True
