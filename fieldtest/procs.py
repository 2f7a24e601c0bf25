"""Processes, the one module for them: start, watch and always stop the OS processes of a trial,
and the signal handling inside each of them.

- ``ProcessGroup``: the trial's own processes (each logs to a file; stopped gently, then its group killed).
- ``ManagedProcess``: a server process (router, broker) that is ready once it prints a line and
  accepts TCP connections; its output read through a pipe.
- ``free_port``, ``port_accepts``: loopback ports for a trial.
- ``lease_dds_domain``: a DDS domain id no other run on this machine uses while the lease is held.
- ``stop_on_signals``, ``signals_set``, ``signal_exit_code``, ``watch_parent``: inside a trial
  process, stop cleanly on SIGTERM/SIGINT or when the parent is gone.
- ``run_stop_event``, ``interruption``: a runner (twin, lab, perf, lab perf) stops its trials or
  rows on SIGINT, SIGTERM or SIGHUP alike.

Standard library only at import (psutil on first CPU sample): the ROS nodes on the robot import
this module without the kit's full dependency set.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import faulthandler
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from fieldtest.errors import FieldtestError

from .realtime import is_realtime, try_realtime

DEFAULT_START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
STACK_DUMP_SIGNAL = signal.SIGUSR1  # a hung trial process writes its threads' stacks to its log


def die_with_parent() -> None:
    """In a child before exec: get SIGTERM when the parent goes away (even by SIGKILL), so no trial
    process outlives the kit, and a host streamer still sends its stop burst. Linux only.

    Linux sends it when the *thread* that started the child ends: start and stop a trial's
    processes from one thread that lives as long as the trial (the runner's worker thread does)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class ProcessStartError(FieldtestError, RuntimeError):
    """A trial process exited or never said it was ready."""


def free_port(kind: int = socket.SOCK_STREAM, address: str = "127.0.0.1") -> int:
    """A port nobody listens on right now on ``address``, for TCP (default) or UDP (the OS picks it)."""
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, kind) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


# RTPS port mapping (CycloneDDS too): 7400 + 250 * domain id must stay below 65536, so 0..232
# (ros2/ros2_documentation source/Concepts/Intermediate/About-Domain-ID.rst).
DDS_DOMAIN_MAX = 232
DOMAIN_LEASE_DIR_ENV = "FIELDTEST_DOMAIN_LEASE_DIR"
DEFAULT_DOMAIN_LEASE_DIR = Path("/tmp/fieldtest-dds-domains")  # one per machine, shared by every user


class DomainsExhaustedError(ProcessStartError):
    """Every DDS domain id is leased by some run on this machine."""


_HELD_HERE: set[int] = set()  # the domain ids this process's own leases hold


def domains_held_here() -> frozenset[int]:
    """The DDS domain ids this process holds: a lease it waits for among them is never freed."""
    return frozenset(_HELD_HERE)


class DomainLease:
    """DDS domain ids held for one run: an exclusive ``flock`` on one lock file per id. The kernel
    drops the locks when the holder exits, even by SIGKILL, so a crashed run frees its domains.
    ``domain_id`` is the run's own id; ``domain_ids`` every id held (a bridged trial's robot side too)."""

    def __init__(self, domain_id: int, files: dict[int, int]):
        self.domain_id = domain_id
        self._files = files  # domain id -> open file descriptor holding the lock
        _HELD_HERE.update(files)

    @property
    def domain_ids(self) -> list[int]:
        return sorted(self._files)

    def release(self) -> None:
        for fd in self._files.values():
            os.close(fd)  # closing the last descriptor drops the flock
        _HELD_HERE.difference_update(self._files)
        self._files = {}

    def __enter__(self) -> DomainLease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def domain_lease_dir() -> Path:
    """The machine-wide directory of domain lock files (world-writable and sticky, like /tmp)."""
    directory = Path(os.environ.get(DOMAIN_LEASE_DIR_ENV) or DEFAULT_DOMAIN_LEASE_DIR)
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):  # made meanwhile by another user: theirs to set
            directory.chmod(0o1777)
    return directory


def _open_lock_file(path: Path) -> int:
    """Open (or create, readable by every user) the lock file. Opening another user's existing file
    with O_CREAT in a sticky world-writable directory is refused (fs.protected_regular): only create
    it when it is missing."""
    while True:
        with contextlib.suppress(FileNotFoundError):
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
        except FileExistsError:
            continue  # another run created it between the two opens
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o444)  # whatever the umask: other users must be able to open it
        return fd


def _try_lock(directory: Path, domain_id: int) -> int | None:
    """The descriptor holding domain ``domain_id``'s lock, or None if another run holds it."""
    fd = _open_lock_file(directory / f"domain-{domain_id}.lock")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def lease_dds_domain(preferred: int = 0, offsets: Sequence[int] = (0,)) -> DomainLease:
    """Lease the first domain id at or after ``preferred`` (wrapping round 0..232) whose ids
    ``(id + offset) % 233`` for every offset are all free, and hold them until ``release``.

    Two runs on one machine (two users' demos, two test runs) on one domain would hear each other's
    commands. flock locks belong to the open file, so two leases in one process exclude each other
    too (the threads of ``fieldtest demo``). Hold the lease in the process that runs the trial.

    Domain 0 goes only to a lease that prefers it: it is ROS 2's default, where the machine's other
    ROS programs talk and the kit's default keystore is governed, so a search that wraps round, or
    an offset side that lands on it, moves on."""
    if not 0 <= preferred <= DDS_DOMAIN_MAX:
        raise ValueError(f"DDS domain id {preferred} out of range 0..{DDS_DOMAIN_MAX}")
    directory = domain_lease_dir()
    count = DDS_DOMAIN_MAX + 1
    for step in range(count):
        domain_id = (preferred + step) % count
        wanted = sorted({(domain_id + offset) % count for offset in offsets})
        if 0 in wanted and preferred != 0:
            continue
        held: dict[int, int] = {}
        for member in wanted:
            fd = _try_lock(directory, member)
            if fd is None:
                break
            held[member] = fd
        if len(held) == len(wanted):
            return DomainLease(domain_id, held)
        DomainLease(domain_id, held).release()
    raise DomainsExhaustedError(
        f"{directory}: every DDS domain id 0..{DDS_DOMAIN_MAX} is leased by another run on this machine"
    )


def port_accepts(address: str, port: int, timeout_s: float = 0.2) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except OSError:
        return False


@dataclass
class TrialProcess:
    name: str
    popen: subprocess.Popen
    log_path: Path
    started: float = field(default_factory=time.monotonic)
    cpu_s: float = 0.0
    realtime: bool | None = None  # ran at SCHED_FIFO (checked once started); None: not asked for
    _ps: Any = None  # psutil.Process, made on the first sample

    def sample_cpu(self) -> None:
        """Remember the latest CPU time: it cannot be read once the process is gone."""
        import psutil

        try:
            if self._ps is None:
                self._ps = psutil.Process(self.popen.pid)
            times = self._ps.cpu_times()
            self.cpu_s = times.user + times.system + times.children_user + times.children_system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass

    def cpu_summary(self) -> dict[str, float]:
        wall = max(time.monotonic() - self.started, 1e-9)
        return {"cpu_s": round(self.cpu_s, 3), "cpu_percent": round(100.0 * self.cpu_s / wall, 2)}


class ProcessGroup:
    """The processes of one trial; ``stop_all`` ends every one of them, gently first."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, TrialProcess] = {}
        self.watched: dict[str, TrialProcess] = {}  # started and stopped elsewhere; CPU sampled here

    def start(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, *, realtime: bool = False
    ) -> TrialProcess:
        """Start ``argv`` logging to ``<name>.log``; ``realtime=True`` at SCHED_FIFO if permitted
        (kept through an ``ip netns exec`` prefix: exec keeps the policy), recorded in ``realtime()``."""
        log_path = self.log_dir / f"{name}.log"
        log = log_path.open("w")
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        popen = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            start_new_session=True,
            preexec_fn=_die_with_parent_realtime if realtime else die_with_parent,
        )
        log.close()
        proc = TrialProcess(name, popen, log_path, realtime=is_realtime(popen.pid) if realtime else None)
        self.procs[name] = proc
        return proc

    def start_python(
        self,
        name: str,
        module: str,
        args: list[str],
        env: dict[str, str] | None = None,
        prefix: Sequence[str] = (),
    ) -> TrialProcess:
        """``python -m module args``; a ``prefix`` such as ``ip netns exec NS`` runs it elsewhere."""
        return self.start(name, [*prefix, sys.executable, "-m", module, *args], env)

    def wait_ready(self, name: str, marker: str = "READY", timeout_s: float = 20.0) -> None:
        """Wait until the process prints ``marker`` on a line of its log."""
        proc = self.procs[name]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if marker in proc.log_path.read_text(errors="replace"):
                return
            if proc.popen.poll() is not None:
                raise ProcessStartError(f"{name} exited with code {proc.popen.returncode}: {self.tail(name)}")
            time.sleep(0.05)
        raise ProcessStartError(f"{name} did not become ready within {timeout_s:g} s: {self.tail(name)}")

    def tail(self, name: str, lines: int = 1) -> str:
        text = self.procs[name].log_path.read_text(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:]) if text else "(no output)"

    def watch(self, name: str, popen: subprocess.Popen, realtime: bool | None = None) -> None:
        """Record the CPU (and whether it ran real-time) of a process that something else starts
        and stops (a broker, a router)."""
        self.watched[name] = TrialProcess(name, popen, self.log_dir / f"{name}.log", realtime=realtime)

    def realtime(self) -> dict[str, bool]:
        """Process name -> whether it ran at SCHED_FIFO, for those started asking for it."""
        every = {**self.procs, **self.watched}
        return {name: proc.realtime for name, proc in every.items() if proc.realtime is not None}

    def sample_cpu(self) -> None:
        for proc in [*self.procs.values(), *self.watched.values()]:
            if proc.popen.poll() is None:
                proc.sample_cpu()

    def stop(self, name: str, timeout_s: float = 5.0) -> int | None:
        proc = self.procs[name]
        if proc.popen.poll() is None:
            proc.sample_cpu()
            proc.popen.send_signal(signal.SIGTERM)
            try:
                proc.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                dump_stacks(proc.popen)
                os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait()
        return proc.popen.returncode

    def stop_all(self, order: list[str] | None = None) -> None:
        for name in order or list(reversed(self.procs)):
            if name in self.procs:
                self.stop(name)
        for name in self.procs:
            self.stop(name)

    def cpu(self) -> dict[str, dict[str, float]]:
        every = {**self.procs, **self.watched}
        return {name: proc.cpu_summary() for name, proc in every.items()}


def _die_with_parent_realtime() -> None:
    """As ``die_with_parent``, and ask for SCHED_FIFO, which the exec'd program keeps."""
    die_with_parent()
    try_realtime()


class ManagedProcess:
    """A subprocess that is ready once ``ready_text`` appears in its output and (without a prefix)
    ``address:port`` accepts TCP connections; stopped with SIGTERM, then SIGKILL.

    ``realtime=True`` starts it at SCHED_FIFO if permitted (``fieldtest.realtime.try_realtime``).
    The twin asks for it: on a 2-core machine beside the twin's own real-time processes, a broker at
    normal priority waited up to 4 ms for a core before forwarding a command (p99 2 ms).
    """

    start_error: type[ProcessStartError] = ProcessStartError  # what a failed start raises

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        address: str,
        port: int,
        ready_text: str,
        check_port: bool,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        realtime: bool = False,
    ):
        self.name = name
        self.argv = list(argv)
        self.address = address
        self.port = port
        self.ready_text = ready_text
        self.check_port = check_port
        self.start_timeout_s = start_timeout_s
        self.realtime_requested = realtime
        self.proc: subprocess.Popen[str] | None = None
        self._lines: collections.deque[str] = collections.deque(maxlen=200)
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def realtime(self) -> bool:
        """Whether the running process has SCHED_FIFO (False once it has ended)."""
        return self.pid is not None and self.running() and is_realtime(self.pid)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        """The last lines the process printed (for diagnostics)."""
        return "\n".join(self._lines)

    def _read_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:  # also drains the pipe so the child never blocks on it
            self._lines.append(line.rstrip("\n"))
            if self.ready_text in line:
                self._ready.set()

    def start(self) -> None:
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                preexec_fn=_die_with_parent_realtime if self.realtime_requested else die_with_parent,
            )
        except OSError as exc:
            raise self.start_error(f"{self.name}: cannot start {self.argv[0]}: {exc}") from exc
        self._reader = threading.Thread(target=self._read_output, name=f"{self.name}-output", daemon=True)
        self._reader.start()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                if self._reader is not None:
                    self._reader.join(timeout=1.0)
                raise self.start_error(
                    f"{self.name} exited with code {self.proc.returncode} while starting:\n{self.output()}"
                )
            if self._ready.is_set() and (not self.check_port or port_accepts(self.address, self.port)):
                return
            time.sleep(0.05)
        raise self.start_error(
            f"{self.name} not ready on {self.address}:{self.port} within {self.start_timeout_s:g} s:\n{self.output()}"
        )

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after a grace period); safe to call twice."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        if self._reader is not None:
            self._reader.join(timeout=1.0)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> ManagedProcess:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# ----------------------------------------------------------------------------- inside a trial process


@contextlib.contextmanager
def signals_set(
    event: threading.Event, signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)
) -> Iterator[list[int]]:
    """Set ``event`` when one of ``signals`` arrives; yields the signals received, in order.

    The handler never calls ``event.set()`` itself: Python runs handlers on the main thread between
    two bytecodes, and if that thread was inside ``event.wait()`` it holds the event's (non-reentrant)
    lock, so ``set()`` there waits for itself forever. The handler only writes the signal number to
    a pipe; a relay thread reads it and sets the event. Main thread only (``signal.signal``)."""
    received: list[int] = []
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def handler(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        with contextlib.suppress(BlockingIOError):  # a full pipe already holds a wake-up
            os.write(write_fd, bytes([signum]))

    def relay() -> None:
        while os.read(read_fd, 64):  # b"": the write end closed on exit
            event.set()

    relay_thread = threading.Thread(target=relay, name="signal-relay", daemon=True)
    relay_thread.start()
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        os.close(write_fd)
        relay_thread.join(timeout=1.0)
        os.close(read_fd)


@contextlib.contextmanager
def stop_on_signals(signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT (``signals_set``; the loop ends cleanly). SIGUSR1 writes
    every thread's stack to stderr (the process's log), even when the main thread is stuck: what a
    process that ignores SIGTERM was doing (``ProcessGroup.stop`` sends it before SIGKILL)."""
    faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True)
    stop = threading.Event()
    with signals_set(stop, signals) as received:
        stop.received = received  # type: ignore[attr-defined]  # a plain Event carries the signals (interruption)
        yield stop


def dump_stacks(popen: subprocess.Popen, wait_s: float = 1.0) -> None:
    """Ask a hung trial process for its threads' stacks (``stop_on_signals``), then give it a moment."""
    with contextlib.suppress(ProcessLookupError):
        popen.send_signal(STACK_DUMP_SIGNAL)
        time.sleep(wait_s)


# Ctrl-C, and what else ends a run from outside (`kill`, `timeout`, a closed terminal, a cancelled
# CI job): every runner (twin, lab, perf, lab perf) stops its trials or rows the same way on each.
RUN_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def run_stop_event(event: threading.Event | None = None) -> Iterator[threading.Event]:
    """``event`` (or a new one), set by the stop signals (main thread only; elsewhere a plain
    event); ``event.received`` lists the signals. A signal the run was told to ignore stays
    ignored: SIGHUP under nohup, SIGINT in a background job."""
    event = threading.Event() if event is None else event
    if threading.current_thread() is not threading.main_thread():
        yield event
        return
    faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True)
    outer: list[int] = getattr(event, "received", [])  # nested (a runner inside a runner): one list
    with signals_set(
        event, [s for s in RUN_STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN]
    ) as received:
        received[:0] = outer
        event.received = received  # type: ignore[attr-defined]  # on the caller's plain Event (interruption)
        try:
            yield event
        finally:
            outer[len(outer) :] = received[len(outer) :]
            event.received = outer  # type: ignore[attr-defined]  # on the caller's plain Event (interruption)


def ignored_stop_signals() -> list[str]:
    """The stop signals this process was started ignoring (SIGINT in a background job, SIGHUP
    under nohup): ``run_stop_event`` leaves them ignored, so they will not stop a run."""
    return [s.name for s in RUN_STOP_SIGNALS if signal.getsignal(s) == signal.SIG_IGN]


def interruption(stop: threading.Event | None) -> str:
    """What ended the run early: Ctrl-C, or the signal the runner received (``stop.received``)."""
    received = getattr(stop, "received", None) or [signal.SIGINT]
    if received[0] == signal.SIGINT:
        return "interrupted by the user (Ctrl-C)"
    return f"interrupted by {signal.Signals(received[0]).name}"


def signal_exit_code(stop: threading.Event) -> int:
    """128 + the first signal that stopped the process (143 SIGTERM, 130 SIGINT), 0 if none."""
    received = getattr(stop, "received", [])
    return 128 + received[0] if received else 0


def watch_parent(stop: threading.Event, poll_s: float = 0.5) -> threading.Thread:
    """Set ``stop`` if the parent process dies, so an orphaned twin process does not linger."""
    parent = os.getppid()

    def watch() -> None:
        while not stop.wait(poll_s):
            if os.getppid() != parent:
                stop.set()
                return

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread
