"""What the robot's own traffic does to the commands: twin trials with and without it, on a
bandwidth-limited link, and the Zenoh bridge's cmd_vel priority under that load.

    .venv/bin/python benchmarks/bench_robot_traffic.py                       # about 4 minutes
    .venv/bin/python benchmarks/bench_robot_traffic.py --network wifi --cases dds,dds+foxglove --repeat 3
    .venv/bin/python benchmarks/bench_robot_traffic.py --cases dds,dds+rviz --json out.json
    .venv/bin/python benchmarks/bench_robot_traffic.py --reference reference/bench-robot-traffic.json
    .venv/bin/python benchmarks/bench_robot_traffic.py --network wifi-lab --cases \\
        dds,dds+rviz-view-robot,zenoh-peer,zenoh-peer+rviz-view-robot,zenoh-peer+rviz-view-robot+express,dds+rviz \\
        --reference reference/bench-robot-traffic-wifi-lab.json

Cases (one quick twin trial each, one at a time, interleaved over repetitions so they share the
machine's conditions): ``middleware[+preset][+express]``: ``dds`` and ``zenoh-peer`` (the bridged
path, as in the lab) without robot traffic, with a robot traffic preset (``+rviz``, any name of
``fieldtest.robottraffic.PRESETS``), and on the bridged path with cmd_vel at Zenoh priority 1
express (``+express``, ``transport.zenoh.express``). Per case: the commands' one-way latency
(shared clock; median, p90, p99), commands lost, lap drift, the preset's topics as the host
received them, and DDS discovery packets on the robot's link; on the ns-3 802.11 profiles also the
link's mechanisms from each record (``outcome.stack.link_simulator``: airtime per transmitter,
retries, group frames and those held to a DTIM beacon, each station's share of the run dozing, the
simulator's lag behind real time). A script, not a test: it prints figures and the machine's load
and never fails on a slow figure. Needs network namespaces (root) and the Zenoh bridge
(tools/install_zenoh_bridge.sh). ``--reference`` writes the summary a table of docs/networks.md
is rendered from (``fieldtest/record/reference.py``), each trial with the machine's load, busy
cores and steal.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_twin import load_conditions, measured_load
from bench_wireless_findings import air_figures

from fieldtest.analysis import analyze_trial, read_metrics
from fieldtest.analysis.metrics.schema import METRICS_FILE
from fieldtest.middleware import registry
from fieldtest.names import ROBOT_TRAFFIC_PRESETS
from fieldtest.record import TrialRequest, read_trial
from fieldtest.record.reference import (
    Conditions,
    RobotTrafficRow,
    RobotTrafficSummary,
    run_summary,
    write_reference,
)
from fieldtest.runner import QUICK_PLAN, run_twin_trial
from fieldtest.testkit.docblocks import (
    PREVIEW_TOPIC,
    case_preset,
    robot_traffic_80211_table,
    robot_traffic_set_aside,
    robot_traffic_table,
)

DEFAULT_CASES = "dds,dds+rviz,zenoh-peer,zenoh-peer+rviz,zenoh-peer+rviz+express"
EXPRESS = "express"


def case_problem(case: str) -> str | None:
    """Why ``middleware[+preset][+express]`` names no case (None: it does)."""
    middleware, *flags = case.split("+")
    presets = [f for f in flags if f != EXPRESS]
    if middleware not in registry.names():
        return f"{case}: unknown middleware {middleware!r}"
    if unknown := [f for f in presets if f not in ROBOT_TRAFFIC_PRESETS or f == "none"]:
        return f"{case}: unknown preset {unknown[0]!r} (choose from {', '.join(ROBOT_TRAFFIC_PRESETS[1:])})"
    if len(presets) > 1 or flags.count(EXPRESS) > 1:
        return f"{case}: one preset and one +express at most"
    return None


def request_for(case: str, network: str, repetition: int) -> TrialRequest:
    """``middleware[+preset][+express]``: the robot traffic preset it names, cmd_vel express."""
    middleware, *flags = case.split("+")
    transport = {"middleware": middleware}
    if EXPRESS in flags:
        transport["zenoh_express"] = True
    return TrialRequest.model_validate(
        {
            "name": f"bench-{case.replace('+', '-')}-r{repetition}",
            "plan": QUICK_PLAN.model_dump(),
            "transport": transport,
            "network": network,
            "robot_traffic": case_preset(case),
            "repetition": repetition,
        }
    )


def link_figures(link_simulator: dict | None) -> dict:
    """The 802.11 mechanisms of one trial from ns-3's stats (outcome.stack.link_simulator; nothing
    on another link): each transmitter's airtime as a share of the run, the simulator's CPU and lag,
    and bench_wireless_findings' retries, group frames and power save."""
    if not link_simulator:
        return {}
    air = air_figures(link_simulator)
    wall_s = link_simulator.get("wall_s")
    by_station = link_simulator.get("airtime_by_station") or {}
    lag = link_simulator.get("lag_ms") or {}
    return {
        "airtime_share": {
            name: a["airtime_s"] / wall_s for name, a in by_station.items() if wall_s and "airtime_s" in a
        },
        "lag_p99_ms": lag.get("p99"),
        "lag_max_ms": lag.get("max"),
        "link_cpu_percent": link_simulator.get("cpu_pct"),
        **{
            k: air[k] for k in ("unicast_retries_per_frame", "group_per_s", "group_frames_held", "doze_share")
        },
    }


def figures(trial_dir: Path) -> dict:
    analyze_trial(trial_dir)
    m = read_metrics(trial_dir / "analysis" / METRICS_FILE)
    lat = m.latency
    one_way = lat.one_way_ms
    topics = m.robot_traffic.topics if m.robot_traffic is not None else {}
    traffic = {
        topic: {
            "sent": f.sent,
            "received": f.received,
            "received_hz": f.received_hz,
            "lost_in_span": f.lost_in_span,
        }
        for topic, f in topics.items()
    }
    outcome = read_trial(trial_dir).outcome
    kinds = outcome.link_traffic.get("kinds", {})
    return {
        "trial": trial_dir.name,
        # DDS discovery on the robot's link (SPDP + SEDP packets): the graph's participants add to it
        "discovery_packets": sum(kinds.get(k, {}).get("packets", 0) for k in ("spdp", "sedp")),
        "valid": m.valid,
        "invalid_reasons": list(m.stack.invalid_reasons) if m.stack else [],
        "end": m.outcome.end_reason,
        "median_ms": one_way.median if one_way else None,
        "p90_ms": one_way.p90 if one_way else None,
        "p99_ms": one_way.p99 if one_way else None,
        "lost": lat.lost,
        "sent": lat.commands_sent,
        "drift_mm": None if m.drift.mean_m is None else m.drift.mean_m * 1000,
        "robot_traffic": traffic,
        **link_figures(outcome.stack.get("link_simulator")),
    }


def _median(values: list) -> float | None:
    found = sorted(v for v in values if v is not None)
    return None if not found else float(np.median(found))


def _fmt(value, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="wifi-lossy", help="link profile (default wifi-lossy, 6 Mbit/s)")
    parser.add_argument(
        "--cases",
        default=DEFAULT_CASES,
        help=f"middleware[+preset][+express], comma-separated (default {DEFAULT_CASES})",
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--reference", type=Path, help="write the summary here (reference/bench-robot-traffic.json)"
    )
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    if problem := next(filter(None, map(case_problem, cases)), None):
        parser.error(problem)
    rows: dict[str, list[dict]] = {c: [] for c in cases}
    trials: list[RobotTrafficRow] = []
    with tempfile.TemporaryDirectory(prefix="bench-rt-") as out:
        for repetition in range(args.repeat):
            for case in cases:
                started = time.monotonic()
                with measured_load() as load:
                    result = run_twin_trial(request_for(case, args.network, repetition), Path(out))
                row = {"case": case, "run_s": time.monotonic() - started, "end_reason": result.end_reason}
                if result.end_reason == "completed":
                    row.update(figures(result.trial_dir))
                else:
                    row["detail"] = result.detail
                rows[case].append(row)
                trials.append(reference_row(row, repetition, load_conditions([load])))
                print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"network {args.network}, quick plan, {args.repeat} repetition(s)")
    print(
        f"{'case':<28} {'median ms':>10} {'p90 ms':>8} {'p99 ms':>8} {'lost':>8} {'drift mm':>9}  preview Hz"
    )
    for case, runs in rows.items():
        for row in runs:
            preview = row.get("robot_traffic", {}).get(PREVIEW_TOPIC, {})
            print(
                f"{case:<28} {_fmt(row.get('median_ms'), 2):>10} {_fmt(row.get('p90_ms'), 2):>8} "
                f"{_fmt(row.get('p99_ms'), 2):>8} {str(row.get('lost')) + '/' + str(row.get('sent')):>8} "
                f"{_fmt(row.get('drift_mm')):>9} {_fmt(preview.get('received_hz')):>10} "
                f"{row.get('discovery_packets', 'n/a'):>14}"
                + ("" if row.get("valid", True) else "  (invalid: machine timing)")
                + (
                    f"  {row['end_reason']}: {row.get('detail', '')}"
                    if row["end_reason"] != "completed"
                    else ""
                )
            )
    if args.repeat > 1:
        print("median over repetitions (valid, completed trials):")
        for case, runs in rows.items():
            ok = [r for r in runs if r["end_reason"] == "completed" and r.get("valid", True)]
            cells = [
                _median([r.get(k) for r in ok]) for k in ("median_ms", "p90_ms", "p99_ms", "lost", "drift_mm")
            ]
            print(f"{case:<28} " + " ".join(_fmt(c, 2) for c in cells) + f"  (n={len(ok)})")
    print("\n".join([*robot_traffic_table(trials), "", *robot_traffic_set_aside(trials)]))
    print("\n".join(robot_traffic_80211_table(trials)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.reference:
        summary = run_summary(
            RobotTrafficSummary,
            args.reference,
            "nice -n 10 .venv/bin/python benchmarks/bench_robot_traffic.py",
            argv,
            {
                "network": args.network,
                "cases": cases,
                "repetitions": args.repeat,
                "plan": "quick",
            },
            trials,
        )
        write_reference(args.reference, summary)
    return 0


def reference_row(row: dict, repetition: int, conditions: Conditions) -> RobotTrafficRow:
    """One trial as docs/networks.md's table shows it (fieldtest.testkit.docblocks)."""
    preview = row.get("robot_traffic", {}).get(PREVIEW_TOPIC, {})
    return RobotTrafficRow(
        case=row["case"], repetition=repetition, end_reason=row["end_reason"],
        median_ms=row.get("median_ms"), p90_ms=row.get("p90_ms"), p99_ms=row.get("p99_ms"),
        lost=row.get("lost"), sent=row.get("sent"), drift_mm=row.get("drift_mm"), valid=row.get("valid"),
        invalid_reasons=row.get("invalid_reasons", []),
        preview_received_hz=preview.get("received_hz"), discovery_packets=row.get("discovery_packets"),
        topics_received_hz={t: f.get("received_hz") for t, f in row.get("robot_traffic", {}).items()},
        topics_received={t: f["received"] for t, f in row.get("robot_traffic", {}).items() if "received" in f},
        topics_sent={t: f["sent"] for t, f in row.get("robot_traffic", {}).items() if "sent" in f},
        lag_p99_ms=row.get("lag_p99_ms"), lag_max_ms=row.get("lag_max_ms"),
        link_cpu_percent=row.get("link_cpu_percent"),
        airtime_share=row.get("airtime_share", {}),
        unicast_retries_per_frame=row.get("unicast_retries_per_frame"), group_per_s=row.get("group_per_s"),
        group_frames_held=row.get("group_frames_held"), doze_share=row.get("doze_share", {}),
        detail=(row.get("detail") or "").splitlines()[0][:200] if row.get("detail") else "",
        conditions=conditions,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
