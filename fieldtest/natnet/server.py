"""NatNetEmulator: a stand-in for OptiTrack Motive streaming one rigid body over real UDP.

It answers the command port like Motive (NAT_CONNECT -> NAT_SERVERINFO, NAT_REQUEST_MODELDEF ->
NAT_MODELDEF, keep-alives, "Bitstream" queries) and streams NAT_FRAMEOFDATA at a fixed rate:

- multicast: frames go to the group (239.255.42.99) on the data port (1511), any number of
  clients listen;
- unicast: frames go to every client that sent NAT_CONNECT, to the address and port it sent
  from (its command socket), as Motive does; a client silent for ``client_timeout_s`` is dropped.

The pose of frame k comes from ``pose_source(t)`` with t the wall-clock time of the frame's
mid-exposure (start + k / rate); the frame is sent ``latency_s`` later. Frame times follow
absolute deadlines, so the rate does not drift with the time spent building frames; when the
emulator falls more than ``max_lag_s`` behind it skips the missed frame numbers, as an
overloaded Motive would. Position noise is Gaussian (seeded); dropouts come from a probability
or scheduled windows and either clear the tracking-valid bit (occlusion) or suppress the frame
(lost in transit, seen by clients as a frame-number gap).
"""

from __future__ import annotations

import collections
import math
import random
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fieldtest.natnet import protocol as nn
from fieldtest.natnet.axes import UpAxis, check_up_axis, world_to_stream
from fieldtest.natnet.feed import Pose

PoseSource = Callable[[float], "Pose | None"]

# The Motive release that introduced each NatNet bitstream version (3.0 Motive 2.0, 3.1 Motive 2.1,
# 4.0 Motive 3.0, 4.1 Motive 3.1, 4.2 Motive 3.2; Motive 3.3 and 3.4 still stream 4.2); an unlisted
# version reports the release of the closest lower one.
_MOTIVE_FOR_NATNET = {
    (3, 0): (2, 0, 0, 0),
    (3, 1): (2, 1, 0, 0),
    (4, 0): (3, 0, 0, 0),
    (4, 1): (3, 1, 0, 0),
    (4, 2): (3, 2, 0, 0),
}


def motive_version_for(natnet: nn.Version) -> nn.Version:
    known = [v for v in sorted(_MOTIVE_FOR_NATNET) if v <= (natnet[0], natnet[1])]
    return _MOTIVE_FOR_NATNET[known[-1]] if known else _MOTIVE_FOR_NATNET[(3, 0)]


@dataclass
class EmulatorConfig:
    rate_hz: float = 120.0
    natnet_version: nn.Version = nn.NATNET_4_1
    rigid_body_id: int = 1
    rigid_body_name: str = "turtlebot4"
    marker_offsets: list[tuple[float, float, float]] = field(
        default_factory=lambda: [
            (0.08, 0.0, 0.19),
            (-0.06, 0.07, 0.19),
            (-0.06, -0.07, 0.19),
            (0.0, 0.05, 0.21),
        ]
    )  # in the stream frame's axes; only described in MODELDEF
    up_axis: UpAxis = "y"
    noise_m: float = 0.0002  # std of Gaussian noise on each position axis
    angle_noise_rad: float = 0.0  # std of a random small rotation applied to the orientation
    mean_error_m: float | None = None  # reported marker residual; default: noise_m
    seed: int = 0
    invalid_probability: float = 0.0  # frame sent with the tracking-valid bit cleared
    invalid_windows: list[tuple[float, float]] = field(default_factory=list)  # (start, end) s after start
    loss_probability: float = 0.0  # frame not sent at all
    loss_windows: list[tuple[float, float]] = field(default_factory=list)
    latency_s: float = 0.0  # mid-exposure to transmit
    first_frame_number: int = 100_000
    multicast: bool = True
    multicast_address: str = nn.DEFAULT_MULTICAST_ADDRESS
    bind_address: str = "0.0.0.0"  # command socket; in multicast also the sending interface if not 0.0.0.0
    command_port: int = nn.DEFAULT_COMMAND_PORT
    data_port: int = nn.DEFAULT_DATA_PORT
    multicast_ttl: int = 1
    client_timeout_s: float = 10.0
    max_lag_s: float = 0.25
    history_size: int = 0  # keep the last N FrameRecords (tests, twin ground truth)
    app_name: str = "Motive"

    def check(self) -> EmulatorConfig:
        if not (self.rate_hz > 0 and math.isfinite(self.rate_hz)):
            raise ValueError(f"emulator rate {self.rate_hz!r} Hz: must be a positive number")
        nn._check_supported(self.natnet_version)
        check_up_axis(self.up_axis)
        for name in ("invalid_probability", "loss_probability"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"emulator {name} {value!r}: must be within 0..1")
        for name in ("noise_m", "angle_noise_rad", "latency_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"emulator {name} {getattr(self, name)!r}: must not be negative")
        for name in ("invalid_windows", "loss_windows"):
            for window in getattr(self, name):
                if len(window) != 2 or window[1] < window[0]:
                    raise ValueError(f"emulator {name}: {window!r} is not a (start, end) pair")
        return self


@dataclass(frozen=True)
class FrameRecord:
    """What the emulator did with one frame (ground truth for tests and the twin)."""

    frame_number: int
    t_wall: float  # mid-exposure time
    true_pose: Pose | None  # robot world, before noise; None when the source had no pose
    sent: bool
    tracking_valid: bool


class NatNetEmulator:
    """Serve NatNet for one rigid body; ``start()`` / ``stop()`` or use as a context manager."""

    def __init__(self, pose_source: PoseSource, config: EmulatorConfig | None = None):
        self.config = (config or EmulatorConfig()).check()
        self.pose_source = pose_source
        self._rng = random.Random(self.config.seed)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._clients: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()
        self._last_frame_packet: bytes | None = None
        self.history: collections.deque[FrameRecord] = collections.deque(maxlen=self.config.history_size or 1)
        self.frames_generated = 0
        self.frames_sent = 0
        self.frames_skipped_late = 0
        self.errors: list[str] = []
        self._cmd_sock = self._open_command_socket()
        self._data_sock = self._open_data_socket() if self.config.multicast else None
        self.command_port = self._cmd_sock.getsockname()[1]
        self.started_wall: float | None = None

    # --- sockets ------------------------------------------------------------------------------

    def _open_command_socket(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.config.bind_address, self.config.command_port))
        except OSError as exc:
            sock.close()
            raise OSError(
                f"NatNet emulator: cannot bind command port {self.config.bind_address}:"
                f"{self.config.command_port} ({exc.strerror})"
            ) from None
        return sock

    def _open_data_socket(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, self.config.multicast_ttl)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        if self.config.bind_address not in ("", "0.0.0.0"):
            iface = socket.inet_aton(self.config.bind_address)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, iface)
        return sock

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> NatNetEmulator:
        if self._threads:
            return self
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._command_loop, name="natnet-command", daemon=True),
            threading.Thread(target=self._frame_loop, name="natnet-frames", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5.0)
        self._threads = []
        self._cmd_sock.close()
        if self._data_sock is not None:
            self._data_sock.close()

    def serve_forever(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set (for the CLI: signal handlers set it)."""
        self.start()
        try:
            while not stop.wait(0.2) and not self._stop.is_set():
                pass
        finally:
            self.stop()

    def __enter__(self) -> NatNetEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def clients(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self._clients)

    # --- command channel -----------------------------------------------------------------------

    def server_info(self) -> nn.ServerInfo:
        cfg = self.config
        return nn.ServerInfo(
            app_name=cfg.app_name,
            app_version=motive_version_for(cfg.natnet_version),
            natnet_version=cfg.natnet_version,
            clock_frequency=1_000_000_000,  # stamps are time.monotonic_ns() ticks
            data_port=cfg.data_port,
            multicast=cfg.multicast,
            multicast_address=cfg.multicast_address,
        )

    def model_definitions(self) -> list[nn.RigidBodyDescription]:
        cfg = self.config
        n = len(cfg.marker_offsets)
        return [
            nn.RigidBodyDescription(
                name=cfg.rigid_body_name,
                id=cfg.rigid_body_id,
                marker_offsets=list(cfg.marker_offsets),
                marker_labels=[0] * n,
                marker_names=[f"{cfg.rigid_body_name}_{i + 1}" for i in range(n)],
            )
        ]

    def _command_loop(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._cmd_sock], [], [], 0.1)
                if not ready:
                    continue
                packet, address = self._cmd_sock.recvfrom(nn.MAX_PACKET_BYTES)
            except OSError:
                if self._stop.is_set():
                    return
                continue
            try:
                reply = self._answer(packet, address)
            except nn.NatNetProtocolError as exc:
                self.errors.append(f"command from {address[0]}:{address[1]}: {exc}")
                continue
            if reply:
                self._send(self._cmd_sock, reply, address)

    def _answer(self, packet: bytes, address: tuple[str, int]) -> bytes | None:
        message_id, payload = nn.unpack_message(packet)
        now = time.monotonic()
        if message_id == nn.NAT_CONNECT:
            with self._lock:
                self._clients[address] = now
            return nn.pack_server_info(self.server_info())
        with self._lock:
            if address in self._clients:
                self._clients[address] = now
        if message_id == nn.NAT_KEEPALIVE:
            return None
        if message_id == nn.NAT_DISCONNECT:
            with self._lock:
                self._clients.pop(address, None)
            return None
        if message_id == nn.NAT_REQUEST_MODELDEF:
            return nn.pack_modeldef(self.model_definitions(), self.config.natnet_version)
        if message_id == nn.NAT_REQUEST_FRAMEOFDATA:
            return self._last_frame_packet
        if message_id == nn.NAT_REQUEST:
            command = bytes(payload).split(b"\0", 1)[0].decode("utf-8", errors="replace")
            if command.strip().lower() == "bitstream":
                text = f"Bitstream,{self.config.natnet_version[0]}.{self.config.natnet_version[1]}"
                return nn.pack_message(nn.NAT_RESPONSE, text.encode() + b"\0")
        return nn.pack_message(nn.NAT_UNRECOGNIZED_REQUEST)

    # --- frames ----------------------------------------------------------------------------------

    def _frame_loop(self) -> None:
        cfg = self.config
        period = 1.0 / cfg.rate_hz
        t0_mono, t0_wall = time.monotonic(), time.time()
        self.started_wall = t0_wall
        k = 0
        while not self._stop.is_set():
            exposure = t0_mono + k * period
            delay = exposure + cfg.latency_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif -delay > cfg.max_lag_s:
                behind = math.floor(-delay / period)
                self.frames_skipped_late += behind
                k += behind
                continue
            try:
                self._emit(k, t0_wall + k * period, int(exposure * 1e9))
            except Exception as exc:  # a failing pose source must not kill the stream silently
                self.errors.append(f"frame {k}: {type(exc).__name__}: {exc}")
                if len(self.errors) > 1000:
                    del self.errors[:500]
            k += 1

    def _in_window(self, windows: Sequence[tuple[float, float]], t_rel: float) -> bool:
        return any(start <= t_rel < end for start, end in windows)

    def _emit(self, k: int, t_wall: float, exposure_ticks: int) -> None:
        cfg = self.config
        t_rel = k / cfg.rate_hz
        true_pose = self.pose_source(t_wall)
        if true_pose is not None and len(true_pose) != 7:
            raise ValueError(f"pose source returned {len(true_pose)} values, expected x y z qx qy qz qw")
        # Draw every random number every frame so a seed gives the same noise whatever the dropouts.
        noise = [self._rng.gauss(0.0, cfg.noise_m) for _ in range(3)]
        turn = [self._rng.gauss(0.0, cfg.angle_noise_rad) for _ in range(3)]
        invalid_draw, loss_draw = self._rng.random(), self._rng.random()
        valid = (
            true_pose is not None
            and invalid_draw >= cfg.invalid_probability
            and not self._in_window(cfg.invalid_windows, t_rel)
        )
        sent = loss_draw >= cfg.loss_probability and not self._in_window(cfg.loss_windows, t_rel)
        if valid and true_pose is not None:
            position = (true_pose[0] + noise[0], true_pose[1] + noise[1], true_pose[2] + noise[2])
            orientation = _perturb(true_pose[3:], turn) if cfg.angle_noise_rad > 0 else true_pose[3:]
            position, orientation = world_to_stream(position, orientation, cfg.up_axis)
            params = nn.RIGID_BODY_TRACKING_VALID
        else:
            position, orientation, params = (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), 0
        body = nn.RigidBody(
            id=cfg.rigid_body_id,
            position=position,
            orientation=orientation,
            mean_error=(cfg.noise_m if cfg.mean_error_m is None else cfg.mean_error_m) if valid else 0.0,
            params=params,
        )
        frame = nn.Frame(
            frame_number=cfg.first_frame_number + k,
            rigid_bodies=[body],
            timestamp=(cfg.first_frame_number + k) / cfg.rate_hz,
            stamp_camera_mid_exposure=exposure_ticks,
            stamp_data_received=exposure_ticks + int(cfg.latency_s * 0.5e9),
            stamp_transmit=time.monotonic_ns(),
        )
        packet = nn.pack_frame(frame, cfg.natnet_version)
        self._last_frame_packet = packet
        self.frames_generated += 1
        if sent:
            self._broadcast(packet)
        if cfg.history_size:
            self.history.append(FrameRecord(frame.frame_number, t_wall, true_pose, sent, valid))

    def _broadcast(self, packet: bytes) -> None:
        cfg = self.config
        if self._data_sock is not None:
            if self._send(self._data_sock, packet, (cfg.multicast_address, cfg.data_port)):
                self.frames_sent += 1
            return
        now = time.monotonic()
        with self._lock:
            for address, seen in list(self._clients.items()):
                if now - seen > cfg.client_timeout_s:
                    del self._clients[address]
            targets = list(self._clients)
        delivered = [self._send(self._cmd_sock, packet, address) for address in targets]
        if any(delivered):
            self.frames_sent += 1

    def _send(self, sock: socket.socket, packet: bytes, address: tuple[str, int]) -> bool:
        try:
            sock.sendto(packet, address)
            return True
        except OSError as exc:  # e.g. a client's port closed (ICMP) or no route: keep streaming
            if not self._stop.is_set():
                self.errors.append(f"send to {address[0]}:{address[1]}: {exc.strerror or exc}")
                if len(self.errors) > 1000:
                    del self.errors[:500]
            return False


def _perturb(quat: Sequence[float], turn: Sequence[float]) -> tuple[float, float, float, float]:
    """Quaternion ``quat`` followed by a small rotation with rotation vector ``turn`` (radians)."""
    x, y, z, w = quat
    angle = math.sqrt(sum(v * v for v in turn))
    if angle == 0:
        return x, y, z, w
    s = math.sin(angle / 2) / angle
    dx, dy, dz, dw = turn[0] * s, turn[1] * s, turn[2] * s, math.cos(angle / 2)
    return (
        dw * x + dx * w + dy * z - dz * y,
        dw * y - dx * z + dy * w + dz * x,
        dw * z + dx * y - dy * x + dz * w,
        dw * w - dx * x - dy * y - dz * z,
    )
