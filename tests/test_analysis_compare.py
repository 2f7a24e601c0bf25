"""compare: one row per middleware x security x network, median and spread over repetitions."""

import csv
import json

import pytest

from fieldtest.analysis import compare_trials
from fieldtest.analysis.cli import compare_main
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize

PLAN = SquarePlan(laps=3, side_duration_s=1.5, turn_rate_dps=90.0)
# (middleware, security) -> last-lap shift per repetition (m) and base latency (s)
CASES = {
    ("dds", "none"): ((0.010, 0.020, 0.060), 0.002),
    ("zenoh-peer", "sros2"): ((0.005, 0.007), 0.008),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for (middleware, security), (shifts, latency) in CASES.items():
        for rep, shift in enumerate(shifts):
            spec = SynthSpec(
                name=f"{middleware}-{security}-r{rep}",
                plan=PLAN,
                middleware=middleware,
                security=security,
                network="wifi",
                repetition=rep,
                last_lap_shift_m=(shift, 0.0),
                latency_s=latency,
                lost_seqs=tuple(range(rep)),
            )
            synthesize(root / spec.name, spec)
    # a partial trial of the first configuration: counted, but not in the drift figures
    synthesize(
        root / "dds-none-partial",
        SynthSpec(
            name="dds-none-partial",
            plan=PLAN,
            network="wifi",
            repetition=9,
            last_lap_shift_m=(0.5, 0),
            stop_after_s=8.0,
        ),
    )
    return root


def test_rows_hold_median_and_spread_per_configuration(runs, tmp_path):
    result = compare_trials([runs], tmp_path / "out")
    assert not result["skipped"]
    rows = {(r["middleware"], r["security"], r["network"]): r for r in result["rows"]}
    assert list(rows) == [("dds", "none", "wifi"), ("zenoh-peer", "sros2", "wifi")]
    dds = rows[("dds", "none", "wifi")]
    assert dds["trials"] == 4 and dds["partial"] == 1
    drift = dds["metrics"]["drift_mean"]  # a pure shift: the drift curve is |shift| everywhere
    assert drift["n"] == 3
    assert drift["median"] == pytest.approx(20.0, abs=1e-3)
    assert drift["min"] == pytest.approx(10.0, abs=1e-3) and drift["max"] == pytest.approx(60.0, abs=1e-3)
    assert drift["p25"] == pytest.approx(15.0, abs=1e-3) and drift["p75"] == pytest.approx(40.0, abs=1e-3)
    assert dds["metrics"]["latency_median"]["median"] == pytest.approx(2.0, abs=1e-3)
    assert dds["metrics"]["latency_median"]["n"] == 4  # latency counts the partial trial too
    zenoh = rows[("zenoh-peer", "sros2", "wifi")]
    assert zenoh["metrics"]["drift_mean"]["median"] == pytest.approx(6.0, abs=1e-3)
    assert zenoh["metrics"]["latency_median"]["median"] == pytest.approx(8.0, abs=1e-3)
    assert zenoh["metrics"]["loss"]["max"] > 0


def test_outputs_markdown_csv_json_and_plot(runs, tmp_path):
    out = tmp_path / "out"
    assert compare_main([str(runs), "--out", str(out)]) == 0
    md = (out / "compare.md").read_text()
    assert "| dds | none | wifi | 4 (1 partial) | 20.0 (10.0-60.0) |" in md
    assert "dds-none-partial (partial)" in md
    with (out / "compare.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["middleware"] for r in rows] == ["dds", "zenoh-peer"]
    assert float(rows[0]["drift_mean_mm_median"]) == pytest.approx(20.0, abs=1e-3)
    assert float(rows[1]["latency_median_ms_median"]) == pytest.approx(8.0, abs=1e-3)
    data = json.loads((out / "compare.json").read_text())
    assert len(data["trials"]) == 6
    png = (out / "drift_by_config.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_compare_reads_existing_metrics_without_analyzing_again(runs, tmp_path):
    compare_trials([runs], tmp_path / "a")
    metrics = next(runs.glob("dds-none-r0/analysis/metrics.json"))
    before = metrics.stat().st_mtime_ns
    compare_trials([runs], tmp_path / "b")
    assert metrics.stat().st_mtime_ns == before
    compare_trials([runs], tmp_path / "c", reanalyze=True)
    assert metrics.stat().st_mtime_ns != before


def test_trials_behind_symbolic_links_are_found_once(runs, tmp_path):
    """A campaign folder of links to trials (and a link back up, which must not loop)."""
    from fieldtest.analysis.campaign.compare import find_trials

    linked = tmp_path / "linked"
    (linked / "wifi").mkdir(parents=True)
    (linked / "wifi" / "r0").symlink_to(runs / "dds-none-r0", target_is_directory=True)
    (linked / "zenoh").symlink_to(runs, target_is_directory=True)  # the whole folder, again
    (linked / "wifi" / "loop").symlink_to(linked, target_is_directory=True)
    found = find_trials([linked])
    assert sorted(found) == sorted(find_trials([runs]))
    assert len(found) == 6
