"""The trial's process group: no trial process outlives the process that started it."""

import signal
import subprocess
import sys
import time

import psutil

PARENT = r"""
import sys, time
from pathlib import Path
from fieldtest.procs import ProcessGroup

group = ProcessGroup(Path(sys.argv[1]))
child = group.start("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"])
print(child.popen.pid, flush=True)
time.sleep(60)
"""


def test_trial_processes_get_sigterm_when_the_runner_is_killed(tmp_path):
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    child_pid = int(parent.stdout.readline())
    child = psutil.Process(child_pid)
    assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(child):
        child.kill()
        raise AssertionError("the trial process outlived its killed runner")


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
