"""The robot's count of missing commands: gaps among what the host sent, not the plan it never sent."""

from __future__ import annotations

import pytest

from fieldtest.endpoints.receiver import RobotStats

N = 1920  # plan ticks; the stop burst is numbered N, N+1, ...


def _stats(seqs, plan_ticks=N) -> RobotStats:
    stats = RobotStats(plan_ticks=plan_ticks)
    for seq in seqs:
        stats.add(seq, 0)
    return stats


@pytest.mark.parametrize("stopped_after", [1, 204, N - 1, N])
def test_a_trial_stopped_early_misses_nothing(stopped_after):
    assert _stats([*range(stopped_after), *range(N, N + 5)]).missing() == 0


def test_gaps_in_the_plan_and_in_the_burst_count():
    seqs = [s for s in range(300) if s not in (10, 11, 250)] + [N + 1, N + 3]  # burst: N, N+2 lost
    assert _stats(seqs).missing() == 3 + 2


def test_without_a_plan_length_every_gap_counts():
    assert _stats([0, 1, 5], plan_ticks=None).missing() == 3
