"""Python side of ``ddsstamp.c``: DDS writes stamped in C, and samples queued with C arrival stamps.

The helper library is compiled on first use (``fieldtest.cbuild``; ``tools/install.sh`` does it at
install) against Debian's libddsc, the same library the cyclonedds binding uses, so entity handles
from the binding (``entity._ref``) are valid here. ctypes releases the GIL during each call.
"""

from __future__ import annotations

import ctypes as ct
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fieldtest import rosmsg
from fieldtest.cbuild import BuildError, build_c
from fieldtest.errors import FieldtestError
from fieldtest.transport.base import Undecoded

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("ddsstamp.c")
_POP_BUFFER = 4096  # grows when a sample is larger


class StampLibraryError(FieldtestError, RuntimeError):
    """The C helper could not be built or loaded."""


@functools.lru_cache(maxsize=1)
def library() -> ct.CDLL:
    try:
        lib = ct.CDLL(str(build_c(SOURCE, shared=True, libs=("ddsc",))))
    except (BuildError, OSError) as exc:
        raise StampLibraryError(
            f"the DDS stamping helper is unavailable (needs gcc and cyclonedds-dev): {exc}"
        ) from None
    i32, i64, u32, ptr = ct.c_int32, ct.c_int64, ct.c_uint32, ct.c_void_p
    lib.ft_write_stamped.argtypes = [i32, ct.c_char_p, u32, u32, i64]
    lib.ft_write_stamped.restype = i64
    lib.ft_now.argtypes = [i64]
    lib.ft_now.restype = i64
    lib.ft_queue_attach.argtypes = [ptr, i32, i32]
    lib.ft_queue_attach.restype = ct.c_int
    return declare_queue(lib)


def declare_queue(lib: ct.CDLL) -> ct.CDLL:
    """The argument types of the arrival queue's functions, which the Fast DDS helper
    (fieldtest.middleware.fastdds) exports under the same names."""
    i32, i64, u32, ptr = ct.c_int32, ct.c_int64, ct.c_uint32, ct.c_void_p
    lib.ft_queue_new.argtypes = [i64]
    lib.ft_queue_new.restype = ptr
    lib.ft_queue_fd.argtypes = [ptr]
    lib.ft_queue_fd.restype = ct.c_int
    lib.ft_queue_dropped.argtypes = [ptr]
    lib.ft_queue_dropped.restype = ct.c_uint64
    lib.ft_queue_pop.argtypes = [ptr, ct.POINTER(i32), ct.POINTER(i64), ct.c_char_p, u32]
    lib.ft_queue_pop.restype = i64
    lib.ft_queue_next.argtypes = lib.ft_queue_pop.argtypes
    lib.ft_queue_next.restype = i64
    lib.ft_queue_wake.argtypes = [ptr]
    lib.ft_queue_wake.restype = None
    lib.ft_queue_free.argtypes = [ptr]
    lib.ft_queue_free.restype = None
    return lib


def padded_size(size: int) -> int:
    """Cyclone pads serialized samples to a multiple of 4 bytes."""
    return (size + 3) & ~3


def write_stamped(
    writer: int, data: bytes | bytearray, offset: int, base_ns: int, views: ExportedBytes | None = None
) -> tuple[int, int]:
    """Write CDR ``data`` on ``writer`` with the clock (CLOCK_MONOTONIC + ``base_ns``) put as a
    builtin_interfaces/Time at byte ``offset`` just before ``dds_write``; (return code, stamp ns).

    A bytearray already padded to Cyclone's 4 bytes is handed to C as it is and stamped in place
    (as the Python transports stamp a prepared message): no copy between the caller and the write;
    with ``views``, the ctypes view of a bytearray written again is made once.
    """
    size = padded_size(len(data))
    if isinstance(data, bytearray) and len(data) == size:
        view = views.view(data) if views is not None else ExportedBytes().view(data)
    else:
        buf = bytearray(size)  # the padding stays zero
        buf[: len(data)] = data
        view = ExportedBytes().view(buf)
    return split_stamp(library().ft_write_stamped(writer, view, size, offset, base_ns), base_ns, library())


def split_stamp(result: int, base_ns: int, lib: ct.CDLL) -> tuple[int, int]:
    """(return code, stamp ns) of a helper's stamped write, which returns the stamp (positive: the
    kit's clocks read boot or epoch time) or a negative return code; a failed write's stamp is the
    clock after it (``lib``'s ``ft_now``), so a lost message still has a send time."""
    return (0, result) if result >= 0 else (result, lib.ft_now(base_ns))


class ExportedBytes:
    """The ctypes view of the last bytearray asked for, kept for the next write of the same one: a
    stamped publisher writes one prepared message again and again (a perf ping, a relay's echo, a
    streamer's command), and making the view each time cost 30-40 us of Python run cold at 10 Hz.
    The bytearray kept cannot be resized while it is kept (ctypes holds its buffer)."""

    def __init__(self) -> None:
        self._last: tuple[bytearray | None, Any] = (None, None)

    def view(self, data: bytearray) -> Any:
        last, view = self._last  # one tuple: a second thread sees a pair, never half of one
        if data is not last:
            view = (ct.c_char * len(data)).from_buffer(data)
            self._last = (data, view)
        return view


def now_ns(base_ns: int) -> int:
    """The clock the helper stamps with."""
    return library().ft_now(base_ns)


class ArrivalQueue:
    """Samples of the attached readers, each with the time Cyclone made it available (ns).

    ``next()`` returns the oldest ``(tag, arrival_ns, cdr_bytes)``, waiting for one if needed (None
    after ``wake()``); ``pop()`` returns it or None at once, and ``wait()`` blocks until something was
    queued or ``wake()`` was called. ``free()`` only after the readers are deleted.
    """

    def __init__(self, base_ns: int, lib: ct.CDLL | None = None):
        self._lib = lib or library()  # ``lib``: another helper with the same queue functions
        self._queue = self._lib.ft_queue_new(base_ns)
        if not self._queue:
            raise StampLibraryError("cannot create the DDS arrival queue (out of memory or eventfd)")
        self.fd = self._lib.ft_queue_fd(self._queue)
        self._buf = ct.create_string_buffer(_POP_BUFFER)
        self._tag = ct.c_int32()
        self._arrival = ct.c_int64()
        self._out = (ct.byref(self._tag), ct.byref(self._arrival))  # made once: each costs cold Python

    def attach(self, reader: int, tag: int) -> int:
        """Queue ``reader``'s samples under ``tag``; a negative DDS return code on failure."""
        return self._lib.ft_queue_attach(self._queue, reader, tag)

    def wait(self) -> None:
        os.read(self.fd, 8)

    def wake(self) -> None:
        self._lib.ft_queue_wake(self._queue)

    def pop(self) -> tuple[int, int, bytes] | None:
        return self._take(self._lib.ft_queue_pop)

    def next(self) -> tuple[int, int, bytes] | None:
        """``pop``, after sleeping (GIL released) until a sample is queued if there is none; None
        after a ``wake()`` with nothing queued. The listener's write of the eventfd wakes it."""
        return self._take(self._lib.ft_queue_next)

    def _take(self, take: Callable[..., int]) -> tuple[int, int, bytes] | None:
        while True:
            size = take(self._queue, *self._out, self._buf, len(self._buf))
            if size == 0:
                return None
            if size > 0:  # one copy of the sample, by slicing (``string_at`` is one more ctypes call)
                return self._tag.value, self._arrival.value, self._buf[:size]  # type: ignore[return-value]  # bytes: a c_char array's slice
            self._buf = ct.create_string_buffer(-size)

    def serve(self, deliver: Callable[[int, int, bytes], None], closed: Callable[[], bool]) -> None:
        """``deliver(tag, arrival_ns, data)`` for each sample in order, until ``closed()`` after a
        ``wake()``: a reader thread's loop, ``next`` with its steps inline (each Python call saved
        is 5-10 us when the loop runs cold, once per sample at 10 Hz)."""
        take, queue, out = self._lib.ft_queue_next, self._queue, self._out
        while not closed():
            size = take(queue, *out, self._buf, len(self._buf))
            if size > 0:
                deliver(self._tag.value, self._arrival.value, self._buf[:size])  # type: ignore[arg-type]  # bytes
            elif size < 0:  # larger than the buffer: still queued, taken again
                self._buf = ct.create_string_buffer(-size)

    @property
    def dropped(self) -> int:
        return int(self._lib.ft_queue_dropped(self._queue))

    def free(self) -> None:
        if self._queue:
            self._lib.ft_queue_free(self._queue)
            self._queue = None


class QueuedReaders:
    """What a DDS transport whose readers feed an ``ArrivalQueue`` shares (CycloneDDS's and Fast
    DDS's): the reader thread's loop, delivery in arrival order on the subscriber's clock, and the
    wait for discovery. The transport sets ``_arrivals``, ``_lock``, ``_closed``, ``_readers`` (tag
    -> (DDS topic, reader, ROS type, callback, clock or None)) and ``matched(topic)``."""

    _arrivals: ArrivalQueue
    _lock: threading.Lock
    _closed: bool
    _readers: list[tuple[str, Any, str, Any, Any]]
    error: type[Exception] = RuntimeError  # what the transport raises

    def matched(self, topic: str, readers_only: bool = False) -> list[int]:
        raise NotImplementedError

    def matched_publishers(self, topic: str) -> int | None:
        """Publishers matched by this transport's least-matched reader of ``topic`` (None: no reader).
        A writer can match a reader before that reader matches it: the reader drops what it sends
        until then, so only the reader's own count says a command would be taken in."""
        counts = self.matched(topic, readers_only=True)
        return min(counts) if counts else None

    def wait_for_match(self, topic: str, *, count: int = 1, timeout_s: float = 5.0) -> bool:
        """True once every writer and reader on ``topic`` matches ``count`` endpoints (discovery
        done); False at the timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            counts = self.matched(topic)
            if not counts:
                raise self.error(f"no publisher or subscription on {topic!r} to wait for")
            if min(counts) >= count:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def _serve_readers(self) -> None:
        self._arrivals.serve(self._deliver, lambda: self._closed)  # sleeps in C until a sample comes

    def _deliver(self, tag: int, arrival_mono_ns: int, data: bytes) -> None:
        with self._lock:
            if self._closed:
                return
            name, _reader, typename, callback, clock = self._readers[tag]
        arrival_ns = arrival_mono_ns + clock.monotonic_base_ns if clock is not None else arrival_mono_ns
        try:
            if isinstance(callback, Undecoded):
                callback.callback(data, arrival_ns)
            else:
                callback(rosmsg.deserialize(data, typename), arrival_ns)
        except Exception:  # one bad sample or callback must not stop the subscription
            log.exception("subscriber callback on %s failed", name)
