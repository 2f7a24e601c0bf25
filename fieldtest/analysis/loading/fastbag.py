"""Fast reading of the kit's bags: raw MCAP records plus vectorized CDR decoding into numpy arrays.

``fieldtest.record.read_bag`` builds one rosbags message object per record, which takes about a
second for a 96 s trial with 360 Hz ground truth. The analysis only needs a few fields of five
fixed-layout message types, so this module walks the MCAP chunks itself and decodes each type's
fields for all messages at once with a numpy structured view (one layout per frame_id length).
Types it does not know fall back to rosbags. Cut-off files are read up to the cut, like read_bag.
``tests/test_analysis_fastbag.py`` checks every decoder against rosbags on the same bytes.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fieldtest import rosmsg
from fieldtest.record import BagError

_OP_FOOTER, _OP_SCHEMA, _OP_CHANNEL, _OP_MESSAGE, _OP_CHUNK = 0x02, 0x03, 0x04, 0x05, 0x06
_MAGIC = b"\x89MCAP0\r\n"
_CDR_LE = b"\x00\x01"


@dataclass
class RawTopic:
    typename: str
    log_ns: list[int] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)


@dataclass
class RawBag:
    """Undecoded messages of the wanted topics of one bag, in file order."""

    path: Path
    topics: dict[str, str] = field(default_factory=dict)  # every topic in the bag -> type name
    raw: dict[str, RawTopic] = field(default_factory=dict)  # wanted topics only
    truncated: bool = False
    problem: str = ""

    def count(self, topic: str) -> int:
        raw = self.raw.get(topic)
        return len(raw.data) if raw else 0


def find_bag_file(bag_dir: Path) -> Path:
    """The storage file of a rosbag2 folder (or the file itself); BagError if there is none."""
    if not bag_dir.exists():
        raise BagError(f"{bag_dir}: no such bag")
    if bag_dir.is_file():
        return bag_dir
    for pattern in ("*.mcap", "*.db3"):
        files = sorted(bag_dir.glob(pattern))
        if files:
            return files[0]
    raise BagError(f"{bag_dir}: no .mcap or .db3 file in this bag folder")


def read_raw(bag_dir: str | Path, topics: set[str]) -> RawBag:
    """Raw messages of ``topics`` from a rosbag2 bag (MCAP fast path; sqlite3 through rosbags)."""
    path = find_bag_file(Path(bag_dir))
    if path.suffix == ".db3":
        return _read_raw_sqlite(path, topics)
    bag = RawBag(path=path)
    buf = path.read_bytes()
    if buf[:8] != _MAGIC:
        raise BagError(f"{path}: not an MCAP file (bad magic)")
    scanner = _McapScanner(bag, topics)
    try:
        saw_footer = scanner.scan(buf, 8, top_level=True)
    except (ValueError, KeyError, struct.error, UnicodeDecodeError) as exc:
        if not bag.topics:
            raise BagError(f"{path}: not a readable MCAP file ({exc})") from None
        saw_footer = False
        scanner.cut = True
    if scanner.cut:
        bag.truncated, bag.problem = True, "file ends mid-record"
    elif not saw_footer:
        bag.truncated, bag.problem = True, "file has no MCAP footer (writer did not close it)"
    return bag


def _decompress(compression: str, data: bytes, size: int) -> bytes:
    if compression == "":
        return data
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    if compression == "lz4":
        import lz4.frame

        plain: bytes = lz4.frame.decompress(data)
        return plain
    raise BagError(f"unsupported MCAP chunk compression {compression!r}")


class _McapScanner:
    """Walks the records inside MCAP chunks with struct, keeping messages of the wanted topics."""

    def __init__(self, bag: RawBag, topics: set[str]):
        self.bag = bag
        self.wanted = topics
        self.schemas: dict[int, str] = {}
        self.channel_topic: dict[int, RawTopic] = {}
        self.cut = False

    def add_channel(self, channel_id: int, schema_id: int, topic: str) -> None:
        typename = self.schemas.get(schema_id, "")
        self.bag.topics[topic] = typename
        if topic in self.wanted:
            self.channel_topic[channel_id] = self.bag.raw.setdefault(topic, RawTopic(typename))

    def scan(self, buf: bytes, pos: int, top_level: bool = False) -> bool:
        """Walk records from ``pos``; chunks are opened and walked too. True if a footer was seen."""
        unpack_from = struct.unpack_from
        end = len(buf)
        channels = self.channel_topic
        while pos + 9 <= end:
            opcode = buf[pos]
            (length,) = unpack_from("<Q", buf, pos + 1)
            body = pos + 9
            pos = body + length
            if pos > end:
                self.cut = True
                return False
            if opcode == _OP_MESSAGE:
                channel_id, _, log_ns = unpack_from("<HIQ", buf, body)
                raw = channels.get(channel_id)
                if raw is not None:
                    raw.log_ns.append(log_ns)
                    raw.data.append(buf[body + 22 : pos])
            elif opcode == _OP_CHUNK and top_level:
                self.scan(self._chunk_records(buf, body), 0)
            elif opcode == _OP_SCHEMA:
                schema_id, names, _ = _read_strings(buf, body, "<H", 2)
                self.schemas[schema_id] = names[0]
            elif opcode == _OP_CHANNEL:
                ids, names, _ = _read_strings(buf, body, "<HH", 1)
                self.add_channel(ids[0], ids[1], names[0])
            elif opcode == _OP_FOOTER and top_level:
                return True
        if pos < end:
            self.cut = True
        return False

    @staticmethod
    def _chunk_records(buf: bytes, body: int) -> bytes:
        # start time, end time, uncompressed size (u64 each), crc (u32), compression, records
        (size,) = struct.unpack_from("<Q", buf, body + 16)
        (name_len,) = struct.unpack_from("<I", buf, body + 28)
        compression = buf[body + 32 : body + 32 + name_len].decode()
        start = body + 32 + name_len
        (records_len,) = struct.unpack_from("<Q", buf, start)
        return _decompress(compression, buf[start + 8 : start + 8 + records_len], size)


def _read_strings(buf: bytes, pos: int, fixed: str, n_strings: int) -> tuple[Any, list[str], int]:
    """Fixed-size fields then ``n_strings`` length-prefixed strings, as MCAP Schema/Channel records start."""
    values = struct.unpack_from(fixed, buf, pos)
    pos += struct.calcsize(fixed)
    strings = []
    for _ in range(n_strings):
        (size,) = struct.unpack_from("<I", buf, pos)
        strings.append(buf[pos + 4 : pos + 4 + size].decode())
        pos += 4 + size
    return (values[0] if len(values) == 1 else values), strings, pos


def _read_raw_sqlite(path: Path, topics: set[str]) -> RawBag:
    from rosbags.rosbag2 import Reader

    bag = RawBag(path=path)
    try:
        with Reader(path.parent) as reader:
            for conn in reader.connections:
                bag.topics[conn.topic] = conn.msgtype
            wanted = [c for c in reader.connections if c.topic in topics]
            for conn, log_ns, data in reader.messages(connections=wanted):
                raw = bag.raw.setdefault(conn.topic, RawTopic(conn.msgtype))
                raw.log_ns.append(log_ns)
                raw.data.append(bytes(data))
    except Exception as exc:  # rosbags raises several unrelated types for damaged bags
        raise BagError(f"{path}: not a readable rosbag2 sqlite3 bag ({exc})") from None
    return bag


# --- CDR decoding -----------------------------------------------------------------------------
# Offsets are relative to the CDR payload, which starts after the 4-byte encapsulation header;
# alignment is relative to the payload start (ROS 2 XCDR1, little endian).


def _align(offset: int, size: int) -> int:
    return (offset + size - 1) // size * size


# the fields (name, numpy type, offset) of a message and its payload size
Layout = tuple[list[tuple[str, str, int]], int]


def _header_fields(string_len: int) -> Layout:
    """std_msgs/Header: stamp (sec, nanosec), frame_id of ``string_len`` bytes with its NUL."""
    return [("sec", "<i4", 0), ("nanosec", "<u4", 4)], 12 + string_len


def _pose_stamped_layout(string_len: int) -> Layout:
    fields, end = _header_fields(string_len)
    base = _align(end, 8)
    names = ("px", "py", "pz", "qx", "qy", "qz", "qw")
    return fields + [(n, "<f8", base + 8 * i) for i, n in enumerate(names)], base + 56


def _twist_stamped_layout(string_len: int) -> Layout:
    fields, end = _header_fields(string_len)
    base = _align(end, 8)
    names = ("lx", "ly", "lz", "ax", "ay", "az")
    return fields + [(n, "<f8", base + 8 * i) for i, n in enumerate(names)], base + 48


def _mocap_frame_layout(string_len: int) -> Layout:
    fields, end = _header_fields(string_len)
    base = _align(end, 4)
    extra = [
        ("frame_number", "<u4", base),
        ("rigid_body_id", "<i4", base + 4),
        ("tracking_valid", "u1", base + 8),
        ("mean_error_m", "<f4", base + 12),
        ("mocap_timestamp_s", "<f8", _align(base + 16, 8)),
    ]
    return fields + extra, _align(base + 16, 8) + 8


def _command_receipt_layout(_: int) -> Layout:
    fields = [
        ("seq", "<u8", 0),
        ("sent_sec", "<i4", 8),
        ("sent_nanosec", "<u4", 12),
        ("received_sec", "<i4", 16),
        ("received_nanosec", "<u4", 20),
        ("clock_offset_s", "<f8", 24),
        ("latency_s", "<f8", 32),
        ("lx", "<f8", 40),
        ("az", "<f8", 80),
    ]
    return fields, 88


def _clock_offset_layout(_: int) -> Layout:
    fields = [("id", "<u4", 0)]
    for i, name in enumerate(("t1", "t2", "t3", "t4")):
        fields += [(f"{name}_sec", "<i4", 4 + 8 * i), (f"{name}_nanosec", "<u4", 8 + 8 * i)]
    return fields + [("offset_s", "<f8", 40), ("delay_s", "<f8", 48)], 56


# type name -> (layout(string_len) -> (fields, payload size), has a header string)
_LAYOUTS = {
    rosmsg.POSE_STAMPED: (_pose_stamped_layout, True),
    rosmsg.TWIST_STAMPED: (_twist_stamped_layout, True),
    rosmsg.MOCAP_FRAME: (_mocap_frame_layout, True),
    rosmsg.COMMAND_RECEIPT: (_command_receipt_layout, False),
    rosmsg.CLOCK_OFFSET_SAMPLE: (_clock_offset_layout, False),
}


def can_decode(typename: str) -> bool:
    return typename in _LAYOUTS


def decode(typename: str, datas: list[bytes], frame_ids: bool = False) -> dict[str, np.ndarray]:
    """Fields of every message as arrays (see the layouts above); ``frame_id`` too if asked."""
    layout, has_header = _LAYOUTS[typename]
    n = len(datas)
    out: dict[str, np.ndarray] = {}
    fields, _ = layout(1)
    for name, fmt, _ in fields:
        out[name] = np.zeros(n, dtype=fmt)
    if has_header and frame_ids:
        out["frame_id"] = np.empty(n, dtype=object)
    if n == 0:
        return out
    lengths = np.fromiter((len(d) for d in datas), dtype=np.int64, count=n)
    for length in np.unique(lengths):
        idx = np.flatnonzero(lengths == length)
        group = [datas[i] for i in idx]
        buf = b"".join(group)
        rows = np.frombuffer(buf, dtype=np.uint8).reshape(len(group), int(length))
        if not np.all(rows[:, 1] == 1) or not np.all(rows[:, 0] == 0):
            raise BagError(f"{typename}: only little-endian CDR is supported")
        string_lens = rows[:, 12:16].copy().view("<u4").ravel() if has_header else np.zeros(len(group), int)
        for string_len in np.unique(string_lens):
            sub = np.flatnonzero(string_lens == string_len)
            fields, size = layout(int(string_len))
            if size + 4 > length:
                raise BagError(
                    f"{typename}: message of {length} bytes is shorter than its layout ({size + 4})"
                )
            dtype = np.dtype(
                {
                    "names": [f[0] for f in fields],
                    "formats": [f[1] for f in fields],
                    "offsets": [f[2] + 4 for f in fields],
                    "itemsize": int(length),
                }
            )
            view = np.frombuffer(buf, dtype=dtype, count=len(group))[sub]
            for name, _, _ in fields:
                out[name][idx[sub]] = view[name]
            if "frame_id" in out:
                for i in sub:
                    out["frame_id"][idx[i]] = bytes(rows[i, 16 : 16 + string_len - 1]).decode(
                        errors="replace"
                    )
    return out


def stamp_ns(sec: np.ndarray, nanosec: np.ndarray) -> np.ndarray:
    return sec.astype(np.int64) * 1_000_000_000 + nanosec.astype(np.int64)


def topic_arrays(
    bag: RawBag, topic: str, frame_ids: bool = False
) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """(log times ns, decoded fields) of a topic, or None if the bag does not have it."""
    raw = bag.raw.get(topic)
    if raw is None:
        return None
    log_ns = np.array(raw.log_ns, dtype=np.int64)
    if can_decode(raw.typename):
        return log_ns, decode(raw.typename, raw.data, frame_ids)
    return log_ns, _decode_with_rosbags(raw)


def _decode_with_rosbags(raw: RawTopic) -> dict[str, np.ndarray]:
    """Slow path for a PoseStamped-like type the fast decoders do not know (e.g. a foreign bag)."""
    if raw.typename not in rosmsg.typestore().types:
        raise BagError(f"topic of type {raw.typename}: unknown message type")
    cols: dict[str, list] = defaultdict(list)
    for data in raw.data:
        msg = rosmsg.deserialize(data, raw.typename)
        pose = getattr(msg, "pose", None)
        pose = getattr(pose, "pose", pose)  # PoseWithCovarianceStamped / Odometry carry pose.pose
        if pose is None or not hasattr(msg, "header"):
            raise BagError(f"topic of type {raw.typename}: not a stamped pose")
        cols["sec"].append(msg.header.stamp.sec)
        cols["nanosec"].append(msg.header.stamp.nanosec)
        for name, value in (
            ("px", pose.position.x),
            ("py", pose.position.y),
            ("pz", pose.position.z),
            ("qx", pose.orientation.x),
            ("qy", pose.orientation.y),
            ("qz", pose.orientation.z),
            ("qw", pose.orientation.w),
        ):
            cols[name].append(value)
    return {k: np.asarray(v) for k, v in cols.items()}
