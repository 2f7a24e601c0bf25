"""Benchmark the emulated links: the forwarder's own cost, and each profile measured vs configured.

    sudo .venv/bin/python benchmarks/bench_netem.py [--count 500] [--interval 0.005] [--profiles wifi 4g]
    sudo .venv/bin/python benchmarks/bench_netem.py --profiles ethernet --reference reference/bench-netem.json

Prints figures only (no pass/fail): added delay p50/p99 of the userspace forwarder against a plain
veth, its scheduling lateness and CPU use, then per profile the measured RTT/loss next to the
configured values. ``--reference`` writes the forwarder's cost and the profiles' round trips as the
summary docs/networks.md, "Backends", is rendered from (``fieldtest/record/reference.py``), each row
with the machine's load, busy cores and steal over its own measurement.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psutil
from bench_twin import Load, load_conditions, measured_load

from fieldtest.netem import Topology, builtin_profiles, choose_backend, measure_link, netns_available
from fieldtest.netem.probe import udp_blast
from fieldtest.record.reference import (
    ForwarderCostRow,
    ForwarderCostSummary,
    run_summary,
    write_reference,
)
from fieldtest.testkit.docblocks import forwarder_cost_table

BLAST_PER_S = 10000


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


def lateness_us(topo: Topology, node: str) -> dict[str, list[int]]:
    """The forwarder's scheduling lateness per direction (a2b, b2a), or nothing on netem."""
    stats = topo.link_stats().get(node)
    if not stats:
        return {}
    return {
        f"late_{q}_us": [int(stats[d][f"late_{q}_us"]) for d in ("a2b", "b2a")] for q in ("p50", "p99", "max")
    }


def lateness(topo: Topology, node: str) -> str:
    stats = topo.link_stats().get(node)
    if not stats:
        return "n/a (netem)"
    return ", ".join(
        f"{d} p50 {stats[d]['late_p50_us']} us p99 {stats[d]['late_p99_us']} us max {stats[d]['late_max_us']} us"
        for d in ("a2b", "b2a")
    )


def bench_overhead(count: int, interval: float, rows: list[ForwarderCostRow]) -> None:
    print("\n== forwarder overhead: 'ideal' link vs plain veth (both through the bridge) ==")
    with Topology("ideal", nodes=["host", "robot", "mocap"]) as topo:
        pid = forwarder_pid(topo, "robot")
        with measured_load() as load:
            wired = measure_link(topo, "host", "mocap", count=count, interval_s=interval)
        rows.append(_rtt_row("plain veth", wired, 1 / interval, None, load))
        with measured_load() as load:
            emulated, cpu = cpu_percent_during(
                pid, lambda: measure_link(topo, "host", "robot", count=count, interval_s=interval)
            )
        rows.append(
            _rtt_row(
                "forwarder, `ideal` profile", emulated, 1 / interval, cpu, load, **lateness_us(topo, "robot")
            )
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
        with measured_load() as load:
            blast, cpu = cpu_percent_during(
                pid,
                lambda: udp_blast(
                    topo, "robot", "host", count=BLAST_PER_S, size=200, interval_s=1 / BLAST_PER_S
                ),
            )
        print(
            f"forwarder CPU at {BLAST_PER_S} datagrams/s: {cpu:.1f} % of a core, delivered {1 - blast['loss']:.1%}"
        )
        rows.append(
            ForwarderCostRow(
                path="forwarder, `ideal` profile, 200 B datagrams one way", rtt_p50_ms=None, rtt_p99_ms=None,
                packets_per_s=BLAST_PER_S, forwarder_cpu_percent=_number(cpu), delivered=1 - blast["loss"],
                conditions=load_conditions([load]),
            )
        )  # fmt: skip


def _number(value: float) -> float | None:
    return None if value != value else value  # NaN: no forwarder (netem)


def _rtt_row(path: str, r: dict, per_s: float, cpu: float | None, load: Load, **extra) -> ForwarderCostRow:
    return ForwarderCostRow(
        path=path, rtt_p50_ms=r["rtt_median_ms"], rtt_p99_ms=r["rtt_p99_ms"], packets_per_s=per_s,
        forwarder_cpu_percent=None if cpu is None else _number(cpu), conditions=load_conditions([load]), **extra,
    )  # fmt: skip


def bench_profiles(names: list[str], count: int, interval: float, rows: list[ForwarderCostRow]) -> None:
    print("\n== profiles: measured (host <-> robot) vs configured ==")
    header = f"{'profile':<12}{'rtt p50':>9}{'(conf)':>8}{'rtt p99':>9}{'loss':>8}{'(conf)':>8}{'up p50':>8}"
    print(header + f"{'(conf)':>8}{'down p50':>9}{'(conf)':>8}{'fwd cpu':>9}")
    profiles = builtin_profiles()
    for name in names:
        profile = profiles[name]
        with Topology(profile, nodes=["host", "robot"]) as topo, measured_load() as load:
            r, cpu = cpu_percent_during(
                forwarder_pid(topo, "robot"),
                lambda: measure_link(topo, "host", "robot", count=count, interval_s=interval),
            )
            late = lateness(topo, "robot")
            late_us = lateness_us(topo, "robot")
        rows.append(
            _rtt_row(
                f"`{name}` profile",
                r,
                1 / interval,
                cpu,
                load,
                configured_rtt_ms=profile.expected_rtt_ms(),
                **late_us,
            )
        )
        print(
            f"{name:<12}{r['rtt_median_ms']:9.2f}{profile.expected_rtt_ms():8.2f}{r['rtt_p99_ms']:9.2f}"
            f"{r['loss']:8.3f}{profile.expected_loss():8.3f}{r['owd_ba_median_ms']:8.2f}{profile.up.delay_ms:8.2f}"
            f"{r['owd_ab_median_ms']:9.2f}{profile.down.delay_ms:8.2f}{cpu:8.1f}%"
        )
        print(f"{'':<12}lateness: {late}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=500, help="probes per measurement")
    parser.add_argument("--interval", type=float, default=0.005, help="seconds between probes")
    parser.add_argument("--profiles", nargs="*", default=["ethernet", "wifi", "wifi-lossy", "4g"])
    parser.add_argument("--reference", type=Path, help="write the summary here (reference/bench-netem.json)")
    args = parser.parse_args(argv)
    ok, reason = netns_available()
    if not ok:
        print(f"cannot benchmark: {reason}", file=sys.stderr)
        return 1
    backend, why = choose_backend()
    print(f"backend: {backend} ({why}); {psutil.cpu_count()} CPUs, load {psutil.getloadavg()}")
    rows: list[ForwarderCostRow] = []
    bench_overhead(args.count, args.interval, rows)
    bench_profiles(args.profiles, args.count, args.interval, rows)
    print("\n" + "\n".join(forwarder_cost_table(rows)))
    if args.reference:
        summary = run_summary(
            ForwarderCostSummary,
            args.reference,
            "sudo nice -n 10 .venv/bin/python benchmarks/bench_netem.py",
            argv,
            {
                "backend": backend,
                "probes": args.count,
                "interval_s": args.interval,
                "profiles": args.profiles,
            },
            rows,
        )
        write_reference(args.reference, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
