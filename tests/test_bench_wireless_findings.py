"""The seed's wireless findings beside a twin campaign (benchmarks/bench_wireless_findings.py and its
block in docs/networks.md): the rows are summarised from small synthetic records written as a
campaign writes them, the direction verdict and the repetitions the drift needs are computed from
the rows, the 802.11 mechanisms are read from the ns-3 program's stats, the summary survives its
file, and every finding names configurations the shipped campaigns run."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

from fieldtest.analysis.campaign.power import pooled_sd, repetitions_needed
from fieldtest.record.reference import WirelessFindingsSummary, read_reference
from fieldtest.testkit.docblocks import (
    SEED_FINDINGS,
    SEED_MEDIUM,
    render,
    wireless_drift_lines,
    wireless_mechanisms_table,
    wireless_verdicts,
)
from fieldtest.trialcampaign import load_trials

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_wireless_findings.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_wireless_findings", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _simulator(doze_host_s: float = 10.0, held_host: int = 4, others_s: float = 3.0) -> dict:
    """ns-3's stats as a wifi-lab trial records them (outcome.stack.link_simulator), cut down."""
    return {
        "wall_s": 100.0,
        "lag_ms": {"p99": 0.7},
        "tx": {
            "group": {"frames": 50, "airtime_s": 0.5},
            "unicast": {"frames": 1000, "retries": 40, "airtime_s": 1.0},
            "management": {"frames": 10, "airtime_s": 0.5},
        },
        "airtime_by_station": {
            "ap": {"frames": 10, "airtime_s": 1.0},
            "host": {"frames": 10, "airtime_s": 0.5},
            "robot": {"frames": 10, "airtime_s": 0.5},
            "others": {"frames": 10, "airtime_s": others_s},
        },
        "channel_access_ms": {
            "host": {"frames": 200, "deferred": 50, "mean": 0.08},
            "robot": {"frames": 100, "deferred": 10, "mean": 0.02},
        },
        "power_save": {
            "group_frames_buffered": 6,
            "stations": {
                "host": {"doze_s": doze_host_s, "frames_buffered": held_host},
                "robot": {"doze_s": 1.0, "frames_buffered": 0},
            },
        },
    }


def _write_trial(
    campaign: Path, n: int, network: str, middleware: str, rtt: float, drift_mm: float,
    valid: bool = True, simulator: dict | None = None,
) -> Path:  # fmt: skip
    """A trial folder with the parts of trial.yaml and analysis/metrics.json the bench reads."""
    trial = campaign / f"20261129-0500{n:02d}-{campaign.name}-{middleware}-{network}-r{n}"
    (trial / "analysis").mkdir(parents=True)
    metrics = {
        "trial": {"network": network, "middleware": middleware},
        "stack": {
            "valid": valid,
            "invalid_reasons": [] if valid else ["the ns-3 link fell behind real time"],
            "machine": {"loadavg_1min": 1.0 + n, "busy_pct": 40.0, "steal_pct": 0.1, "steal_max_pct": 2.0},
        },
        "latency": {
            "round_trip_ms": {"mean": rtt},
            "one_way_ms": {"median": rtt / 4, "p99": rtt},
            "loss_ratio": 0.0,
        },
        "drift": {"mean_m": drift_mm / 1000},
        "wire": {
            "host_to_robot": {"groups": {"discovery": {"packets_per_s": 0.5}}},
            "robot_to_host": {"groups": {"discovery": {"packets_per_s": 0.25}}},
        },
    }
    (trial / "analysis" / "metrics.json").write_text(json.dumps(metrics))
    record = {
        "request": {"plan": {"laps": 4, "side_duration_s": 3.0}, "topology": "seed"},
        "outcome": {
            "stopped_ns": {"host": 1_795_928_039_000_000_000 + n * 10**9},
            "software": {"python": "3.11.7", "fieldtest": "0.1.0", "platform": "Linux"},
            "stack": {"link_simulator": simulator},
        },
    }
    (trial / "trial.yaml").write_text(yaml.safe_dump(record))
    return trial


def _campaign(tmp_path: Path, rows: dict[tuple[str, str], list[tuple[float, float, bool]]]) -> Path:
    """A campaign folder: (network, middleware) -> (round trip, drift, valid) per repetition."""
    campaign = tmp_path / "twin-wifi-lab"
    n = 0
    for (network, middleware), reps in rows.items():
        for rtt, drift, valid in reps:
            sim = _simulator() if network.startswith("wifi") else None
            _write_trial(campaign, n, network, middleware, rtt, drift, valid, sim)
            n += 1
    return campaign


def _rows(bench, tmp_path, rows):
    campaign = _campaign(tmp_path, rows)
    return bench.summarise([bench.trial_figures(d) for d in sorted(campaign.iterdir())])


@pytest.mark.parametrize(
    ("dds", "zenoh", "expected"),
    [
        ([30, 31, 32], [10, 11, 12], "yes"),
        ([12, 20, 31], [10, 13, 30], "same sign, intervals overlap"),
        ([10, 11, 12], [30, 31, 32], "no: opposite or no difference"),
        ([10, 10, 10], [10, 10, 10], "no: opposite or no difference"),
    ],
)
@pytest.mark.parametrize("network", ["wifi-lab", "wifi-80211"])
def test_the_direction_is_computed_from_the_twins_figures(bench, tmp_path, network, dds, zenoh, expected):
    rows = _rows(
        bench,
        tmp_path,
        {
            (network, "dds"): [(r, 1.0, True) for r in dds],
            (network, "zenoh-peer"): [(r, 1.0, True) for r in zenoh],
        },
    )
    (verdict,) = [
        v for v in wireless_verdicts(rows) if (v.finding.slower, v.finding.faster) == ("dds", "zenoh-peer")
    ]
    assert verdict.network == network
    assert verdict.seed == (
        bench.SEED_ARRAY1K_RTT_MS[("Wi-Fi", "dds")],
        bench.SEED_ARRAY1K_RTT_MS[("Wi-Fi", "zenoh-peer")],
    )
    assert verdict.reproduced == expected


def test_invalid_trials_count_but_carry_no_figure(bench, tmp_path):
    rows = _rows(bench, tmp_path, {("4g", "dds"): [(50, 40.0, True), (52, 60.0, True), (500, 900.0, False)]})
    (row,) = rows
    assert (row.valid, row.invalid) == (2, 1)
    assert row.invalid_reasons == ["the ns-3 link fell behind real time"]
    assert "Set aside by the stack check: 4g dds: the ns-3 link fell behind real time." in bench.markdown(
        rows
    )
    assert row.rtt_ms == 51
    assert row.drift_each_mm == pytest.approx([40.0, 60.0])
    assert row.drift_mm == pytest.approx(50.0)
    assert row.load_range == [1.0, 2.0]  # the valid trials' loads only
    assert row.conditions.load_1min == 2.0  # over the trials its figures come from
    (verdict,) = [v for v in wireless_verdicts(rows) if v.finding.slower == "zenoh-peer"]
    assert verdict.reproduced == "no valid trials"


def test_the_drift_interval_and_the_repetitions_it_needs_come_from_the_repetitions(bench, tmp_path):
    rows = _rows(
        bench,
        tmp_path,
        {
            ("wifi-lab", "dds"): [(2, 1.0, True), (2, 2.0, True), (2, 3.0, True)],
            ("wifi-lab", "zenoh-peer"): [(2, 5.0, True), (2, 6.0, True), (2, 7.0, True)],
        },
    )
    dds, zenoh = rows
    # Student's t, 2 degrees of freedom: 2 +- 4.303 * 1 / sqrt(3)
    assert (dds.drift_low_mm, dds.drift_high_mm) == pytest.approx((2 - 2.4843, 2 + 2.4843), abs=1e-3)
    assert pooled_sd([dds.drift_each_mm, zenoh.drift_each_mm]) == (1.0, 4)
    (line,) = wireless_drift_lines(rows)
    needed = repetitions_needed(1.0, 4.0)
    assert "from 2.00 mm (dds) to 6.00 mm (zenoh-peer)" in line
    assert "pooled standard deviation 1.00 mm (4 degrees of freedom)" in line
    assert f"the largest difference (4.00 mm) needs {needed} repetitions of each" in line
    lines = bench.markdown(rows).splitlines()
    column = [c.strip() for c in lines[0].split("|")].index("reps to resolve the drift from the least")
    cells = {line.split("|")[2].strip(): line.split("|")[column].strip() for line in lines[2:4]}
    assert cells == {"dds": "-", "zenoh-peer": str(needed)}


def test_the_air_figures_come_from_the_simulators_counts(bench):
    figures = bench.air_figures(_simulator())
    assert figures == {
        "group_per_s": 0.5,
        "group_airtime_share": 0.25,
        "unicast_retries_per_frame": 0.04,
        "others_airtime_share": 0.6,
        "group_frames_held": 6,
        "frames_held": {"host": 4.0, "robot": 0.0},
        "doze_share": {"host": 0.1, "robot": 0.01},
        "channel_access_mean_ms": {"host": 0.08, "robot": 0.02},
        "channel_access_deferred": {"host": 0.25, "robot": 0.1},
        "lag_p99_ms": 0.7,
    }
    nothing = bench.air_figures(None)
    assert [v for v in nothing.values() if v not in (None, {})] == []


def test_the_mechanisms_table_holds_the_80211_rows_only(bench, tmp_path):
    rows = _rows(
        bench,
        tmp_path,
        {("wifi-lab", "dds"): [(2, 1.0, True)], ("4g", "dds"): [(120, 50.0, True)]},
    )
    table = wireless_mechanisms_table(rows)
    assert [line.split(" | ")[0] for line in table[2:]] == ["| wifi-lab"]
    # host dozing 10 % of the run, four frames held, a quarter of its frames deferred
    assert "| 10.0 % / 1.0 % | 4.0 / 0.0 | 0.080 / 0.020 | 25.0 % / 10.0 % |" in table[2]
    assert wireless_mechanisms_table([r for r in rows if r.network == "4g"]) == []


def test_the_summary_survives_its_file_and_renders_the_block(bench, tmp_path, monkeypatch):
    campaign = _campaign(
        tmp_path,
        {
            ("wifi-lab", "dds"): [(3.0, 1.0, True), (3.5, 1.5, True), (4.0, 2.0, True)],
            ("wifi-lab", "zenoh-peer"): [(1.0, 0.5, True), (1.2, 0.6, True), (1.4, 0.7, True)],
        },
    )
    root = tmp_path / "repo"
    (root / "reference").mkdir(parents=True)
    monkeypatch.chdir(root)
    reference = Path("reference/bench-wireless-findings.json")
    assert bench.main([str(campaign), "--reference", str(reference)]) == 0
    summary = read_reference(root / reference)
    assert isinstance(summary, WirelessFindingsSummary)
    assert summary.model_dump() == read_reference(root / reference).model_dump()
    assert summary.command.endswith("--reference reference/bench-wireless-findings.json")
    assert "fieldtest campaign trials/twin-wifi-lab.yaml" in summary.command
    assert summary.measured_utc == "2026-11-29T04:54:04Z"  # the last trial's end, not the bench's
    assert summary.versions == {"python": "3.11.7", "fieldtest": "0.1.0"}
    assert summary.settings["plan_laps"] == 4 and summary.settings["trials"] == 6
    block = render("wireless-findings", root)
    assert (
        "| DDS behind Zenoh (dds slower than zenoh-peer) | wifi-lab | 51.40 / 14.82 | 3.5 / 1.2 | yes |"
        in block
    )
    assert "Direction reproduced: 1 of 4 findings (3 without valid trials of both middlewares)." in block
    # a changed figure in the file changes the block
    data = json.loads((root / reference).read_text())
    data["rows"][0]["rtt_ms"] = 0.5
    (root / reference).write_text(json.dumps(data))
    assert "| 0.5 / 1.2 | no: opposite or no difference |" in render("wireless-findings", root)


def test_every_finding_is_run_by_the_shipped_campaigns(bench):
    run: set[tuple[str, str]] = set()
    for name in ("twin-wireless.yaml", "twin-wifi-lab.yaml"):
        _, requests = load_trials(ROOT / "trials" / name)
        run |= {(t.network, t.transport.middleware) for t in requests}
    for f in SEED_FINDINGS:
        networks = {n for n, _ in run if SEED_MEDIUM.get(n) == f.medium}
        assert networks, f.name
        for network in networks:
            assert {(network, f.slower), (network, f.faster)} <= run, (f.name, network)
            assert bench.seed_rtt_ms(network, f.slower) is not None
    assert {n for n, _ in run} >= {"wifi-lab", "wifi-80211", "4g"}


def test_the_round_trips_excess_is_what_the_commands_one_way_path_does_not_explain(bench):
    assert bench.rtt_excess_ms(130.0, 60.0) == 10.0
    assert bench.rtt_excess_ms(None, 60.0) is None
