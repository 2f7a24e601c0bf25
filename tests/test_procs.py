"""The trial's process group: no trial process outlives the process that started it."""

import signal
import subprocess
import sys
import time

import psutil
import pytest

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


# What handles processes: defined in fieldtest/procs.py and nowhere else in the repository.
PROCESS_HELPERS = {
    "free_port",
    "port_accepts",
    "die_with_parent",
    "stop_on_signals",
    "signals_set",
    "signal_exit_code",
    "watch_parent",
    "ProcessGroup",
    "ManagedProcess",
    "lease_dds_domain",
    "DomainLease",
}


def test_process_helpers_are_defined_only_in_procs():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sources = [
        p
        for d in ("fieldtest", "tests", "benchmarks", "host_ws", "robot_ws", "analysis")
        for p in (root / d).rglob("*.py")
    ]
    defined = {}
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name.lstrip("_") in PROCESS_HELPERS:
                defined.setdefault(node.name.lstrip("_"), []).append(str(path.relative_to(root)))
    assert defined == {name: ["fieldtest/procs.py"] for name in PROCESS_HELPERS}


def test_the_kits_signal_handlers_are_installed_only_through_procs():
    """A handler that sets an event itself can deadlock (``signals_set``); the kit's processes use
    ``stop_on_signals`` or ``signals_set``. The namespace topology's teardown hook is the exception:
    it re-raises the signal after closing."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    installs = sorted(
        str(path.relative_to(root))
        for d in ("fieldtest", "host_ws", "robot_ws", "analysis", "mocap", "trials")
        for path in (root / d).rglob("*.py")
        if re.search(r"signal\.signal\(\s*\w+\s*,\s*(?!old\b|previous\b|signal\.SIG_DFL)", path.read_text())
    )
    assert installs == ["fieldtest/netem/topology.py", "fieldtest/procs.py"]


def test_free_port_gives_a_bindable_tcp_or_udp_port_on_the_address():
    import socket

    from fieldtest.procs import free_port, port_accepts

    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        for address in ("127.0.0.1", "127.0.0.2"):
            port = free_port(kind, address)
            with socket.socket(socket.AF_INET, kind) as sock:
                sock.bind((address, port))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert port_accepts("127.0.0.1", listener.getsockname()[1])
    assert not port_accepts("127.0.0.1", free_port())


STUCK = r"""
import threading
from fieldtest.procs import stop_on_signals

def wedged_in_a_lock():
    held = threading.Lock()
    held.acquire()
    print("READY", flush=True)
    while True:
        held.acquire(timeout=3600)  # a stuck library call: the stop event is never looked at

with stop_on_signals():
    wedged_in_a_lock()
"""


def test_a_process_that_ignores_sigterm_leaves_its_stacks_in_its_log(tmp_path):
    from pathlib import Path

    from fieldtest.procs import ProcessGroup

    group = ProcessGroup(Path(tmp_path))
    proc = group.start("stuck", [sys.executable, "-c", STUCK])
    group.wait_ready("stuck")
    assert group.stop("stuck", timeout_s=0.5) == -signal.SIGKILL
    log = proc.log_path.read_text()
    assert "Current thread" in log and "wedged_in_a_lock" in log, log


@pytest.mark.parametrize("realtime_env", ["1", "0"])
@pytest.mark.parametrize("prefix", [[], ["env"]])  # "env": stands in for "ip netns exec <ns>"
def test_a_process_started_realtime_runs_at_sched_fifo_where_permitted(
    tmp_path, monkeypatch, realtime_env, prefix
):
    """The twin's bridges and router start this way: the group records whether each got SCHED_FIFO."""
    import os
    from pathlib import Path

    from fieldtest.procs import ProcessGroup
    from fieldtest.testkit.sched import realtime_permitted

    monkeypatch.setenv("FIELDTEST_REALTIME", realtime_env)  # "0": the kit's switch to turn it off
    expected = realtime_permitted()
    group = ProcessGroup(Path(tmp_path))
    sleeper = [*prefix, sys.executable, "-c", "import time; time.sleep(30)"]
    fast = group.start("router", sleeper, realtime=True)
    plain = group.start("other", sleeper)
    try:
        assert os.sched_getscheduler(fast.popen.pid) == (os.SCHED_FIFO if expected else os.SCHED_OTHER)
        assert os.sched_getscheduler(plain.popen.pid) == os.SCHED_OTHER
        assert group.realtime() == {"router": expected}  # only those that asked for it
    finally:
        group.stop_all()


# The main thread holds the stop event's lock whenever it is inside stop.wait() (the twin's loops
# spend their time there); a SIGTERM then runs the handler on that same thread.
SIGNAL_INSIDE_WAIT = r"""
import os, signal
from fieldtest.procs import signal_exit_code, stop_on_signals

with stop_on_signals() as stop:
    with stop._cond:  # what Event.wait() holds while it sets up and after it wakes
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):  # the handler runs here, between two bytecodes
            pass
    print("stopped" if stop.wait(5.0) else "not stopped", signal_exit_code(stop), flush=True)
"""


def test_a_signal_that_lands_inside_the_stop_events_wait_still_stops_the_process():
    """A CI run failed on this: the twin robot ignored SIGTERM for 15 s, stuck in its own handler."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGNAL_INSIDE_WAIT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = _communicate_or_dump(proc, timeout_s=10.0)
    assert out.split() == ["stopped", str(128 + signal.SIGTERM)], err


# A trial process's loop at a given tick; the parent signals it at random phases of the tick.
TICKING = r"""
import sys, time
from fieldtest.endpoints.clock import Clock
from fieldtest.procs import signal_exit_code, stop_on_signals

tick_ns = int(float(sys.argv[1]) * 1e6)
clock = Clock()
with stop_on_signals() as stop:
    print("READY", flush=True)
    deadline = clock.now_ns()
    while not stop.is_set():
        deadline += tick_ns
        clock.sleep_until(deadline, stop, spin_ns=0)
sys.exit(signal_exit_code(stop))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("tick_ms", [0.05, 1.0, 50.0])
def test_a_ticking_loop_stops_on_a_signal_at_any_phase(sig, tick_ms):
    import random

    rng = random.Random(f"{sig}-{tick_ms}")
    for _ in range(8):
        proc = subprocess.Popen(
            [sys.executable, "-c", TICKING, str(tick_ms)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout.readline().strip() == "READY"
        time.sleep(rng.uniform(0.0, 0.05))
        proc.send_signal(sig)
        _, err = _communicate_or_dump(proc, timeout_s=5.0)
        assert proc.returncode == 128 + sig, err


def _communicate_or_dump(proc: subprocess.Popen, timeout_s: float) -> tuple[str, str]:
    """The process's output; if it does not end in time, its threads' stacks, then a failure."""
    from fieldtest.procs import dump_stacks

    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        dump_stacks(proc)
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"the process ignored the signal for {timeout_s} s:\n{err}") from None
