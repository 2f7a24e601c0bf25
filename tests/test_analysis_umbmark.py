"""Both directions (UMBmark): the base's systematic errors from clockwise and counter-clockwise runs.

- The formulas against exactly integrated return errors of a robot whose turns go alpha too far and
  whose sides curve by beta, swept over both signs and sizes: recovered to first order.
- End to end: synthetic trials in both directions whose turns go too far (SynthSpec.turn_scale), through
  analyze and compare, recover that turn error and no curvature.
"""

import cmath
import math

import pytest

from fieldtest.analysis import compare_trials
from fieldtest.analysis.campaign.umbmark import systematic_errors
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize

B = 0.233


def _return_error(side_m: float, alpha: float, beta: float, clockwise: bool) -> tuple[float, float]:
    """Where one lap ends, integrated exactly: sides are arcs turning beta to the left, corners turn
    90 deg + alpha in the lap's direction."""
    turn = -(math.pi / 2 + alpha) if clockwise else math.pi / 2 + alpha
    position, heading = 0j, 0.0
    for _ in range(4):
        if beta == 0:
            position += side_m * cmath.exp(1j * heading)
        else:  # an arc of length side_m: chord 2 R sin(beta / 2) along the mid heading
            chord = 2 * (side_m / beta) * math.sin(beta / 2)
            position += chord * cmath.exp(1j * (heading + beta / 2))
        heading += beta + turn
    return position.real, position.imag


@pytest.mark.parametrize("alpha_deg", [0.0, 0.4, -0.8])
@pytest.mark.parametrize("beta_deg", [0.0, 0.3, -0.6])
@pytest.mark.parametrize("side_m", [0.99, 4.0])
def test_turn_and_curvature_errors_are_recovered(alpha_deg, beta_deg, side_m):
    alpha, beta = math.radians(alpha_deg), math.radians(beta_deg)
    cw = [_return_error(side_m, alpha, beta, clockwise=True)]
    ccw = [_return_error(side_m, alpha, beta, clockwise=False)]
    u = systematic_errors(cw, ccw, side_m, B)
    # first order: the neglected terms are of the order of the angles squared
    tolerance = 2 * max(abs(alpha_deg), abs(beta_deg)) ** 2 * math.pi / 180 + 1e-9
    assert u.alpha_deg == pytest.approx(alpha_deg, abs=tolerance)
    assert u.beta_deg == pytest.approx(beta_deg, abs=tolerance)
    assert u.e_max_syst_m == pytest.approx(max(math.hypot(*cw[0]), math.hypot(*ccw[0])), abs=1e-12)
    assert u.wheelbase_factor == pytest.approx(90 / (90 + u.alpha_deg), abs=1e-12)
    if beta_deg:
        radius = side_m / 2 / math.sin(math.radians(u.beta_deg) / 2)
        assert u.wheel_diameter_ratio == pytest.approx((radius + B / 2) / (radius - B / 2), rel=1e-12)
        assert (u.wheel_diameter_ratio > 1) == (beta_deg > 0)  # curving left: the right wheel is larger
    else:
        assert u.wheel_diameter_ratio == 1.0


@pytest.mark.parametrize("alpha_deg", [0.5, -0.7])
def test_both_directions_through_analyze_and_compare(tmp_path, alpha_deg):
    for direction in ("left", "right"):
        for rep in range(2):
            plan = SquarePlan(laps=2, side_duration_s=1.5, turn_rate_dps=90.0, turn_direction=direction)
            spec = SynthSpec(
                name=f"{direction}-{rep}",
                plan=plan,
                network="wifi",
                repetition=rep,
                turn_scale=1 + alpha_deg / 90,
                mocap_phase_s=rep * 0.003,
                world_yaw_deg=40.0 + 90 * rep,
            )
            synthesize(tmp_path / "runs" / spec.name, spec)
    result = compare_trials([tmp_path / "runs"], tmp_path / "out")
    u = result["rows"][0]["umbmark"]
    assert (u["runs_cw"], u["runs_ccw"]) == (2, 2)
    # two laps: the second lap starts turned by 4 alpha, a second-order term like the formula's own
    assert u["alpha_deg"] == pytest.approx(alpha_deg, abs=0.05 * abs(alpha_deg))
    assert abs(u["beta_deg"]) < 0.05 * abs(alpha_deg)
    assert "## Both directions (UMBmark)" in (tmp_path / "out" / "compare.md").read_text()
    page = (tmp_path / "out" / "campaign.html").read_text()
    assert f"<td>{u['alpha_deg']:.3f}</td>" in page and "<h2>Both directions (UMBmark)</h2>" in page


def test_one_direction_only_gives_no_figures(tmp_path):
    spec = SynthSpec(plan=SquarePlan(laps=2, side_duration_s=1.5, turn_rate_dps=90.0), network="wifi")
    synthesize(tmp_path / "runs" / "a", spec)
    result = compare_trials([tmp_path / "runs"], tmp_path / "out", page=False)
    assert result["rows"][0]["umbmark"] is None
    assert "UMBmark" not in (tmp_path / "out" / "compare.md").read_text()
