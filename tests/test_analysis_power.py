"""Repetitions needed to resolve a difference of lap drift (fieldtest.analysis.campaign.power).

- The size against the exact power of the two-sample t test, computed here independently (noncentral
  t, scipy): n reaches the power and n - 1 does not, swept over the effect size, alpha and power; and
  against the t test's tabulated sizes (effect 0.5: 64, 0.8: 26, 1: 17 at alpha 0.05, 80 %).
- The smallest resolvable difference inverts it; the pooled spread is the within-configuration one.
- compare reports it per network, from the repetitions' spread, and --resolve picks the differences.
"""

import math

import numpy as np
import pytest
from scipy import stats

from fieldtest.analysis.campaign.power import (
    pooled_sd,
    power_lines,
    power_table,
    repetitions_needed,
    smallest_difference,
)


def exact_power(n: int, effect: float, alpha: float) -> float:
    dof = 2 * n - 2
    crit = stats.t.ppf(1 - alpha / 2, dof)
    nc = effect * math.sqrt(n / 2)
    return float(stats.nct.sf(crit, dof, nc) + stats.nct.cdf(-crit, dof, nc))


@pytest.mark.parametrize("effect", [0.2, 0.35, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0])
@pytest.mark.parametrize(("alpha", "power"), [(0.05, 0.8), (0.05, 0.9), (0.01, 0.8)])
def test_the_size_is_the_smallest_the_exact_t_test_accepts(effect, alpha, power):
    n = repetitions_needed(1.0, effect, alpha, power)
    assert exact_power(n, effect, alpha) >= power
    if n > 2:
        assert exact_power(n - 1, effect, alpha) < power


@pytest.mark.parametrize("sd", [0.1, 2.0, 35.0])
def test_units_cancel_and_the_smallest_difference_inverts_the_size(sd):
    for effect, n in ((0.5, 64), (0.8, 26), (1.0, 17)):
        assert repetitions_needed(sd, effect * sd) == n
    for n in (2, 3, 7, 20):
        delta = smallest_difference(sd, n)
        assert exact_power(n, delta / sd, 0.05) == pytest.approx(0.8, abs=1e-6)
        assert repetitions_needed(sd, delta * 1.001) <= n < repetitions_needed(sd, delta * 0.97)


def test_pooled_spread_is_within_configurations():
    rng = np.random.default_rng(4)
    groups = [list(rng.normal(mean, 2.0, 40)) for mean in (0.0, 50.0, -30.0)]  # far apart means
    sd, dof = pooled_sd(groups + [[7.0]])  # a single value adds nothing
    assert dof == 117
    assert sd == pytest.approx(2.0, rel=0.15)


def test_power_table_per_network():
    groups = [("wifi", [1.0, 3.0]), ("wifi", [10.0, 12.0]), ("4g", [5.0])]
    (table,) = power_table(groups, (0.002, 0.02))
    assert table["network"] == "wifi" and table["dof"] == 2
    assert table["pooled_sd_mm"] == pytest.approx(math.sqrt(2))
    assert [e["n"] for e in table["needed"]] == [repetitions_needed(math.sqrt(2), d) for d in (2.0, 20.0)]
    text = "\n".join(power_lines([table]))
    assert "To resolve a difference in lap drift at 80% power: 2 mm: n = " in text


def test_compare_pools_the_spread_within_configuration_and_direction(tmp_path):
    """Synthetic trials with known last-lap shifts: two directions of one configuration whose drifts
    differ by far more than their spread; the pooled SD is the within-group one."""
    from fieldtest.analysis import compare_trials
    from fieldtest.plan import SquarePlan
    from fieldtest.testkit.synth import SynthSpec, synthesize

    shifts_mm = {"left": (20.0, 22.0, 24.0), "right": (2.0, 3.0, 4.0)}
    for direction, shifts in shifts_mm.items():
        for rep, shift in enumerate(shifts):
            plan = SquarePlan(laps=2, side_duration_s=1.5, turn_rate_dps=90.0, turn_direction=direction)
            spec = SynthSpec(
                name=f"{direction}-{rep}",
                plan=plan,
                network="wifi",
                repetition=rep,
                last_lap_shift_m=(shift / 1e3, 0),
            )
            synthesize(tmp_path / "runs" / spec.name, spec)
    result = compare_trials([tmp_path / "runs"], tmp_path / "out", page=False, resolve_m=(0.002,))
    (table,) = result["power"]
    # the drift mean follows the shift: lap 2 is the last lap, shifted whole
    expected_sd = math.sqrt((np.var([20, 22, 24], ddof=1) + np.var([2, 3, 4], ddof=1)) / 2)
    assert table["dof"] == 4
    assert table["pooled_sd_mm"] == pytest.approx(expected_sd, rel=0.05)
    assert table["needed"][0]["n"] == repetitions_needed(table["pooled_sd_mm"], 2.0)
    assert f"2 mm: n = {table['needed'][0]['n']}" in (tmp_path / "out" / "compare.md").read_text()
