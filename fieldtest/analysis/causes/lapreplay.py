"""The Create 3 model driven by a command timeline: the lap-to-lap displacement and the closing error
that commands at given times make (nominal wheels, or a base's systematic errors). The drift's
causes, the base's calibration part and the prediction all replay commands through these."""

from __future__ import annotations

import numpy as np

from fieldtest.analysis.metrics.drift import phase_grid
from fieldtest.plan import REST_AFTER_S, SquarePlan
from fieldtest.twin.create3model import MAX_SUBSTEP_S, Create3Model, Imperfections, SafetyOverride, drive

MOVING_EPS = 1e-9


def planned_timeline(plan: SquarePlan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stream seconds, linear, angular) of the plan's ticks, with the stop at the first tick after."""
    sched = plan.schedule()
    return (
        np.append(sched.t_s, plan.n_ticks() * plan.tick_s),
        np.append(sched.linear_mps, 0.0),
        np.append(sched.angular_rps, 0.0),
    )


def _first_motion_s(times: np.ndarray, linear: np.ndarray, angular: np.ndarray) -> float | None:
    moving = (np.abs(linear) > MOVING_EPS) | (np.abs(angular) > MOVING_EPS)
    return float(times[np.argmax(moving)]) if moving.any() else None


def _in_time_order(
    times: np.ndarray, linear: np.ndarray, angular: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.argsort(times, kind="stable")
    return times[order], linear[order], angular[order]


def lap_displacement(
    times: np.ndarray,
    linear: np.ndarray,
    angular: np.ndarray,
    plan: SquarePlan,
    last_lap: int,
    safety_override: SafetyOverride,
    imperfections: Imperfections | None = None,
    max_substep_s: float = MAX_SUBSTEP_S,
) -> np.ndarray | None:
    """Replay commands at ``times`` (stream seconds) through the model (nominal: what the robot would
    do with perfect wheels); return d(tau) = p(last lap, tau) - p(first lap, tau) in the start frame
    (n x 2), laps counted from the first moving command."""
    times, linear, angular = _in_time_order(times, linear, angular)
    start = _first_motion_s(times, linear, angular)
    if start is None:
        return None
    tau = phase_grid(plan)
    first = start + tau
    last = start + (last_lap - 1) * plan.lap_s + tau
    model = Create3Model(safety_override, imperfections, max_substep_s=max_substep_s)
    poses = drive(model, times, linear, angular, np.concatenate([first, last]))
    n = len(tau)
    displacement: np.ndarray = poses[n:, :2] - poses[:n, :2]
    return displacement


def closing_displacement(
    times: np.ndarray, linear: np.ndarray, angular: np.ndarray, run_s: float, safety_override: SafetyOverride
) -> list[float] | None:
    """Where the nominal model, replaying these commands, rests after the run against where it started
    to move ((dx, dy), start frame): the closing error the command timing alone gives, taken as the
    measured closing is (the rest mean REST_AFTER_S after ``run_s`` of laps)."""
    times, linear, angular = _in_time_order(times, linear, angular)
    start = _first_motion_s(times, linear, angular)
    if start is None:
        return None
    end = start + run_s + sum(REST_AFTER_S) / 2
    poses = drive(Create3Model(safety_override), times, linear, angular, np.array([start, end]))
    return [float(v) for v in poses[1, :2] - poses[0, :2]]
