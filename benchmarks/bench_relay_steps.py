#!/usr/bin/env python3
"""The perf relay's Python steps timed cold and warm: what each costs when it runs once every 100 ms.

    .venv/bin/python benchmarks/bench_relay_steps.py [--repeat 40] [--message Array1k]
    .venv/bin/python benchmarks/bench_relay_steps.py --reference reference/bench-relay-steps.json

At 10 Hz the relay's path from a ping's arrival to its echo runs cold every time (docs/benchmarks.md,
"Where the relay's time goes"). Each step below is the kit's own code (or, marked, what the relay
does not do), called after ``time.sleep(0.1)`` (cold, as at 10 Hz) and at once again (warm), with
``time.perf_counter_ns()`` around it; the figure is the median over ``--repeat`` rounds, the steps
interleaved so a change in the machine's load hits them alike. Not a pass/fail target: the figures
are this machine's, with its load, busy share and steal beside each step.
``--reference`` writes the summary docs/benchmarks.md's table is rendered from (``tools/render_docs.py``).
"""

from __future__ import annotations

import argparse
import ctypes as ct
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_twin import Load, load_conditions, measured_load  # noqa: E402

from fieldtest import rosmsg  # noqa: E402
from fieldtest.middleware.dds.ddsstamp import ExportedBytes, library  # noqa: E402
from fieldtest.perf.messages import (  # noqa: E402
    SENT_STAMP,
    build,
    copy_seq,
    ids_of,
    parse_message,
    seq_of_cdr,
    set_ids,
)
from fieldtest.record.reference import RelayStepRow, RelayStepsSummary, run_summary, write_reference  # noqa: E402
from fieldtest.testkit.docblocks import relay_steps_table  # noqa: E402

COLD_SLEEP_S = 0.1  # one period at 10 Hz


def steps(message: str) -> dict[str, Callable[[], object]]:
    """The steps by the name the table gives them, each a call with no arguments."""
    lib = library()
    perf_message = parse_message(message)
    ping, echo = build(perf_message), build(perf_message)
    set_ids(ping, 1234, 0)
    data = bytes(ping.cdr)
    typename = perf_message.typename
    pop_buffer = ct.create_string_buffer(len(data) + 64)
    ct.memmove(pop_buffer, data, len(data))
    views = ExportedBytes()
    views.view(echo.cdr)

    def empty() -> None:
        pass

    return {
        "an empty Python call": empty,
        "a ctypes call (`ft_now`)": lambda: lib.ft_now(0),
        "decoding the ping with rosbags and reading its ids (what the relay does not do)": lambda: ids_of(
            rosmsg.deserialize(data, typename)
        ),
        "reading the sequence number and send stamp from the bytes": lambda: (seq_of_cdr(data), SENT_STAMP.read(data)),
        "writing seq and relay into the echo's bytes and message object (what the relay does not do)": lambda: set_ids(
            echo, 1234, 1
        ),
        "copying the sequence number into the echo's bytes": lambda: copy_seq(echo, data),
        "`ctypes.string_at` of the pop buffer (what the queue does not do)": lambda: ct.string_at(pop_buffer, len(data)),
        "a slice of the pop buffer": lambda: pop_buffer[: len(data)],
        "a ctypes view and stamp out-parameter made for each write (what the writers do not do)": lambda: (
            (ct.c_char * len(echo.cdr)).from_buffer(echo.cdr),
            ct.c_int64(),
        ),
        "the view kept for the row": lambda: views.view(echo.cdr),
    }  # fmt: skip


def timed_ns(step: Callable[[], object]) -> int:
    start = time.perf_counter_ns()
    step()
    return time.perf_counter_ns() - start


def measure(message: str, repeat: int) -> list[RelayStepRow]:
    named = steps(message)
    cold: dict[str, list[int]] = {name: [] for name in named}
    warm: dict[str, list[int]] = {name: [] for name in named}
    loads: dict[str, list[Load]] = {name: [] for name in named}
    for _ in range(repeat):
        for name, step in named.items():  # interleaved: the machine's load hits every step alike
            with measured_load() as load:
                time.sleep(COLD_SLEEP_S)
                cold[name].append(timed_ns(step))
                warm[name].append(timed_ns(step))
            loads[name].append(load)
    return [
        RelayStepRow(
            step=name,
            cold_us=statistics.median(cold[name]) / 1e3,
            warm_us=statistics.median(warm[name]) / 1e3,
            conditions=load_conditions(loads[name]),
        )
        for name in named
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=40, help="rounds; each step's figure is their median")
    parser.add_argument("--message", default="Array1k", help="the perf message the ping and echo carry")
    parser.add_argument(
        "--reference", type=Path, help="write the summary here (reference/bench-relay-steps.json)"
    )
    args = parser.parse_args(argv)
    rows = measure(args.message, args.repeat)
    print("\n".join(relay_steps_table(rows)))
    if args.reference:
        settings = {"repeat": args.repeat, "message": args.message, "cold_sleep_s": COLD_SLEEP_S}
        write_reference(
            args.reference,
            run_summary(
                RelayStepsSummary, args.reference, ".venv/bin/python benchmarks/bench_relay_steps.py",
                argv, settings, rows,
            ),
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
