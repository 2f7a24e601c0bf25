"""Benchmark the ns-3 802.11 link against its configuration, beside the fast (forwarder) profiles.

    sudo .venv/bin/python benchmarks/bench_wifi80211.py [--probes 200] [--datagrams 150]
        [--profiles wifi-80211 wifi-80211-far wifi wifi-lossy] [--distances 15 30]
    sudo .venv/bin/python benchmarks/bench_wifi80211.py --profiles wifi-lab --own-radios \
        --reference reference/bench-wifi-lab.json

Host and robot are stations of the simulated access point (the fast profiles put both on their
profile too), the mocap node is wired. Per profile, in one run: unicast round trip and loss per
datagram size (UDP echo), multicast delivery per datagram size (4000 B = three IP fragments, one
frame each), and for ns-3 the frames' retries, the rate of group frames, airtime, the simulator's
lag behind real time and its CPU (for the fast profiles the forwarders' CPU). Each row carries the
machine's load and CPU steal over its own measurement. Figures only, no pass/fail. ``--own-radios``
adds, for every profile with other stations, the same profile with a radio of its own per other
station (``other_stations_radio: own``), to set the simulator's cost of each beside the other.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psutil

from fieldtest.machine import MachineMonitor, describe
from fieldtest.netem import Topology, get_profile, measure_link, netns_available
from fieldtest.netem.probe import udp_blast
from fieldtest.netem.profiles import LinkProfile
from fieldtest.record.reference import (
    Conditions,
    Wifi80211Row,
    Wifi80211Summary,
    machine_text,
    utc_now,
    write_reference,
)
from fieldtest.record.trial import software_versions
from fieldtest.testkit.docblocks import wifi80211_table

RTT_SIZES = (64, 512, 1400)
MULTICAST_SIZES = (100, 1400, 4000)
GROUP = "239.255.0.1"  # DDS SPDP
NODES = ["host", "robot", "mocap"]
STATIONS = ("host", "robot")


def configuration(profile: LinkProfile) -> str:
    w = profile.wifi80211
    if w is None:
        d = profile.up
        return f"forwarder: {d.delay_ms:g} ms +- {d.jitter_ms:g} per direction, {d.expected_loss():.1%} loss per frame"
    fading = "no fading" if w.nakagami_m is None else f"Nakagami m={w.nakagami_m:g}"
    return f"ns-3: {w.standard} {w.band_ghz:g} GHz ch {w.channel}, {w.distance_m:g} m, exponent {w.path_loss_exponent:g}, {fading}"


def link_cpu_seconds(topo: Topology) -> float:
    """CPU time so far of the processes that make the link (ns-3 or the forwarders)."""
    pids = (
        [topo.wifi_link.pid]
        if topo.wifi_link
        else [ln.forwarder.pid for ln in topo.links.values() if ln.forwarder]
    )
    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)


def measure(profile: LinkProfile, probes: int, datagrams: int, seed: int) -> dict:
    with Topology(profile, nodes=NODES, wireless=STATIONS, seed=seed) as topo, MachineMonitor() as monitor:
        cpu0, t0 = link_cpu_seconds(topo), time.monotonic()
        rtt = {
            s: measure_link(topo, "host", "robot", count=probes, interval_s=0.01, size=s) for s in RTT_SIZES
        }
        mcast = {
            s: udp_blast(topo, "host", "robot", count=datagrams, size=s, interval_s=0.01, group=GROUP)
            for s in MULTICAST_SIZES
        }
        cpu = 100 * (link_cpu_seconds(topo) - cpu0) / (time.monotonic() - t0)
        sim = topo.simulator_record()
    return {"rtt": rtt, "mcast": mcast, "cpu_pct": cpu, "sim": sim, "machine": monitor.report()}


def print_row(profile: LinkProfile, r: dict) -> None:
    print(f"\n== {profile.name}: {configuration(profile)}")
    for size, m in r["rtt"].items():
        print(
            f"  unicast {size:>5} B: RTT p50 {m['rtt_median_ms']:6.2f} ms  p99 {m['rtt_p99_ms']:6.2f} ms  "
            f"loss {m['loss']:6.1%}"
        )
    for size, m in r["mcast"].items():
        print(f"  multicast {size:>5} B: delivered {1 - m['loss']:6.1%}")
    print(f"  link CPU {r['cpu_pct']:.1f} % of a core (measured from outside)")
    sim = r["sim"]
    if sim:
        tx = sim["tx"]
        for kind in ("unicast", "group_uplink", "group"):
            k = tx.get(kind)
            if k:
                rates = ", ".join(
                    f"{mode} {n}" for mode, n in sorted(k["modes"].items(), key=lambda x: -x[1])[:3]
                )
                sizes = ", ".join(
                    f"{cls}: {v['retries'] / v['frames']:.2f}"
                    for cls, v in sorted(k["by_size"].items())
                    if v["frames"]
                )
                print(
                    f"  {kind:<12} frames {k['frames']:>6}  retries/frame {k['retries'] / k['frames']:.2f} "
                    f"({sizes})  airtime {100 * k['airtime_s'] / sim['wall_s']:.1f} %  rates: {rates}"
                )
        lag = sim["lag_ms"]
        print(
            f"  simulator: lag p50 {lag['p50']:.3f} / p99 {lag['p99']:.3f} / max {lag['max']:.1f} ms "
            f"(bound {sim['lag_bound_ms']:g} ms at p99), CPU {sim['cpu_pct']:.1f} %, SCHED_FIFO {sim['realtime']}, "
            f"MAC drops {sim['mac_drops'] or 'none'}, association repairs {sim['association_repairs']}, "
            f"deassociations {sim['deassociations']}"
        )
    print(f"  {describe(r['machine'])}")


def _rates(kind: dict | None) -> list[str]:
    """The most used rates of a frame kind, most used first (ns-3's mode names)."""
    modes = sorted((kind or {}).get("modes", {}).items(), key=lambda x: -x[1])
    return [mode for mode, _ in modes[:2]]


def _per_frame(kind: dict | None, what: str) -> float | None:
    return kind[what] / kind["frames"] if kind and kind["frames"] else None


def summary_row(profile: LinkProfile, r: dict) -> Wifi80211Row:
    """The figures docs/networks.md quotes, from one profile's measurement."""
    machine, sim = r["machine"], r["sim"]
    row = Wifi80211Row(
        profile=profile.name,
        configuration=configuration(profile),
        rtt_p50_ms={s: m["rtt_median_ms"] for s, m in r["rtt"].items()},
        rtt_p99_ms={s: m["rtt_p99_ms"] for s, m in r["rtt"].items()},
        unicast_loss={s: m["loss"] for s, m in r["rtt"].items()},
        multicast_delivered={s: 1 - m["loss"] for s, m in r["mcast"].items()},
        link_cpu_percent=r["cpu_pct"],
        conditions=Conditions(
            load_1min=machine["loadavg_1min"], busy_percent=[machine["busy_pct"]],
            steal_percent=machine["steal_pct"], steal_max_percent=machine["steal_max_pct"],
        ),
    )  # fmt: skip
    if sim:
        unicast, group = sim["tx"].get("unicast"), sim["tx"].get("group")
        row.unicast_retries_per_frame = _per_frame(unicast, "retries")
        row.unicast_rates = _rates(unicast)
        row.group_rates = _rates(group)
        row.group_retries_per_frame = _per_frame(group, "retries")
        row.group_airtime_share = group["airtime_s"] / sim["wall_s"] if group else None
        row.lag_p99_ms, row.lag_max_ms = sim["lag_ms"]["p99"], sim["lag_ms"]["max"]
        row.lag_bound_ms = sim["lag_bound_ms"]
        others = [
            a["airtime_s"]
            for name, a in sim.get("airtime_by_station", {}).items()
            if name.startswith("other")
        ]
        row.others_airtime_share = sum(others) / sim["wall_s"] if others else None
    return row


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--probes", type=int, default=200, help="round-trip probes per size (100/s)")
    parser.add_argument("--datagrams", type=int, default=150, help="multicast datagrams per size (100/s)")
    parser.add_argument(
        "--profiles", nargs="+", default=["wifi-80211", "wifi-80211-far", "wifi", "wifi-lossy"]
    )
    parser.add_argument(
        "--distances", nargs="*", type=float, default=[], help="extra wifi-80211-far distances (m)"
    )
    parser.add_argument(
        "--own-radios",
        action="store_true",
        help="also each profile with other stations on radios of their own",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--reference", type=Path, default=None, help="write the summary here (reference/bench-wifi80211.json)"
    )
    args = parser.parse_args()
    ok, reason = netns_available()
    if not ok:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 1
    profiles = [get_profile(name) for name in args.profiles]
    profiles += [
        get_profile(
            {"name": f"wifi-80211-{d:g}m", "extends": "wifi-80211-far", "wifi80211": {"distance_m": d}}
        )
        for d in args.distances
    ]
    if args.own_radios:
        profiles += [
            get_profile(
                {
                    "name": f"{p.name}-own-radios",
                    "extends": p.name,
                    "wifi80211": {"other_stations_radio": "own"},
                }
            )
            for p in list(profiles)
            if p.wifi80211 is not None and p.wifi80211.other_stations
        ]
    rows = []
    for profile in profiles:
        result = measure(profile, args.probes, args.datagrams, args.seed)
        print_row(profile, result)
        rows.append(summary_row(profile, result))
    print("\n" + "\n".join(wifi80211_table(rows)))
    if args.reference:
        command = " ".join(["sudo nice -n 10 .venv/bin/python benchmarks/bench_wifi80211.py", *sys.argv[1:]])
        settings = {"probes": args.probes, "datagrams": args.datagrams, "seed": args.seed,
                    "profiles": args.profiles, "distances": args.distances, "own_radios": args.own_radios}  # fmt: skip
        write_reference(
            args.reference,
            Wifi80211Summary(
                kind="wifi80211-link", name=args.reference.stem, command=command, measured_utc=utc_now(),
                machine=machine_text(), versions=software_versions(), settings=settings, rows=rows,
            ),
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
