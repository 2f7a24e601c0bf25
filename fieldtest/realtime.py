"""Real-time scheduling for the kit's own processes on the test machine (twin and emulator)."""

from __future__ import annotations

import os

REALTIME_PRIORITY = 10
REALTIME_ENV = "FIELDTEST_REALTIME"  # "0" turns the real-time scheduling attempt off


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
