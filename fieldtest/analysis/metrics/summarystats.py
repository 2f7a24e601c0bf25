"""Summary statistics and small numeric helpers shared by the analysis modules."""

from __future__ import annotations

import math

import numpy as np

# RTI perftest's latency summary: Ave, Std, Min, Max and the 50/90/99/99.99 percentiles.
PERCENTILES = (("p90", 90.0), ("p99", 99.0), ("p99_99", 99.99))


def perftest_stats(values: np.ndarray, scale: float = 1.0) -> dict[str, float | int | None]:
    """Statistics as RTI perftest reports them, of the finite ``values`` times ``scale``.

    perftest sorts the samples and reads percentile p at index floor(n * p / 100) (nearest rank,
    clamped to the last sample); its std is the population standard deviation (divides by n).
    The median is the p50 of that rule, as perftest prints it.
    """
    v = np.sort(np.asarray(values, dtype=float)[np.isfinite(values)]) * scale
    n = len(v)
    if n == 0:
        empty: dict[str, float | int | None] = {"count": 0, "median": None, "mean": None, "std": None}
        return empty | {"min": None, "max": None} | {name: None for name, _ in PERCENTILES}
    out: dict[str, float | int | None] = {
        "count": n,
        "median": float(v[_rank(n, 50.0)]),
        "mean": float(v.mean()),
        "std": float(v.std()),
        "min": float(v[0]),
        "max": float(v[-1]),
    }
    for name, p in PERCENTILES:
        out[name] = float(v[_rank(n, p)])
    return out


def _rank(n: int, p: float) -> int:
    # n * p / 100 in exact arithmetic: p has at most two decimals
    return min(n - 1, (n * round(p * 100)) // 10000)


def summary(values: np.ndarray) -> dict[str, float | None]:
    """mean, RMS, max of finite values (None when there are none)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return {"mean": None, "rms": None, "max": None}
    return {"mean": float(v.mean()), "rms": float(np.sqrt(np.mean(v * v))), "max": float(v.max())}


def wrap_angle(a: np.ndarray | float) -> np.ndarray:
    """Angle(s) wrapped to [-pi, pi) (a 0-d array for one angle)."""
    return (np.asarray(a) + math.pi) % (2 * math.pi) - math.pi


def circular_mean(angles: np.ndarray) -> float | None:
    a = np.asarray(angles, dtype=float)
    a = a[np.isfinite(a)]
    if len(a) == 0:
        return None
    return float(math.atan2(np.mean(np.sin(a)), np.mean(np.cos(a))))


def interp_with_gaps(
    t: np.ndarray, values: np.ndarray, query: np.ndarray, max_gap: float
) -> tuple[np.ndarray, np.ndarray]:
    """Linear interpolation of ``values`` (n or n x k) at ``query``; NaN where the bracketing samples
    are more than ``max_gap`` apart or the query is outside the samples. Returns (values, valid)."""
    t = np.asarray(t, dtype=float)
    q = np.asarray(query, dtype=float)
    vals = np.asarray(values, dtype=float)
    n = len(t)
    if n == 0:
        shape = (len(q),) + vals.shape[1:]
        return np.full(shape, np.nan), np.zeros(len(q), dtype=bool)
    hi = np.clip(np.searchsorted(t, q, side="left"), 0, n - 1)
    lo = np.clip(hi - 1, 0, n - 1)
    exact = t[hi] == q
    lo = np.where(exact, hi, lo)
    inside = (q >= t[0]) & (q <= t[-1])
    valid = inside & (exact | (t[hi] - t[lo] <= max_gap))
    span = t[hi] - t[lo]
    w = np.where(span > 0, (q - t[lo]) / np.where(span > 0, span, 1.0), 0.0)
    if vals.ndim == 1:
        out = vals[lo] + w * (vals[hi] - vals[lo])
        out[~valid] = np.nan
    else:
        out = vals[lo] + w[:, None] * (vals[hi] - vals[lo])
        out[~valid] = np.nan
    return out, valid


def finite_or_none(x: float | np.floating | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def spans(indices: np.ndarray) -> list[list[int]]:
    """Consecutive integers grouped into [first, last] ranges: [3,4,5,9] -> [[3,5],[9,9]]."""
    idx = np.asarray(indices, dtype=np.int64)
    if len(idx) == 0:
        return []
    breaks = np.flatnonzero(np.diff(idx) != 1)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(idx) - 1]])
    return [[int(idx[s]), int(idx[e])] for s, e in zip(starts, ends, strict=True)]
