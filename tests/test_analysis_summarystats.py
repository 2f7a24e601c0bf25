"""Statistics as RTI perftest reports them, and gap-aware interpolation."""

import numpy as np
import pytest

from fieldtest.analysis.metrics.summarystats import interp_with_gaps, perftest_stats, spans


def test_perftest_percentiles_use_floor_of_n_times_p():
    values = np.arange(1, 10001, dtype=float)[::-1]  # 10000 samples, unsorted
    s = perftest_stats(values)
    assert s["count"] == 10000
    assert s["median"] == 5001.0  # sorted[10000 * 50 / 100]
    assert s["p90"] == 9001.0 and s["p99"] == 9901.0 and s["p99_99"] == 10000.0
    assert s["min"] == 1.0 and s["max"] == 10000.0
    assert s["mean"] == pytest.approx(5000.5)
    assert s["std"] == pytest.approx(np.sqrt((10000**2 - 1) / 12.0))  # population std, as perftest


def test_perftest_stats_ignore_nan_and_scale():
    s = perftest_stats(np.array([0.001, np.nan, 0.003, 0.002]), scale=1e3)
    assert s["count"] == 3 and s["median"] == pytest.approx(2.0) and s["max"] == pytest.approx(3.0)
    assert perftest_stats(np.array([]))["median"] is None


def test_interpolation_leaves_long_gaps_empty():
    t = np.array([0.0, 1.0, 2.0, 5.0, 6.0])
    v = np.array([0.0, 10.0, 20.0, 50.0, 60.0])
    out, ok = interp_with_gaps(t, v, np.array([-1.0, 0.5, 2.0, 3.0, 5.5, 6.0, 7.0]), max_gap=1.5)
    assert ok.tolist() == [False, True, True, False, True, True, False]
    assert out[ok].tolist() == [5.0, 20.0, 55.0, 60.0]
    assert np.isnan(out[~ok]).all()


def test_spans_group_consecutive_numbers():
    assert spans(np.array([3, 4, 5, 9, 11, 12])) == [[3, 5], [9, 9], [11, 12]]
    assert spans(np.array([], dtype=int)) == []
