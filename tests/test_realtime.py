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
    print("NOT PERMITTED")
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
    if result.stdout.strip() == "NOT PERMITTED":
        pytest.fail("SCHED_FIFO is needed (root or CAP_SYS_NICE)", pytrace=False)
    all_fifo, raised, after_block, all_other, threads = result.stdout.split()
    assert all_fifo == "True" and int(threads) >= 2  # every thread, the later one too
    assert (int(raised), int(after_block)) == (50, 10)  # the block raises the calling thread only
    assert all_other == "True"  # every thread back to SCHED_OTHER


SETTLED_HEAP = r"""
import gc, sys, time
from fieldtest.realtime import settle_heap

setup = [{"n": i, "next": [i]} for i in range(300_000)]  # what a process builds before its timed work
if sys.argv[1] == "settle":
    settle_heap()
worst = 0.0
for _ in range(5):
    start = time.perf_counter()
    gc.collect(2)  # the slowest collection a timed loop can meet
    worst = max(worst, time.perf_counter() - start)
print(worst)
"""


def test_a_settled_heap_is_not_scanned_by_later_collections():
    """The twin's and the lab's timed processes call ``settle_heap`` once set up: a full collection
    afterwards must not walk what was built before (it took 21-32 ms in a twin process)."""
    import subprocess
    import sys

    def worst_collection_s(mode: str) -> float:
        out = subprocess.run(
            [sys.executable, "-c", SETTLED_HEAP, mode], capture_output=True, text=True, check=True
        )
        return float(out.stdout)

    unsettled, settled = worst_collection_s("none"), worst_collection_s("settle")
    assert settled < unsettled / 5, (settled, unsettled)


def test_the_timed_processes_settle_their_heap_before_they_start():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    timed = [
        "fieldtest/twin/host.py",
        "fieldtest/twin/robot.py",
        "fieldtest/natnet/cli.py",
        "host_ws/src/fieldtest_host/fieldtest_host/square_driver.py",
        "robot_ws/src/fieldtest_robot/fieldtest_robot/link_monitor.py",
    ]
    for path in timed:
        calls = {
            node.func.id
            for node in ast.walk(ast.parse((root / path).read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
        assert "settle_heap" in calls, path
