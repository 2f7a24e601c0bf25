"""ROS 2 message types and CDR (de)serialization without ROS, through rosbags' typestore.

The kit's own messages (``fieldtest_msgs/msg/*``) are defined by the .msg files in ``fieldtest/msg``,
which the lab workspaces build as the ``fieldtest_msgs`` package and the bags embed.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

MSG_DIR = Path(__file__).parent / "msg"
MSG_PACKAGE = "fieldtest_msgs"

TWIST = "geometry_msgs/msg/Twist"
TWIST_STAMPED = "geometry_msgs/msg/TwistStamped"
POSE_STAMPED = "geometry_msgs/msg/PoseStamped"
HEADER = "std_msgs/msg/Header"
ODOMETRY = "nav_msgs/msg/Odometry"
COMMAND_RECEIPT = f"{MSG_PACKAGE}/msg/CommandReceipt"
CLOCK_PROBE = f"{MSG_PACKAGE}/msg/ClockProbe"
CLOCK_OFFSET_SAMPLE = f"{MSG_PACKAGE}/msg/ClockOffsetSample"
MOCAP_FRAME = f"{MSG_PACKAGE}/msg/MocapFrame"

# Sequence numbers ride in the command's header.frame_id (Create 3 ignores it): "seq:<n>".
SEQ_PREFIX = "seq:"


def custom_msg_definitions() -> dict[str, str]:
    """Type name -> .msg text of the kit's own messages."""
    return {f"{MSG_PACKAGE}/msg/{p.stem}": p.read_text() for p in sorted(MSG_DIR.glob("*.msg"))}


@functools.lru_cache(maxsize=1)
def typestore() -> Typestore:
    store = get_typestore(Stores.ROS2_HUMBLE)
    types: dict[str, Any] = {}
    for name, text in custom_msg_definitions().items():
        types.update(get_types_from_msg(text, name))
    store.register(types)
    return store


def msg_class(typename: str) -> Any:  # rosbags builds the message classes at run time
    return typestore().types[typename]


def serialize(msg: Any, typename: str) -> bytes:
    """CDR bytes with the 4-byte encapsulation header, as ROS 2 puts them on the wire."""
    return bytes(typestore().serialize_cdr(msg, typename))


def deserialize(data: bytes | bytearray | memoryview, typename: str) -> Any:
    """The message in CDR ``data``. Its numeric arrays are read-only views on the bytes (rosbags
    reads them with ``numpy.frombuffer``): ``bytes`` are read in place, anything mutable is copied
    once first, so a message never changes under its subscriber."""
    immutable = data if isinstance(data, bytes) else bytes(data)
    return typestore().deserialize_cdr(memoryview(immutable), typename)


def time_msg(ns: int) -> Any:
    sec, nanosec = divmod(int(ns), 1_000_000_000)
    return msg_class("builtin_interfaces/msg/Time")(sec=sec, nanosec=nanosec)


def ns_of(time: Any) -> int:
    return int(time.sec) * 1_000_000_000 + int(time.nanosec)


@dataclass(frozen=True)
class TimeField:
    """A builtin_interfaces/Time field of a message type: its attribute path, and its byte offset in
    the type's CDR (encapsulation header included), where a transport stamps serialized bytes at
    the last moment before sending. ``tests/test_rosmsg.py`` checks each offset against rosbags."""

    typename: str
    path: tuple[str, ...]
    offset: int

    def set(self, msg: Any, ns: int) -> None:
        owner = msg
        for name in self.path[:-1]:
            owner = getattr(owner, name)
        setattr(owner, self.path[-1], time_msg(ns))

    def patch(self, data: bytearray, ns: int) -> None:
        """Write ``ns`` into little-endian CDR ``data`` (as rosbags serializes on this machine)."""
        if not data[1] & 1:
            raise ValueError(f"{self.typename}: cannot stamp big-endian CDR")
        sec, nanosec = divmod(int(ns), 1_000_000_000)
        struct.pack_into("<iI", data, self.offset, sec, nanosec)

    def read(self, data: bytes | bytearray) -> int:
        """The time at this field's offset in little-endian CDR ``data``, in ns (``patch`` undone)."""
        sec, nanosec = struct.unpack_from("<iI", data, self.offset)
        return sec * 1_000_000_000 + nanosec


# Where transports stamp the send time of what the twin measures (offsets: 4-byte CDR header first).
COMMAND_SENT = TimeField(TWIST_STAMPED, ("header", "stamp"), 4)
PROBE_T1 = TimeField(CLOCK_PROBE, ("t1",), 8)  # after uint32 id
PROBE_T3 = TimeField(CLOCK_PROBE, ("t3",), 24)


def header(stamp_ns: int, frame_id: str = "") -> Any:
    return msg_class(HEADER)(stamp=time_msg(stamp_ns), frame_id=frame_id)


def twist(linear_x: float, angular_z: float) -> Any:
    vec = msg_class("geometry_msgs/msg/Vector3")
    return msg_class(TWIST)(
        linear=vec(x=float(linear_x), y=0.0, z=0.0), angular=vec(x=0.0, y=0.0, z=float(angular_z))
    )


def command(seq: int, sent_ns: int, linear_x: float, angular_z: float) -> Any:
    """A TwistStamped velocity command carrying its sequence number and send time."""
    return msg_class(TWIST_STAMPED)(
        header=header(sent_ns, f"{SEQ_PREFIX}{seq}"), twist=twist(linear_x, angular_z)
    )


def seq_of(frame_id: str) -> int | None:
    """Sequence number from a command header's frame_id, None if it carries none."""
    if not frame_id.startswith(SEQ_PREFIX):
        return None
    try:
        return int(frame_id[len(SEQ_PREFIX) :])
    except ValueError:
        return None


def pose_stamped(stamp_ns: int, frame_id: str, xyz: Sequence[float], quat_xyzw: Sequence[float]) -> Any:
    point = msg_class("geometry_msgs/msg/Point")(x=float(xyz[0]), y=float(xyz[1]), z=float(xyz[2]))
    quat = msg_class("geometry_msgs/msg/Quaternion")(
        x=float(quat_xyzw[0]), y=float(quat_xyzw[1]), z=float(quat_xyzw[2]), w=float(quat_xyzw[3])
    )
    pose = msg_class("geometry_msgs/msg/Pose")(position=point, orientation=quat)
    return msg_class(POSE_STAMPED)(header=header(stamp_ns, frame_id), pose=pose)


def yaw_quaternion(yaw: float) -> tuple[float, float, float, float]:
    """(x, y, z, w) of a rotation by ``yaw`` about +z."""
    return (0.0, 0.0, math.sin(yaw / 2.0), math.cos(yaw / 2.0))


def quaternion_yaw(x: float, y: float, z: float, w: float) -> float:
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
