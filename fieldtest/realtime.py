"""Real-time scheduling for the kit's own processes: the twin, the emulators and the lab nodes."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

REALTIME_PRIORITY = 10
# The simulated radio (ns-3's 802.11 link) stands for hardware and the air, which go on whatever
# the machines' processes do: above the twin's FIFO-10 processes, a burst of theirs on its core
# cannot hold simulated frames back (at FIFO 10 beside them a quick wifi-lab trial's link lagged
# 3.6 ms at p99, 119 ms at worst).
LINK_REALTIME_PRIORITY = 20
REALTIME_ENV = "FIELDTEST_REALTIME"  # "0" turns the real-time scheduling attempt off
REALTIME_HELP = "grant rtprio: docs/lab-guide.md, 'Real-time scheduling'"


def try_realtime(priority: int = REALTIME_PRIORITY) -> bool:
    """Ask for SCHED_FIFO (needs root or CAP_SYS_NICE); True if granted.

    Call it before opening the middleware: threads started later inherit the policy. The twin's
    processes sleep between events, so they cannot starve the machine, and on a busy 2-core box
    this cuts their scheduling jitter (command send times, arrival times) from milliseconds to
    tens of microseconds, which would otherwise show up as lap-to-lap drift that is not the stack's.
    """
    if os.environ.get(REALTIME_ENV, "1") == "0" or not hasattr(os, "sched_setscheduler"):
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (PermissionError, OSError):
        return False
    return True


def settle_heap() -> None:
    """Collect once, then put every object alive now out of the cyclic collector's reach
    (``gc.freeze``), so a timed loop's later collections scan only what it allocated since.

    Call it once set up, right before the timed work. Without it, in a quick twin trial the host's
    and the robot's generation-1 collections took 1.4-2.9 ms each (13-14 per process), and one
    generation-2 collection 21-32 ms: any of them at a turn edge sends or applies that command late.
    """
    gc.collect()
    gc.freeze()


def scheduling_note(realtime: bool) -> str:
    """One log line saying how a lab node is scheduled, and what to do when it is not real-time."""
    if realtime:
        return f"scheduling: SCHED_FIFO {REALTIME_PRIORITY} (send and receive threads)"
    if os.environ.get(REALTIME_ENV, "1") == "0":
        return f"scheduling: normal ({REALTIME_ENV}=0)"
    return (
        f"scheduling: normal (SCHED_FIFO refused; {REALTIME_HELP}): "
        "latency tails may be this machine's, not the link's"
    )


def is_realtime(pid: int = 0) -> bool:
    """Whether process ``pid`` (0: this one) runs at SCHED_FIFO; False if it cannot be read."""
    try:
        return os.sched_getscheduler(pid) == os.SCHED_FIFO
    except (OSError, AttributeError):
        return False


def leave_realtime() -> None:
    """Put every thread of this process back to normal scheduling (SCHED_OTHER).

    The twin processes call it once their timed work is over: closing bags, rewriting trial.yaml
    and the interpreter's exit are bursts of CPU that, at FIFO 10, delay every other trial's FIFO-10
    threads on that core (a concurrent trial's command arrived 41 ms late while two hosts closed).
    """
    if not hasattr(os, "sched_setscheduler"):
        return
    try:
        tids = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))


def leave_thread_realtime() -> None:
    """Put only the calling thread (and the threads it starts later) back to normal scheduling."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))  # Linux: pid 0 is the calling thread


@contextlib.contextmanager
def thread_priority(priority: int) -> Iterator[None]:
    """Raise only the calling thread to SCHED_FIFO ``priority`` for the block, if the process already
    runs real-time (``try_realtime`` granted); otherwise leave it as it is.

    The twin host's send loop uses it: the whole process at FIFO 10 beside the other twin processes
    still let ticks wait behind them under load (p99 0.5 ms at 20 Hz). On Linux, pid 0 means the
    calling thread.
    """
    try:
        before = os.sched_getscheduler(0), os.sched_getparam(0)
        if before[0] != os.SCHED_FIFO:  # real-time was refused or turned off (FIELDTEST_REALTIME=0)
            raise PermissionError
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (AttributeError, PermissionError, OSError):
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, before[0], before[1])
