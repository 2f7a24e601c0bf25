"""Start, watch and always stop the separate OS processes of a trial."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil


def die_with_parent() -> None:
    """In a child before exec: get SIGTERM when the parent goes away (even by SIGKILL), so no trial
    process outlives the kit, and a host streamer still sends its stop burst. Linux only.

    Linux sends it when the *thread* that started the child ends: start and stop a trial's
    processes from one thread that lives as long as the trial (the runner's worker thread does)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class ProcessStartError(RuntimeError):
    """A trial process exited or never said it was ready."""


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port nobody listens on right now, for TCP or UDP on loopback."""
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class TrialProcess:
    name: str
    popen: subprocess.Popen
    log_path: Path
    started: float = field(default_factory=time.monotonic)
    cpu_s: float = 0.0
    _ps: psutil.Process | None = None

    def sample_cpu(self) -> None:
        """Remember the latest CPU time: it cannot be read once the process is gone."""
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

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> TrialProcess:
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
            preexec_fn=die_with_parent,
        )
        log.close()
        proc = TrialProcess(name, popen, log_path)
        self.procs[name] = proc
        return proc

    def start_python(
        self,
        name: str,
        module: str,
        args: list[str],
        env: dict[str, str] | None = None,
        prefix: list[str] = (),
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

    def watch(self, name: str, popen: subprocess.Popen) -> None:
        """Record the CPU of a process that something else starts and stops (a broker, a router)."""
        self.watched[name] = TrialProcess(name, popen, self.log_dir / f"{name}.log")

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
