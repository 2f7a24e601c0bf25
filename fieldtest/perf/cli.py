"""``fieldtest perf``: a sweep of perf rows (middleware x security x QoS x network x message x
subscribers x the fields the families declare, ``fieldtest.perf.case.FAMILY_PERF_FIELDS``), from the
command line or a perf campaign file (``--campaign``, ``fieldtest.perf.perfcampaign``), each case
``--repetitions`` times; a progress bar per sweep, the files of ``fieldtest.perf.results``.

Names are checked before anything runs (one line and exit 2 for an unknown message, middleware,
QoS, security setting or network); a combination that cannot run (a size the middleware cannot
carry, a rate the link cannot hold) is recorded as a refused row and the sweep goes on. A stop
signal, Ctrl-C, SIGTERM or SIGHUP, ends the sweep as the lifecycle ends a run (``fieldtest.lifecycle``):
the row under way stops (no further process of it starts), no further row starts and those left are
listed, every finished row is kept and the files are written (a signal while they are written lets
the write finish), exit 130.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fieldtest.lifecycle import not_run, run_exit_code
from fieldtest.middleware import registry
from fieldtest.procs import interruption, run_stop_event

from .case import FAMILY_PERF_FIELDS
from .messages import QUICK_MESSAGES, SEED_MESSAGES, parse_message
from .results import table2_markdown, write_all
from .run import (
    MODES,
    CombinationRefused,
    PerfCase,
    PerfInputError,
    PerfRow,
    check_case,
    parse_rate,
    run_row,
)

DEFAULT_OUT = Path("trials/perf")
QUICK_DURATION_S = 2.0
# The flags that describe the sweep; a campaign file (--campaign) describes it instead
SWEEP_FLAGS = ("middleware", "security", "qos", "network", "message", "size", "rate", "duration",
               "subscribers", "mode", "repetitions", "vpn", *FAMILY_PERF_FIELDS)  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fieldtest perf",
        description="Latency, throughput, loss, CPU and RSS per message size over the twin's middlewares "
        "(as Zhang et al.'s performance_test runs: Array1k ... PointCloud2m, 10 Hz, 30 s, round trips).",
    )
    p.add_argument("--middleware", nargs="+", default=list(registry.names()), help="default: all five")
    p.add_argument(
        "--security", nargs="+", default=["none"], help="setting names, or 'on' (each middleware's default)"
    )
    p.add_argument(
        "--qos", nargs="+", default=["default"], help="profiles from fieldtest.qos (fernandez-a .. e)"
    )
    p.add_argument(
        "--network", nargs="+", default=["loopback"], help="loopback or a link profile (wifi, 4g, ...)"
    )
    p.add_argument(
        "--vpn", nargs="+", default=["none"], help="none or openvpn: a VPN between host and robot over "
        "the network (docs/networks.md, 'A VPN over the link')",
    )  # fmt: skip
    p.add_argument("--profiles", type=Path, default=None, help="YAML file of link profiles of your own")
    p.add_argument("--message", nargs="+", default=None, help="Array1k ... Array2m, PointCloud512k ... PointCloud2m, "
                   "or Array<N>/PointCloud<N>[k|m] (default: Zhang's ten)")  # fmt: skip
    p.add_argument("--size", nargs="+", type=int, default=[], help="payload sizes in bytes (as Array<N>)")
    p.add_argument(
        "--rate", default="10", help="messages per second (default 10), or max: saturation, as fast as "
        "the middleware accepts (performance_test's --rate 0; needs --mode one-way)",
    )  # fmt: skip
    p.add_argument("--duration", type=float, default=30.0, help="seconds per row (default 30)")
    p.add_argument(
        "--subscribers", nargs="+", type=int, default=[1], help="receivers of the topic (default 1)"
    )
    p.add_argument(
        "--mode", choices=MODES, default="roundtrip", help="roundtrip (Main/Relay, default) or one-way"
    )
    for name, declared in FAMILY_PERF_FIELDS.items():  # each family's own (its settings' PERF_FIELDS)
        p.add_argument(
            declared.flag, dest=name, nargs="+", choices=declared.choices, default=[declared.default],
            help=declared.help,
        )  # fmt: skip
    p.add_argument("--repetitions", type=int, default=1, help="runs of each case (default 1), interleaved")
    p.add_argument(
        "--campaign",
        type=Path,
        default=None,
        help="perf campaign file (YAML matrix) instead of the flags above",
    )
    p.add_argument(
        "--quick", action="store_true", help=f"{QUICK_DURATION_S:g} s rows, {', '.join(QUICK_MESSAGES)}"
    )
    p.add_argument("--out", type=Path, default=None, help="output folder (default trials/perf/<time>)")
    p.add_argument(
        "--rerun-invalid",
        type=int,
        default=0,
        metavar="N",
        help="run a row invalid by its link emulator or ns-3 falling behind again, up to N times "
        "(default 0); the invalid rows are kept in the files, left out of the tables",
    )
    p.add_argument(
        "--discovery-timeout", type=float, default=20.0, help="s to wait for every relay (default 20)"
    )
    return p


def user_profiles(args: argparse.Namespace) -> dict:
    from fieldtest.netem import ProfileError, load_profiles_file

    try:
        return load_profiles_file(args.profiles) if args.profiles else {}
    except ProfileError as exc:
        raise PerfInputError(str(exc)) from None


def planned_rows(
    args: argparse.Namespace, profiles: dict | None = None, parser: argparse.ArgumentParser | None = None
) -> list[tuple[PerfCase, int]]:
    """Every (row, repetition) in run order, from the campaign file or the flags; bad input refused
    here (PerfInputError or CampaignError, one line)."""
    if args.campaign is None:
        if args.repetitions < 1:
            raise PerfInputError(f"--repetitions: {args.repetitions}, must be at least 1")
        cases = build_cases(args, profiles)
        return [(case, r) for r in range(args.repetitions) for case in cases]
    from .perfcampaign import expand_rows, load_perf_campaign

    parser = parser or _parser()
    for dest in SWEEP_FLAGS:
        if getattr(args, dest) != parser.get_default(dest):
            flag = "--" + dest.replace("_", "-")
            raise PerfInputError(f"{flag}: not with --campaign ({args.campaign} describes the sweep)")
    sweep = load_perf_campaign(args.campaign)
    return expand_rows(sweep, profiles, duration_s=QUICK_DURATION_S if args.quick else None)


def build_cases(args: argparse.Namespace, profiles: dict | None = None) -> list[PerfCase]:
    """Every row of the sweep; unknown names refused here (PerfInputError, one line)."""
    messages = list(args.message or (QUICK_MESSAGES if args.quick else SEED_MESSAGES))
    messages += [f"Array{size}" for size in args.size]
    duration = QUICK_DURATION_S if args.quick else args.duration
    rate = parse_rate(args.rate)
    for name in messages:
        try:
            parse_message(name)
        except ValueError as exc:
            raise PerfInputError(str(exc)) from None
    cases: list[PerfCase] = []
    for mw, family_values, security, qos, network, vpn, subs, message in itertools.product(
        args.middleware,
        family_value_sets(args),
        args.security,
        args.qos,
        args.network,
        args.vpn,
        args.subscribers,
        messages,
    ):
        try:
            setting = registry.get(mw).secure_default if security == "on" else security
        except ValueError as exc:
            raise PerfInputError(str(exc)) from None
        case = PerfCase(
            middleware=mw, security=setting, qos=qos, network=network, message=message, rate_hz=rate,
            duration_s=duration, subscribers=subs, mode=args.mode, vpn=vpn, **family_values,
        )  # fmt: skip
        if case.normalized() not in cases:  # once, whatever the values of fields it does not read
            cases.append(case.normalized())
    refused = []
    for case in cases:  # a wrong name is one error; a combination that cannot run, one refused row
        try:
            check_case(case, profiles)
        except CombinationRefused as exc:
            refused.append(str(exc))
    if refused and len(refused) == len(cases):
        raise PerfInputError(refused[0])  # nothing would run
    return cases


def family_value_sets(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every combination of the family fields' values on the command line (``FAMILY_PERF_FIELDS``)."""
    names = list(FAMILY_PERF_FIELDS)
    return [
        dict(zip(names, values, strict=True))
        for values in itertools.product(*(getattr(args, n) for n in names))
    ]


def run_sweep(
    planned: list[tuple[PerfCase, int]],
    out: Path,
    stop: threading.Event,
    *,
    discovery_s: float = 20.0,
    show: bool = True,
    profiles: dict | None = None,
    first_index: int = 0,
) -> tuple[list[PerfRow], bool]:
    """Run the (row, repetition) pairs in order with a progress bar, in ``out/rows/<first_index +
    i>``; (rows finished, interrupted). After a stop signal no further row starts; those left are
    listed (``lifecycle.not_run``)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    rows: list[PerfRow] = []
    started = 0
    columns = (TextColumn("{task.description:<48}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not show, transient=False) as progress:
        task = progress.add_task("perf", total=len(planned))
        for i, (case, repetition) in enumerate(planned):
            if stop.is_set():
                break
            started += 1
            progress.update(task, description=case.label[:48])
            row = run_row(
                case,
                out / "rows" / f"{first_index + i:03d}",
                stop=stop,
                discovery_s=discovery_s,
                profiles=profiles,
            )
            row.repetition = repetition
            if stop.is_set():
                break  # the row under way is cut short: not kept
            rows.append(row)
            progress.advance(task)
    not_run(planned, started, stop, say_on_stderr, name=lambda p: p[0].label)
    return rows, stop.is_set()


def say_on_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def rerun_invalid(
    rows: list[PerfRow],
    out: Path,
    stop: threading.Event,
    reruns: int,
    *,
    discovery_s: float = 20.0,
    show: bool = True,
    profiles: dict | None = None,
) -> tuple[list[PerfRow], bool]:
    """Each invalid row's case and repetition run again, one row at a time, up to ``reruns`` times
    while it stays invalid (as ``fieldtest campaign --rerun-invalid``); the new rows, to be kept
    beside the invalid ones, and whether the sweep was interrupted."""
    added: list[PerfRow] = []
    todo = [row for row in rows if row.valid is False]
    for _ in range(reruns):
        if not todo or stop.is_set():
            break
        print(f"re-running {len(todo)} invalid row(s) ...", file=sys.stderr)
        again, _ = run_sweep(
            [(row.case, row.repetition) for row in todo],
            out,
            stop,
            first_index=len(rows) + len(added),
            discovery_s=discovery_s,
            show=show,
            profiles=profiles,
        )
        added += again
        todo = [row for row in again if row.valid is False]
    return added, stop.is_set()


def perf_main(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    profiles = user_profiles(args)
    planned = planned_rows(args, profiles, parser)
    out = args.out or DEFAULT_OUT / time.strftime("%Y%m%d-%H%M%S")
    with run_stop_event() as stop:  # the write of the files too: a signal then lets it finish
        rows, interrupted = run_sweep(
            planned,
            out,
            stop,
            discovery_s=args.discovery_timeout,
            show=sys.stderr.isatty(),
            profiles=profiles,
        )
        if args.rerun_invalid and not interrupted:
            again, interrupted = rerun_invalid(
                rows, out, stop, args.rerun_invalid, discovery_s=args.discovery_timeout,
                show=sys.stderr.isatty(), profiles=profiles,
            )  # fmt: skip
            rows += again
        meta = {"argv": argv, "interrupted": interrupted, "rows_planned": len(planned)}
        paths = write_all(rows, out, meta)
    print(table2_markdown(rows))
    for row in rows:
        if row.status != "ok":
            print(f"{row.status}: {row.case.label}: {row.error}")
        elif row.valid is False:
            print(f"invalid: {row.case.label}: {'; '.join(row.invalid_reasons)}")
    print(f"{len(rows)} of {len(planned)} rows: " + ", ".join(str(p) for p in paths))
    if stop.is_set():
        print(f"fieldtest perf: {interruption(stop)}; kept the {len(rows)} finished rows", file=sys.stderr)
    return run_exit_code(all(r.status == "ok" for r in rows), stop)
