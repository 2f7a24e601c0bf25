"""Benchmark the emulated links: the forwarder's own cost, and each profile measured vs configured.

    sudo .venv/bin/python benchmarks/bench_netem.py [--count 500] [--interval 0.005] [--profiles wifi 4g]

Prints figures only (no pass/fail): added delay p50/p99 of the userspace forwarder against a plain
veth, its scheduling lateness and CPU use, then per profile the measured RTT/loss next to the
configured values.
"""

from __future__ import annotations

import argparse
import sys
import time

import psutil

from fieldtest.netem import Topology, builtin_profiles, choose_backend, measure_link, netns_available
from fieldtest.netem.probe import udp_blast


def cpu_percent_during(pid: int | None, action):
    """Run ``action`` and return (its result, CPU % of process ``pid`` meanwhile)."""
    if pid is None:
        return action(), float("nan")
    proc = psutil.Process(pid)
    before, start = sum(proc.cpu_times()[:2]), time.monotonic()
    result = action()
    return result, 100.0 * (sum(proc.cpu_times()[:2]) - before) / (time.monotonic() - start)


def forwarder_pid(topo: Topology, node: str) -> int | None:
    fwd = topo.links[node].forwarder
    return fwd.pid if fwd is not None else None


def lateness(topo: Topology, node: str) -> str:
    stats = topo.link_stats().get(node)
    if not stats:
        return "n/a (netem)"
    return ", ".join(
        f"{d} p50 {stats[d]['late_p50_us']} us p99 {stats[d]['late_p99_us']} us max {stats[d]['late_max_us']} us"
        for d in ("a2b", "b2a")
    )


def bench_overhead(count: int, interval: float) -> None:
    print("\n== forwarder overhead: 'ideal' link vs plain veth (both through the bridge) ==")
    with Topology("ideal", nodes=["host", "robot", "mocap"]) as topo:
        pid = forwarder_pid(topo, "robot")
        wired = measure_link(topo, "host", "mocap", count=count, interval_s=interval)
        emulated, cpu = cpu_percent_during(
            pid, lambda: measure_link(topo, "host", "robot", count=count, interval_s=interval)
        )
        print(f"plain veth RTT      p50 {wired['rtt_median_ms']:.3f} ms  p99 {wired['rtt_p99_ms']:.3f} ms")
        print(
            f"through forwarder   p50 {emulated['rtt_median_ms']:.3f} ms  p99 {emulated['rtt_p99_ms']:.3f} ms"
        )
        print(
            f"added per round trip: p50 {emulated['rtt_median_ms'] - wired['rtt_median_ms']:+.3f} ms, "
            f"p99 {emulated['rtt_p99_ms'] - wired['rtt_p99_ms']:+.3f} ms (two forwarder passes)"
        )
        print(
            f"forwarder CPU at {1 / interval:.0f} probes/s: {cpu:.1f} % of a core; lateness: {lateness(topo, 'robot')}"
        )
        blast, cpu = cpu_percent_during(
            pid, lambda: udp_blast(topo, "robot", "host", count=10000, size=200, interval_s=0.0001)
        )
        print(f"forwarder CPU at 10000 datagrams/s: {cpu:.1f} % of a core, delivered {1 - blast['loss']:.1%}")


def bench_profiles(names: list[str], count: int, interval: float) -> None:
    print("\n== profiles: measured (host <-> robot) vs configured ==")
    header = f"{'profile':<12}{'rtt p50':>9}{'(conf)':>8}{'rtt p99':>9}{'loss':>8}{'(conf)':>8}{'up p50':>8}"
    print(header + f"{'(conf)':>8}{'down p50':>9}{'(conf)':>8}{'fwd cpu':>9}")
    profiles = builtin_profiles()
    for name in names:
        profile = profiles[name]
        with Topology(profile, nodes=["host", "robot"]) as topo:
            r, cpu = cpu_percent_during(
                forwarder_pid(topo, "robot"),
                lambda: measure_link(topo, "host", "robot", count=count, interval_s=interval),
            )
            late = lateness(topo, "robot")
        print(
            f"{name:<12}{r['rtt_median_ms']:9.2f}{profile.expected_rtt_ms():8.2f}{r['rtt_p99_ms']:9.2f}"
            f"{r['loss']:8.3f}{profile.expected_loss():8.3f}{r['owd_ba_median_ms']:8.2f}{profile.up.delay_ms:8.2f}"
            f"{r['owd_ab_median_ms']:9.2f}{profile.down.delay_ms:8.2f}{cpu:8.1f}%"
        )
        print(f"{'':<12}lateness: {late}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=500, help="probes per measurement")
    parser.add_argument("--interval", type=float, default=0.005, help="seconds between probes")
    parser.add_argument("--profiles", nargs="*", default=["ethernet", "wifi", "wifi-lossy", "4g"])
    args = parser.parse_args()
    ok, reason = netns_available()
    if not ok:
        print(f"cannot benchmark: {reason}", file=sys.stderr)
        return 1
    backend, why = choose_backend()
    print(f"backend: {backend} ({why}); {psutil.cpu_count()} CPUs, load {psutil.getloadavg()}")
    bench_overhead(args.count, args.interval)
    bench_profiles(args.profiles, args.count, args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
