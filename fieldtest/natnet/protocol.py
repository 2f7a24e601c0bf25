"""NatNet wire format (OptiTrack Motive streaming): framing, server info, model and frame data.

Every NatNet message is ``uint16 message id, uint16 payload bytes, payload``, little-endian.
Layouts follow NaturalPoint's public SDK samples (PacketClient.cpp, NatNetClient.py) for the
versions Motive 2.x and 3.x stream:

- NatNet 3.x (Motive 2.x): rigid-body markers live in the model description, frames carry the
  three uint64 host-clock stamps.
- NatNet 4.0 (Motive 3.0): marker names in the rigid-body description.
- NatNet 4.1+ (Motive 3.1+): every frame section and every description carries its byte size
  after its count, frames carry an asset section and a precision timestamp (2 x uint32).
- NatNet 4.2+: the rigid-body description also carries an orientation quaternion.

Only the parts the field-test kit needs are modelled as data; other frame sections a real
Motive may send (skeletons, assets, labeled markers, force plates, devices) are parsed past and
counted, so frames from a live Motive with extra content are still read.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fieldtest.errors import FieldtestError
from fieldtest.names import NATNET_COMMAND_PORT, NATNET_DATA_PORT

NAT_CONNECT = 0
NAT_SERVERINFO = 1
NAT_REQUEST = 2
NAT_RESPONSE = 3
NAT_REQUEST_MODELDEF = 4
NAT_MODELDEF = 5
NAT_REQUEST_FRAMEOFDATA = 6
NAT_FRAMEOFDATA = 7
NAT_MESSAGESTRING = 8
NAT_DISCONNECT = 9
NAT_KEEPALIVE = 10
NAT_UNRECOGNIZED_REQUEST = 100

DEFAULT_COMMAND_PORT, DEFAULT_DATA_PORT = NATNET_COMMAND_PORT, NATNET_DATA_PORT
DEFAULT_MULTICAST_ADDRESS = "239.255.42.99"
MAX_PACKET_BYTES = 65507  # largest UDP payload; the uint16 size field caps NatNet payloads lower still

NAME_FIELD_BYTES = 256  # fixed-size application name in NAT_SERVERINFO
DATASET_MARKERSET, DATASET_RIGIDBODY, DATASET_SKELETON = 0, 1, 2

RIGID_BODY_TRACKING_VALID = 0x01  # rigid-body params bit 0

# Frame numbers: a datagram overtaken by at most this many later frames is late, not a restart; a
# forward step larger than this many frames per second since the previous frame (plus the window) is
# no loss but a jump (Motive restarted, or a garbage number).
REORDER_WINDOW_FRAMES = 64
MAX_FRAME_RATE_HZ = 1000.0

Version = tuple[int, int, int, int]
NATNET_3_1: Version = (3, 1, 0, 0)
NATNET_4_1: Version = (4, 1, 0, 0)

_HEADER = struct.Struct("<HH")
_RIGID_BODY = struct.Struct("<i3f4ffH")  # id, position, quaternion x y z w, mean error, params
_LABELED_MARKER_BYTES = 4 + 12 + 4 + 2 + 4  # id, position, size, params, residual (NatNet 3.0+)
_SERVER_CONNECTION = struct.Struct("<QH?4s")  # clock frequency, data port, multicast, group address
_STAMPS = struct.Struct("<3Q")


class NatNetProtocolError(FieldtestError, ValueError):
    """A NatNet packet that cannot be read or written; the message says where and why."""


def parse_version(value: str | Sequence[int]) -> Version:
    """``"4.1"``, ``"3.1.0.0"`` or a sequence of ints -> a 4-part version."""
    try:
        parts = [int(p) for p in value.split(".")] if isinstance(value, str) else [int(p) for p in value]
    except ValueError:
        raise NatNetProtocolError(f"NatNet version {value!r}: expected numbers like 4.1") from None
    if not 1 <= len(parts) <= 4 or any(not 0 <= p <= 255 for p in parts):
        raise NatNetProtocolError(f"NatNet version {value!r}: expected 1 to 4 numbers 0-255")
    parts += [0] * (4 - len(parts))
    return (parts[0], parts[1], parts[2], parts[3])


def version_text(version: Sequence[int]) -> str:
    return ".".join(str(p) for p in version)


def _at_least(version: Sequence[int], major: int, minor: int) -> bool:
    return (version[0], version[1]) >= (major, minor)


def has_section_sizes(version: Sequence[int]) -> bool:
    """NatNet 4.1 put a byte count after each frame section's and each description's count."""
    return _at_least(version, 4, 1)


def frame_step_is_loss(step: int, elapsed_s: float) -> bool:
    """Whether a forward frame-number step over ``elapsed_s`` of arrival time can be frames lost."""
    return 1 < step <= elapsed_s * MAX_FRAME_RATE_HZ + REORDER_WINDOW_FRAMES + 1


def _check_supported(version: Sequence[int]) -> None:
    if version[0] < 3:
        raise NatNetProtocolError(
            f"NatNet {version_text(version)} is not supported (this kit reads NatNet 3.0 and later; "
            "set Motive's streaming to a newer bitstream)"
        )


# --- byte readers and writers -------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes | memoryview, what: str):
        self.data = memoryview(data)
        self.pos = 0
        self.what = what

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, fmt: struct.Struct) -> tuple:
        if self.pos + fmt.size > len(self.data):
            raise NatNetProtocolError(
                f"{self.what}: truncated at byte {self.pos} (need {fmt.size} more, have {self.remaining()})"
            )
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values

    def one(self, fmt: struct.Struct) -> Any:
        return self.take(fmt)[0]

    def skip(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise NatNetProtocolError(f"{self.what}: cannot skip {n} bytes at byte {self.pos}")
        self.pos += n

    def cstring(self) -> str:
        end = bytes(self.data[self.pos :]).find(b"\0")
        if end < 0:
            raise NatNetProtocolError(f"{self.what}: unterminated string at byte {self.pos}")
        text = bytes(self.data[self.pos : self.pos + end]).decode("utf-8", errors="replace")
        self.pos += end + 1
        return text

    def count(self, label: str) -> int:
        n = self.one(_I32)
        if n < 0 or n > self.remaining():
            raise NatNetProtocolError(f"{self.what}: implausible {label} count {n} at byte {self.pos - 4}")
        return n


_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
_VEC3 = struct.Struct("<3f")
_VEC4 = struct.Struct("<4f")


def _cstring(text: str) -> bytes:
    raw = text.encode("utf-8")
    if b"\0" in raw:
        raise NatNetProtocolError(f"name {text!r} contains a NUL byte")
    return raw + b"\0"


# --- framing --------------------------------------------------------------------------------------


def pack_message(message_id: int, payload: bytes = b"") -> bytes:
    if len(payload) > 0xFFFF:
        raise NatNetProtocolError(f"message {message_id}: payload of {len(payload)} bytes exceeds 65535")
    return _HEADER.pack(message_id, len(payload)) + payload


def unpack_message(packet: bytes | memoryview) -> tuple[int, memoryview]:
    """(message id, payload) of one datagram; the size field must fit the datagram."""
    if len(packet) < _HEADER.size:
        raise NatNetProtocolError(f"packet of {len(packet)} bytes is shorter than the NatNet header")
    message_id, size = _HEADER.unpack_from(packet, 0)
    if _HEADER.size + size > len(packet):
        raise NatNetProtocolError(
            f"message {message_id}: header says {size} payload bytes, datagram has {len(packet) - 4}"
        )
    return message_id, memoryview(packet)[_HEADER.size : _HEADER.size + size]


def pack_connect() -> bytes:
    """NAT_CONNECT as the NatNet 3.x samples send it: the string "Ping" (the server answers SERVERINFO)."""
    return pack_message(NAT_CONNECT, b"Ping\0")


# --- server info ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerInfo:
    app_name: str = "Motive"
    app_version: Version = (3, 1, 0, 0)
    natnet_version: Version = NATNET_4_1
    # Connection info (NatNet 3.0+): host clock ticks per second, data port, multicast or unicast.
    clock_frequency: int | None = 1_000_000_000
    data_port: int | None = DEFAULT_DATA_PORT
    multicast: bool | None = True
    multicast_address: str | None = DEFAULT_MULTICAST_ADDRESS


def pack_server_info(info: ServerInfo) -> bytes:
    name = info.app_name.encode("utf-8")[: NAME_FIELD_BYTES - 1].ljust(NAME_FIELD_BYTES, b"\0")
    payload = name + bytes(info.app_version) + bytes(info.natnet_version)
    if info.natnet_version[0] >= 3 and info.clock_frequency is not None:
        group = _ip_bytes(info.multicast_address or "0.0.0.0")
        payload += _SERVER_CONNECTION.pack(
            info.clock_frequency, info.data_port or 0, bool(info.multicast), group
        )
    return pack_message(NAT_SERVERINFO, payload)


def unpack_server_info(payload: bytes | memoryview) -> ServerInfo:
    reader = _Reader(payload, "NAT_SERVERINFO")
    raw_name = bytes(reader.data[:NAME_FIELD_BYTES])
    reader.skip(NAME_FIELD_BYTES)
    app_version = reader.take(struct.Struct("<4B"))
    natnet_version = reader.take(struct.Struct("<4B"))
    name = raw_name.split(b"\0", 1)[0].decode("utf-8", errors="replace")
    if reader.remaining() < _SERVER_CONNECTION.size:
        return ServerInfo(name, app_version, natnet_version, None, None, None, None)
    frequency, data_port, multicast, group = reader.take(_SERVER_CONNECTION)
    return ServerInfo(name, app_version, natnet_version, frequency, data_port, multicast, _ip_text(group))


def _ip_bytes(address: str) -> bytes:
    parts = address.split(".")
    if len(parts) != 4 or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
        raise NatNetProtocolError(f"{address!r} is not an IPv4 address")
    return bytes(int(p) for p in parts)


def _ip_text(raw: bytes) -> str:
    return ".".join(str(b) for b in raw)


# --- model definitions ----------------------------------------------------------------------------


@dataclass
class RigidBodyDescription:
    name: str
    id: int
    parent_id: int = -1
    offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    orientation: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 1.0)  # on the wire from NatNet 4.2
    marker_offsets: list[tuple[float, float, float]] = field(default_factory=list)
    marker_labels: list[int] = field(default_factory=list)  # active labels, 0 for passive markers
    marker_names: list[str] = field(default_factory=list)  # on the wire from NatNet 4.0


@dataclass
class ModelDefinitions:
    rigid_bodies: list[RigidBodyDescription] = field(default_factory=list)
    marker_sets: dict[str, list[str]] = field(default_factory=dict)
    skipped: int = 0  # datasets of other kinds (skeletons, force plates, ...) that were passed over

    def rigid_body(self, body_id: int) -> RigidBodyDescription | None:
        return next((rb for rb in self.rigid_bodies if rb.id == body_id), None)


def _pack_rigid_body_description(rb: RigidBodyDescription, version: Version) -> bytes:
    n = len(rb.marker_offsets)
    labels = rb.marker_labels or [0] * n
    names = rb.marker_names or [f"Marker{i + 1}" for i in range(n)]
    if len(labels) != n or len(names) != n:
        raise NatNetProtocolError(f"rigid body {rb.name!r}: marker offsets, labels and names differ in count")
    out = bytearray(_cstring(rb.name))
    out += struct.pack("<ii3f", rb.id, rb.parent_id, *rb.offset)
    if _at_least(version, 4, 2):
        out += _VEC4.pack(*rb.orientation)
    out += _I32.pack(n)
    for offset in rb.marker_offsets:
        out += _VEC3.pack(*offset)
    for label in labels:
        out += _I32.pack(label)
    if version[0] >= 4:
        for name in names:
            out += _cstring(name)
    return bytes(out)


def _unpack_rigid_body_description(reader: _Reader, version: Version) -> RigidBodyDescription:
    name = reader.cstring()
    body_id, parent_id = reader.take(struct.Struct("<ii"))
    offset = reader.take(_VEC3)
    orientation = reader.take(_VEC4) if _at_least(version, 4, 2) else (0.0, 0.0, 0.0, 1.0)
    n = reader.count("rigid-body marker")
    offsets = [reader.take(_VEC3) for _ in range(n)]
    labels = [reader.one(_I32) for _ in range(n)]
    names = [reader.cstring() for _ in range(n)] if version[0] >= 4 else []
    return RigidBodyDescription(name, body_id, parent_id, offset, orientation, offsets, labels, names)


def pack_modeldef(bodies: Sequence[RigidBodyDescription], version: Version) -> bytes:
    """NAT_MODELDEF holding one marker set and one rigid-body description per body, as Motive sends."""
    _check_supported(version)
    datasets: list[tuple[int, bytes]] = []
    for rb in bodies:
        names = rb.marker_names or [f"Marker{i + 1}" for i in range(len(rb.marker_offsets))]
        markerset = _cstring(rb.name) + _I32.pack(len(names)) + b"".join(_cstring(n) for n in names)
        datasets.append((DATASET_MARKERSET, markerset))
        datasets.append((DATASET_RIGIDBODY, _pack_rigid_body_description(rb, version)))
    out = bytearray(_I32.pack(len(datasets)))
    for kind, body in datasets:
        out += _I32.pack(kind)
        if has_section_sizes(version):
            out += _I32.pack(len(body))
        out += body
    return pack_message(NAT_MODELDEF, bytes(out))


def unpack_modeldef(payload: bytes | memoryview, version: Version) -> ModelDefinitions:
    _check_supported(version)
    reader = _Reader(payload, f"NAT_MODELDEF (NatNet {version_text(version)})")
    models = ModelDefinitions()
    for _ in range(reader.count("dataset")):
        kind = reader.one(_I32)
        size = reader.one(_I32) if has_section_sizes(version) else None
        start = reader.pos
        if kind == DATASET_MARKERSET:
            name = reader.cstring()
            models.marker_sets[name] = [reader.cstring() for _ in range(reader.count("marker name"))]
        elif kind == DATASET_RIGIDBODY:
            models.rigid_bodies.append(_unpack_rigid_body_description(reader, version))
        elif kind == DATASET_SKELETON:
            reader.cstring()
            reader.one(_I32)
            for _ in range(reader.count("skeleton bone")):
                _unpack_rigid_body_description(reader, version)
            models.skipped += 1
        elif size is not None:
            reader.skip(size)
            models.skipped += 1
        else:
            raise NatNetProtocolError(
                f"{reader.what}: dataset type {kind} at byte {start} cannot be skipped before NatNet 4.1"
            )
        if size is not None and reader.pos - start != size:
            raise NatNetProtocolError(
                f"{reader.what}: dataset type {kind} at byte {start} says {size} bytes, holds {reader.pos - start}"
            )
    return models


# --- frames of data -------------------------------------------------------------------------------


@dataclass
class RigidBody:
    id: int
    position: tuple[float, float, float]
    orientation: tuple[float, float, float, float]  # quaternion x, y, z, w
    mean_error: float = 0.0  # mean marker residual, metres
    params: int = RIGID_BODY_TRACKING_VALID

    @property
    def tracking_valid(self) -> bool:
        return bool(self.params & RIGID_BODY_TRACKING_VALID)

    @property
    def finite(self) -> bool:
        return all(math.isfinite(v) for v in (*self.position, *self.orientation))


@dataclass
class Frame:
    frame_number: int
    rigid_bodies: list[RigidBody] = field(default_factory=list)
    marker_sets: list[tuple[str, list[tuple[float, float, float]]]] = field(default_factory=list)
    other_markers: list[tuple[float, float, float]] = field(default_factory=list)
    timecode: int = 0
    timecode_subframe: int = 0
    timestamp: float = 0.0  # seconds on Motive's clock
    stamp_camera_mid_exposure: int = 0  # host clock ticks (ServerInfo.clock_frequency per second)
    stamp_data_received: int = 0
    stamp_transmit: int = 0
    precision_timestamp_s: int = 0  # NatNet 4.1+ (PTP seconds when available)
    precision_timestamp_frac: int = 0
    params: int = 0  # bit 0 recording, bit 1 tracked models changed
    # Sections this kit does not model; counted when read, sent empty.
    skeleton_count: int = 0
    asset_count: int = 0
    labeled_marker_count: int = 0
    force_plate_count: int = 0
    device_count: int = 0

    def rigid_body(self, body_id: int) -> RigidBody | None:
        return next((rb for rb in self.rigid_bodies if rb.id == body_id), None)


def _section(count: int, content: bytes, version: Version) -> bytes:
    head = _I32.pack(count)
    if has_section_sizes(version):
        head += _I32.pack(len(content))
    return head + content


def pack_frame(frame: Frame, version: Version) -> bytes:
    """A complete NAT_FRAMEOFDATA message for ``version``; unmodelled sections are sent empty."""
    _check_supported(version)
    if frame.skeleton_count or frame.asset_count or frame.labeled_marker_count:
        raise NatNetProtocolError("packing skeletons, assets or labeled markers is not supported")
    if frame.force_plate_count or frame.device_count:
        raise NatNetProtocolError("packing force plates or devices is not supported")
    out = bytearray(_U32.pack(frame.frame_number))
    marker_sets = b"".join(
        _cstring(name) + _I32.pack(len(points)) + b"".join(_VEC3.pack(*p) for p in points)
        for name, points in frame.marker_sets
    )
    out += _section(len(frame.marker_sets), marker_sets, version)
    out += _section(len(frame.other_markers), b"".join(_VEC3.pack(*p) for p in frame.other_markers), version)
    bodies = b"".join(
        _RIGID_BODY.pack(rb.id, *rb.position, *rb.orientation, rb.mean_error, rb.params)
        for rb in frame.rigid_bodies
    )
    out += _section(len(frame.rigid_bodies), bodies, version)
    out += _section(0, b"", version)  # skeletons
    if has_section_sizes(version):
        out += _section(0, b"", version)  # assets
    out += _section(0, b"", version)  # labeled markers
    out += _section(0, b"", version)  # force plates
    out += _section(0, b"", version)  # devices
    out += struct.pack("<IId", frame.timecode, frame.timecode_subframe, frame.timestamp)
    out += _STAMPS.pack(frame.stamp_camera_mid_exposure, frame.stamp_data_received, frame.stamp_transmit)
    if has_section_sizes(version):
        out += struct.pack("<II", frame.precision_timestamp_s, frame.precision_timestamp_frac)
    out += _U16.pack(frame.params)
    out += _I32.pack(0)  # end-of-data tag
    return pack_message(NAT_FRAMEOFDATA, bytes(out))


class _FrameReader:
    """Reads one frame section by section; with NatNet 4.1 sizes it checks every section's length."""

    def __init__(self, payload: bytes | memoryview, version: Version):
        self.r = _Reader(payload, f"NAT_FRAMEOFDATA (NatNet {version_text(version)})")
        self.version = version
        self.sized = has_section_sizes(version)

    def begin(self, label: str) -> tuple[int, int | None, int]:
        count = self.r.count(label)
        size = self.r.one(_I32) if self.sized else None
        return count, size, self.r.pos

    def end(self, label: str, size: int | None, start: int) -> None:
        if size is not None and self.r.pos - start != size:
            raise NatNetProtocolError(
                f"{self.r.what}: {label} section at byte {start} says {size} bytes, holds {self.r.pos - start}"
            )

    def rigid_body(self) -> RigidBody:
        body_id, x, y, z, qx, qy, qz, qw, error, params = self.r.take(_RIGID_BODY)
        return RigidBody(body_id, (x, y, z), (qx, qy, qz, qw), error, params)

    def skip_section(self, label: str, walk_one: Callable[[], None] | None) -> int:
        count, size, start = self.begin(label)
        if size is not None:
            self.r.skip(size)
        else:
            assert walk_one is not None  # every section without a size has a known layout
            for _ in range(count):
                walk_one()
        return count

    def skeletons(self) -> None:
        """Skeleton entry: id, bone count, bones laid out as rigid bodies."""
        self.r.one(_I32)
        for _ in range(self.r.count("skeleton bone")):
            self.rigid_body()

    def channels(self) -> None:
        """Force plate / device entry: id, channel count, per channel a frame count and floats."""
        self.r.one(_I32)
        for _ in range(self.r.count("channel")):
            self.r.skip(4 * self.r.count("channel frame"))


def unpack_frame(payload: bytes | memoryview, version: Version) -> Frame:
    """Read a NAT_FRAMEOFDATA payload (after the 4-byte header) streamed as NatNet ``version``."""
    _check_supported(version)
    fr = _FrameReader(payload, version)
    r = fr.r
    frame = Frame(frame_number=r.one(_U32))

    count, size, start = fr.begin("marker set")
    for _ in range(count):
        name = r.cstring()
        frame.marker_sets.append((name, [r.take(_VEC3) for _ in range(r.count("marker"))]))
    fr.end("marker set", size, start)

    count, size, start = fr.begin("other marker")
    frame.other_markers = [r.take(_VEC3) for _ in range(count)]
    fr.end("other marker", size, start)

    count, size, start = fr.begin("rigid body")
    frame.rigid_bodies = [fr.rigid_body() for _ in range(count)]
    fr.end("rigid body", size, start)

    # Sections this kit does not use: with NatNet 4.1 sizes they are skipped whole (robust to
    # layout additions in later versions); before 4.1 they have to be walked.
    frame.skeleton_count = fr.skip_section("skeleton", fr.skeletons)
    if fr.sized:  # assets arrived with NatNet 4.1
        frame.asset_count = fr.skip_section("asset", None)
    frame.labeled_marker_count = fr.skip_section("labeled marker", lambda: r.skip(_LABELED_MARKER_BYTES))
    frame.force_plate_count = fr.skip_section("force plate", fr.channels)
    frame.device_count = fr.skip_section("device", fr.channels)

    frame.timecode, frame.timecode_subframe, frame.timestamp = r.take(struct.Struct("<IId"))
    (frame.stamp_camera_mid_exposure, frame.stamp_data_received, frame.stamp_transmit) = r.take(_STAMPS)
    if fr.sized:
        frame.precision_timestamp_s, frame.precision_timestamp_frac = r.take(struct.Struct("<II"))
    frame.params = r.one(_U16)
    _check_frame_end(r)
    return frame


def _check_frame_end(r: _Reader) -> None:
    """Only the 4-byte end-of-data tag may follow the frame (its value is not checked: the SDK samples
    skip it); some tools omit it. Anything else means the frame was read with the wrong layout (e.g. a
    NatNet 4.1 frame read as 3.x finds no rigid body and ends early), so it is refused rather than
    recorded with the body missing."""
    left = r.remaining()
    if left in (0, 4):
        return
    raise NatNetProtocolError(
        f"{r.what}: {left} bytes left over after the frame (read with the wrong NatNet version?)"
    )
