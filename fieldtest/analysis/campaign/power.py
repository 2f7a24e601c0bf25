"""How many repetitions resolve a given difference of lap drift between two configurations
(docs/analysis.md, "Repetitions needed (power)").

Two-sample, two-sided test of equal means at level ``alpha`` with power ``power``, the spread the
campaign measured: the pooled standard deviation s of the lap drift over the configurations of one
network (each configuration's valid, complete repetitions of one direction about their own mean).
Per configuration

    n = the smallest n >= 2 whose two-sample t test (2n - 2 degrees of freedom) has power >= ``power``:
        power(n) = P(|T'| > t_(1-alpha/2, 2n-2)),  T' noncentral t with noncentrality (delta / s) sqrt(n / 2)

starting from the closed form n0 = 2 (z_(1-alpha/2) + z_power)^2 s^2 / delta^2 + z_(1-alpha/2)^2 / 4
(the normal-theory size with Guenther's correction for the t test: W. C. Guenther, "Sample size
formulas for normal theory t tests", The American Statistician 35(4), 1981), which is within one of
it. With the campaign's own n repetitions, the smallest difference resolved is the delta at which
power(n) reaches ``power``.
"""

from __future__ import annotations

import math
from statistics import NormalDist

ALPHA, POWER = 0.05, 0.80
DEFAULT_DIFFERENCES_M = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02)


def _z_sum(alpha: float, power: float) -> tuple[float, float]:
    z_alpha = NormalDist().inv_cdf(1 - alpha / 2)
    return z_alpha, z_alpha + NormalDist().inv_cdf(power)


def t_test_power(n: int, effect: float, alpha: float = ALPHA) -> float:
    """Power of the two-sided two-sample t test with ``n`` per group at ``effect`` = delta / s."""
    from scipy import stats  # evo's dependency

    dof = 2 * n - 2
    crit = stats.t.ppf(1 - alpha / 2, dof)
    nc = effect * math.sqrt(n / 2)
    return float(stats.nct.sf(crit, dof, nc) + stats.nct.cdf(-crit, dof, nc))


def repetitions_needed(sd: float, difference: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Repetitions per configuration to resolve ``difference`` (same unit as ``sd``)."""
    if difference <= 0 or sd < 0:
        raise ValueError(f"difference {difference}, spread {sd}: the difference must be positive")
    if sd == 0:
        return 2
    effect = difference / sd
    z_alpha, z = _z_sum(alpha, power)
    n = max(2, math.ceil(2 * z * z / (effect * effect) + z_alpha * z_alpha / 4))
    while t_test_power(n, effect, alpha) < power:
        n += 1
    while n > 2 and t_test_power(n - 1, effect, alpha) >= power:
        n -= 1
    return n


def smallest_difference(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest difference ``n`` repetitions per configuration resolve (None below 2)."""
    if n < 2:
        return None
    lo, hi = 0.0, 1.0
    while t_test_power(n, hi, alpha) < power:
        hi *= 2
    for _ in range(60):  # bisection on the effect size
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_test_power(n, mid, alpha) < power else (lo, mid)
    return hi * sd


def pooled_sd(groups: list[list[float]]) -> tuple[float | None, int]:
    """(pooled standard deviation, its degrees of freedom) over groups of two values or more."""
    squares, dof = 0.0, 0
    for values in groups:
        if len(values) >= 2:
            mean = sum(values) / len(values)
            squares += sum((v - mean) ** 2 for v in values)
            dof += len(values) - 1
    return (math.sqrt(squares / dof), dof) if dof else (None, 0)


def drift_groups(trials: list) -> list[tuple[str, list[float]]]:
    """(network, lap drift means in mm) per configuration and direction: the valid, complete trials
    (a miscalibrated base drifts differently each way, so the directions are not pooled as one)."""
    groups: dict[tuple, list[float]] = {}
    for m in trials:
        if m.valid and m.progress.complete and m.drift.mean_m is not None:
            key = (*m.config, m.trial.plan.turn_direction)
            groups.setdefault(key, []).append(m.drift.mean_m * 1000.0)
    return [(key[2], values) for key, values in groups.items()]


def power_table(
    groups: list[tuple[str, list[float]]], differences_m: tuple[float, ...] = DEFAULT_DIFFERENCES_M
) -> list[dict]:
    """Per network: the pooled spread of the lap drift (mean, mm) and the repetitions each
    difference needs. ``groups``: (network, values in mm) per configuration and direction."""
    by_network: dict[str, list[list[float]]] = {}
    for network, values in groups:
        by_network.setdefault(network, []).append(values)
    out = []
    for network, values_of in by_network.items():
        sd, dof = pooled_sd(values_of)
        if sd is None:
            continue
        typical_n = max(len(g) for g in values_of)
        out.append(
            {
                "network": network,
                "pooled_sd_mm": sd,
                "dof": dof,
                "alpha": ALPHA,
                "power": POWER,
                "repetitions": typical_n,
                "smallest_difference_mm": smallest_difference(sd, typical_n),
                "needed": [
                    {"difference_mm": d * 1000, "n": repetitions_needed(sd, d * 1000)} for d in differences_m
                ],
            }
        )
    return out


def power_lines(table: list[dict]) -> list[str]:
    """compare.md section: the repetitions that resolve a given difference of lap drift."""
    if not table:
        return []
    out = [
        "## Repetitions needed (power)",
        "",
        f"Two-sample, two-sided, alpha {ALPHA:g}, power {POWER:.0%}, from the spread of the lap drift (mean) "
        "the repetitions of each configuration show (pooled per network). Formula: docs/analysis.md.",
        "",
    ]
    for t in table:
        needed = ", ".join(f"{e['difference_mm']:g} mm: n = {e['n']}" for e in t["needed"])
        smallest = t["smallest_difference_mm"]
        now = f"{smallest:.2f} mm" if smallest is not None else "none (too few)"
        out += [
            f"- {t['network']}: pooled SD {t['pooled_sd_mm']:.3f} mm ({t['dof']} degrees of freedom). "
            f"To resolve a difference in lap drift at {POWER:.0%} power: {needed} per configuration. "
            f"With {t['repetitions']} repetitions: {now}.",
        ]
    return out + [""]
