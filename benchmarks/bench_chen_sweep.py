"""Chen 2019's loss against distance on Chen's radio (wifi-80211a-adhoc): `fieldtest perf` rows at
each distance, Sensor and Default QoS, without and with DDS Security (SROS2).

    .venv/bin/python benchmarks/bench_chen_sweep.py [--distances 24 24.25 ... 27] [--duration 15]
        [--until 02:40] --reference reference/bench-chen-sweep.json

Host (Chen's publisher) and robot (the subscriber) are stations of one 802.11a ad hoc network at a
fixed 54 Mbit/s (docs/networks.md, "Chen's radio"), the robot at each distance from the host. Each
row: DDS, Array128 at 10 Hz, round trips (the robot echoes every ping), so it gives the one-way loss
(pings the robot never got: Chen's loss from a sequence counter), the round trip and its loss, the
ns-3 link's unicast retries and MAC drops, the RTPS packets on the robot's link by kind, the
simulator's lag and the row's validity (docs/perf.md, "Valid rows"), with the machine's load over
the row. Distances run coarse to fine (whole metres first, then halves, then quarters), so a run cut
short by ``--until`` still spans the range. No propagation value comes from Chen's figures: the
profile is Chen's stated set-up with ns-3's defaults (fieldtest/netem/profiles.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from pathlib import Path

from fieldtest.machine import MachineMonitor
from fieldtest.netem import get_profile, netns_available
from fieldtest.perf.case import PerfCase, PerfRow
from fieldtest.record.reference import (
    ChenSweepRow,
    ChenSweepSummary,
    Conditions,
    run_summary,
    write_reference,
)
from fieldtest.testkit.docblocks import chen_sweep_table

PROFILE = "wifi-80211a-adhoc"
DEFAULT_DISTANCES = [24 + 0.25 * i for i in range(13)]  # 24-27 m in quarter metres
RTPS_KINDS = ("user_data", "heartbeat_acknack", "rtps_protected")


def coarse_to_fine(distances: list[float]) -> list[float]:
    """Whole metres first, then half metres, then the rest, each ascending."""

    def level(d: float) -> int:
        return 0 if d == int(d) else 1 if 2 * d == int(2 * d) else 2

    return sorted(distances, key=lambda d: (level(d), d))


def summary_row(distance: float, row: PerfRow, conditions: Conditions) -> ChenSweepRow:
    case = row.case
    out = ChenSweepRow(
        distance_m=distance, qos=case.qos, security=case.security, status=row.status,
        valid=row.valid, invalid_reasons=row.invalid_reasons, error=row.error or None, conditions=conditions,
    )  # fmt: skip
    sim = row.link.get("simulator") or {}
    unicast = (sim.get("tx") or {}).get("unicast") or {}
    if unicast.get("frames"):
        out.unicast_frames = unicast["frames"]
        out.retries_per_frame = unicast["retries"] / unicast["frames"]
        out.mac_drops = sum(
            n for reason, n in (sim.get("mac_drops") or {}).items() if reason.startswith("unicast:")
        )
    out.lag_p99_ms = (sim.get("lag_ms") or {}).get("p99")
    kinds = (row.link.get("traffic") or {}).get("kinds") or {}
    out.rtps_packets = {k: kinds[k]["packets"] for k in RTPS_KINDS if k in kinds}
    if row.status == "ok" and row.subscribers:
        sub = row.subscribers[0]
        out.sent = sub["sent"]
        out.one_way_loss = sub["lost"] / sub["sent"] if sub["sent"] else None
        out.round_trip_loss = sub.get("round_trip_lost", 0) / sub["sent"] if sub["sent"] else None
        out.round_trip_p50_ms = row.figures.get("round_trip_p50 (ms)")
        out.round_trip_p99_ms = row.figures.get("round_trip_p99 (ms)")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--distances", nargs="+", type=float, default=DEFAULT_DISTANCES)
    parser.add_argument("--qos", nargs="+", default=["sensor", "default"])
    parser.add_argument("--security", nargs="+", default=["none", "sros2"])
    parser.add_argument("--message", default="Array128")
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=15.0, help="seconds of pings per row")
    parser.add_argument("--discovery-timeout", type=float, default=15.0)
    parser.add_argument("--until", default=None, help="HH:MM UTC: start no row after it")
    parser.add_argument("--reference", type=Path, default=None, help="write the summary here")
    args = parser.parse_args()
    ok, reason = netns_available()
    if not ok:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 1
    from fieldtest.perf.run import run_row  # the middleware stack: after the namespace check

    until = None
    if args.until:
        hour, minute = map(int, args.until.split(":"))
        now = dt.datetime.now(dt.UTC)
        until = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    rows: list[ChenSweepRow] = []
    not_run: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fieldtest-chen-") as work:
        for distance in coarse_to_fine(args.distances):
            name = f"{PROFILE}-{distance:g}m"
            profiles = {
                name: get_profile({"name": name, "extends": PROFILE, "wifi80211": {"distance_m": distance}})
            }
            for security in args.security:
                for qos in args.qos:
                    label = f"{distance:g} m {qos}/{security}"
                    if until is not None and dt.datetime.now(dt.UTC) >= until:
                        not_run.append(label)
                        continue
                    case = PerfCase(
                        middleware="dds", security=security, qos=qos, network=name, message=args.message,
                        rate_hz=args.rate, duration_s=args.duration, mode="roundtrip",
                    )  # fmt: skip
                    with MachineMonitor() as monitor:
                        row = run_row(
                            case, Path(work) / label.replace(" ", "-").replace("/", "-"),
                            profiles=profiles, discovery_s=args.discovery_timeout,
                        )  # fmt: skip
                    machine = monitor.report()
                    conditions = Conditions(
                        load_1min=machine["loadavg_1min"], busy_percent=[machine["busy_pct"]],
                        steal_percent=machine["steal_pct"], steal_max_percent=machine["steal_max_pct"],
                    )  # fmt: skip
                    rows.append(summary_row(distance, row, conditions))
                    print(f"{label}: {chen_sweep_table([rows[-1]])[-1]}", file=sys.stderr, flush=True)
                    if args.reference:  # after every row: a run cut short keeps what it measured
                        write(args, rows, not_run)
    print("\n".join(chen_sweep_table(rows)))
    if not_run:
        print(f"not run (--until): {', '.join(not_run)}", file=sys.stderr)
    if args.reference:
        write(args, rows, not_run)
    return 0


def write(args: argparse.Namespace, rows: list[ChenSweepRow], not_run: list[str]) -> None:
    settings = {
        "profile": PROFILE, "distances": args.distances, "qos": args.qos, "security": args.security,
        "message": args.message, "rate_hz": args.rate, "duration_s": args.duration, "mode": "roundtrip",
        "middleware": "dds", "not_run": not_run,
    }  # fmt: skip
    script = "nice -n 10 .venv/bin/python benchmarks/bench_chen_sweep.py"
    write_reference(
        args.reference, run_summary(ChenSweepSummary, args.reference, script, None, settings, rows)
    )


if __name__ == "__main__":
    sys.exit(main())
