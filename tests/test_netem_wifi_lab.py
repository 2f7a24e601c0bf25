"""A lab's Wi-Fi on the ns-3 802.11 link: station power save (unicast held to the next beacon whose
TIM the station reads), group frames held to the DTIM beacon, other stations with their own
traffic, and each switched off. Real ns-3, real datagrams through the namespaces; timings are
judged against the access point's own beacon log (CLOCK_MONOTONIC, as the probes). Needs root
(namespaces) and libns3-dev + g++ (tools/install.sh)."""

import os
import statistics
from collections.abc import Callable
from typing import TypeVar

import pytest

from fieldtest.machine import MachineMonitor, describe
from fieldtest.netem import Topology, get_profile, load_profiles, measure_link
from fieldtest.netem.probe import udp_blast
from fieldtest.netem.profiles import ProfileError
from fieldtest.realtime import LINK_REALTIME_PRIORITY, REALTIME_PRIORITY
from fieldtest.testkit import needs

T = TypeVar("T")

NODES = ["host", "robot", "mocap"]
STATIONS = ("host", "robot")
DDS_SPDP_GROUP = "239.255.0.1"
BEACON_MS = 100 * 1.024  # hostapd's beacon_int 100 TU
TIMEOUT_MS = 100.0  # mac80211's dynamic power save timeout
# from the releasing beacon to the receiving socket: the beacon's and the frame's airtime and
# channel access (about 1 ms) plus the receiver's wake-up; what the machine adds to it in the same
# run (the simulator's own lag, a woken process's lateness) comes on top (_with_the_machine)
SETTLE_MS = 12.0
UPLINK_MS = 5.0  # the sending station's own hop to the access point, on a loaded machine


@pytest.fixture(autouse=True, scope="module")
def _network_namespaces():
    needs.netns()


def _radio(**mechanisms) -> dict:
    """The wifi-80211 radio with the given mechanisms (everything else off)."""
    return {"name": "lab-test", "extends": "wifi-80211", "wifi80211": mechanisms}


def _beacons(stats: dict, dtim_only: bool = False) -> list[float]:
    return [t * 1e3 for t, dtim in stats["beacon_log"] if dtim or not dtim_only]


def _wait_for_next(beacons_ms: list[float], t_ms: float) -> float | None:
    """How long after ``t_ms`` the next beacon starts (None past the log's last beacon: the link
    stopped before another one)."""
    later = [b for b in beacons_ms if b > t_ms]
    return min(later) - t_ms if later else None


def _with_the_machine(stats: dict, machine: MachineMonitor) -> dict:
    """The link's stats plus what the machine did to its timing in the same run: ``settle_ms``,
    SETTLE_MS plus the simulator's lag p90 (events it ran late) and a woken process's lateness p90;
    ``late_max_ms``, the worst of both."""
    report = machine.report()
    return stats | {
        "settle_ms": SETTLE_MS + stats["lag_ms"]["p90"] + report["timer_late_p90_ms"],
        "late_max_ms": stats["lag_ms"]["max"] + report["timer_late_max_ms"],
        "machine": describe(report),
    }


def _unicast_probes(profile: dict, gap_ms: float, count: int, seed: int) -> tuple[list[dict], dict]:
    """Per delivered probe host -> robot (ms): how long the robot had been idle (since it sent the
    previous echo), the wait from sending to the next beacon, the one-way delay; the link's stats
    with the machine's allowance (``_with_the_machine``)."""
    with Topology(profile, nodes=NODES, wireless=STATIONS, seed=seed) as topo, MachineMonitor() as machine:
        trip = measure_link(
            topo, "host", "robot", count=count, interval_s=gap_ms / 1e3, size=200, samples=True
        )
        stats = _with_the_machine(topo.wifi_link.stats(), machine)
    beacons = _beacons(stats)
    raw = trip["samples"]
    out = []
    for seq, tx_ns in enumerate(raw["sent_at_ns"]):
        echo, previous = raw["echoes"].get(seq), raw["echoes"].get(seq - 1)
        wait = _wait_for_next(beacons, tx_ns / 1e6)
        if echo is not None and previous is not None and wait is not None:
            out.append(
                {
                    "idle": (tx_ns - previous["srv_tx"]) / 1e6,
                    "wait": wait,
                    "delay": (echo["srv_rx"] - tx_ns) / 1e6,
                }
            )
    return out, stats


def _right_after_the_beacon(probe: dict, settle_ms: float) -> bool:
    """Delivered within ``settle_ms`` after the first beacon that followed sending."""
    return 0 <= probe["delay"] - probe["wait"] <= settle_ms


@pytest.mark.parametrize("gap_ms", [60.0, 160.0, 250.0, 330.0])
def test_unicast_to_a_robot_idle_longer_than_its_timeout_waits_for_the_next_beacon(gap_ms):
    """Idle means since the robot's last frame: a probe held ~100 ms leaves the next one of a
    160 ms cadence only ~60 ms of idle, so that cadence alternates between the two cases."""
    count = 16
    probes, stats = _unicast_probes(_radio(power_save={"robot": TIMEOUT_MS}), gap_ms, count, seed=7)
    robot, settle_ms = stats["power_save"]["stations"]["robot"], stats["settle_ms"]
    assert len(probes) >= count - 3
    dozing = [p for p in probes if p["idle"] > TIMEOUT_MS + 5]
    awake = [p for p in probes if p["idle"] < TIMEOUT_MS - 5]
    assert sum(p["delay"] <= settle_ms for p in awake) >= 0.8 * len(awake), (awake, stats["machine"])
    if gap_ms < TIMEOUT_MS:
        # the cadence keeps it awake: it dozes only after a probe the machine sent late (its measured
        # idle past the timeout), and such a probe waits for the beacon like any held one
        assert robot["wakes_tim"] <= 2 + len(dozing), (robot, dozing, stats["machine"])
        assert all(p["delay"] >= p["wait"] - 1.0 for p in dozing), dozing
        return
    assert len(dozing) >= 0.4 * len(probes)
    # never delivered before the next beacon, and right after it
    assert all(p["delay"] >= p["wait"] - 1.0 for p in dozing), dozing
    right_after = [_right_after_the_beacon(p, settle_ms) for p in dozing]
    assert sum(right_after) >= 0.8 * len(dozing), (dozing, settle_ms, stats["machine"])
    waits = [p["wait"] for p in dozing]
    # the probes met the beacon at phases further apart than the settle window, so no fixed delay
    # could pass the check above (at a 160 ms cadence only every other probe is held, and the held
    # ones step through the beacon interval 320 - 3 x 102.4 = 12.8 ms at a time)
    assert max(waits) - min(waits) > 2 * settle_ms
    assert max(p["delay"] for p in probes) <= 2 * BEACON_MS + stats["late_max_ms"], stats["machine"]
    assert robot["frames_buffered"] >= len(dozing) and robot["wakes_tim"] >= len(dozing)
    assert robot["doze_s"] > sum(p["idle"] - TIMEOUT_MS for p in dozing) / 1e3 * 0.8


def test_the_robots_shipped_timeout_keeps_it_awake_between_probes_closer_than_two_seconds():
    """brcmfmac's 2000 ms: a probe 1.2 s after the last exchange is delivered at once, one after
    2.4 s waits for a beacon."""
    timeout_ms = get_profile("wifi-lab").wifi80211.power_save["robot"]
    assert timeout_ms == 2000.0
    awake, awake_stats = _unicast_probes(_radio(power_save={"robot": timeout_ms}), 1200.0, 5, seed=8)
    dozing, stats = _unicast_probes(_radio(power_save={"robot": timeout_ms}), 2400.0, 5, seed=8)
    assert len(awake) >= 3 and len(dozing) >= 3
    assert all(p["idle"] < timeout_ms for p in awake) and all(p["idle"] > timeout_ms for p in dozing)
    assert sum(p["delay"] <= awake_stats["settle_ms"] for p in awake) >= len(awake) - 1, (
        awake,
        awake_stats["machine"],
    )
    right_after = [_right_after_the_beacon(p, stats["settle_ms"]) for p in dozing]
    assert sum(right_after) >= len(dozing) - 1, (dozing, stats["machine"])
    assert all(p["delay"] >= p["wait"] - 1.0 for p in dozing), dozing
    assert stats["power_save"]["stations"]["robot"]["wakes_tim"] >= len(dozing)


@pytest.mark.parametrize("dtim_period", [1, 2, 3])
def test_group_frames_wait_for_the_dtim_beacon_while_a_station_dozes(dtim_period):
    count, gap_s = 12, 0.33
    profile = _radio(power_save={"robot": TIMEOUT_MS}, dtim_period=dtim_period)
    with Topology(profile, nodes=NODES, wireless=STATIONS, seed=9) as topo, MachineMonitor() as machine:
        blast = udp_blast(
            topo, "host", "robot", count=count, size=200, interval_s=gap_s, group=DDS_SPDP_GROUP, samples=True
        )
        stats = _with_the_machine(topo.wifi_link.stats(), machine)
    settle_ms = stats["settle_ms"]
    dtims = _beacons(stats, dtim_only=True)
    samples = blast["samples"]
    pairs = []
    for seq, rx_ns in samples["rx_ns"].items():
        tx_ms = samples["start_ns"] / 1e6 + seq * gap_s * 1e3
        wait = _wait_for_next(dtims, tx_ms)
        if wait is not None:  # delivered, so a DTIM beacon followed unless the log stopped first
            pairs.append((wait, rx_ns / 1e6 - tx_ms))
    assert len(pairs) >= count - 2
    assert stats["power_save"]["dtim_period"] == dtim_period
    assert stats["power_save"]["beacons"] >= dtim_period * (stats["power_save"]["dtim_beacons"] - 1)
    # a datagram sent just before a DTIM beacon reaches the access point after it: the next one
    right_after = [
        0 <= delay - wait <= settle_ms
        or (wait < UPLINK_MS and 0 <= delay - wait - dtim_period * BEACON_MS <= settle_ms)
        for wait, delay in pairs
    ]
    # by chance: settle_ms / BEACON_MS (12 % on an idle machine)
    assert sum(right_after) >= 0.7 * len(pairs), (pairs, settle_ms, stats["machine"])
    waits = [wait for wait, _ in pairs]
    assert max(waits) - min(waits) > 0.5 * dtim_period * BEACON_MS
    # each one that left with a DTIM beacon was held (one sent while nobody dozed goes at once)
    assert stats["power_save"]["group_frames_buffered"] >= sum(right_after)


def _with_other_stations(count: int, load_kbit: float, radio: str = "own") -> tuple[dict, dict]:
    """Round trips host -> robot beside ``count`` other stations; the link's stats."""
    profile = _radio(other_stations=count, other_load_kbit=load_kbit, other_stations_radio=radio)
    with Topology(profile, nodes=NODES, wireless=STATIONS, seed=4) as topo:
        trip = measure_link(topo, "host", "robot", count=150, interval_s=0.02, size=200, samples=True)
        stats = topo.wifi_link.stats()
    return trip, stats


def _in_real_time(measure: Callable[[], tuple[T, dict]], tries: int = 3) -> T:
    """``measure()`` (its result and the link's stats) run again while the simulator fell behind real
    time past the bound that makes a trial invalid: behind, it gives the frames the machine handed it
    late simulated times closer together than they were sent, and they defer to each other."""
    bound_ms = get_profile("wifi-80211").wifi80211.lag_bound_ms
    lags = []
    for _ in range(tries):
        result, stats = measure()
        lags.append(stats["lag_ms"]["p99"])
        if lags[-1] <= bound_ms:
            return result
    pytest.fail(f"ns-3 stayed behind real time in {tries} runs (lag p99 {lags} ms > {bound_ms} ms)")


def _kept_real_time(count: int, load_kbit: float) -> tuple[dict, dict]:
    """``_with_other_stations`` in a run the simulator kept up with real time."""

    def measure() -> tuple[tuple[dict, dict], dict]:
        trip, stats = _with_other_stations(count, load_kbit)
        return (trip, stats), stats

    return _in_real_time(measure)


def _sent_into_the_previous_exchange(trip: dict) -> int:
    """Probes the machine sent late, less than a millisecond (the ACK and an AIFS) after the previous
    probe's echo came back or before it did: on the air they meet their own exchange's frames, not
    the others' on the schedule the bound assumes."""
    echoes = trip["samples"]["echoes"]
    return sum(
        1 for seq, e in echoes.items() if seq - 1 in echoes and e["tx"] < echoes[seq - 1]["rx"] + 1_000_000
    )


def _others_airtime_s(stats: dict) -> float:
    return sum(a["airtime_s"] for name, a in stats["airtime_by_station"].items() if name.startswith("other"))


def _others_busy_fraction(stats: dict) -> float:
    """The share of the run the medium carried frames other than the host's and the robot's own:
    the other stations', the access point's (its downlink to them, beacons, ACKs), in simulated
    time."""
    busy = sum(a["airtime_s"] for name, a in stats["airtime_by_station"].items() if name not in STATIONS)
    return busy / stats["sim_s"]


def test_other_stations_share_the_airtime_and_the_trials_frames_defer_to_theirs():
    """In simulated time, so the machine's own delays do not enter: a frame of the host or the robot
    that finds the medium busy waits at least an AIFS after it. The share of frames that waited is
    judged against the share of the run the medium was busy with others' frames, both measured in
    the same run, in a run the simulator kept up with real time; a probe the machine held back and
    sent into its predecessor's exchange (measured too) may defer, with its echo, to that exchange's
    frames."""
    load_kbit = 1600.0
    runs = {count: _kept_real_time(count, load_kbit) for count in (0, 2, 5)}
    deferred, frames = {}, {}
    for count, (trip, stats) in runs.items():
        access = [stats["channel_access_ms"][name] for name in STATIONS]
        frames[count] = sum(a["frames"] for a in access)
        deferred[count] = sum(a["deferred"] for a in access)
        assert frames[count] >= 2 * 140, access  # every probe and echo went on the air once
        share, busy = deferred[count] / frames[count], _others_busy_fraction(stats)
        # The others' frames are Poisson, so a frame sent on a schedule of its own finds one on the
        # air for the share of time the medium carries them: the host's probes (every 20 ms). The
        # robot's echoes are not on their own schedule: each follows the probe's exchange, while the
        # stations that deferred to it still count their backoff down, so they defer less; only the
        # upper bound (the AIFS after each busy spell above) holds for them. Four binomial
        # standard deviations.
        host = stats["channel_access_ms"]["host"]
        host_spread = 4 * (max(busy, 0.01) * (1 - busy) / host["frames"]) ** 0.5
        assert busy - host_spread <= host["deferred"] / host["frames"], (count, busy, access)
        spread = 4 * (max(busy, 0.01) * (1 - busy) / frames[count]) ** 0.5
        bunched = _sent_into_the_previous_exchange(trip)
        assert share <= 1.5 * busy + spread + 2 * bunched / frames[count], (
            count,
            share,
            busy,
            bunched,
            access,
        )
        others = {name: a for name, a in stats["airtime_by_station"].items() if name.startswith("other")}
        assert len(others) == count and stats["other_stations"]["count"] == count
        if count:
            shares = [a["airtime_s"] for a in others.values()]
            mean = statistics.fmean(shares)
            assert all(0.6 * mean <= share <= 1.4 * mean for share in shares), shares  # same load, same share
            assert stats["other_stations"]["sent_up"] > 0 and stats["other_stations"]["sent_down"] > 0
    # the others' share of the medium grows with their number (simulated time); the trial's frames
    # defer with it, each run's share judged against its own busy share above, and without others
    # fewer than beside either number of them (two runs' counts beside each other are too close to
    # order: 24 and 24 were seen at two and five stations)
    busy = {count: _others_busy_fraction(stats) for count, (_, stats) in runs.items()}
    assert busy[0] < busy[2] < busy[5], busy
    assert deferred[0] < min(deferred[2], deferred[5]), deferred
    airtime = {count: _others_airtime_s(stats) for count, (_, stats) in runs.items()}
    # per simulated second (the machine's load cannot stretch it), five stations take about 5/2 of
    # what two take
    per_s = {count: airtime[count] / runs[count][1]["sim_s"] for count in (2, 5)}
    assert 1.5 < per_s[5] / per_s[2] < 4.0, per_s


def test_other_stations_on_a_shared_radio_load_the_air_as_their_own_radios_do_for_less_cpu():
    """wifi-lab's default: one simulated station sends for all five. The same frames go on the air
    (their airtime and the frames offered per station match five own radios), and the simulator
    receives each frame on four radios fewer, which was most of its work: counted, not timed, as
    CPU seconds of separate runs would hold the machine's load in each."""
    load_kbit = get_profile("wifi-lab").wifi80211.other_load_kbit
    assert get_profile("wifi-lab").wifi80211.other_stations_radio == "shared"
    runs = {radio: _with_other_stations(5, load_kbit, radio) for radio in ("shared", "own")}
    shared, own = runs["shared"][1], runs["own"][1]
    assert shared["other_stations"]["radios"] == 1 and own["other_stations"]["radios"] == 5
    assert {n for n in shared["airtime_by_station"] if n.startswith("other")} == {"others"}
    sent = [up + down for up, down in shared["other_stations"]["sent_each"]]
    assert len(sent) == 5 and all(
        0.6 * statistics.fmean(sent) <= n <= 1.4 * statistics.fmean(sent) for n in sent
    )
    per_s = {radio: _others_airtime_s(stats) / stats["sim_s"] for radio, (_, stats) in runs.items()}
    assert 0.75 < per_s["shared"] / per_s["own"] < 1.33, per_s
    for stats in (shared, own):
        radios = len(STATIONS) + 1 + stats["other_stations"]["radios"]  # and the access point's
        frames = sum(a["frames"] for a in stats["airtime_by_station"].values())
        # every radio but the sender's begins to receive each frame on the air
        assert stats["phy_rx_begun"] / frames == pytest.approx(radios - 1, rel=0.05), (
            stats["phy_rx_begun"],
            frames,
        )


def test_the_link_simulator_runs_above_the_twins_processes():
    """A twin process at the same FIFO priority holding a core would hold simulated frames back."""
    with Topology("wifi-lab", nodes=NODES, wireless=STATIONS, seed=5) as topo:
        record = topo.simulator_record()
        policy, priority = os.sched_getscheduler(topo.wifi_link.pid), os.sched_getparam(topo.wifi_link.pid)
    assert LINK_REALTIME_PRIORITY > REALTIME_PRIORITY
    assert policy == os.SCHED_FIFO and priority.sched_priority == LINK_REALTIME_PRIORITY
    assert record["realtime"] and record["rt_priority"] == LINK_REALTIME_PRIORITY


def test_with_every_mechanism_off_the_link_is_the_ideal_one():
    # measured also both at one fixed rate: Minstrel sends a share of frames at rates it samples at
    # random, a mix that moves with the frames' real-time arrivals; a fixed rate fixes each frame's airtime
    fixed = {"rate_control": "constant", "data_mode": "HtMcs4"}
    profiles = load_profiles(
        {
            "lab-off": {
                "extends": "wifi-lab",
                "wifi80211": {"power_save": {}, "other_stations": 0, "other_load_kbit": 0},
            },
            "lab-off-fixed": {"extends": "lab-off", "wifi80211": fixed},
            "ideal-fixed": {"extends": "wifi-80211", "wifi80211": fixed},
        }
    )
    off = profiles["lab-off"]
    ideal = get_profile("wifi-80211")
    assert off.wifi80211.program_args() == ideal.wifi80211.program_args()
    assert off.wifi80211.power_save_args(list(STATIONS)) == []
    figures = {}
    for profile in (profiles["ideal-fixed"], profiles["lab-off-fixed"]):

        def measure(profile=profile) -> tuple[tuple[dict, dict, dict], dict]:
            with Topology(profile, nodes=NODES, wireless=STATIONS, seed=6) as topo:
                trip = measure_link(topo, "host", "robot", count=100, interval_s=0.03, size=200)
                group = udp_blast(
                    topo,
                    "host",
                    "robot",
                    count=30,
                    size=200,
                    interval_s=0.07,
                    group=DDS_SPDP_GROUP,
                    samples=True,
                )
                record = topo.simulator_record()
            return (trip, group, record), record

        figures[profile.name] = _in_real_time(measure)
    for trip, group, record in figures.values():
        assert trip["rtt_median_ms"] < SETTLE_MS  # nothing waits for a beacon (held: ~50 ms)
        delays = [
            rx / 1e6 - (group["samples"]["start_ns"] / 1e6 + seq * 70.0)
            for seq, rx in group["samples"]["rx_ns"].items()
        ]
        assert statistics.median(delays) < SETTLE_MS, delays  # held to a DTIM: ~100 ms
        assert record["power_save"]["stations"] == {} and record["power_save"]["group_frames_buffered"] == 0
        assert set(record["airtime_by_station"]) == {"ap", "host", "robot"}
        assert "beacon_log" not in record  # the record keeps counts, the beacon times are for tests
    # the same medium in simulated time, which the machine's load cannot reach: the same rates, every
    # frame of the host and the robot on the air for as long and sent as soon as on the ideal link
    ideal_record, off_record = (record for _, _, record in figures.values())
    assert off_record["rate_control"] == ideal_record["rate_control"]
    for name in STATIONS:
        for access in (ideal_record["channel_access_ms"][name], off_record["channel_access_ms"][name]):
            assert access["frames"] >= 100, access  # every probe or echo went on the air
            assert access["p90"] * 1e3 < access["aifs_us"], access  # nothing held at the sender's MAC
        # first transmissions: how many retries there are follows the fading and the frames' arrivals
        ideal_air, off_air = ideal_record["airtime_by_station"][name], off_record["airtime_by_station"][name]
        per_frame = [air["first_airtime_s"] / air["first_ppdus"] for air in (ideal_air, off_air)]
        assert per_frame[1] == pytest.approx(per_frame[0], rel=0.02), (ideal_air, off_air)


def test_power_save_applies_to_stations_only_and_the_lab_profile_cites_its_defaults():
    lab = get_profile("wifi-lab").wifi80211
    assert lab.power_save_args(["host", "robot"]) == ["--ps=robot:2000", "--ps=host:100"]
    assert lab.power_save_args(["robot"]) == ["--ps=robot:2000"]  # a wired host has no power save
    args = lab.program_args()
    assert {"--beacon-interval-tu=100", "--dtim-period=2", "--listen-interval=1", "--others=5"} <= set(args)
    source = get_profile("wifi-lab").source
    for cited in ("net/mac80211/mlme.c", "brcmfmac/cfg80211.c", "hostapd/hostapd.conf", "IEEE 802.11-2016"):
        assert cited in source


@pytest.mark.parametrize(
    ("field", "value"), [("dtim_period", 5), ("listen_interval", 5), ("beacon_interval_tu", 500)]
)
def test_power_save_holding_frames_beyond_the_queue_lifetime_is_refused(field, value):
    with pytest.raises(ProfileError, match="beyond ns-3's 500 ms queue lifetime"):
        load_profiles({"long": {"extends": "wifi-lab", "wifi80211": {field: value}}})
    load_profiles({"awake": {"extends": "wifi-lab", "wifi80211": {field: value, "power_save": {}}}})
