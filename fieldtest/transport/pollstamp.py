"""Python side of ``pollstamp.c``: poll(2) with the wake-up stamped in C, before the GIL is back.

Compiled on first use (``fieldtest.cbuild``; ``tools/install.sh`` does it at install); libc only.
"""

from __future__ import annotations

import ctypes as ct
import errno
import functools
import select
from collections.abc import Sequence
from pathlib import Path

from fieldtest.cbuild import BuildError, build_c
from fieldtest.errors import FieldtestError

SOURCE = Path(__file__).with_name("pollstamp.c")


class PollStampError(FieldtestError, RuntimeError):
    """The C helper could not be built or loaded."""


class _PollFd(ct.Structure):
    _fields_ = [("fd", ct.c_int), ("events", ct.c_short), ("revents", ct.c_short)]


@functools.lru_cache(maxsize=1)
def library() -> ct.CDLL:
    try:
        lib = ct.CDLL(str(build_c(SOURCE, shared=True)))
    except (BuildError, OSError) as exc:
        raise PollStampError(f"the MQTT arrival-stamping helper is unavailable (needs gcc): {exc}") from None
    lib.ft_poll_stamped.argtypes = [ct.POINTER(_PollFd), ct.c_int, ct.c_int, ct.POINTER(ct.c_int64)]
    lib.ft_poll_stamped.restype = ct.c_int
    return lib


def poll_stamped(fds: Sequence[tuple[int, int]], timeout_s: float) -> tuple[list[int], int]:
    """Wait until one of ``(fd, events)`` is ready or ``timeout_s`` passed: (revents per fd,
    CLOCK_MONOTONIC ns when the wait ended). A signal ends the wait with nothing ready."""
    array = (_PollFd * len(fds))(*(_PollFd(fd, events, 0) for fd, events in fds))
    woke = ct.c_int64()
    rc = library().ft_poll_stamped(array, len(fds), max(0, round(timeout_s * 1000)), ct.byref(woke))
    if rc == -errno.EINTR:
        return [0] * len(fds), woke.value
    if rc < 0:
        raise OSError(-rc, f"poll: {errno.errorcode.get(-rc, -rc)}")
    return [p.revents for p in array], woke.value


READABLE = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP | select.POLLNVAL
