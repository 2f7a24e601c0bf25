#!/usr/bin/env python3
"""Lab-path latency: the real rclpy nodes beside the twin's C-stamped DDS path and ddsperf, one run.

    .venv/bin/python benchmarks/bench_lab_latency.py [--duration 32] [--rounds 2]
    .venv/bin/python benchmarks/bench_lab_latency.py --reference reference/bench-lab-latency.json

1. Lab path: a lab rehearsal trial (``fieldtest.labrun.rehearsal.labrehearsal``): square_driver -> link_monitor,
   rclpy from the ROS 2 wheels on Fast DDS, started from the launch plan by planrun, with the
   simulated base and the NatNet emulator running. The robot bag's CommandReceipt latency: send
   stamp right before rclpy publishes, arrival from the RMW's reception timestamp.
2. Twin DDS path: the twin host and robot processes over the kit's CycloneDDS transport, stamped
   at the CycloneDDS API by the C helper (bench_twin.measure_latency).
3. ddsperf ping/pong on loopback, TwistStamped's size, at the command rate: round trip / 2.

The lab and twin paths alternate for ``--rounds`` rounds (a stall of the machine then hits both
paths alike rather than one); each round's rows and the pooled rows are printed, and the verdict is
the pooled one. Target on a quiet machine (issue: lab software in the loop): lab-path median within 0.2 ms of the
twin's DDS path, p99 within 1 ms. The machine's conditions (load, busy cores, CPU steal) are
printed beside every figure; figures from a loaded or stolen machine are not the link's.
``--reference`` writes the summary docs/benchmarks.md's table is rendered from (``tools/render_docs.py``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_twin import (  # noqa: E402
    TWIST_STAMPED_CDR_BYTES,
    Figures,
    Load,
    bench_plan,
    load_conditions,
    loads_text,
    measure_latency,
    measured_load,
)

from fieldtest import rosmsg  # noqa: E402
from fieldtest.labrun.orchestration.labrunner import LabOptions  # noqa: E402
from fieldtest.labrun.orchestration.remote import RobotSide  # noqa: E402
from fieldtest.labrun.rehearsal.labrehearsal import SimulatedLab, rehearse  # noqa: E402
from fieldtest.record import RECEIPTS_TOPIC, ROBOT_BAG, TrialRequest, read_bag  # noqa: E402
from fieldtest.record.reference import LabLatencyRow, LabLatencySummary, run_summary, write_reference  # noqa: E402
from fieldtest.testkit.ddsperf import DdsperfError, run_pingpong  # noqa: E402
from fieldtest.testkit.docblocks import LAB_MEDIAN_TARGET_MS, LAB_P99_TARGET_MS  # noqa: E402
from fieldtest.transport.base import TransportConfig  # noqa: E402
from fieldtest.trialcampaign import LabSettings  # noqa: E402

MEDIAN_TARGET_MS, P99_TARGET_MS = LAB_MEDIAN_TARGET_MS, LAB_P99_TARGET_MS


def lab_latency(duration_s: float, work_dir: Path) -> tuple[np.ndarray, Load]:
    """Raw one-way latencies (ns) of one lab rehearsal trial, and the machine's load over it."""
    plan = bench_plan(20.0, duration_s)
    request = TrialRequest(
        name="bench-lab",
        plan=plan,
        cmd_type="twist_stamped",
        network="loopback",
        transport=TransportConfig(middleware="dds", namespace="/tb4"),
    )
    lab = LabSettings(ros_distro="jazzy", countdown_s=0, confirm_each_trial=False, preflight_timeout_s=60)
    options = LabOptions(runs_dir=work_dir / "lab", ros_distro="jazzy", lab=lab, robot=RobotSide(), say=print)
    with measured_load() as load:
        [result] = rehearse([request], options, SimulatedLab())
    if result.end_reason != "completed":
        raise SystemExit(f"lab rehearsal did not complete: {result.end_reason} {result.detail}")
    raw = [
        rosmsg.ns_of(r.received) - rosmsg.ns_of(r.sent)
        for _, r in read_bag(result.trial_dir / ROBOT_BAG).messages(RECEIPTS_TOPIC)
        if r.seq < plan.n_ticks()
    ]
    return np.array(raw), load


def twin_latency(duration_s: float, work_dir: Path) -> tuple[np.ndarray, Load]:
    twin = measure_latency("dds", duration_s, work_dir, domain_id=61)
    if twin.raw_ns is None or twin.load is None:
        raise SystemExit(f"twin DDS path: {twin.error or 'no receipts'}")
    return twin.raw_ns, twin.load


def row(name: str, f: Figures | None, conditions: str) -> str:
    if f is None:
        return f"{name:<34} {'n/a':>7}"
    return f"{name:<34} {f.count:>6} {f.p50_ms:>8.3f} {f.p90_ms:>8.3f} {f.p99_ms:>8.3f} {f.max_ms:>8.3f}  {conditions}"


def reference_row(path: str, round_no: int | None, f: Figures, loads: list[Load]) -> LabLatencyRow:
    return LabLatencyRow(
        path=path, round=round_no, count=f.count, p50_ms=f.p50_ms, p90_ms=f.p90_ms, p99_ms=f.p99_ms,
        max_ms=f.max_ms, conditions=load_conditions(loads),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=32.0, help="seconds of commands per path and round")
    parser.add_argument("--rounds", type=int, default=2, help="lab and twin paths alternate this many times")
    parser.add_argument(
        "--reference", type=Path, help="write the summary here (reference/bench-lab-latency.json)"
    )
    args = parser.parse_args(argv)
    paths = {"lab path (rclpy, Fast DDS)": lab_latency, "twin DDS path (C stamps)": twin_latency}
    series: dict[str, list[np.ndarray]] = {name: [] for name in paths}
    loads: dict[str, list[Load]] = {name: [] for name in paths}
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-lab-") as tmp:
        work = Path(tmp)
        for round_no in range(1, args.rounds + 1):
            for name, measure in paths.items():
                raw, load = measure(
                    args.duration, work / f"r{round_no}-{len(series[name])}-{measure.__name__}"
                )
                series[name].append(raw)
                loads[name].append(load)
                rows.append(row(f"{name} r{round_no}", Figures.of_ns(raw), load.text()))
        try:
            with measured_load() as load:
                ping = run_pingpong(20.0, TWIST_STAMPED_CDR_BYTES, args.duration, 62)
            d = ping.one_way
            dds = Figures(
                d.count, d.p50_us / 1e3, d.p90_us / 1e3, d.p99_us / 1e3, d.max_us / 1e3, d.mean_us / 1e3
            )
            dds_load, dds_loads = load.text(), [load]
        except DdsperfError as exc:
            dds, dds_load, dds_loads = None, str(exc), []
    print(
        f"\n{'one-way latency, ms (raw: received - sent)':<34} {'n':>6} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}  conditions"
    )
    print("\n".join(rows))
    pooled = {name: Figures.of_ns(np.concatenate(parts)) for name, parts in series.items()}
    for name, figures in pooled.items():
        print(row(f"{name} pooled", figures, loads_text(loads[name])))
    print(row("ddsperf (RTT/2)", dds, dds_load))
    lab, twin = pooled.values()
    d50, d99 = lab.p50_ms - twin.p50_ms, lab.p99_ms - twin.p99_ms
    ok = d50 <= MEDIAN_TARGET_MS and d99 <= P99_TARGET_MS
    print(
        f"\nlab - twin, pooled: median {d50:+.3f} ms (target <= {MEDIAN_TARGET_MS}), p99 {d99:+.3f} ms "
        f"(target <= {P99_TARGET_MS}): {'MET' if ok else 'NOT MET'} under the conditions above"
    )
    if args.reference:
        if dds is None:
            raise SystemExit(f"no summary written: ddsperf failed ({dds_load})")
        short = dict(zip(paths, ("lab", "twin"), strict=True))
        summary_rows = [
            reference_row(short[name], round_no, Figures.of_ns(raw), [load])
            for name in paths
            for round_no, (raw, load) in enumerate(zip(series[name], loads[name], strict=True), start=1)
        ]
        summary_rows += [reference_row(short[name], None, pooled[name], loads[name]) for name in paths]
        summary_rows.append(reference_row("ddsperf", None, dds, dds_loads))
        settings = {"duration_s": args.duration, "rounds": args.rounds, "rate_hz": 20.0}
        write_reference(
            args.reference,
            run_summary(
                LabLatencySummary, args.reference, ".venv/bin/python benchmarks/bench_lab_latency.py",
                argv, settings, summary_rows,
            ),
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
