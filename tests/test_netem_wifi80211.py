"""The 802.11 link on ns-3: host and robot as stations of one simulated access point, in their own
namespaces, the mocap node wired behind the access point. Mechanisms only (figures: benchmarks/
bench_wifi80211.py). Needs root (namespaces) and libns3-dev + g++ (tools/install.sh)."""

import re
import time

import pytest

from fieldtest.netem import Topology, TopologyError, get_profile, measure_link
from fieldtest.netem.probe import udp_blast
from fieldtest.record import TrialRequest, read_trial
from fieldtest.runner import QUICK_PLAN, run_twin_trial
from fieldtest.testkit import needs

NODES = ["host", "robot", "mocap"]
STATIONS = ("host", "robot")
DDS_SPDP_GROUP = "239.255.0.1"
BASIC_RATE = "OfdmRate6Mbps"  # lowest mandatory OFDM rate, 5 GHz (IEEE 802.11-2016 19.1.1 / 17.1.1)
DATAGRAM_SIZES = (100, 4000)  # one frame; three IP fragments, each a frame of its own


@pytest.fixture(autouse=True, scope="module")
def _network_namespaces():
    needs.netns()


def _eventually(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _tx(stats: dict, kind: str) -> dict:
    return stats["tx"].get(kind, {"frames": 0, "retries": 0, "modes": {}})


@pytest.fixture(scope="module")
def far():
    """A few seconds of traffic at the far distance: unicast probes, then multicast per size."""
    with Topology("wifi-80211-far", nodes=NODES, wireless=STATIONS, seed=11) as topo:
        unicast = measure_link(topo, "host", "robot", count=150, interval_s=0.01, size=200)
        before = topo.wifi_link.stats()
        multicast = {
            size: udp_blast(
                topo, "host", "robot", count=150, size=size, interval_s=0.01, group=DDS_SPDP_GROUP
            )
            for size in DATAGRAM_SIZES
        }
        yield {
            "unicast": unicast,
            "multicast": multicast,
            "before": before,
            "stats": topo.wifi_link.stats(),
            "record": topo.simulator_record(),
            "describe": topo.describe(),
        }


def test_near_the_access_point_unicast_round_trips_and_wired_nodes_reach_the_stations():
    with Topology("wifi-80211", nodes=NODES, wireless=STATIONS, seed=3) as topo:
        trip = measure_link(topo, "host", "robot", count=100, interval_s=0.01, size=200)
        wired = udp_blast(topo, "mocap", "robot", count=100, size=200, interval_s=0.005)
        stats = topo.wifi_link.stats()
    assert trip["loss"] <= 0.02 and trip["rtt_median_ms"] > 0
    assert wired["loss"] <= 0.02  # through the access point's bridge to the switch
    # host -> AP -> robot and back: every probe crosses the air twice per direction, rate-controlled
    assert _tx(stats, "unicast")["frames"] >= 4 * 0.98 * 100
    assert any(mode.startswith("HtMcs") for mode in _tx(stats, "unicast")["modes"])


def test_far_from_the_access_point_retries_hide_unicast_loss_but_multicast_loss_rises_with_size(far):
    assert far["unicast"]["loss"] <= 0.05  # link-layer retries recover what the channel loses
    assert _tx(far["stats"], "unicast")["retries"] > 0
    small, large = (far["multicast"][size]["loss"] for size in DATAGRAM_SIZES)
    # no retries for group frames: a datagram is lost when any of its frames is
    assert 0 < small < 0.5
    assert large > small + 0.1, (small, large)


def test_multicast_goes_out_at_the_basic_rate_without_retries_while_unicast_is_retried(far):
    group = _tx(far["stats"], "group")
    sent_frames = sum(150 * -(-size // 1480) for size in DATAGRAM_SIZES)  # IP fragments of 1480 B payload
    assert group["frames"] - _tx(far["before"], "group")["frames"] >= sent_frames
    assert group["retries"] == 0
    assert set(group["modes"]) == {BASIC_RATE} and far["stats"]["basic_mode"] == BASIC_RATE
    # the station's copy to the access point is unicast: acknowledged, retried, rate-controlled
    uplink = _tx(far["stats"], "group_uplink")
    assert uplink["frames"] - _tx(far["before"], "group_uplink")["frames"] >= sent_frames
    assert uplink["retries"] > 0 and any(mode.startswith("HtMcs") for mode in uplink["modes"])


def test_the_simulators_lag_cpu_and_configuration_go_into_the_record(far):
    record = far["record"]
    assert record["lag_ms"]["samples"] > 1000  # one per simulated ms, one per frame
    assert 0 <= record["lag_ms"]["p50"] <= record["lag_ms"]["p99"] <= record["lag_ms"]["max"]
    assert record["cpu_s"] > 0 and record["cpu_pct"] > 0
    config = get_profile("wifi-80211-far").wifi80211
    assert (
        record["lag_bound_ms"] == config.lag_bound_ms and record["config"]["distance_m"] == config.distance_m
    )
    assert record["associated"] == 2 and record["ports"]["robot"]["to_kernel_group"] > 0
    nodes = far["describe"]["nodes"]
    assert nodes["host"]["wifi"] == nodes["robot"]["wifi"] == "station" and "wifi" not in nodes["mocap"]


def test_an_outage_silences_a_station_and_a_profile_change_is_refused():
    with Topology("wifi-80211", nodes=NODES, wireless=STATIONS, seed=5) as topo:
        topo.schedule_outage(at_s=0.0, duration_s=30.0, node="robot")
        blocked = udp_blast(topo, "host", "robot", count=50, size=200, interval_s=0.005)
        for at_s in (None, 5.0):  # now, or scheduled: refused at once either way
            with pytest.raises(TopologyError, match="802.11 .* cannot change profile"):
                topo.set_profile("wifi", node="robot", at_s=at_s)
        assert topo.wifi_link.stats()["ports"]["robot"]["dropped_down"] >= 50
    assert blocked["loss"] == 1.0


def test_a_station_the_access_point_forgot_gets_unicast_again():
    """ns-3's access point forgets a station whose association-response ACK was lost, while the
    station stays associated: without a repair every frame to it is dropped for good."""
    with Topology("wifi-80211", nodes=NODES, wireless=STATIONS, seed=2) as topo:
        topo.wifi_link.ap_forget("robot")
        assert _eventually(lambda: topo.wifi_link.stats()["association_repairs"] >= 1, 10.0), (
            "the link never repaired the forgotten station"
        )
        trip = measure_link(topo, "host", "robot", count=30, interval_s=0.01, size=64)
    assert trip["loss"] <= 0.1


def test_a_trial_asking_an_80211_link_to_change_profile_is_refused_before_anything_starts(tmp_path):
    request = TrialRequest(
        name="wifi80211-profile-fault",
        plan=QUICK_PLAN,
        network="wifi-80211",
        faults=[{"kind": "profile", "at_s": 5.0, "profile": "wifi-lossy"}],
    )
    result = run_twin_trial(request, tmp_path)
    assert result.end_reason == "error"
    assert re.match(
        r"faults: node '(host|robot)': an 802.11 \(ns-3\) link cannot change profile", result.detail
    )
    assert not (result.trial_dir / "host").exists() and read_trial(result.trial_dir).outcome.cpu == {}


def test_chens_ad_hoc_link_carries_traffic_at_54_mbits_and_52_m_from_the_access_point_starts():
    """wifi-80211a-adhoc: station to station, every unicast frame at OfdmRate54Mbps. Far from an
    access point, ns-3 3.37 aborted when a station missed its beacons while waiting for its
    association response (seed 10 at 52 m did); the link now cancels the stale request timeout."""
    near = get_profile({"name": "chen-20m", "extends": "wifi-80211a-adhoc", "wifi80211": {"distance_m": 20}})
    with Topology(near, nodes=["host", "robot"], wireless=STATIONS, seed=3) as topo:
        trip = measure_link(topo, "host", "robot", count=50, interval_s=0.01, size=200)
        stats = topo.wifi_link.stats()
    assert trip["loss"] <= 0.04
    assert (stats["mac"], stats["standard"], stats["associated"]) == ("adhoc", "80211a", 0)
    assert stats["rate_control"]["manager"] == "ns3::ConstantRateWifiManager"
    assert set(_tx(stats, "unicast")["modes"]) == {"OfdmRate54Mbps"} and "management" not in stats["tx"]
    assert _tx(stats, "unicast")["frames"] >= 2 * 50 * 0.96  # host -> robot direct, no access point
    far = get_profile({"name": "far-52m", "extends": "wifi-80211-far", "wifi80211": {"distance_m": 52}})
    with Topology(far, nodes=["host", "robot"], wireless=STATIONS, seed=10) as topo:
        record = topo.simulator_record()
    assert record["association_guards"] >= 1 and record["mac"] == "infrastructure"
