"""The ``fieldtest`` command: one entry point, one subcommand per job.

Subcommands import their modules only when run, so ``fieldtest --help`` is instant and a missing
optional library only affects the subcommand that needs it. Every error the kit names
(``fieldtest.errors.FieldtestError``) is caught here, once: one line on stderr, exit code 2
(``--debug`` shows the traceback instead).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib import import_module

from fieldtest.errors import FieldtestError

EXIT_BAD_INPUT = 2  # the input, the machine or the trial set-up has a problem the message names

# name -> (module, function taking argv and returning an exit code, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": (
        "fieldtest.runner.cli",
        "demo_main",
        "run the digital-twin trial over every middleware and report (default)",
    ),
    "trial": (
        "fieldtest.runner.cli",
        "trial_main",
        "run one digital-twin trial with chosen middleware, security, network",
    ),
    "plan": ("fieldtest.cli", "plan_main", "show the square plan: timing, corners, warnings"),
    "analyze": (
        "fieldtest.analysis.cli",
        "analyze_main",
        "analyze one trial directory: drift, latency, plots, report",
    ),
    "compare": (
        "fieldtest.analysis.cli",
        "compare_main",
        "compare many trials: tables per middleware x security x network",
    ),
    "predict": (
        "fieldtest.analysis.predictcli",
        "predict_main",
        "predict lap drift and watchdog stops from a latency/loss trace; the plan's envelope",
    ),
    "keys": (
        "fieldtest.cli",
        "keys_main",
        "create or check an SROS2 keystore with TLS material for Zenoh and MQTT",
    ),
    "campaign": (
        "fieldtest.runner.cli",
        "campaign_main",
        "run a campaign YAML (matrix of trials) in the twin and compare",
    ),
    "cluster": (
        "fieldtest.runner.clusterworker",
        "cluster_main",
        "start a Dask worker that runs campaign trials (fieldtest campaign --cluster)",
    ),
    "perf": (
        "fieldtest.perf.cli",
        "perf_main",
        "latency, throughput, loss and CPU per message size (Zhang et al.'s Table 2)",
    ),
    "lab": (
        "fieldtest.labrun.cli",
        "lab_main",
        "lab runner: pre-flight, run and collect a trial with a real TurtleBot 4",
    ),
}

EPILOG = """\
Start here:
  fieldtest demo                 the twin trial over all five middlewares (about 2 minutes), then the report
  fieldtest demo --quick         a one-lap version of the same (about 20 s)
  fieldtest trial --middleware zenoh-peer --security none --network wifi
  fieldtest analyze trials/runs/<trial>      re-analyze a recorded trial
  fieldtest compare trials/runs/* --out trials/compare
Each subcommand has its own --help.
"""


def plan_main(argv: list[str]) -> int:
    import yaml

    from fieldtest.plan import SquarePlan, plan_from_mapping

    parser = argparse.ArgumentParser(prog="fieldtest plan", description="Show the square plan.")
    parser.add_argument(
        "plan_yaml", nargs="?", help="a YAML file with SquarePlan fields (default: the seed study)"
    )
    args = parser.parse_args(argv)
    try:
        if args.plan_yaml:
            with open(args.plan_yaml) as f:
                plan = plan_from_mapping(yaml.safe_load(f) or {}, args.plan_yaml)
        else:
            plan = SquarePlan()
    except (OSError, yaml.YAMLError) as exc:  # a PlanError is the command line's (main)
        print(f"fieldtest plan: {exc}", file=sys.stderr)
        return 2
    print(f"speed {plan.linear_speed_mps} m/s, turns {plan.turn_rate_dps} deg/s ({plan.turn_direction})")
    print(
        f"side {plan.side_m:.3f} m in {plan.side_s:.3f} s, turn {plan.turn_s:.3f} s, lap {plan.lap_s:.3f} s"
    )
    print(f"{plan.laps} laps = {plan.motion_s:.1f} s of motion after {plan.start_delay_s} s of zero commands")
    print(f"{plan.n_ticks()} commands at {plan.command_rate_hz:g} Hz")
    for lap in range(plan.laps):
        corners = plan.ideal_pose(plan.corner_times_s(lap))
        print(
            f"lap {lap + 1} corners: "
            + ", ".join(f"({x:.2f}, {y:.2f})".replace("-0.00", "0.00") for x, y, _ in corners)
        )
    for warning in plan.warnings():
        print(f"warning: {warning}")
    return 0


def keys_main(argv: list[str]) -> int:
    """``fieldtest keys`` (``fieldtest.security.cli``), whose keystores carry what every middleware
    family adds to one (``fieldtest.middleware.registry.keystore_material``)."""
    from fieldtest.middleware.registry import keystore_material, keystore_shares
    from fieldtest.security.cli import keys_command

    return keys_command(argv, extra_material=keystore_material(), extra_shares=keystore_shares())


def one_line(exc: BaseException) -> str:
    """The first line of an error's message (its class name when it has none)."""
    message = str(exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__


def _load(name: str) -> Callable[[list[str]], int]:
    module, func, _ = SUBCOMMANDS[name]
    return getattr(import_module(module), func)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="fieldtest",
        description="Field-test kit: how ROS 2 middleware and security change TurtleBot 4 motion.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, _, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv:
        argv = ["demo"]
    if argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    if argv[0] not in SUBCOMMANDS:
        parser.print_usage(sys.stderr)
        print(
            f"fieldtest: unknown command {argv[0]!r} (choose from {', '.join(SUBCOMMANDS)})", file=sys.stderr
        )
        return 2
    try:
        return _load(argv[0])(argv[1:])
    except FieldtestError as exc:
        if "--debug" in argv:
            raise
        print(f"fieldtest {argv[0]}: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("fieldtest: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
