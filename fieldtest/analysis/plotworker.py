"""Draw the plots in a forked process while the main process works on the metrics and evo's APE.

Importing matplotlib and drawing three figures takes about as long as everything else in an
analysis; on two cores the two halves overlap. The worker is forked at the start of an analysis
(it imports matplotlib meanwhile), gets the plot inputs once the metrics are known, draws the
drift and latency figures, then waits for the APE figure for the trajectory legend. Without
``fork`` (or with one core, other Python threads running, or FIELDTEST_PLOT_WORKER=0) the caller
draws in-process instead.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
import threading
from multiprocessing.connection import Connection

_started = 0  # workers started by this process


class PlotWorkerError(RuntimeError):
    pass


class PlotWorker:
    def __init__(self) -> None:
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_child_main, args=(child, self._conn), name="fieldtest-plots", daemon=True
        )
        # Objects that exist now are shared copy-on-write with the child: keep the garbage collector
        # from walking (and so copying) all of them in either process.
        self._sender: threading.Thread | None = None
        gc.freeze()
        try:
            self._proc.start()
        finally:
            gc.unfreeze()
        child.close()

    @classmethod
    def start(cls) -> PlotWorker | None:
        """A running worker, or None where forking is unavailable or would not help."""
        if os.environ.get("FIELDTEST_PLOT_WORKER", "1") == "0":
            return None
        if "fork" not in multiprocessing.get_all_start_methods() or (os.cpu_count() or 1) < 2:
            return None
        if threading.active_count() > 1:  # forking a threaded Python process is not safe
            return None
        global _started
        if _started and "matplotlib.figure" not in sys.modules:
            # a process analysing many trials: import matplotlib once here so every child inherits it
            from . import plots  # noqa: F401
        _started += 1
        try:
            return cls()
        except OSError:
            return None

    def submit(self, *plot_args) -> None:
        """The arguments of plots.write_plots (without ``ape``), sent from a thread: the pipe holds
        64 KB and the child reads only once matplotlib is imported, so sending in line would stall."""
        self._sender = threading.Thread(target=self._send_quietly, args=(("job", plot_args),), daemon=True)
        self._sender.start()

    def _send_quietly(self, msg) -> None:
        try:
            self._conn.send(msg)
        except (OSError, ValueError):
            pass  # the child is gone; result() reports it

    def send_ape(self, ape: dict) -> None:
        if self._sender is not None:
            self._sender.join()
        self._send(("ape", ape))

    def _send(self, msg) -> None:
        try:
            self._conn.send(msg)
        except (OSError, ValueError) as exc:
            raise PlotWorkerError(f"plot worker gone ({exc})") from None

    def result(self, timeout_s: float = 120.0) -> list[str]:
        if not self._conn.poll(timeout_s):
            raise PlotWorkerError(f"plot worker gave no answer in {timeout_s:g} s")
        try:
            kind, value = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise PlotWorkerError(f"plot worker ended without an answer ({type(exc).__name__})") from None
        if kind != "done":
            raise PlotWorkerError(f"plot worker failed: {value}")
        return value

    def close(self) -> None:
        self._conn.close()  # also ends a sender still blocked on the pipe
        self._proc.join(5.0)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5.0)


def _child_main(conn: Connection, parent_end: Connection) -> None:
    parent_end.close()  # else the child holds both ends and never sees the parent close its own
    gc.disable()  # short-lived: collecting would touch, and so copy, the parent's whole heap
    try:
        from . import plots  # matplotlib loads while the parent reads the bags

        kind, args = conn.recv()
        if kind != "job":
            return

        def ape() -> dict:
            kind, section = conn.recv()
            return section if kind == "ape" else {}

        conn.send(("done", plots.write_plots(*args, ape=ape)))
    except (EOFError, OSError):
        pass  # the parent gave up (bad input) or closed the pipe
    except Exception as exc:  # reported to the parent, which then draws itself
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
        except OSError:
            pass
    finally:
        conn.close()
