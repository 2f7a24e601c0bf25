"""SIGHUP and SIGINT as a program started from a terminal has them, whatever the test run inherited.

The kit keeps a stop signal its process was started ignoring (``procs.run_stop_event``: SIGHUP
under nohup, SIGINT in a shell's background job), so a test of the hang-up or Ctrl-C path run that
way would see nothing happen. These give the program under test the signals' default actions, as
a terminal's foreground job has them."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


def as_from_a_terminal() -> None:
    """``preexec_fn`` of a child that must react to SIGHUP or SIGINT (Ctrl-C)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def hangup_not_ignored() -> Iterator[None]:
    """This process with SIGHUP's default action inside the block (the kit's run then handles it),
    the inherited action restored after."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)
