"""compare: invalid trials (the machine's own timing faults) are counted, not averaged; median
intervals per configuration and which configurations differ beyond their spread."""

import json

import pytest

from fieldtest.analysis import compare_trials
from fieldtest.analysis.campaign.intervals import differ, median_interval
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize

PLAN = SquarePlan(side_duration_s=2.0, laps=2, start_delay_s=0.5)


@pytest.mark.parametrize(
    ("n", "rank", "coverage"),
    # rank j of [x_(j), x_(n+1-j)] and its coverage, from the binomial distribution (n, 1/2)
    [(3, 1, 0.75), (5, 1, 0.9375), (6, 1, 0.96875), (9, 2, 0.9609375), (12, 3, 0.961)],
)
def test_median_interval_is_the_order_statistic_interval(n, rank, coverage):
    values = [10.0 * k for k in range(n)]
    iv = median_interval(list(reversed(values)) + [None])
    assert iv["n"] == n
    assert (iv["low"], iv["high"]) == (values[rank - 1], values[n - rank])
    assert iv["coverage"] == pytest.approx(coverage, abs=1e-3)


def test_intervals_differ_only_without_overlap():
    assert differ({"low": 1, "high": 2}, {"low": 2.5, "high": 3}) is True
    assert differ({"low": 1, "high": 2}, {"low": 1.5, "high": 3}) is False
    assert differ({"low": None, "high": None}, {"low": 1, "high": 2}) is None


def test_invalid_trials_are_counted_but_left_out_of_the_medians(tmp_path):
    late_last_lap = ((PLAN.lap_start_s(1), PLAN.total_s + 5, 0.02),)  # 20 ms late sends: several mm
    trials = []
    for rep, shift_mm in enumerate((2.0, 2.2, 2.4)):
        trials.append(("dds", rep, {"last_lap_shift_m": (shift_mm / 1e3, 0.0)}))
        trials.append(("zenoh-peer", rep, {"last_lap_shift_m": (shift_mm / 1e3 + 0.01, 0.0)}))
    trials.append(("dds", 3, {"send_late": late_last_lap}))  # the host was late: invalid
    for middleware, rep, fields in trials:
        spec = SynthSpec(plan=PLAN, middleware=middleware, repetition=rep, truth_from_commands=True, **fields)
        synthesize(tmp_path / f"{middleware}-{rep}", spec)
    result = compare_trials([tmp_path], tmp_path / "compare")
    rows = {row["middleware"]: row for row in result["rows"]}
    dds, zenoh = rows["dds"], rows["zenoh-peer"]
    assert (dds["trials"], dds["invalid"], zenoh["invalid"]) == (4, 1, 0)
    assert dds["metrics"]["drift_mean"]["n"] == 3  # the invalid trial is not in the median
    assert dds["metrics"]["drift_mean"]["median"] == pytest.approx(2.2, abs=0.3)
    assert dds["drift_interval"]["coverage"] == pytest.approx(0.75)
    invalid = [t for t in result["trials"] if not t["valid"]]
    assert [t["repetition"] for t in invalid] == [3] and "lap drift" in invalid[0]["invalid_reasons"][0]
    text = (tmp_path / "compare" / "compare.md").read_text()
    assert "4 (1 invalid)" in text and "(invalid)" in text
    assert "- dds/none and zenoh-peer/none (loopback)" in text  # 2 mm against 12 mm: they differ
    assert json.loads((tmp_path / "compare" / "compare.json").read_text())["rows"][0]["invalid"] == 1
