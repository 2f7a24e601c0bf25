"""Pose feed: how a separate process (the twin robot) hands its true pose to the NatNet emulator.

The robot sends one UDP datagram per physics step to the emulator's feed port (loopback):

    magic b"FTPF", uint8 version 1, uint8 flags (bit 0: no pose / occluded), 2 pad bytes,
    float64 sample time (wall clock, s), 7 x float64 x y z qx qy qz qw (robot world, Z up, m)

UDP keeps the two processes decoupled: neither blocks on the other, a restarted robot simply
resumes sending, and a lost datagram costs one sample. The receiver is itself a pose source for
the emulator: asked for the pose at a frame's exposure time it interpolates between the last
two samples (or extrapolates a little past the newest), so a robot stepping at 100 Hz still
yields smooth 120 or 360 Hz frames. A feed silent for ``stale_s`` counts as occlusion. With
``history_s`` it keeps that much of the past, for an emulator whose frames leave a latency after
their exposure (each frame then still shows the pose at its exposure time).
"""

from __future__ import annotations

import bisect
import math
import socket
import struct
import threading
import time
from dataclasses import dataclass

from fieldtest.errors import FieldtestError

DEFAULT_FEED_PORT = 15110
DRAIN_PERIOD_S = (
    0.05  # with a history: how often the feed is read while nobody asks (100 Hz x 0.05 s fits any buffer)
)
_FORMAT = struct.Struct("<4sBB2xd7d")
_MAGIC = b"FTPF"
_VERSION = 1
_FLAG_NO_POSE = 0x01

Pose = tuple[float, float, float, float, float, float, float]  # x y z qx qy qz qw


class PoseFeedError(FieldtestError, ValueError):
    """A datagram on the feed port that is not a pose-feed sample."""


def pack_sample(t: float, pose: Pose | None) -> bytes:
    if pose is None:
        return _FORMAT.pack(_MAGIC, _VERSION, _FLAG_NO_POSE, t, *([0.0] * 7))
    if len(pose) != 7:
        raise PoseFeedError(f"pose needs 7 values (x y z qx qy qz qw), got {len(pose)}")
    return _FORMAT.pack(_MAGIC, _VERSION, 0, t, *pose)


def unpack_sample(data: bytes) -> tuple[float, Pose | None]:
    if len(data) != _FORMAT.size:
        raise PoseFeedError(f"pose-feed datagram of {len(data)} bytes, expected {_FORMAT.size}")
    magic, version, flags, t, *pose = _FORMAT.unpack(data)
    if magic != _MAGIC or version != _VERSION:
        raise PoseFeedError(f"pose-feed datagram with magic {magic!r} version {version}")
    return t, None if flags & _FLAG_NO_POSE else tuple(pose)


class PoseFeedSender:
    """Used by the twin robot: ``send(pose)`` after each physics step, ``send(None)`` to occlude."""

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_FEED_PORT):
        # A path instead of an address selects a Unix datagram socket: it crosses network
        # namespaces, so the simulated truth never travels over an emulated link.
        unix = host.startswith("/")
        self.address = host if unix else (host, port)
        self._sock = socket.socket(socket.AF_UNIX if unix else socket.AF_INET, socket.SOCK_DGRAM)
        # Never block the robot's physics loop: a Unix datagram queue holds only ~10 samples, and
        # a busy emulator would otherwise stall the robot (and its truth log) until it drains.
        self._sock.setblocking(False)

    def send(self, pose: Pose | None, t: float | None = None) -> None:
        try:
            self._sock.sendto(pack_sample(time.time() if t is None else t, pose), self.address)
        except OSError:
            pass  # nobody listening, or the queue is full: the sample is simply lost

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> PoseFeedSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _Sample:
    t: float
    pose: Pose | None


class PoseFeedReceiver:
    """Callable pose source for NatNetEmulator fed by PoseFeedSender datagrams."""

    def __init__(
        self,
        bind: str = "127.0.0.1",
        port: int = DEFAULT_FEED_PORT,
        stale_s: float = 0.25,
        max_extrapolate_s: float = 0.05,
        history_s: float = 0.0,
    ):
        if bind.startswith("/"):  # Unix datagram socket path (see PoseFeedSender)
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.bind(bind)
            self.port = 0
        else:
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self._sock.bind((bind, port))
            self.port = self._sock.getsockname()[1]
        self._sock.setblocking(False)
        self.stale_s = stale_s
        self.max_extrapolate_s = max_extrapolate_s
        self.history_s = history_s
        self._samples: list[_Sample] = []  # oldest first: the last two, or history_s of them
        self._times: list[float] = []
        self.samples = 0
        self.rejected = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        if history_s > 0:
            # An emulator asks for its first pose only a latency after its start: read the feed
            # meanwhile, or the socket's buffer fills and the samples of that time are lost
            threading.Thread(target=self._keep_draining, name="pose-feed", daemon=True).start()

    def _keep_draining(self) -> None:
        while not self._closed.wait(DRAIN_PERIOD_S):
            with self._lock:
                self._drain()

    def _drain(self) -> None:
        while True:
            try:
                data = self._sock.recv(256)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                t, pose = unpack_sample(data)
            except PoseFeedError:
                self.rejected += 1
                continue
            if self._times and t <= self._times[-1]:
                continue  # reordered or repeated datagram
            self._samples.append(_Sample(t, pose))
            self._times.append(t)
            self.samples += 1
        keep_from = bisect.bisect_left(self._times, self._times[-1] - self.history_s) if self._times else 0
        drop = min(keep_from, len(self._times) - 2)
        if drop > 0:
            del self._samples[:drop], self._times[:drop]

    def __call__(self, t: float) -> Pose | None:
        """Pose at wall time ``t`` (None: occluded, no sample yet, or the feed went quiet)."""
        with self._lock:
            self._drain()
            return self._pose_at(t)

    def _pose_at(self, t: float) -> Pose | None:
        if not self._samples or t - self._times[-1] > self.stale_s:
            return None
        i = bisect.bisect_right(self._times, t)
        if i >= len(self._samples):  # past the newest: the last two samples, extrapolated a little
            i = len(self._samples) - 1
        prev, last = self._samples[max(i - 1, 0)], self._samples[i]
        if last.pose is None:
            return None if t >= last.t else prev.pose
        if prev.pose is None or last.t - prev.t <= 0:
            return last.pose
        a = (min(t, last.t + self.max_extrapolate_s) - prev.t) / (last.t - prev.t)
        return _blend(prev.pose, last.pose, max(a, 0.0))

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._sock.close()


def _blend(p: Pose, q: Pose, a: float) -> Pose:
    """Linear blend of positions and normalised blend of quaternions (same hemisphere)."""
    qa: tuple[float, ...] = p[3:]
    qb: tuple[float, ...] = q[3:]
    if sum(x * y for x, y in zip(qa, qb, strict=True)) < 0:
        qb = tuple(-v for v in qb)
    quat = [x + a * (y - x) for x, y in zip(qa, qb, strict=True)]
    norm = math.sqrt(sum(v * v for v in quat)) or 1.0
    pos = [x + a * (y - x) for x, y in zip(p[:3], q[:3], strict=True)]
    return (pos[0], pos[1], pos[2], quat[0] / norm, quat[1] / norm, quat[2] / norm, quat[3] / norm)
