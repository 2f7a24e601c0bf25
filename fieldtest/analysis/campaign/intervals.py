"""Median intervals over repetitions, and whether two configurations differ beyond their spread.

Distribution-free: for n repetitions sorted x_(1) <= ... <= x_(n), the interval [x_(j), x_(n+1-j)]
covers the true median with probability 1 - 2 * P(Binomial(n, 1/2) < j). The interval reported is
the narrowest such one with coverage >= 95 %; with fewer than 6 repetitions none reaches 95 %, and
the whole range is reported with its actual coverage (3 repetitions: 75 %, 5: 93.75 %).
docs/analysis.md, "compare".
"""

from __future__ import annotations

from math import comb

import numpy as np

CONFIDENCE = 0.95


def _coverage(n: int, j: int) -> float:
    """Coverage of [x_(j), x_(n+1-j)] (1-based order statistics) for the median."""
    below: float = sum(comb(n, k) for k in range(j)) / 2**n
    return 1.0 - 2.0 * below


def median_interval(values: list[float | None]) -> dict[str, float | int | None]:
    """{"n", "low", "high", "coverage"}: the median's interval over the valid repetitions."""
    v = np.sort(np.array([x for x in values if x is not None], dtype=float))
    n = len(v)
    if n < 2:
        return {"n": n, "low": None, "high": None, "coverage": None}
    j = 1
    while j + 1 <= (n + 1) // 2 and _coverage(n, j + 1) >= CONFIDENCE:
        j += 1
    return {"n": n, "low": float(v[j - 1]), "high": float(v[n - j]), "coverage": _coverage(n, j)}


def differ(a: dict, b: dict) -> bool | None:
    """Whether two intervals do not overlap (None when either is missing)."""
    if a.get("low") is None or b.get("low") is None:
        return None
    return bool(a["high"] < b["low"] or b["high"] < a["low"])


def interval_lines(rows: list[dict]) -> list[str]:
    """compare.md section: drift median with its interval per configuration, and the pairs (same
    network) whose intervals do not overlap."""
    lines = [
        "## Drift: median and interval per configuration",
        "",
        "Valid trials only. Interval: distribution-free for the median, the narrowest with coverage >= 95 %; with "
        "fewer than 6 repetitions none reaches 95 % and the full range is shown with its coverage.",
        "",
        "| configuration | valid | invalid | median (mm) | interval (mm) | coverage |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        iv, med = row["drift_interval"], row["metrics"]["drift_mean"]["median"]
        shown = "n/a" if iv["low"] is None else f"{iv['low']:.2f}-{iv['high']:.2f}"
        coverage = "n/a" if iv["coverage"] is None else f"{100 * iv['coverage']:.1f} %"
        lines.append(
            f"| {row['middleware']} / {row['security']} / {row['network']} | {iv['n']} | {row['invalid']} | "
            f"{'n/a' if med is None else f'{med:.2f}'} | {shown} | {coverage} |"
        )
    pairs = []
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            if a["network"] == b["network"] and differ(a["drift_interval"], b["drift_interval"]):
                pairs.append(
                    f"- {a['middleware']}/{a['security']} and {b['middleware']}/{b['security']} ({a['network']})"
                )
    lines += [
        "",
        "Differ beyond their spread (intervals do not overlap):"
        if pairs
        else "No two configurations "
        "differ beyond their spread (every pair of intervals overlaps, or too few valid repetitions).",
    ]
    return lines + pairs + [""]
