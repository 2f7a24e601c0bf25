"""The robot traffic benchmark's cases and its 802.11 side (benchmarks/bench_robot_traffic.py and its
blocks in docs/networks.md): a case names the preset it adds, ns-3's stats in a trial's record
become the row's 802.11 mechanisms, and the block renders them beside the preset's topics."""

import importlib.util
import sys
from pathlib import Path

import pytest

from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings
from fieldtest.record.reference import Conditions
from fieldtest.testkit.docblocks import (
    robot_traffic_80211_table,
    robot_traffic_set_aside,
    robot_traffic_table,
)

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_robot_traffic.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH.parent))  # the bench imports its sibling scripts
    try:
        spec = importlib.util.spec_from_file_location("bench_robot_traffic", BENCH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH.parent))


def test_a_case_names_the_preset_it_adds(bench):
    view = bench.request_for("zenoh-peer+rviz-view-robot+express", "wifi-lab", 2)
    assert (view.robot_traffic, view.network, view.repetition) == ("rviz-view-robot", "wifi-lab", 2)
    assert view.transport.middleware == "zenoh-peer" and view.transport.settings(ZenohSettings).express
    assert bench.request_for("dds+rviz", "wifi-lossy", 0).robot_traffic == "rviz"
    assert bench.request_for("dds", "wifi-lossy", 0).robot_traffic == "none"
    for case in ("dds", "dds+rviz-view-robot", "zenoh-peer+all+express"):
        assert bench.case_problem(case) is None
    assert "unknown preset 'rqt'" in bench.case_problem("dds+rqt")
    assert "unknown preset 'none'" in bench.case_problem("dds+none")
    assert "one preset" in bench.case_problem("dds+rviz+all")
    assert "unknown middleware 'ddz'" in bench.case_problem("ddz+rviz")


def _simulator() -> dict:
    """ns-3's stats as a wifi-lab trial records them (outcome.stack.link_simulator), cut down."""
    return {
        "wall_s": 100.0,
        "cpu_pct": 31.4,
        "lag_ms": {"p99": 0.7, "max": 9.3},
        "tx": {
            "group": {"frames": 50, "airtime_s": 0.5},
            "unicast": {"frames": 1000, "retries": 40, "airtime_s": 1.0},
        },
        "airtime_by_station": {
            "ap": {"frames": 10, "airtime_s": 1.5},
            "robot": {"frames": 10, "airtime_s": 2.0},
            "host": {"frames": 10, "airtime_s": 0.5},
            "others": {"frames": 10, "airtime_s": 3.0},
        },
        "power_save": {
            "group_frames_buffered": 6,
            "stations": {"host": {"doze_s": 10.0}, "robot": {"doze_s": 1.0}},
        },
    }


def test_the_80211_mechanisms_come_from_the_record(bench):
    figures = bench.link_figures(_simulator())
    assert figures["airtime_share"] == pytest.approx(
        {"ap": 0.015, "robot": 0.02, "host": 0.005, "others": 0.03}
    )
    assert (figures["link_cpu_percent"], figures["lag_p99_ms"], figures["lag_max_ms"]) == (31.4, 0.7, 9.3)
    assert figures["unicast_retries_per_frame"] == pytest.approx(0.04) and figures["group_per_s"] == 0.5
    assert figures["group_frames_held"] == 6
    assert figures["doze_share"] == pytest.approx({"host": 0.1, "robot": 0.01})
    assert bench.link_figures(None) == {}  # a link of the forwarder: no simulator, no figures


def _row(bench, case: str, link: dict, received: dict, **figures):
    """A trial's row as the bench makes it; ``received``: topic -> (rate over arrivals, received, sent)."""
    row = {
        "case": case, "end_reason": "completed", "median_ms": 2.5, "p90_ms": 4.0, "p99_ms": 9.0,
        "lost": 0, "sent": 655, "drift_mm": 1.5, "valid": True, "discovery_packets": 40,
        "robot_traffic": {t: {"received_hz": hz, "received": n, "sent": s} for t, (hz, n, s) in received.items()},
        **link, **figures,
    }  # fmt: skip
    return bench.reference_row(
        row, 0, Conditions(load_1min=1.0, busy_percent=[40.0, 50.0], steal_percent=0.0)
    )


def test_the_block_shows_each_trials_80211_side(bench):
    view = _row(
        bench,
        "dds+rviz-view-robot",
        bench.link_figures(_simulator()),
        {"/scan": (5.46, 184, 201), "/tf": (19.9, 670, 731)},
    )
    preview = _row(
        bench, "dds+rviz", bench.link_figures(_simulator()), {"/oakd/rgb/preview/image_raw": (7.2, 4, 1153)},
        valid=False, invalid_reasons=["the ns-3 802.11 link fell behind real time"],
    )  # fmt: skip
    table = robot_traffic_80211_table([view, preview])
    assert table[2] == (
        "| dds+rviz-view-robot | 0 | /scan 5.5 of 5.5 Hz, 184 of 201, /tf 19.9 of 20 Hz, 670 of 731 | "
        "ap 1.5 %, host 0.5 %, robot 2.0 %, "
        "others 3.0 % | 0.040 | 0.50 | 6 | 10.0 % / 1.0 % | 31 | 0.70 / 9.3 |"
    )
    # a preview that hardly arrives: a rate over its few arrivals, and how few they were
    assert "/oakd/rgb/preview/image_raw 7.2 of 30 Hz, 4 of 1153" in table[3]
    assert "/scan - of 5.5 Hz," in table[3]  # a topic of the preset nothing of arrived
    assert robot_traffic_set_aside([view, preview]) == [
        "Set aside by the stack check: dds+rviz 0: the ns-3 802.11 link fell behind real time.",
        "",
    ]
    # no camera in the preset: its preview cell stays empty, as for a case without robot traffic
    assert [line.split("|")[6].strip() for line in robot_traffic_table([view, preview])[2:]] == ["", "7.2"]
    # a trial on a forwarder's link carries no 802.11 side: no table
    assert robot_traffic_80211_table([_row(bench, "dds+rviz", {}, {})]) == []
