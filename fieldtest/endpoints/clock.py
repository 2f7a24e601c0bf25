"""Process clocks: wall-clock nanoseconds that never jump, optionally shifted (the twin robot's clock).

Every endpoint (twin or lab) takes time from a ``Clock``. Readings follow the wall clock at
start-up and then advance with the monotonic clock, so an NTP step during a trial cannot make time
run backwards; ``offset_s`` shifts the whole clock, which tests use to give the twin robot a
deliberately wrong clock that the clock-offset probe must find.
"""

from __future__ import annotations

import threading
import time

# Sleep in the OS until this close to a deadline, then spin: time.sleep overshoots by 50-100 us.
_SPIN_NS = 300_000


class Clock:
    def __init__(self, offset_s: float = 0.0):
        self.offset_ns = round(offset_s * 1e9)
        self._wall0 = time.time_ns()
        self._mono0 = time.monotonic_ns()

    def now_ns(self) -> int:
        return self._wall0 + (time.monotonic_ns() - self._mono0) + self.offset_ns

    @property
    def monotonic_base_ns(self) -> int:
        """Add to CLOCK_MONOTONIC nanoseconds (``time.monotonic_ns``) to get this clock's reading."""
        return self._wall0 - self._mono0 + self.offset_ns

    def now_s(self) -> float:
        return self.now_ns() / 1e9

    def sleep_until(
        self, deadline_ns: int, stop: threading.Event | None = None, spin_ns: int = _SPIN_NS
    ) -> bool:
        """Sleep until the clock reads ``deadline_ns``; False if ``stop`` was set meanwhile.

        The last ``spin_ns`` are spent polling the clock (precise, costs CPU); 0 sleeps only."""
        while True:
            if stop is not None and stop.is_set():
                return False
            left = deadline_ns - self.now_ns()
            if left <= 0:
                return True
            if left > spin_ns:
                chunk_s = min(left - spin_ns, 50_000_000) / 1e9  # wake at least every 50 ms
                if stop is not None:
                    if stop.wait(chunk_s):
                        return False
                else:
                    time.sleep(chunk_s)


class MonotonicClock:
    """CLOCK_MONOTONIC in ns, the same in every process of the machine: for stamps compared within
    one process or between processes on one machine (the transports' native stamps read
    CLOCK_MONOTONIC plus ``monotonic_base_ns``)."""

    monotonic_base_ns = 0

    def now_ns(self) -> int:
        return time.monotonic_ns()
