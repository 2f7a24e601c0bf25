"""The twin's command lines: ``fieldtest trial``, ``fieldtest demo``, ``fieldtest campaign``."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from fieldtest.lifecycle import TrialResult, exit_code, not_run
from fieldtest.middleware import registry
from fieldtest.names import ROBOT_TRAFFIC_PRESETS
from fieldtest.plan import SquarePlan
from fieldtest.procs import interruption, run_stop_event
from fieldtest.record import TrialRequest
from fieldtest.runner.batches import (
    analyze_all,
    choose_parallel,
    run_and_rerun,
    run_with_progress,
    say_on_stderr,
)
from fieldtest.runner.twintrial import DEFAULT_RUNS_DIR, QUICK_PLAN
from fieldtest.runner.verdict import print_stack_check, verdict_lines

if TYPE_CHECKING:
    from fieldtest.analysis import Metrics
    from fieldtest.runner.resume import KeptTrial


def request_from_args(args: argparse.Namespace, middleware: str) -> TrialRequest:
    plan = QUICK_PLAN if args.quick else SquarePlan()
    traffic = f"-traffic-{args.robot_traffic}" if args.robot_traffic != "none" else ""
    name = f"{middleware}-{args.security}-{args.network}{traffic}-r{args.repetition}"
    return TrialRequest.model_validate(
        {
            "name": name,
            "plan": plan.model_dump(),
            "transport": {
                "middleware": middleware,
                "qos": args.qos,
                "security": args.security,
                "mqtt": {"nagle": not args.no_nagle},
                "dds": {"discovery": args.dds_discovery, "robot_vendor": args.dds_robot_vendor},
                "zenoh": {"express": args.zenoh_express},
            },
            "robot_traffic": args.robot_traffic,
            "network": args.network,
            "topology": args.topology,
            "repetition": args.repetition,
            "seed": args.seed,
        }
    )


def _parallel_arg(value: str) -> str:
    if value != "auto" and not (value.isdigit() and int(value) >= 1):
        raise argparse.ArgumentTypeError(f"{value!r}: a number of trials (1 or more) or auto")
    return value


def add_scheduling_args(parser: argparse.ArgumentParser, parallel_default: str) -> None:
    parser.add_argument(
        "--parallel",
        type=_parallel_arg,
        default=parallel_default,
        help=f"trials run side by side: a number, or auto (from the cores left free; default {parallel_default})",
    )
    parser.add_argument(
        "--rerun-invalid",
        type=int,
        default=1,
        metavar="N",
        help="re-run a trial invalid by the machine's own timing faults up to N times, alone (default 1)",
    )


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="two short laps instead of the 96 s plan")
    parser.add_argument("--security", default="none", help="security setting (default none)")
    parser.add_argument("--network", default="loopback", help="link profile (default loopback)")
    parser.add_argument(
        "--topology",
        default="seed",
        choices=("seed", "robot-only", "all"),
        help="which machines sit on the emulated link (default seed: host and robot, on 4g the broker/router too)",
    )
    parser.add_argument(
        "--no-nagle",
        action="store_true",
        help="MQTT: TCP_NODELAY on the clients (default: Nagle's algorithm on, as mqtt_client's Paho C)",
    )
    parser.add_argument(
        "--dds-discovery",
        default="spdp",
        choices=("spdp", "all", "none", "cyclonedds-default", "server"),
        help="DDS: multicast SPDP discovery as the lab (default), multicast for all, none (unicast "
        "peers), CycloneDDS's own default (spdp on a Wi-Fi interface, all on a wired one), or server "
        "(Fast DDS: the discovery server on the robot, as ROS_DISCOVERY_SERVER)",
    )
    parser.add_argument(
        "--dds-robot-vendor",
        default="same",
        choices=("same", "cyclonedds", "fastdds"),
        help="DDS: the library the robot and its base run, whatever the host runs (default same): "
        "fastdds with --middleware dds is a stock TurtleBot 4 beside a kit on CycloneDDS",
    )
    parser.add_argument(
        "--robot-traffic",
        default="none",
        choices=ROBOT_TRAFFIC_PRESETS,
        help="the robot's own topics an operator's tool pulls during the trial: rviz (scan, tf, odom, "
        "camera preview), rviz-view-robot (scan, tf: RViz as turtlebot4_viz opens it, no camera), "
        "foxglove (also imu, battery, diagnostics), all (default none)",
    )
    parser.add_argument(
        "--zenoh-express",
        action="store_true",
        help="bridged Zenoh: the bridges route cmd_vel at priority 1 (real time) and express",
    )
    parser.add_argument("--qos", default="default", help="QoS profile name (default: ROS 2 default)")
    parser.add_argument("--repetition", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_RUNS_DIR, help="where trial directories go")


def trial_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fieldtest trial", description="Run one digital-twin trial.")
    parser.add_argument("--middleware", default="dds", choices=registry.names())
    add_common_args(parser)
    args = parser.parse_args(argv)
    try:
        requests = [request_from_args(args, args.middleware)]
    except ValueError as exc:
        print(f"fieldtest trial: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    with run_stop_event() as stop:  # the analysis too: a signal then lets it finish
        try:
            results = run_with_progress(requests, args.out, stop)
        except ValueError as exc:
            print(f"fieldtest trial: {exc}".splitlines()[0], file=sys.stderr)
            return 2
        metrics = analyze_all(results)
    for result in results:
        print(f"{result.end_reason}: {result.trial_dir}  report: {result.trial_dir}/analysis/report.md")
    print_stack_check(requests, metrics=metrics, results=results)
    print("\n".join(verdict_lines(requests, metrics)))
    return exit_code(results, stop)


def demo_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="fieldtest demo",
        description="The twin trial over every middleware at once, then a comparison report.",
    )
    parser.add_argument("--middlewares", default=",".join(registry.names()), help="comma-separated subset")
    add_scheduling_args(parser, parallel_default="auto")
    add_common_args(parser)
    args = parser.parse_args(argv)
    middlewares = [m for m in args.middlewares.split(",") if m]
    unknown = sorted(set(middlewares) - set(registry.names()))
    if unknown:
        print(
            f"fieldtest demo: unknown middleware {', '.join(unknown)} (choose from {', '.join(registry.names())})",
            file=sys.stderr,
        )
        return 2
    requests, direct_note = direct_where_no_bridge([request_from_args(args, m) for m in middlewares])
    if direct_note:
        print(direct_note.replace(" ran without ", " run without ", 1), file=sys.stderr)
    parallel = choose_parallel(args.parallel, len(requests))
    stop = threading.Event()
    results, metrics, every, reruns = run_and_rerun(requests, args.out, parallel, args.rerun_invalid, stop)
    requests = not_run(requests, len(results), stop, say_on_stderr)
    from fieldtest.analysis import compare_trials

    compare_dir = args.out / f"compare-{results[0].trial_dir.name}"
    compare_trials([r.trial_dir for r in every], compare_dir)
    for result in results:
        print(f"{result.end_reason:>12}  {result.trial_dir}/analysis/report.md  {result.detail}")
    print(f"comparison report: {compare_dir / 'compare.md'}")
    print_stack_check(requests, metrics=metrics, results=results)
    print("\n".join(verdict_lines(requests, metrics, reruns)))
    if direct_note:
        print(direct_note)
    return exit_code(results, stop)


def direct_where_no_bridge(requests: list[TrialRequest]) -> tuple[list[TrialRequest], str]:
    """The demo's cases that would run through the lab's bridges run on their middleware's own path
    while the bridges are not built (their first build takes 25-60 min), so a newcomer's first
    verdict does not wait for it; the note says so and how to run them bridged."""
    out, direct, why = [], [], ""
    for request in requests:
        family = registry.get(request.transport.middleware)
        config = family.twin_defaults(request.transport, request.transport.model_fields_set)
        if family.bridged(config) and (missing := family.bridge_missing()):
            middleware = request.transport.middleware
            name = request.name.replace(middleware, f"{middleware}-direct", 1)
            request = request.model_copy(update={"name": name, "transport": family.unbridged(config)})
            direct.append(middleware)
            why = missing
        out.append(request)
    if not direct:
        return out, ""
    return out, (
        f"note: {', '.join(direct)} ran without the lab's bridges ({why.split(':')[0]}); "
        f"`make install` builds them, then `fieldtest demo --middlewares {','.join(direct)}` runs them bridged"
    )


def campaign_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="fieldtest campaign",
        description="Run every trial of a campaign YAML in the twin, analyze each, then compare them.",
    )
    parser.add_argument("campaign_yaml", type=Path, help="e.g. trials/twin-networks.yaml")
    parser.add_argument("--quick", action="store_true", help="two short laps per trial instead of the plan")

    parser.add_argument("--out", type=Path, default=DEFAULT_RUNS_DIR, help="where trial directories go")
    parser.add_argument("--list", action="store_true", help="only list the trials")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the trials that already have a completed, valid record under --out and run the rest "
        "(an interrupted campaign, or one whose repetitions were raised)",
    )
    add_scheduling_args(parser, parallel_default="1")
    parser.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run the trials on the workers of this Dask scheduler, e.g. tcp://10.0.0.5:8786 "
        "(docs/cluster.md); each worker then runs as many at once as it declared (--parallel is not used)",
    )
    args = parser.parse_args(argv)
    from fieldtest.trialcampaign import load_trials

    try:
        campaign, requests = load_trials(args.campaign_yaml)
    except (OSError, ValueError) as exc:
        print(f"fieldtest campaign: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    if args.quick:
        requests = [r.model_copy(update={"plan": QUICK_PLAN}) for r in requests]
    if args.list:
        for request in requests:
            print(request.name)
        return 0
    out = args.out / campaign.campaign
    stop = threading.Event()
    planned = len(requests)
    kept: list[KeptTrial] = []
    if args.resume:
        from fieldtest.runner.resume import kept_trials

        requests, kept = kept_trials(requests, out)
        say_on_stderr(f"resume: {len(kept)} of {planned} trials kept from {out}, {len(requests)} to run")
    if args.cluster:
        from fieldtest.runner.cluster import run_on_cluster

        run = run_on_cluster(requests, out, args.cluster, args.rerun_invalid, stop)
        results, metrics, every, reruns = run.results, run.metrics, run.every, run.reruns
        left = [r for r in requests if r not in run.ran]
        if left:
            why = interruption(stop) if stop.is_set() else "not brought home"
            why = "the scheduler was lost" if run.scheduler_lost else why
            say_on_stderr(f"not run ({why}): {', '.join(r.name for r in left)}")
        requests = run.ran
    else:
        parallel = choose_parallel(args.parallel, len(requests))
        results, metrics, every, reruns = run_and_rerun(requests, out, parallel, args.rerun_invalid, stop)
        requests = not_run(requests, len(results), stop, say_on_stderr)
    from fieldtest.analysis import compare_trials

    compare_trials([k.trial_dir for k in kept] + [r.trial_dir for r in every], out / "compare")
    failed = [r for r in results if r.end_reason != "completed"]
    for result in failed:
        print(f"{result.end_reason:>12}  {result.trial_dir}  {result.detail}")
    completed = len(kept) + len(results) - len(failed)
    print(f"{completed}/{planned} trials completed; comparison: {out / 'compare' / 'compare.md'}")
    kept_metrics: list[Metrics | None] = [k.metrics for k in kept]
    verdict = verdict_lines([k.request for k in kept] + requests, kept_metrics + metrics, reruns)
    print("\n".join(verdict))
    # the kept trials count as the completed trials they are
    every_result = [TrialResult(k.trial_dir, "completed") for k in kept] + results
    # 1 when planned trials never came home (the cluster lost them, or its scheduler)
    return exit_code(every_result, stop) or int(len(every_result) < planned)
