"""Clock offset between two machines from NTP-style four-timestamp probes (no ROS, no I/O).

The initiator (the robot, which needs the offset to correct its latency log) sends a probe with
t1 (its clock); the responder (the host) stamps t2 on receipt and t3 on reply (its clock); the
initiator stamps t4 when the reply arrives. Each stamp is taken as close to the wire as the
transport allows (``fieldtest.transport.base.stamped_publisher`` / ``timed_subscribe``): Python's
own wake-up and send costs on the four legs are not symmetric and would bias the offset. Then

    offset = ((t2 - t1) + (t3 - t4)) / 2     responder clock minus initiator clock
    delay  = (t4 - t1) - (t3 - t2)           round trip without the responder's own time

The offset error is at most delay / 2 (when all of the delay sits on one side), so the estimate
used is the offset of the minimum-delay probe among the latest ``window`` ones: the window lets
the estimate follow slowly drifting clocks through a long trial.

Follow-up probes: a probe sent after idle goes out on a cold path (the sender's and receiver's
middleware threads asleep, caches cold), while the reply leaves at once on a warm one, so the two
legs differ and half the difference lands in the offset (+47 us median on the development VM,
where the true offset was 0). As soon as such a reply arrives the initiator sends a follow-up
probe, whose two legs are both warm; it has the smaller delay, so the minimum-delay filter picks
it (offset 5 us on the same runs). The twin processes and the lab's
rclpy nodes wrap the same ``ProbeInitiator`` in their own messages.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

NS = 1_000_000_000


@dataclass(frozen=True)
class ProbeSample:
    """One completed probe; t1/t4 on the initiator's clock, t2/t3 on the responder's (ns)."""

    id: int
    t1_ns: int
    t2_ns: int
    t3_ns: int
    t4_ns: int
    follow_up: bool = False  # sent the moment the previous reply arrived

    @property
    def offset_s(self) -> float:
        return ((self.t2_ns - self.t1_ns) + (self.t3_ns - self.t4_ns)) / 2 / NS

    @property
    def delay_s(self) -> float:
        return ((self.t4_ns - self.t1_ns) - (self.t3_ns - self.t2_ns)) / NS


def offset_and_delay(t1_ns: int, t2_ns: int, t3_ns: int, t4_ns: int) -> tuple[float, float]:
    sample = ProbeSample(0, t1_ns, t2_ns, t3_ns, t4_ns)
    return sample.offset_s, sample.delay_s


def to_responder_ns(initiator_ns: int, offset_s: float) -> int:
    """A time on the initiator's clock expressed on the responder's clock."""
    return initiator_ns + round(offset_s * NS)


def one_way_latency_s(sent_ns: int, received_ns: int, offset_s: float) -> float:
    """Latency of a message sent at ``sent_ns`` (sender = responder clock) and received at
    ``received_ns`` (receiver = initiator clock), given offset = sender minus receiver clock."""
    if not math.isfinite(offset_s):
        return math.nan
    return (received_ns - sent_ns) / NS + offset_s


class MinDelayFilter:
    """Offset of the minimum-delay sample among the latest ``window`` samples."""

    def __init__(self, window: int = 16):
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self._recent: deque[ProbeSample] = deque(maxlen=window)
        self.best: ProbeSample | None = None

    def add(self, sample: ProbeSample) -> ProbeSample | None:
        self._recent.append(sample)
        self.best = min(self._recent, key=lambda s: s.delay_s)
        return self.best

    @property
    def offset_s(self) -> float:
        return math.nan if self.best is None else self.best.offset_s

    @property
    def delay_s(self) -> float:
        return math.nan if self.best is None else self.best.delay_s

    def __len__(self) -> int:
        return len(self._recent)


def best_offset(samples: list[ProbeSample]) -> ProbeSample | None:
    """The minimum-delay sample of a whole trial (for post-hoc correction)."""
    return min(samples, key=lambda s: s.delay_s, default=None)


class ProbeInitiator:
    """The probing side: when to probe, which replies to trust, the running offset estimate.

    Probes go out ``burst_interval_s`` apart until ``burst`` of them have been answered (an
    estimate within a fraction of a second once the responder is up), then every ``interval_s``.
    With ``follow_up`` (default) the caller sends a follow-up probe as soon as a reply to a
    scheduled one arrives (``wants_follow_up``; module docstring). Replies that do not match an
    outstanding probe (wrong id or t1, duplicated, older than ``timeout_s``) or that imply a
    negative delay are ignored. Thread-safe: replies arrive on a middleware thread.
    """

    def __init__(
        self,
        burst: int = 10,
        burst_interval_s: float = 0.05,
        interval_s: float = 0.5,
        timeout_s: float = 2.0,
        window: int = 16,
        follow_up: bool = True,
    ):
        self.burst = burst
        self.follow_up = follow_up
        self.burst_interval_ns = round(burst_interval_s * NS)
        self.interval_ns = round(interval_s * NS)
        self.timeout_ns = round(timeout_s * NS)
        self.filter = MinDelayFilter(window)
        self.samples: list[ProbeSample] = []
        self.sent = 0
        self.ignored = 0
        self._outstanding: dict[int, int] = {}  # id -> t1
        self._follow_up_ids: set[int] = set()  # outstanding follow-up probes
        self._last_sent_ns: int | None = None
        self._lock = threading.Lock()

    def due(self, now_ns: int) -> bool:
        due_ns = self.next_due_ns()
        return due_ns is None or now_ns >= due_ns

    def next_due_ns(self) -> int | None:
        """When the next probe should go out (None: now, nothing sent yet)."""
        with self._lock:
            if self._last_sent_ns is None:
                return None
            gap = self.burst_interval_ns if len(self.samples) < self.burst else self.interval_ns
            return self._last_sent_ns + gap

    def make_probe(self, now_ns: int) -> tuple[int, int]:
        """Register a probe sent now; returns (id, t1_ns) to put in the message."""
        return self.send_probe(lambda _probe_id: now_ns)

    def send_probe(self, send: Callable[[int], int], *, follow_up: bool = False) -> tuple[int, int]:
        """Send a probe: ``send(probe_id)`` publishes it and returns the t1 it carries (stamped as
        it went out). A reply is not taken before its probe is registered (same lock)."""
        with self._lock:
            probe_id = self.sent & 0xFFFFFFFF  # uint32 on the wire
            t1_ns = send(probe_id)
            self.sent += 1
            self._outstanding[probe_id] = t1_ns
            if follow_up:
                self._follow_up_ids.add(probe_id)
            for old_id, t1 in list(self._outstanding.items()):
                if t1_ns - t1 > self.timeout_ns:
                    del self._outstanding[old_id]
                    self._follow_up_ids.discard(old_id)
            self._last_sent_ns = t1_ns
            return probe_id, t1_ns

    def on_reply(self, probe_id: int, t1_ns: int, t2_ns: int, t3_ns: int, t4_ns: int) -> ProbeSample | None:
        """Take a reply received at ``t4_ns``; returns the completed sample, None if ignored."""
        with self._lock:
            follow_up = probe_id in self._follow_up_ids
            sample = ProbeSample(probe_id, t1_ns, t2_ns, t3_ns, t4_ns, follow_up)
            stale = t4_ns - t1_ns > self.timeout_ns
            if self._outstanding.get(probe_id) != t1_ns or stale or sample.delay_s < 0 or t3_ns < t2_ns:
                self.ignored += 1
                return None
            del self._outstanding[probe_id]
            self._follow_up_ids.discard(probe_id)
            self.samples.append(sample)
            self.filter.add(sample)
            return sample

    def wants_follow_up(self, sample: ProbeSample | None) -> bool:
        """Whether to send a follow-up probe now, on taking the reply that completed ``sample``."""
        return self.follow_up and sample is not None and not sample.follow_up

    @property
    def offset_s(self) -> float:
        with self._lock:
            return self.filter.offset_s

    @property
    def delay_s(self) -> float:
        with self._lock:
            return self.filter.delay_s

    @property
    def completed(self) -> int:
        return len(self.samples)


@dataclass(frozen=True)
class OneWayClockFit:
    """Receiver clock = sender clock + ``offset_s`` + ``drift`` x (sender time - ``ref_s``), from
    one-way stamps (a stream whose messages carry the sender's time, like NatNet frames).

    One-way stamps cannot tell a clock offset from a constant transit delay: the fit is the lower
    envelope of receipt minus send time, so ``offset_s`` includes the fastest message's delay and a
    mapped time is when the message would have arrived at that delay. What a message took beyond
    it (``receipt - mapped``) is the stream's own delay variation.
    """

    offset_s: float
    drift: float  # seconds per second (x 1e6 = ppm)
    ref_s: float  # sender time the offset refers to
    windows: int  # lower-envelope points the line was fitted through

    def receiver_minus_sender_s(self, sender_s: np.ndarray) -> np.ndarray:
        """Receiver clock minus sender clock (seconds) at the given sender times (numpy arrays)."""
        return self.offset_s + self.drift * (sender_s - self.ref_s)


def fit_one_way_clock(
    sender_s: np.ndarray, receipt_minus_sender_s: np.ndarray, window_s: float = 1.0
) -> OneWayClockFit | None:
    """Lower-envelope linear fit over numpy arrays: the minimum of ``receipt - sender`` per
    ``window_s`` of sender time, a line through those minima, refitted without the minima well above
    it (a window in which every message was held up), then lowered onto the fastest kept minimum.
    None with fewer than two usable samples."""
    import numpy as np  # here: the robot's processes import this module and need no numpy

    x = np.asarray(sender_s, dtype=float)
    y = np.asarray(receipt_minus_sender_s, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 2:
        return None
    ref = float(x.min())
    window = np.floor((x - ref) / window_s).astype(np.int64)
    order = np.lexsort((y, window))  # by window, then delay: the first of each window is its minimum
    first = order[np.concatenate([[True], np.diff(window[order]) != 0])]
    px, py = x[first] - ref, y[first]
    if len(px) < 3:
        return OneWayClockFit(float(py.min()), 0.0, ref, int(len(px)))
    keep = np.ones(len(px), dtype=bool)
    for _ in range(3):
        drift, offset = np.polyfit(px[keep], py[keep], 1)
        residual = py - (offset + drift * px)
        spread = 1.4826 * np.median(np.abs(residual[keep] - np.median(residual[keep])))
        again = residual <= np.median(residual[keep]) + 3.0 * max(spread, 1e-6)
        if again.sum() < 3 or np.array_equal(again, keep):
            break
        keep = again
    drift, offset = np.polyfit(px[keep], py[keep], 1)
    offset += float(np.min(py[keep] - (offset + drift * px[keep])))
    return OneWayClockFit(float(offset), float(drift), ref, int(keep.sum()))
