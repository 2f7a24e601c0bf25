"""The stack verdict: did the stack itself add drift (loopback, no imperfections), and is each
trial valid by the machine's own timing faults (metrics ``stack.valid``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fieldtest.lifecycle import TrialResult
from fieldtest.record import TrialRequest

if TYPE_CHECKING:
    from fieldtest.analysis import Metrics

# On loopback with no imperfections the stack itself must add no drift: lap N vs lap 1.
STACK_DRIFT_LIMIT_M = 0.001


def print_stack_check(
    requests: list[TrialRequest], results: list[TrialResult], metrics: list[Metrics | None]
) -> None:
    """The stack check, for runs where every trial completed (a stopped one has no last lap)."""
    if all(r.end_reason == "completed" for r in results):
        if (check := stack_drift_check(requests, metrics)) is not None:
            print(check)


def stack_drift_check(requests: list[TrialRequest], metrics: list[Metrics | None]) -> str | None:
    """One line on whether the stack added drift: on loopback with no imperfections every trial's
    lap drift should stay within ``STACK_DRIFT_LIMIT_M``. None where that does not apply."""
    if any(r.network != "loopback" or r.faults or r.twin.has_imperfections() for r in requests):
        return None
    figures = []
    for request, m in zip(requests, metrics, strict=True):
        value = m.drift.mean_m if m is not None and m.drift.available else None
        figures.append((request.transport.middleware, value))
    shown = ", ".join(f"{name} {'n/a' if v is None else f'{v * 1000:.1f}'}" for name, v in figures)
    limit_mm = f"{STACK_DRIFT_LIMIT_M * 1000:g} mm"
    over = [name for name, v in figures if v is None or v > STACK_DRIFT_LIMIT_M]
    if not over:
        return f"stack check: lap drift within {limit_mm} on loopback in every trial (mm: {shown})"
    return (
        f"stack check NOT met: lap drift over {limit_mm} (or not measured) on loopback for {', '.join(over)}"
        f" (mm: {shown}); this machine's scheduling adds drift (docs/benchmarks.md, 'Drift on loopback')"
    )


def _validity(m: Metrics | None) -> bool | None:
    """stack.valid: True, False, or None (not analyzed, or no stack figures to judge by)."""
    return m.stack.valid if m is not None and m.stack is not None else None


def invalid_trials(metrics: list[Metrics | None]) -> list[int]:
    """Indices of trials whose stack faults made them invalid (metrics stack.valid false)."""
    return [i for i, m in enumerate(metrics) if _validity(m) is False]


def _caution_lines(requests: list[TrialRequest], metrics: list[Metrics | None]) -> list[str]:
    """Trials kept as valid whose latency tails may still hold the hypervisor's pauses."""
    cautioned = [
        r.name
        for r, m in zip(requests, metrics, strict=True)
        if m is not None and m.stack is not None and m.stack.cautions and m.stack.valid is not False
    ]
    if not cautioned:
        return []
    return [
        f"  caution: {', '.join(cautioned)} ran under CPU steal: within bounds for the motion, but their "
        "latency tails may hold the hypervisor's pauses (see their report.md)"
    ]


def verdict_lines(requests: list[TrialRequest], metrics: list[Metrics | None], reruns: int = 0) -> list[str]:
    """The final word for a newcomer: valid, or which trials are not, why, and what to do."""
    bad = [
        (r, m.stack)
        for r, m in zip(requests, metrics, strict=True)
        if m is not None and m.stack is not None and m.stack.valid is False
    ]
    unknown = [r for r, m in zip(requests, metrics, strict=True) if _validity(m) is None]
    rerun_note = f" ({reruns} re-run(s) of invalid trials)" if reruns else ""
    caution = _caution_lines(requests, metrics)
    if not bad and not unknown:
        return [
            f"verdict: VALID - the machine's own timing stayed within bounds in every trial{rerun_note}",
            *caution,
        ]
    lines = []
    if bad:
        lines.append(f"verdict: NOT VALID for {', '.join(r.name for r, _ in bad)}{rerun_note}:")
        for r, stack in bad:
            lines.append(f"  {r.name}: {'; '.join(stack.invalid_reasons)}")
        lines.append(f"  what to do: {bad[0][1].advice}")
    if unknown:
        lines.append(
            f"verdict: validity unknown for {', '.join(r.name for r in unknown)} (see their report.md)"
        )
    return lines + caution
