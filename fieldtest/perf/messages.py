"""The payloads ``fieldtest perf`` sends: names, sizes, message objects and their serialized form.

Sizes are performance_test's message types as Zhang et al. ran them (TIERS/rmw_comparison
``relay_dds.sh``, its ``for msg in ...`` list): Array<N> carries N bytes, PointCloud<N> a point cloud of N data bytes.
Any other size is given as ``Array<N>`` / ``PointCloud<N>`` with N in bytes or with a k/m suffix
(binary: 1k = 1024 bytes, as performance_test's Array1k).

Both kinds start with a ``std_msgs/Header``: the send time rides in ``header.stamp`` (CDR offset 4,
stamped by the transport right before the send) and the sequence number and the echoing relay in
``header.frame_id``, a fixed-width text "seq:<10 digits>@<3 digits>", so the serialized bytes are
made once per row and only patched per message, on the main side and on the relays alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from rosbags.typesys import get_types_from_msg

from fieldtest import rosmsg
from fieldtest.errors import FieldtestError
from fieldtest.transport.base import Prepared, prepare

ARRAY_TYPE = "fieldtest_perf/msg/Array"  # performance_test's ArrayN, with a header for the stamps
ARRAY_DEFINITION = "std_msgs/Header header\nuint8[] data\n"
POINTCLOUD_TYPE = "sensor_msgs/msg/PointCloud2"
POINT_STEP = 16  # x, y, z, intensity as float32
SENT_STAMP = rosmsg.TimeField(ARRAY_TYPE, ("header", "stamp"), 4)  # the header comes first in both types
FRAME_ID_OFFSET = 16  # 4 CDR header + 8 stamp + 4 string length
SEQ_DIGITS, RELAY_DIGITS = 10, 3
_FRAME_ID = "seq:{seq:010d}@{relay:03d}"
_FRAME_RE = re.compile(r"^seq:(\d{10})@(\d{3})$")
SEQ_OFFSET = FRAME_ID_OFFSET + len("seq:")
RELAY_OFFSET = SEQ_OFFSET + SEQ_DIGITS + 1

KIB = 1024
# Zhang et al.'s message set (TIERS/rmw_comparison relay_dds.sh), in their table order.
SEED_MESSAGES: dict[str, int] = {
    "Array1k": KIB,
    "Array4k": 4 * KIB,
    "Array16k": 16 * KIB,
    "Array64k": 64 * KIB,
    "Array256k": 256 * KIB,
    "Array1m": KIB * KIB,
    "Array2m": 2 * KIB * KIB,
    "PointCloud512k": 512 * KIB,
    "PointCloud1m": KIB * KIB,
    "PointCloud2m": 2 * KIB * KIB,
}
QUICK_MESSAGES = ("Array1k", "Array64k", "PointCloud512k")
_NAME_RE = re.compile(r"^(Array|PointCloud)(\d+)([kKmM]?)$")


class MessageError(FieldtestError, ValueError):
    """An unknown message name or size."""


@dataclass(frozen=True)
class PerfMessage:
    name: str  # "Array64k", "PointCloud2m", "Array1000"
    kind: str  # "Array" or "PointCloud"
    size: int  # payload bytes (the data array)

    @property
    def typename(self) -> str:
        return ARRAY_TYPE if self.kind == "Array" else POINTCLOUD_TYPE


def parse_message(name: str) -> PerfMessage:
    """``Array64k`` -> 65536 payload bytes; one line naming the problem otherwise."""
    match = _NAME_RE.match(name.strip())
    if match is None:
        known = ", ".join(SEED_MESSAGES)
        raise MessageError(f"message {name!r}: unknown (use {known}, or Array<N>/PointCloud<N>[k|m])")
    kind, number, unit = match.groups()
    size = int(number) * {"": 1, "k": KIB, "m": KIB * KIB}[unit.lower()]
    if kind == "PointCloud" and size % POINT_STEP:
        raise MessageError(f"message {name!r}: a point cloud's size must be a multiple of {POINT_STEP} bytes")
    return PerfMessage(name.strip(), kind, size)


def register_types() -> None:
    """Add the perf Array type to the kit's typestore (idempotent; every perf process calls it)."""
    store = rosmsg.typestore()
    if ARRAY_TYPE not in store.types:
        store.register(get_types_from_msg(ARRAY_DEFINITION, ARRAY_TYPE))


def build(message: PerfMessage) -> Prepared:
    """The message object and its CDR bytes, seq 0 and relay 0, payload of ``message.size`` bytes."""
    register_types()
    data = np.frombuffer(np.random.default_rng(0).bytes(message.size), dtype=np.uint8)
    header = rosmsg.header(0, _FRAME_ID.format(seq=0, relay=0))
    if message.kind == "Array":
        msg = rosmsg.msg_class(ARRAY_TYPE)(header=header, data=data)
    else:
        field = rosmsg.msg_class("sensor_msgs/msg/PointField")
        fields = [field(name=n, offset=4 * i, datatype=7, count=1) for i, n in enumerate("xyz")]
        fields.append(field(name="intensity", offset=12, datatype=7, count=1))  # 7: FLOAT32
        points = message.size // POINT_STEP
        msg = rosmsg.msg_class(POINTCLOUD_TYPE)(
            header=header, height=1, width=points, fields=fields, is_bigendian=False,
            point_step=POINT_STEP, row_step=points * POINT_STEP, data=data, is_dense=True,
        )  # fmt: skip
    return prepare(msg, message.typename)


def set_ids(out: Prepared, seq: int, relay: int = 0) -> None:
    """Write ``seq`` and the echoing ``relay`` into the prepared bytes (and the object) in place."""
    out.cdr[SEQ_OFFSET : SEQ_OFFSET + SEQ_DIGITS] = b"%010d" % seq
    out.cdr[RELAY_OFFSET : RELAY_OFFSET + RELAY_DIGITS] = b"%03d" % relay
    out.msg.header.frame_id = _FRAME_ID.format(seq=seq, relay=relay)


def seq_of_cdr(data: bytes) -> int:
    """The sequence number of a perf message's CDR bytes, read where ``set_ids`` wrote it (a relay
    reads it without decoding the message); ValueError if the bytes are not a perf message's."""
    if data[FRAME_ID_OFFSET:SEQ_OFFSET] != b"seq:":
        raise ValueError(f"not a perf message: {bytes(data[FRAME_ID_OFFSET:RELAY_OFFSET])!r} at its frame_id")
    return int(data[SEQ_OFFSET : SEQ_OFFSET + SEQ_DIGITS])


def copy_seq(out: Prepared, data: bytes) -> None:
    """Give the prepared bytes the sequence number of the perf message ``data`` (CDR), as an echo
    carries its ping's. Only the bytes change: what the transports' stamped publishers send."""
    out.cdr[SEQ_OFFSET : SEQ_OFFSET + SEQ_DIGITS] = data[SEQ_OFFSET : SEQ_OFFSET + SEQ_DIGITS]


def ids_of(msg: Any) -> tuple[int, int]:  # a decoded perf message (its class is the typestore's)
    """(seq, relay) of a received message; ValueError if its frame_id is not a perf one."""
    match = _FRAME_RE.match(msg.header.frame_id)
    if match is None:
        raise ValueError(f"not a perf message: frame_id {msg.header.frame_id!r}")
    return int(match.group(1)), int(match.group(2))
