"""Command timing in classes against the command period, as iRobot's ros2-performance classes messages.

Every command the host sent is exactly one of: on time, late, too late or lost. With the plan's
command period ``T``:

- too late: one-way latency > min(T, 50 ms)
- late: latency > min(0.2 T, 5 ms), and not too late
- lost: never arrived

(ros2-performance, performance_metrics/src/tracker.cpp and include/performance_metrics/tracker.hpp:
late_percentage 20, late_absolute_us 5000, too_late_percentage 100, too_late_absolute_us 50000; a
latency equal to a threshold is not over it.) docs/analysis.md, "Command timing in classes".
"""

from __future__ import annotations

import numpy as np

from fieldtest.analysis.metrics.schema import Lateness

LATE_SHARE, LATE_ABSOLUTE_S = 0.2, 0.005
TOO_LATE_SHARE, TOO_LATE_ABSOLUTE_S = 1.0, 0.050
CLASSES = ("on_time", "late", "too_late", "lost")


def thresholds_s(period_s: float) -> tuple[float, float]:
    """(late, too late) latency thresholds in seconds for a command period."""
    return min(LATE_SHARE * period_s, LATE_ABSOLUTE_S), min(TOO_LATE_SHARE * period_s, TOO_LATE_ABSOLUTE_S)


def lateness_classes(one_way_s: np.ndarray, lost: int, period_s: float) -> Lateness:
    """Counts and fractions of the commands sent (``one_way_s``: the latency of each one that arrived,
    first copy only; ``lost``: how many never arrived) in the four classes.

    Latencies are compared in whole microseconds, rounded (ros2-performance truncates its nanosecond
    latency to microseconds): a latency equal to a threshold is not over it, however the clock
    correction rounded its last nanosecond."""
    late_s, too_late_s = thresholds_s(period_s)
    latency_us = np.rint(np.asarray(one_way_s, dtype=float) * 1e6)
    latency_us = latency_us[np.isfinite(latency_us)]
    # thresholds rounded to a picosecond: 0.2 / 40 Hz is 5000.000000000001 us in floating point
    too_late = latency_us > round(too_late_s * 1e6, 6)
    late = (latency_us > round(late_s * 1e6, 6)) & ~too_late
    counts = {
        "on_time": int(len(latency_us) - np.count_nonzero(late) - np.count_nonzero(too_late)),
        "late": int(np.count_nonzero(late)),
        "too_late": int(np.count_nonzero(too_late)),
        "lost": int(lost),
    }
    total = sum(counts.values())

    def fraction(name: str) -> float | None:
        return counts[name] / total if total else None

    return Lateness(
        period_ms=period_s * 1e3,
        late_threshold_ms=late_s * 1e3,
        too_late_threshold_ms=too_late_s * 1e3,
        commands=total,
        **counts,
        on_time_fraction=fraction("on_time"),
        late_fraction=fraction("late"),
        too_late_fraction=fraction("too_late"),
        lost_fraction=fraction("lost"),
    )
