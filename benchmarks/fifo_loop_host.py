#!/usr/bin/env python3
"""The twin host streamer with its emission loop above its other threads (a what-if for bench_twin).

    python benchmarks/fifo_loop_host.py [--priority 50] --trial-dir D [host options]

It runs ``fieldtest.twin.host`` unchanged, except that the thread that calls ``emit_schedule``
(``fieldtest.endpoints.streamer``) switches itself to SCHED_FIFO ``priority`` just before the
first tick and back to its previous policy afterwards. The host's other threads (middleware receive threads, the clock-probe
responder, the parent watch) keep what the kit gives them: SCHED_FIFO 10 for the whole process
(``fieldtest.realtime.try_realtime``), or SCHED_OTHER with FIELDTEST_REALTIME=0. Threads at
equal FIFO priority never preempt one another on a core. So with the kit's setting alone, a probe
reply that is being handled (or any other FIFO-10 process on the host's core) delays the next
tick until it sleeps. With the loop above them, it does not. Needs root or CAP_SYS_NICE.
"""

from __future__ import annotations

import os
import sys

from fieldtest.endpoints import streamer
from fieldtest.twin import host

DEFAULT_PRIORITY = 50


def fifo_emit_schedule(priority: int):
    """``streamer.emit_schedule`` wrapped so its calling thread runs at SCHED_FIFO ``priority``."""
    plain = streamer.emit_schedule

    def emit(*args, **kwargs):
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))  # this thread only
        try:
            return plain(*args, **kwargs)
        finally:
            os.sched_setscheduler(0, policy, param)

    return emit


def main(argv: list[str]) -> int:
    priority = DEFAULT_PRIORITY
    if argv[:1] == ["--priority"]:
        priority, argv = int(argv[1]), argv[2:]
    streamer.emit_schedule = fifo_emit_schedule(priority)  # CommandStreamer.stream looks it up at call time
    return host.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
