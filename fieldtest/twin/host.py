"""The twin host process: the shared command streamer over the trial's middleware.

    python -m fieldtest.twin.host --trial-dir D [--config REQUEST.{json,yaml}]

It joins the trial's middleware as the host and runs ``fieldtest.endpoints.streamer``'s
``CommandStreamer`` (the same code the lab's driver runs): clock-probe answers, plan ticks on
absolute deadlines once the robot is on the link, the host bag (D/host), and the stop burst on
every way out (the last tick, SIGTERM, SIGINT/Ctrl-C, an error). Exit code 0 when the plan
completed, 128 + signal number when stopped by a signal, 3 when the robot never showed up.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from fieldtest.endpoints.status import say
from fieldtest.endpoints.streamer import EXIT_NO_ROBOT, LINK_TIMEOUT_S, CommandStreamer
from fieldtest.middleware.registry import open_transport
from fieldtest.procs import signal_exit_code, stop_on_signals, watch_parent
from fieldtest.realtime import settle_heap, try_realtime
from fieldtest.record import TrialFormatError, TrialRequest
from fieldtest.security.keystore import KeystoreError
from fieldtest.twin.common import GIL_SWITCH_S, TwinConfigError, load_request
from fieldtest.twin.trafficpubsub import RobotTrafficSink, close_sink


def open_host(request: TrialRequest, trial_dir: Path, *, realtime: bool = False) -> CommandStreamer:
    """The streamer on the trial's own middleware, joined as the host."""
    return CommandStreamer(request, trial_dir, open_transport(request.transport, "host"), realtime=realtime)


def run_host(host: CommandStreamer, stop: threading.Event, link_timeout_s: float = LINK_TIMEOUT_S) -> int:
    """Wait for the robot, stream, always send the stop burst; returns the exit code."""

    def on_link() -> None:
        say(f"LINK robot seen, probes answered={host.probes_answered}")

    result = host.run(stop, link_timeout_s, on_link=on_link)
    if result.end == "no-robot":
        return EXIT_NO_ROBOT
    return 0 if result.completed else (signal_exit_code(stop) or 1)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fieldtest.twin.host", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--trial-dir", type=Path, required=True, help="trial directory (bag goes to DIR/host)"
    )
    parser.add_argument("--config", type=Path, help="TrialRequest as JSON/YAML (default: DIR/trial.yaml)")
    parser.add_argument(
        "--link-timeout-s", type=float, default=LINK_TIMEOUT_S, help="wait this long for the robot"
    )
    parser.add_argument(
        "--no-realtime", action="store_true", help="do not ask for SCHED_FIFO (also: FIELDTEST_REALTIME=0)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    sys.setswitchinterval(GIL_SWITCH_S)
    realtime = not args.no_realtime and try_realtime()
    try:
        request = load_request(args.trial_dir, args.config)
    except (TrialFormatError, TwinConfigError) as exc:
        print(f"twin host: {exc}", file=sys.stderr)
        return 2
    with stop_on_signals() as stop:
        watch_parent(stop)
        try:
            host = open_host(request, args.trial_dir, realtime=realtime)
        except (KeystoreError, ValueError, OSError) as exc:  # keys, settings, link: refuse to start
            print(f"twin host: cannot start: {exc}".splitlines()[0], file=sys.stderr)
            return 2
        traffic = RobotTrafficSink(request, host.transport, host.clock)
        settle_heap()
        say(f"READY host {request.transport.middleware} cmd_type={request.cmd_type} realtime={realtime}")
        try:
            code = run_host(host, stop, args.link_timeout_s)
        finally:
            status = host.close()
            close_sink(traffic, args.trial_dir)
    say(
        f"HOST DONE end={status['end']} sent={status['plan_sent']}/{status['plan_ticks']} "
        f"stop_burst={status['stop_burst_sent']}"
    )
    if code == EXIT_NO_ROBOT:
        print(f"twin host: no robot on the link within {args.link_timeout_s:g} s", file=sys.stderr)
    if host.transport_hung:  # the middleware's own threads may block interpreter exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
