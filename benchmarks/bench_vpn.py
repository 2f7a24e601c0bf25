#!/usr/bin/env python3
"""SROS2 against a VPN, as Kim et al. 2018 compared them: DDS latency and throughput by payload size
with no protection, with SROS2, and over OpenVPN, on the same emulated link.

    sudo .venv/bin/python benchmarks/bench_vpn.py                        # ethernet and wifi, 3 repetitions
    sudo .venv/bin/python benchmarks/bench_vpn.py --networks ethernet --repetitions 2
    sudo .venv/bin/python benchmarks/bench_vpn.py --reference reference/bench-vpn.json

Every figure is a ``fieldtest perf`` row (``fieldtest.perf.run.run_row``) between the twin's host
and robot namespaces: ``security`` none or the DDS secure default (SROS2: authentication, access
control, encryption), or ``vpn openvpn`` (fieldtest/netem/vpn.py) without DDS security. Latency is
Kim's: round trip / 2, from round-trip rows; throughput is what the robot received per second in a
one-way row sending a message every millisecond, as Kim's test sent its packets with a 1 ms
cooling-off between them (a row whose rate the emulated link cannot carry is refused). The
payload sizes span Kim's 16 to 12 000 bytes (the seed gives the range, not the steps). The
repetitions run interleaved; each figure is the mean over the repetitions that counted (ok, and
their link emulator kept up) with its 95 % interval. Whatever comes out is reported.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench_twin import Load, load_conditions, measured_load

from fieldtest.middleware import registry
from fieldtest.perf.case import PerfCase, PerfRow
from fieldtest.perf.run import run_row
from fieldtest.perf.stats import MeanInterval, mean_interval
from fieldtest.record.reference import VpnCompareRow, VpnCompareSummary, run_summary, write_reference
from fieldtest.testkit.docblocks import vpn_compare_table

SIZES = (16, 1024, 12000)  # both ends of Kim's range (16 to 12 000 bytes) and 1 KiB between
NETWORKS = ("ethernet", "wifi")  # Kim ran wired and Wi-Fi
RATE_HZ = 20.0
DURATION_S = 3.0
THROUGHPUT_RATE_HZ = 1000.0  # Kim's 1 ms cooling-off between packets
THROUGHPUT_DURATION_S = 1.0
RTT = "round_trip_mean (ms)"
THROUGHPUT = "throughput_received (MB/s)"


def protections() -> dict[str, dict[str, str]]:
    """Protection name -> the PerfCase fields that set it."""
    sros2 = registry.get("dds").secure_default
    return {"none": {}, sros2: {"security": sros2}, "openvpn": {"vpn": "openvpn"}}


def cases(
    network: str, size: int, fields: dict[str, str], args: argparse.Namespace
) -> tuple[PerfCase, PerfCase]:
    """The round-trip row and the one-way throughput row of one cell."""
    common = {"middleware": "dds", "network": network, "message": f"Array{size}", **fields}
    rtt = PerfCase(**common, rate_hz=args.rate, duration_s=args.duration)
    flood = PerfCase(
        **common, rate_hz=THROUGHPUT_RATE_HZ, duration_s=args.throughput_duration, mode="one-way"
    )
    return rtt, flood


def _counted(rows: list[PerfRow], figure: str) -> list[float | None]:
    return [r.figures.get(figure) for r in rows if r.counted]


def reference_row(
    network: str, protection: str, size: int, rows: list[PerfRow], loads: list[Load]
) -> VpnCompareRow:
    rtt = mean_interval(
        [None if v is None else v / 2 for v in _counted([r for r in rows if r.case.mode == "roundtrip"], RTT)]
    )
    flow = mean_interval(_counted([r for r in rows if r.case.mode == "one-way"], THROUGHPUT))

    def half(interval: MeanInterval) -> float | None:
        if interval.high is None or interval.mean is None:
            return None
        return round(interval.high - interval.mean, 4)

    def value(interval: MeanInterval) -> float | None:
        return None if interval.mean is None else round(interval.mean, 4)

    errors = sorted({f"{r.status}: {r.error}" if r.status != "ok" else "invalid: " + "; ".join(r.invalid_reasons)
                     for r in rows if not r.counted})  # fmt: skip
    return VpnCompareRow(
        network=network, protection=protection, message=f"Array{size}", size_b=size,
        latency_ms=value(rtt), latency_half95_ms=half(rtt), throughput_mb_s=value(flow),
        throughput_half95_mb_s=half(flow), runs_latency=rtt.n, runs_throughput=flow.n, errors=errors,
        conditions=load_conditions(loads),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--networks", nargs="+", default=list(NETWORKS))
    p.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--rate", type=float, default=RATE_HZ, help="round-trip rows' rate (Hz)")
    p.add_argument("--duration", type=float, default=DURATION_S, help="round-trip rows' length (s)")
    p.add_argument("--throughput-duration", type=float, default=THROUGHPUT_DURATION_S)
    p.add_argument(
        "--rerun-invalid", type=int, default=1, metavar="N",
        help="run a row whose link emulator fell behind again, up to N times (default 1); the invalid "
        "rows count nowhere",
    )  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="keep the rows' folders here")
    p.add_argument("--reference", type=Path, help="write the summary here (reference/bench-vpn.json)")
    args = p.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-vpn-"))
    cells = [(n, name, s, f) for n in args.networks for s in args.sizes for name, f in protections().items()]
    rows: dict[tuple, list[PerfRow]] = {cell[:3]: [] for cell in cells}
    loads: dict[tuple, list[Load]] = {cell[:3]: [] for cell in cells}
    index = 0
    for repetition in range(args.repetitions):
        for network, name, size, fields in cells:
            for case in cases(network, size, fields, args):
                for _attempt in range(1 + args.rerun_invalid):
                    with measured_load() as load:
                        row = run_row(case, out / f"{index:03d}")
                    row.repetition = repetition
                    index += 1
                    rows[(network, name, size)].append(row)
                    loads[(network, name, size)].append(load)
                    status = f"{row.status}, invalid" if row.valid is False else row.status
                    print(f"{index:3d} {case.label}: {status} {row.figures.get(RTT) or row.figures.get(THROUGHPUT) or row.error}",
                          file=sys.stderr)  # fmt: skip
                    if row.valid is not False:
                        break
    table = [reference_row(*key, rows[key], loads[key]) for key in rows]
    print("\n".join(vpn_compare_table(table)))
    if args.reference:
        settings = {
            "networks": args.networks, "sizes_b": [float(s) for s in args.sizes], "repetitions": args.repetitions,
            "rate_hz": args.rate, "duration_s": args.duration, "throughput_duration_s": args.throughput_duration,
            "throughput_rate_hz": THROUGHPUT_RATE_HZ,
            "protections": list(protections()),
        }  # fmt: skip
        script = "sudo nice -n 10 .venv/bin/python benchmarks/bench_vpn.py"
        summary = run_summary(VpnCompareSummary, args.reference, script, argv, settings, table)
        write_reference(args.reference, summary)
        print(f"wrote {args.reference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
