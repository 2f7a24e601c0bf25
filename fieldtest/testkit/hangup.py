"""SIGHUP as a program started from a terminal has it, whatever the test run inherited.

The kit keeps a stop signal its process was started ignoring (``procs.run_stop_event``: SIGHUP
under nohup), so a test of the hang-up path run under nohup would see nothing happen. These give
the program under test SIGHUP's default action, as a login shell's job has it."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


def as_from_a_terminal() -> None:
    """``preexec_fn`` of a child that must react to SIGHUP."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@contextlib.contextmanager
def hangup_not_ignored() -> Iterator[None]:
    """This process with SIGHUP's default action inside the block (the kit's run then handles it),
    the inherited action restored after."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)
