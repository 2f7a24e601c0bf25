"""Drift split into causes (plan -> send -> arrival -> motion) on synthetic trials with known answers.

The synthetic robot is the Create 3 model driven by the commands at their arrival times, with the
last lap moved by a known shift: emission lateness, a link delay step and the robot's own shift
are each injected alone and together. The expected emission/link parts come from the plan's ideal
geometry (plan.ideal_pose), not from the model the analysis replays.
"""

import math

import numpy as np
import pytest

from fieldtest.analysis import analyze_trial
from fieldtest.analysis.metrics.drift import phase_grid
from fieldtest.analysis.metrics.schema import as_json
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize

PLAN = SquarePlan(side_duration_s=2.0, laps=3, start_delay_s=0.5)
LAST = PLAN.laps - 1


def _last_lap_late(delay_s: float) -> tuple[tuple[float, float, float], ...]:
    """Every command of the last lap (and after it) late by ``delay_s``."""
    return ((PLAN.lap_start_s(LAST), PLAN.total_s + 10.0, delay_s),)


def expected_drift_of_late_last_lap(delay_s: float) -> float:
    """Ideal geometry: the turn that ends the lap before lasts ``delay_s`` longer (the last lap is
    turned by w * delay about the start corner), and the last lap runs ``delay_s`` behind."""
    tau = phase_grid(PLAN)
    lap_frame = PLAN.lap_start_s(0)
    first = PLAN.ideal_pose(lap_frame + tau)[:, :2]
    behind = PLAN.ideal_pose(lap_frame + np.maximum(tau - delay_s, 0.0))[:, :2]
    w = PLAN.schedule().angular_rps[int(round((PLAN.lap_start_s(LAST) - PLAN.tick_s) / PLAN.tick_s))]
    c, s = math.cos(w * delay_s), math.sin(w * delay_s)
    last = np.column_stack([c * behind[:, 0] - s * behind[:, 1], s * behind[:, 0] + c * behind[:, 1]])
    return float(np.linalg.norm(last - first, axis=1).mean())


CASES = {
    # name: (spec fields, expected host_emission_m, link_m, rest_m)
    "on time": ({}, 0.0, 0.0, 0.0),
    "host 15 ms late": (
        {"send_late": _last_lap_late(0.015)},
        expected_drift_of_late_last_lap(0.015),
        0.0,
        0.0,
    ),
    "link 25 ms slower": (
        {"latency_steps": _last_lap_late(0.025)},
        0.0,
        expected_drift_of_late_last_lap(0.025),
        0.0,
    ),
    "robot shifted 4 mm": ({"last_lap_shift_m": (0.0, 0.004)}, 0.0, 0.0, 0.004),
    "all three": (
        {"send_late": _last_lap_late(0.01), "last_lap_shift_m": (0.003, 0.0), "latency_jitter_s": 0.0},
        expected_drift_of_late_last_lap(0.01),
        0.0,
        0.003,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_drift_causes_recover_the_injected_ones(tmp_path, case):
    fields, emission, link, rest = CASES[case]
    spec = SynthSpec(plan=PLAN, truth_from_commands=True, mocap_rate_hz=240.0, world_yaw_deg=-70.0, **fields)
    synthesize(tmp_path / "t", spec)
    causes = analyze_trial(tmp_path / "t", plots=False).drift_causes
    print(case, {k: v for k, v in as_json(causes).items() if k.endswith("_m")})
    assert causes.available
    assert causes.replay_drift_m["plan"] < 1e-4  # the model itself adds no lap-to-lap drift
    # geometry vs model: corner rounding by the acceleration limit differs by a few per cent
    assert causes.host_emission_m == pytest.approx(emission, rel=0.15, abs=1e-5)
    assert causes.link_m == pytest.approx(link, rel=0.15, abs=1e-5)
    assert causes.rest_m == pytest.approx(rest, abs=3e-4)  # mocap interpolation and start detection
    assert causes.stack_includes_link  # loopback: the link part is the machine's too
    assert causes.stack_m == pytest.approx(emission + link, rel=0.15, abs=1e-5)


def test_drift_causes_need_commands_on_both_ends(tmp_path):
    synthesize(tmp_path / "t", SynthSpec(plan=PLAN, truncate={"robot": 0.0}))
    causes = analyze_trial(tmp_path / "t", plots=False).drift_causes
    assert causes.available is False and causes.reason
