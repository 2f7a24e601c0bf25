"""Real-time scheduling of the twin processes: raised for the timed work, dropped for shutdown.

Each test runs in a child process, so the test runner itself never runs at SCHED_FIFO.
"""

import os
import subprocess
import sys

import pytest

CHILD = r"""
import os, threading
from fieldtest.realtime import leave_realtime, thread_priority, try_realtime

if not try_realtime():
    print("SKIP")
    raise SystemExit(0)
started, stop = threading.Event(), threading.Event()

def worker():  # a thread started after try_realtime inherits SCHED_FIFO
    started.set()
    stop.wait()

thread = threading.Thread(target=worker)
thread.start()
started.wait()
tids = [int(t) for t in os.listdir("/proc/self/task")]
before = {os.sched_getscheduler(t) for t in tids}
with thread_priority(50):
    raised = os.sched_getparam(0).sched_priority
after_block = os.sched_getparam(0).sched_priority
leave_realtime()
after = {os.sched_getscheduler(t) for t in tids}
stop.set()
thread.join()
print(before == {os.SCHED_FIFO}, raised, after_block, after == {os.SCHED_OTHER}, len(tids))
"""


def test_realtime_is_raised_for_the_run_and_left_for_shutdown():
    result = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=30, env=dict(os.environ)
    )
    assert result.returncode == 0, result.stderr
    if result.stdout.strip() == "SKIP":
        pytest.skip("SCHED_FIFO not permitted here (needs root or CAP_SYS_NICE)")
    all_fifo, raised, after_block, all_other, threads = result.stdout.split()
    assert all_fifo == "True" and int(threads) >= 2  # every thread, the later one too
    assert (int(raised), int(after_block)) == (50, 10)  # the block raises the calling thread only
    assert all_other == "True"  # every thread back to SCHED_OTHER
