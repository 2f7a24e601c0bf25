"""MocapRecorder: a ROS-free NatNet client that writes every mocap frame into a rosbag2 bag.

It connects like the NatNet SDK clients (NAT_CONNECT from a command socket, learns the bitstream
version from NAT_SERVERINFO), then receives frames: in multicast mode on the data port after
joining the group, in unicast mode on the command socket (Motive sends unicast frames to the
address the client connected from) while sending keep-alives. Works against a real Motive
(NatNet 3.x / 4.x) and against NatNetEmulator.

For each received frame the bag gets, at log time = arrival time on this machine (the kernel's
receive timestamp where available, else ``time.time_ns()`` after recv; both the realtime clock):

- ``MOCAP_FRAMES_TOPIC`` fieldtest_msgs/MocapFrame: NatNet frame number, rigid-body id,
  tracking-valid flag, mean error, Motive timestamp; for every frame, valid or not, so lost
  (frame-number gaps) and invalid frames can be counted later;
- ``MOCAP_POSE_TOPIC`` geometry_msgs/PoseStamped, frame "mocap", robot-world axes (Z up): only
  for frames where the rigid body is tracked. Nothing is interpolated.

While it records, ``stats`` says how far the ground truth got by its own stamps: the latest tracked
frame and when the rigid body first moved away from where it stood (the runners keep recording
until the rest after the run is in; ``--status`` writes the same to a file for another process).
"""

from __future__ import annotations

import json
import math
import platform
import select
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from fieldtest import rosmsg
from fieldtest.errors import FieldtestError
from fieldtest.natnet import protocol as nn
from fieldtest.natnet.axes import UpAxis, check_up_axis, stream_to_world
from fieldtest.plan import MOTION_START_MIN_M, MOTION_START_SUSTAIN_S
from fieldtest.record import MOCAP_FRAMES_TOPIC, MOCAP_POSE_TOPIC, BagWriter

MOCAP_FRAME_ID = "mocap"
# After a frame was read, this many unreadable frames in a row stop the recorder (a single corrupt
# datagram does not; a stream that changed its layout does). Before any frame was read, one does.
MAX_UNREADABLE_RUN = 10
STATUS_PERIOD_S = 0.2

# Kernel receive timestamps (Linux SO_TIMESTAMPNS, CLOCK_REALTIME like time.time_ns()): a frame's
# stamp is when it reached this machine, not when Python got round to reading it, so a stall of
# the recorder (start-up, GC, a busy laptop) does not shift the ground-truth times. The option is
# not exported by Python's socket module; 35 is its value on x86-64 and arm64 Linux, where struct
# timespec is two int64. Elsewhere the recorder falls back to time.time_ns() after recv.
_SO_TIMESTAMPNS = 35
_KERNEL_STAMPS = sys.platform == "linux" and platform.machine().lower() in (
    "x86_64",
    "amd64",
    "aarch64",
    "arm64",
)
_TIMESPEC = struct.Struct("=qq")
_ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if _KERNEL_STAMPS else 0


def _enable_kernel_stamps(sock: socket.socket) -> None:
    if _KERNEL_STAMPS:
        try:
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError:
            pass


def _arrival_ns(ancillary: list[tuple[int, int, bytes]]) -> int:
    now = time.time_ns()
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            stamp = sec * 1_000_000_000 + nsec
            if 0 <= now - stamp < 60_000_000_000:  # sane: in the past minute
                return stamp
    return now


class MocapRecorderError(FieldtestError, RuntimeError):
    """The recorder cannot run (no server answered, socket setup failed); the message says why."""


@dataclass
class RecorderConfig:
    server_address: str = "127.0.0.1"
    local_address: str = "0.0.0.0"  # interface for the multicast join and the command socket
    multicast: bool = True
    multicast_address: str = nn.DEFAULT_MULTICAST_ADDRESS
    command_port: int = nn.DEFAULT_COMMAND_PORT
    data_port: int = nn.DEFAULT_DATA_PORT
    rigid_body_id: int = 1
    up_axis: UpAxis = "y"  # Motive's streaming Up Axis setting
    natnet_version: nn.Version | None = None  # None: take it from NAT_SERVERINFO
    connect_timeout_s: float = 10.0
    keepalive_s: float = 1.0  # unicast keep-alive period
    reconnect_after_s: float = 3.0  # unicast: re-send NAT_CONNECT after this long without frames

    def check(self) -> RecorderConfig:
        check_up_axis(self.up_axis)
        if self.natnet_version is not None:
            nn._check_supported(self.natnet_version)
        return self


@dataclass
class RecorderStats:
    frames: int = 0  # frames received and parsed
    valid: int = 0  # with the rigid body tracked (a pose was written)
    invalid: int = 0  # rigid body present but not tracked (or non-finite)
    absent: int = 0  # rigid body id not in the frame at all
    missing: int = 0  # frame numbers skipped between consecutive received frames (plausible loss only)
    out_of_order: int = 0  # frame number not above the highest so far, by at most REORDER_WINDOW_FRAMES
    jumps: int = 0  # frame number restarted or jumped: counting continues from the new number
    parse_errors: int = 0
    first_frame: int | None = None
    last_frame: int | None = None
    errors: list[str] = field(default_factory=list)
    fatal: str | None = None  # why the recorder stopped on its own (it refuses what it cannot read)
    last_valid_ns: int | None = None  # arrival of the latest tracked frame
    moved_ns: int | None = None  # arrival of the first tracked frame MOTION_START_MIN_M away (sustained)

    def summary(self) -> str:
        text = (
            f"{self.frames} frames ({self.valid} valid, {self.invalid} invalid, {self.absent} without body), "
            f"{self.missing} missing by frame number, {self.out_of_order} out of order, "
            f"{self.jumps} frame-number jumps, {self.parse_errors} unreadable"
        )
        return text if self.fatal is None else f"{text}; stopped: {self.fatal}"


class MocapRecorder:
    """``connect()`` then ``run(stop_event)``; or ``start()`` / ``stop()`` for a background thread."""

    def __init__(
        self, bag_dir: str | Path, config: RecorderConfig | None = None, status_path: Path | None = None
    ):
        self.config = (config or RecorderConfig()).check()
        self.bag_dir = Path(bag_dir)
        self.status_path = status_path  # progress for another process (``progress()``), if given
        self._status_due = 0.0
        self.stats = RecorderStats()
        self.server_info: nn.ServerInfo | None = None
        self.models: nn.ModelDefinitions | None = None
        self.version: nn.Version | None = self.config.natnet_version
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cmd_sock = self._open_command_socket()
        self._data_sock = self._open_data_socket() if self.config.multicast else None
        self._server = (self.config.server_address, self.config.command_port)
        self._writer: BagWriter | None = None
        self._closed = False
        self._last_keepalive = 0.0
        self._last_frame_mono = time.monotonic()
        self._last_frame_ns: int | None = None  # arrival of the frame that set stats.last_frame
        self._last_mocap_s: float | None = None  # and its Motive timestamp
        self._first_frame_ns: int | None = None  # arrival of the first frame counted
        self._unreadable_run = 0
        # the last tracked position (world frame, Z up) and when it came (time.monotonic)
        self.latest_position: tuple[tuple[float, float, float], float] | None = None
        self._standing_xy: tuple[float, float] | None = None  # where the body was first tracked
        self._away_since_ns: int | None = None

    # --- sockets ------------------------------------------------------------------------------

    def _open_command_socket(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        local = self.config.local_address if not self.config.multicast else "0.0.0.0"
        try:
            sock.bind((local, 0))
        except OSError as exc:
            sock.close()
            raise MocapRecorderError(f"cannot bind a command socket on {local} ({exc.strerror})") from None
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        _enable_kernel_stamps(sock)
        return sock

    def _open_data_socket(self) -> socket.socket:
        cfg = self.config
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # other NatNet clients on this host
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        _enable_kernel_stamps(sock)
        try:
            sock.bind(("", cfg.data_port))
            iface = cfg.local_address if cfg.local_address not in ("", "0.0.0.0") else "0.0.0.0"
            membership = socket.inet_aton(cfg.multicast_address) + socket.inet_aton(iface)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
        except OSError as exc:
            sock.close()
            self._cmd_sock.close()
            raise MocapRecorderError(
                f"cannot join multicast {cfg.multicast_address}:{cfg.data_port} on {cfg.local_address} "
                f"({exc.strerror})"
            ) from None
        return sock

    def _close_sockets(self) -> None:
        self._cmd_sock.close()
        if self._data_sock is not None:
            self._data_sock.close()

    # --- connection ---------------------------------------------------------------------------

    def _send(self, packet: bytes) -> None:
        try:
            self._cmd_sock.sendto(packet, self._server)
        except OSError as exc:
            self.stats.errors.append(f"send to {self._server[0]}:{self._server[1]}: {exc.strerror or exc}")

    def connect(self, stop: threading.Event | None = None) -> nn.ServerInfo | None:
        """Send NAT_CONNECT until NAT_SERVERINFO arrives; also asks for the model definitions.

        Returns None only in multicast mode with a configured NatNet version, where frames can be
        read without the server having answered (e.g. a firewall blocks the command port).
        """
        cfg = self.config
        stop = stop or self._stop
        deadline = time.monotonic() + cfg.connect_timeout_s
        next_ping = 0.0
        while self.server_info is None and not stop.is_set():
            now = time.monotonic()
            if now >= deadline:
                break
            if now >= next_ping:
                self._send(nn.pack_connect())
                next_ping = now + 0.5
            self._receive_once(min(0.1, max(0.0, deadline - now)), frames_allowed=False)
            self._raise_if_failed()
        if self.server_info is not None:
            self._send(nn.pack_message(nn.NAT_REQUEST_MODELDEF))
            return self.server_info
        if cfg.multicast and cfg.natnet_version is not None:
            return None
        if stop.is_set():
            raise MocapRecorderError("stopped before the NatNet server answered")
        raise MocapRecorderError(
            f"no NatNet server answered NAT_CONNECT at {cfg.server_address}:{cfg.command_port} "
            f"within {cfg.connect_timeout_s:g} s (is Motive streaming, is the address right, "
            "does a firewall block UDP 1510/1511?)"
        )

    # --- receiving -------------------------------------------------------------------------------

    def _receive_once(self, timeout_s: float, frames_allowed: bool = True) -> None:
        socks = [self._cmd_sock] + ([self._data_sock] if self._data_sock is not None else [])
        ready, _, _ = select.select(socks, [], [], timeout_s)
        for sock in ready:
            while True:  # drain what is queued so a burst does not wait for the next select
                try:
                    packet, ancillary, _, _ = sock.recvmsg(
                        nn.MAX_PACKET_BYTES, _ANCILLARY_BYTES, socket.MSG_DONTWAIT
                    )
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:  # e.g. ICMP port unreachable while the server is down
                    self.stats.errors.append(f"receive: {exc.strerror or exc}")
                    break
                self._handle(packet, _arrival_ns(ancillary), frames_allowed)

    def _handle(self, packet: bytes, recv_ns: int, frames_allowed: bool) -> None:
        try:
            message_id, payload = nn.unpack_message(packet)
            if message_id == nn.NAT_SERVERINFO:
                self._take_server_info(nn.unpack_server_info(payload))
            elif message_id == nn.NAT_MODELDEF and self.version is not None:
                self.models = nn.unpack_modeldef(payload, self.version)
            elif message_id == nn.NAT_FRAMEOFDATA and frames_allowed and self.version is not None:
                try:
                    frame = nn.unpack_frame(payload, self.version)
                except nn.NatNetProtocolError as exc:
                    self._unreadable_frame(exc)
                    return
                self._unreadable_run = 0
                self._record(frame, recv_ns)
        except nn.NatNetProtocolError as exc:
            self._note_error(exc)

    def _note_error(self, exc: Exception) -> None:
        self.stats.parse_errors += 1
        if len(self.stats.errors) < 100:
            self.stats.errors.append(str(exc))

    def _fail(self, reason: str) -> None:
        if self.stats.fatal is None:
            self.stats.fatal = reason

    def _raise_if_failed(self) -> None:
        if self.stats.fatal is not None:
            raise MocapRecorderError(self.stats.fatal)

    def _server_text(self) -> str:
        return f"NatNet server {self.config.server_address}:{self.config.command_port}"

    def _take_server_info(self, info: nn.ServerInfo) -> None:
        """Refuse a server whose frames would be misread: NatNet 2.x, or not the configured version."""
        reported, configured = info.natnet_version, self.config.natnet_version
        where = f"{self._server_text()} ({info.app_name} {nn.version_text(info.app_version)})"
        if reported[0] < 3:
            self._fail(
                f"{where} streams NatNet {nn.version_text(reported)}: not supported (this kit reads "
                "NatNet 3.0 and later; set Motive's streaming to a newer bitstream)"
            )
        elif configured is not None and tuple(reported[:2]) != tuple(configured[:2]):
            self._fail(
                f"{where} streams NatNet {nn.version_text(reported)}, configured "
                f"{nn.version_text(configured)}: its frames would be misread (configure "
                f"{reported[0]}.{reported[1]} or no version)"
            )
        else:
            self.server_info = info
            self.version = configured or reported

    def _unreadable_frame(self, exc: nn.NatNetProtocolError) -> None:
        self._note_error(exc)
        self._unreadable_run += 1
        if self._unreadable_run == 1 and self.config.natnet_version is None and self.server_info is not None:
            self._send(nn.pack_connect())  # Motive may have changed its bitstream: ask for the version again
        if self.stats.frames == 0 or self._unreadable_run >= MAX_UNREADABLE_RUN:
            run = "the first frame" if self.stats.frames == 0 else f"{self._unreadable_run} frames in a row"
            self._fail(
                f"{run} from the {self._server_text()} cannot be read (another NatNet version?): {exc}"
            )

    def _record(self, frame: nn.Frame, recv_ns: int) -> None:
        stats = self.stats
        self._last_frame_mono = time.monotonic()
        stats.frames += 1
        self._count_frame_number(frame.frame_number, recv_ns, float(frame.timestamp))
        body = frame.rigid_body(self.config.rigid_body_id)
        valid = body is not None and body.tracking_valid and body.finite
        if body is None:
            stats.absent += 1
        elif not valid:
            stats.invalid += 1
        else:
            stats.valid += 1
        writer = self._open_writer()
        msg = rosmsg.msg_class(rosmsg.MOCAP_FRAME)(
            header=rosmsg.header(recv_ns, MOCAP_FRAME_ID),
            frame_number=frame.frame_number & 0xFFFFFFFF,
            rigid_body_id=self.config.rigid_body_id,
            tracking_valid=valid,
            mean_error_m=float(body.mean_error) if body is not None else 0.0,
            mocap_timestamp_s=float(frame.timestamp),
        )
        writer.write(MOCAP_FRAMES_TOPIC, rosmsg.MOCAP_FRAME, recv_ns, msg)
        if valid and body is not None:
            position, orientation = stream_to_world(body.position, body.orientation, self.config.up_axis)
            self.latest_position = (position, time.monotonic())  # world frame: the lab's geofence reads it
            self._watch_motion(position, recv_ns)
            pose = rosmsg.pose_stamped(recv_ns, MOCAP_FRAME_ID, position, orientation)
            writer.write(MOCAP_POSE_TOPIC, rosmsg.POSE_STAMPED, recv_ns, pose)

    def _watch_motion(self, position: tuple[float, float, float], recv_ns: int) -> None:
        stats = self.stats
        stats.last_valid_ns = recv_ns
        if self._standing_xy is None:
            self._standing_xy = (position[0], position[1])
            return
        if stats.moved_ns is not None:
            return
        away = math.dist(self._standing_xy, position[:2]) > MOTION_START_MIN_M
        if not away:
            self._away_since_ns = None
        elif self._away_since_ns is None:
            self._away_since_ns = recv_ns
        elif recv_ns - self._away_since_ns >= MOTION_START_SUSTAIN_S * 1e9:
            stats.moved_ns = self._away_since_ns

    def watch_motion_from_here(self) -> None:
        """Count motion from where the rigid body stands now (the lab's go: the robot was placed before)."""
        self._standing_xy = None
        self._away_since_ns = None
        self.stats.moved_ns = None

    def progress(self) -> dict[str, int | bool | None]:
        """How far the ground truth got (the ``--status`` file's content)."""
        stats = self.stats
        return {
            "frames": stats.frames,
            "valid": stats.valid,
            "last_valid_ns": stats.last_valid_ns,
            "moved_ns": stats.moved_ns,
            "running": self.running,
        }

    @property
    def running(self) -> bool:
        """Still recording: not closed, and not stopped on its own."""
        return not self._closed and self.stats.fatal is None

    def _write_status(self, now: float, final: bool = False) -> None:
        if self.status_path is None or (now < self._status_due and not final):
            return
        self._status_due = now + STATUS_PERIOD_S
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.progress()) + "\n")
        tmp.replace(self.status_path)

    def _count_frame_number(self, number: int, recv_ns: int, mocap_s: float) -> None:
        stats = self.stats
        if stats.last_frame is None:
            stats.first_frame = number
            self._first_frame_ns = recv_ns
        else:
            step = number - stats.last_frame
            # time between the two frames by arrival, or by Motive's own frame timestamps where that
            # is longer (frames Motive sent back to back after catching up arrive together) and no
            # longer than this recording has run (a garbage timestamp is not elapsed time)
            by_motive_s = mocap_s - (self._last_mocap_s if self._last_mocap_s is not None else mocap_s)
            recording_s = (recv_ns - (self._first_frame_ns or recv_ns)) / 1e9
            elapsed_s = (recv_ns - (self._last_frame_ns or recv_ns)) / 1e9
            if by_motive_s <= recording_s:
                elapsed_s = max(elapsed_s, by_motive_s)
            if step == 1:
                pass
            elif nn.frame_step_is_loss(step, elapsed_s):
                stats.missing += step - 1
            elif -nn.REORDER_WINDOW_FRAMES <= step <= 0:
                stats.out_of_order += 1
                return  # late: the count goes on from the highest number
            else:
                stats.jumps += 1
        stats.last_frame = number
        self._last_frame_ns = recv_ns
        self._last_mocap_s = mocap_s

    def _open_writer(self) -> BagWriter:
        if self._writer is None:
            self._writer = BagWriter(self.bag_dir, background=True)
        return self._writer

    # --- main loop ---------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, duration_s: float | None = None) -> RecorderStats:
        """Connect, then record until ``stop`` is set (or ``duration_s`` passes); always closes the bag."""
        stop = stop or self._stop
        cfg = self.config
        end = None if duration_s is None else time.monotonic() + duration_s
        try:
            self._open_writer()  # an empty bag still marks that the recorder ran
            rosmsg.msg_class(rosmsg.MOCAP_FRAME)  # build the type store now, not on the first frame
            self.connect(stop)
            self._last_frame_mono = time.monotonic()
            while not stop.is_set() and (end is None or time.monotonic() < end):
                now = time.monotonic()
                if not cfg.multicast:
                    if now - self._last_keepalive >= cfg.keepalive_s:
                        self._send(nn.pack_message(nn.NAT_KEEPALIVE))
                        self._last_keepalive = now
                    if now - self._last_frame_mono > cfg.reconnect_after_s:
                        self._send(nn.pack_connect())  # the server may have restarted and forgotten us
                        self._last_frame_mono = now
                self._receive_once(0.1)
                self._write_status(now)
                self._raise_if_failed()
        finally:
            self.close()
        return self.stats

    def start(self) -> MocapRecorder:
        """Record in a background thread (errors end up in ``stats.errors``)."""

        def target() -> None:
            try:
                self.run(self._stop)
            except MocapRecorderError as exc:
                self.stats.errors.append(str(exc))

        self._thread = threading.Thread(target=target, name="mocap-recorder", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> RecorderStats:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self.close()
        return self.stats

    def close(self) -> None:
        """Close the bag and the sockets (idempotent)."""
        if self._writer is not None:
            self._writer.close()
        if self._closed:
            return
        self._closed = True
        self._write_status(time.monotonic(), final=True)
        if self.server_info is not None:
            self._send(nn.pack_message(nn.NAT_DISCONNECT))
        self._close_sockets()
