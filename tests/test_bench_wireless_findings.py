"""The wireless findings table (benchmarks/bench_wireless_findings.py): the direction verdict is
computed from the twin's figures and intervals, the 802.11 mechanisms are read from the ns-3
program's stats, and every finding names configurations the shipped campaign runs."""

import importlib.util
import sys
from pathlib import Path

import pytest

from fieldtest.campaign import load_trials

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_wireless_findings.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_wireless_findings", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _trials(network: str, middleware: str, rtts: list[float], valid: bool = True) -> list[dict]:
    return [
        {
            "network": network,
            "middleware": middleware,
            "valid": valid,
            **dict.fromkeys(_FIGURES),
            "rtt_mean_ms": r,
        }
        for r in rtts
    ]


_FIGURES = (
    "one_way_median_ms one_way_p99_ms loss_pct drift_mm group_per_s group_airtime_share "
    "unicast_retries_per_frame discovery_per_s rtt_excess_ms load steal_pct"
).split()


@pytest.mark.parametrize(
    ("dds", "zenoh", "expected"),
    [
        ([30, 31, 32], [10, 11, 12], "yes"),
        ([12, 20, 31], [10, 13, 30], "same sign, intervals overlap"),
        ([10, 11, 12], [30, 31, 32], "no: opposite or no difference"),
        ([10, 10, 10], [10, 10, 10], "no: opposite or no difference"),
    ],
)
def test_the_direction_is_computed_from_the_twins_figures(bench, dds, zenoh, expected):
    rows = bench.summarise(_trials("wifi-80211", "dds", dds) + _trials("wifi-80211", "zenoh-peer", zenoh))
    finding = next(f for f in bench.FINDINGS if (f.slower, f.faster) == ("dds", "zenoh-peer"))
    assert bench.verdict(finding, rows)["reproduced"] == expected


def test_invalid_trials_count_but_carry_no_figure(bench):
    trials = _trials("4g", "dds", [50, 52]) + _trials("4g", "dds", [500], valid=False)
    row = bench.summarise(trials)[("4g", "dds")]
    assert (row["valid"], row["invalid"]) == (2, 1)
    assert row["rtt_mean_ms"] == 51
    finding = bench.Finding("x", "4g", "dds", "zenoh-peer", "")
    assert bench.verdict(finding, bench.summarise(trials))["reproduced"] == "no valid trials"


def test_the_air_figures_come_from_the_simulators_counts(bench):
    stats = {
        "wall_s": 100.0,
        "tx": {
            "group": {"frames": 50, "airtime_s": 0.5},
            "unicast": {"frames": 1000, "retries": 40, "airtime_s": 1.0},
            "management": {"frames": 10, "airtime_s": 0.5},
        },
    }
    assert bench.air_figures(stats) == {
        "group_per_s": 0.5,
        "group_airtime_share": 0.25,
        "unicast_retries_per_frame": 0.04,
    }
    assert set(bench.air_figures(None).values()) == {None}


def test_every_finding_is_run_by_the_shipped_campaign(bench):
    _, requests = load_trials(ROOT / "trials" / "twin-wireless.yaml")
    run = {(t.network, t.transport.middleware) for t in requests}
    for f in bench.FINDINGS:
        assert {(f.network, f.slower), (f.network, f.faster)} <= run, f.name
        assert (f.network, f.slower) in bench.SEED_ARRAY1K_RTT_MS


def test_the_round_trips_excess_is_what_the_commands_one_way_path_does_not_explain(bench):
    assert bench.rtt_excess_ms(130.0, 60.0) == 10.0
    assert bench.rtt_excess_ms(None, 60.0) is None
