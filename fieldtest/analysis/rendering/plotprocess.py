"""Draw the plots in a forked process while the main process works on the metrics and evo's APE.

Importing matplotlib and drawing three figures takes about as long as everything else in an
analysis; on two cores the two halves overlap. ``fieldtest analyze`` forks the worker first thing,
before it imports the analysis (analyze_trial forks one itself when not given one): the worker
imports matplotlib meanwhile, gets the plot inputs (a PlotData: numpy arrays, nothing that needs
more imports) once the metrics are known, forks once more to draw the latency figure beside it,
draws the drift figure and the trajectory while the caller computes evo's APE, then adds the APE
to the trajectory's legend. Without ``fork`` (or with one core, other Python threads running, or
FIELDTEST_PLOT_WORKER=0) the caller draws in-process instead.

The second fork costs about 0.04 s of CPU (copy-on-write page faults); in a fresh process it
finishes about as soon as one worker drawing all three figures (the caller is busy with the APE
meanwhile), in a warm one (the caller done in 0.1 s) 0.1 s sooner.

A plain ``os.fork`` with two pipes, not multiprocessing: importing that would cost the fresh
process 20 ms before the fork, on the worker's path as much as on the caller's.
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any

from fieldtest.errors import FieldtestError

if TYPE_CHECKING:
    from fieldtest.analysis.rendering.figuredata import PlotData

_started = 0  # workers started by this process
_HEADER = struct.Struct("<Q")  # length of the pickled message that follows


class PlotWorkerError(FieldtestError, RuntimeError):
    pass


class _Channel:
    """One direction of a pipe: pickled messages, each after its length."""

    def __init__(self, fd: int, mode: str) -> None:
        self.fd = fd
        self._file: IO[bytes] = os.fdopen(fd, mode)

    def send(self, msg: object) -> None:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        self._file.write(_HEADER.pack(len(data)))
        self._file.write(data)
        self._file.flush()

    def recv(self) -> Any:
        header = self._file.read(_HEADER.size)
        if len(header) < _HEADER.size:
            raise EOFError("pipe closed")
        (size,) = _HEADER.unpack(header)
        data = self._file.read(size)
        if len(data) < size:
            raise EOFError("pipe closed mid-message")
        return pickle.loads(data)

    def poll(self, timeout_s: float) -> bool:
        return bool(select.select([self.fd], [], [], timeout_s)[0])

    def close(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass


class PlotWorker:
    def __init__(self) -> None:
        import numpy  # noqa: F401  (both sides use it: imported once, before the fork)

        job_r, job_w = os.pipe()
        answer_r, answer_w = os.pipe()
        self._sender: threading.Thread | None = None
        sys.stdout.flush()  # else what is buffered now would be written twice
        sys.stderr.flush()
        # Objects that exist now are shared copy-on-write with the child: keep the garbage collector
        # from walking (and so copying) all of them in either process.
        gc.freeze()
        try:
            pid = os.fork()
        except OSError:
            gc.unfreeze()
            for fd in (job_r, job_w, answer_r, answer_w):
                os.close(fd)
            raise
        if pid == 0:
            code = 1
            try:
                os.close(job_w)
                os.close(answer_r)
                _child_main(_Channel(job_r, "rb"), _Channel(answer_w, "wb"))
                code = 0
            finally:
                os._exit(code)  # no exit handlers: they belong to the caller
        gc.unfreeze()
        os.close(job_r)
        os.close(answer_w)
        self._pid: int | None = pid
        self._jobs = _Channel(job_w, "wb")
        self._answers = _Channel(answer_r, "rb")

    @classmethod
    def start(cls) -> PlotWorker | None:
        """A running worker, or None where forking is unavailable or would not help."""
        if os.environ.get("FIELDTEST_PLOT_WORKER", "1") == "0":
            return None
        if not hasattr(os, "fork") or (os.cpu_count() or 1) < 2:
            return None
        if threading.active_count() > 1:  # forking a threaded Python process is not safe
            return None
        global _started
        if _started and "matplotlib.figure" not in sys.modules:
            # a process analyzing many trials: import matplotlib once here so every child inherits it
            from fieldtest.analysis.rendering import trialplots  # noqa: F401
        _started += 1
        try:
            return cls()
        except OSError:
            return None

    def submit(self, out_dir: Path, data: PlotData) -> None:
        """The arguments of plots.write_plots (without ``ape``), sent from a thread: the pipe holds
        64 KB and the child reads only once matplotlib is imported, so sending in line would stall."""
        job = ("job", (out_dir, data))
        self._sender = threading.Thread(target=self._send_quietly, args=(job,), daemon=True)
        self._sender.start()

    def _send_quietly(self, msg: object) -> None:
        try:
            self._jobs.send(msg)
        except (OSError, ValueError):
            pass  # the child is gone; result() reports it

    def send_ape(self, ape: dict) -> None:
        """The APE section for the trajectory legend (a worker that failed already is told nothing:
        its error, or its end, comes from result())."""
        if self._sender is not None:
            self._sender.join()
        self._send_quietly(("ape", ape))

    def result(self, timeout_s: float = 120.0) -> list[str]:
        if not self._answers.poll(timeout_s):
            raise PlotWorkerError(f"plot worker gave no answer in {timeout_s:g} s")
        try:
            kind, value = self._answers.recv()
        except (EOFError, OSError) as exc:
            raise PlotWorkerError(f"plot worker ended without an answer ({type(exc).__name__})") from None
        if kind != "done":
            raise PlotWorkerError(f"plot worker failed: {value}")
        written: list[str] = value
        return written

    def close(self) -> None:
        """End the worker: it ends by itself once it has answered, or when it sees the pipes close;
        one that never got a job (the analysis failed) is terminated at once, any other after 5 s."""
        self._answers.close()
        sending = self._sender is not None and self._sender.is_alive()
        if not sending:  # (a sender blocked on a full pipe holds it until the child is gone)
            self._jobs.close()
        if self._pid is not None:
            signals = (None, signal.SIGTERM, signal.SIGKILL)
            for sig in signals if self._sender is not None else signals[1:]:
                if sig is not None:
                    os.kill(self._pid, sig)
                if _reaped(self._pid, 5.0):
                    break
            self._pid = None
        if sending and self._sender is not None:
            self._sender.join(5.0)  # its write fails now that the child is gone
            self._jobs.close()


def _reaped(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def _child_main(jobs: _Channel, answers: _Channel) -> None:
    gc.disable()  # short-lived: collecting would touch, and so copy, the parent's whole heap
    try:
        plots = _import_plots()  # matplotlib loads while the parent imports the analysis and reads the bags

        kind, args = jobs.recv()
        if kind != "job":
            return
        out_dir, data = args

        def ape() -> dict:
            kind, section = jobs.recv()
            return section if kind == "ape" else {}

        latency = _LatencyFork.start(plots, out_dir, data)
        try:
            answers.send(("done", plots.write_plots(out_dir, data, ape=ape, latency=latency)))
        finally:
            if latency is not None:
                latency.join()  # never leave it writing its file after this worker has given up
    except (EOFError, OSError):
        pass  # the parent gave up (bad input) or closed the pipe
    except Exception as exc:  # reported to the parent, which then draws itself
        try:
            answers.send(("error", f"{type(exc).__name__}: {exc}"))
        except OSError:
            pass
    finally:
        jobs.close()
        answers.close()


def _import_plots() -> ModuleType:
    """The plots module, imported without matplotlib's generated ``Artist.set`` documentation.

    A third of matplotlib's import (about 0.1 s here) goes to writing every artist class's property
    list into the docstring of its ``set()`` method (``matplotlib.artist.kwdoc``) and building that
    method's signature (``Artist._update_set_signature_and_docstring``). Nothing in the worker reads
    them, so they are skipped while it imports (and put back after); ``set()`` itself, and so the
    drawing, is unchanged. Only the forked worker does this: a process that imports matplotlib itself
    keeps its documentation.
    """
    if "matplotlib.figure" in sys.modules:  # inherited from the parent
        from fieldtest.analysis.rendering import trialplots as plots

        return plots
    from matplotlib import artist

    saved = [
        (owner, name, owner.__dict__[name])
        for owner, name in ((artist, "kwdoc"), (artist.Artist, "_update_set_signature_and_docstring"))
        if name in owner.__dict__
    ]
    stubs = {"kwdoc": lambda cls: "", "_update_set_signature_and_docstring": classmethod(lambda cls: None)}
    for owner, name, _ in saved:
        setattr(owner, name, stubs[name])
    try:
        from fieldtest.analysis.rendering import trialplots as plots
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
    return plots


class _LatencyFork:
    """The latency plot, drawn in a second fork (matplotlib already loaded) while the worker draws
    the others: once the parent has its APE it only waits, and the two halves use both cores."""

    def __init__(self, pid: int, plots: ModuleType, out_dir: Path, data: PlotData) -> None:
        self._pid: int | None = pid
        self._ok = False
        self._plots, self._out_dir, self._data = plots, out_dir, data

    @classmethod
    def start(cls, plots: ModuleType, out_dir: Path, data: PlotData) -> _LatencyFork | None:
        """The running fork, or None where forking fails (the worker then draws it itself)."""
        try:
            pid = os.fork()
        except OSError:
            return None
        if pid == 0:
            code = 1
            try:
                plots.write_latency_plot(out_dir, data)
                code = 0
            finally:
                os._exit(code)  # no exit handlers, no flushing: all that belongs to the worker
        return cls(pid, plots, out_dir, data)

    def __call__(self) -> str:
        """Wait for the plot; the file's name (drawn here after all if the fork failed)."""
        name: str = (
            self._plots.LATENCY_PNG
            if self.join()
            else self._plots.write_latency_plot(self._out_dir, self._data)
        )
        return name

    def join(self) -> bool:
        if self._pid is not None:
            _, status = os.waitpid(self._pid, 0)
            self._pid, self._ok = None, os.waitstatus_to_exitcode(status) == 0
        return self._ok
