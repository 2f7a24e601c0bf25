"""rosbag2 bags in MCAP storage: written so a kill mid-write keeps everything up to the last flush.

The writer uses the ``mcap`` library with small chunks flushed to disk as they fill and at least
every ``flush_interval_s``; ``close()`` adds the MCAP summary and rosbag2's ``metadata.yaml`` so
``ros2 bag info``, Foxglove, rosbags and evo open the bag. The reader streams records in file
order and stops cleanly at a cut, so an unfinished bag is read up to the cut.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fieldtest import rosmsg
from fieldtest.errors import FieldtestError

if TYPE_CHECKING:
    from mcap.records import Channel, Message, Schema

# mcap is imported where a bag is written or read with it: the analysis reads bags with its own
# reader (fieldtest.analysis.loading.fastbag) and needs only BagError from here.

ROSBAG2_VERSION = 9
_CHUNK_BYTES = 16 * 1024


class BagError(FieldtestError, ValueError):
    """A bag that cannot be read; the message names the bag and the problem."""


class BagWriter:
    """Write ROS 2 messages to ``bag_dir`` (a rosbag2 folder); thread-safe."""

    def __init__(self, bag_dir: str | Path, flush_interval_s: float = 0.5, background: bool = False):
        self.bag_dir = Path(bag_dir)
        self.bag_dir.mkdir(parents=True, exist_ok=True)
        self.mcap_path = self.bag_dir / f"{self.bag_dir.name}_0.mcap"
        from mcap.writer import CompressionType, Writer

        self._file = self.mcap_path.open("wb")
        self._writer = Writer(self._file, chunk_size=_CHUNK_BYTES, compression=CompressionType.NONE)
        self._writer.start(profile="ros2", library="fieldtest")
        self._channels: dict[str, tuple[int, str]] = {}
        self._schemas: dict[str, int] = {}
        self._counts: dict[str, int] = defaultdict(int)
        self._first_ns: int | None = None
        self._last_ns = 0
        self._lock = threading.Lock()
        self._flush_interval_s = flush_interval_s
        self._last_flush = time.monotonic()
        self._closed = False
        self._close_lock = threading.Lock()
        # background: a writer thread does the file work, so a slow disk never delays the caller
        # (the twin's physics loop, a middleware callback stamping a receive time).
        self._queue: queue.Queue | None = queue.Queue() if background else None
        self._thread_error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if self._queue is not None:
            self._thread = threading.Thread(target=self._drain, name=f"bag-{self.bag_dir.name}", daemon=True)
            self._thread.start()

    def _channel(self, topic: str, typename: str) -> int:
        known = self._channels.get(topic)
        if known is not None:
            if known[1] != typename:
                raise BagError(f"{self.mcap_path}: topic {topic} is {known[1]}, not {typename}")
            return known[0]
        if typename not in self._schemas:
            msgdef, _ = rosmsg.typestore().generate_msgdef(typename, ros_version=2)
            self._schemas[typename] = self._writer.register_schema(typename, "ros2msg", msgdef.encode())
        channel_id = self._writer.register_channel(
            topic, "cdr", self._schemas[typename], metadata={"offered_qos_profiles": ""}
        )
        self._channels[topic] = (channel_id, typename)
        return channel_id

    def write(self, topic: str, typename: str, t_ns: int, msg: Any) -> None:
        self.write_raw(topic, typename, t_ns, rosmsg.serialize(msg, typename))

    def write_raw(self, topic: str, typename: str, t_ns: int, data: bytes) -> None:
        if self._closed:
            raise BagError(f"{self.mcap_path}: write after close")
        if self._thread_error is not None:
            raise BagError(f"{self.mcap_path}: writer thread failed: {self._thread_error}")
        if self._queue is not None:
            self._queue.put((topic, typename, t_ns, data))
        else:
            self._add(topic, typename, t_ns, data)

    def _drain(self) -> None:
        assert self._queue is not None
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._thread_error is None:
                    self._add(*item)
            except BaseException as exc:  # reported to the next write() or close()
                self._thread_error = exc
            finally:
                self._queue.task_done()

    def _add(self, topic: str, typename: str, t_ns: int, data: bytes) -> None:
        with self._lock:
            if self._file.closed:
                raise BagError(f"{self.mcap_path}: write after close")
            channel_id = self._channel(topic, typename)
            self._writer.add_message(
                channel_id, log_time=t_ns, data=data, publish_time=t_ns, sequence=self._counts[topic]
            )
            self._counts[topic] += 1
            self._first_ns = t_ns if self._first_ns is None else min(self._first_ns, t_ns)
            self._last_ns = max(self._last_ns, t_ns)
            if time.monotonic() - self._last_flush > self._flush_interval_s:
                self._flush_locked()

    def flush(self) -> None:
        """Everything written so far is in the file when this returns."""
        if self._queue is not None:
            self._queue.join()
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._writer.flush()  # closes the pending chunk and pushes it to the file
        self._last_flush = time.monotonic()

    def close(self) -> None:
        with self._close_lock:  # not self._lock: the writer thread needs that one to drain
            if self._closed:
                return
            self._closed = True
        if self._queue is not None and self._thread is not None:
            self._queue.put(None)
            self._thread.join()
        with self._lock:
            self._writer.finish()
            self._file.close()
            write_metadata(
                self.bag_dir, self.mcap_path.name, self._topic_summary(), self._first_ns, self._last_ns
            )
        if self._thread_error is not None:
            raise BagError(f"{self.mcap_path}: writer thread failed: {self._thread_error}")

    def _topic_summary(self) -> list[tuple[str, str, int]]:
        return [(topic, typename, self._counts[topic]) for topic, (_, typename) in self._channels.items()]

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_metadata(
    bag_dir: Path, file_name: str, topics: list[tuple[str, str, int]], first_ns: int | None, last_ns: int
) -> None:
    """rosbag2's metadata.yaml (format version 9) for a single-file MCAP bag."""
    start = first_ns or 0
    duration = max(0, last_ns - start) if first_ns is not None else 0
    count = sum(n for _, _, n in topics)
    store = rosmsg.typestore()
    info = {
        "version": ROSBAG2_VERSION,
        "storage_identifier": "mcap",
        "relative_file_paths": [file_name],
        "duration": {"nanoseconds": duration},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": count,
        "topics_with_message_count": [
            {
                "topic_metadata": {
                    "name": topic,
                    "type": typename,
                    "serialization_format": "cdr",
                    "offered_qos_profiles": [],
                    "type_description_hash": store.hash_rihs01(typename),
                },
                "message_count": n,
            }
            for topic, typename, n in topics
        ],
        "compression_format": "",
        "compression_mode": "",
        "files": [
            {
                "path": file_name,
                "starting_time": {"nanoseconds_since_epoch": start},
                "duration": {"nanoseconds": duration},
                "message_count": count,
            }
        ],
        "custom_data": None,
        "ros_distro": "fieldtest",
    }
    tmp = bag_dir / "metadata.yaml.tmp"
    tmp.write_text(yaml.safe_dump({"rosbag2_bagfile_information": info}, sort_keys=False))
    tmp.replace(bag_dir / "metadata.yaml")


@dataclass
class BagData:
    """Messages of one bag by topic, in file order, as (log time ns, message object)."""

    path: Path
    topics: dict[str, str] = field(default_factory=dict)  # topic -> type name
    by_topic: dict[str, list[tuple[int, Any]]] = field(default_factory=lambda: defaultdict(list))
    truncated: bool = False  # the file ends mid-record or without its summary (writer was killed)
    problem: str = ""

    def messages(self, topic: str) -> list[tuple[int, Any]]:
        return self.by_topic.get(topic, [])

    def count(self, topic: str) -> int:
        return len(self.by_topic.get(topic, []))


def _mcap_file(bag_dir: Path) -> Path:
    if not bag_dir.exists():
        raise BagError(f"{bag_dir}: no such bag")
    if bag_dir.is_file() and bag_dir.suffix == ".mcap":
        return bag_dir
    files = sorted(bag_dir.glob("*.mcap"))
    if not files:
        raise BagError(f"{bag_dir}: no .mcap file in this bag folder")
    return files[0]


def _register_foreign_schema(schema: Schema) -> None:
    """Make a bag's embedded message definition known, for bags recorded by other tools."""
    store = rosmsg.typestore()
    if schema.name in store.types or schema.encoding != "ros2msg":
        return
    from rosbags.typesys import get_types_from_msg

    text = schema.data.decode()
    parts = text.split("=" * 80) if "=" * 80 in text else [text]
    types = dict(get_types_from_msg(parts[0], schema.name))
    for part in parts[1:]:
        lines = part.strip().splitlines()
        if lines and lines[0].startswith("MSG: "):
            name = lines[0][5:].strip()
            if "/msg/" not in name:
                name = name.replace("/", "/msg/", 1)
            types.update(get_types_from_msg("\n".join(lines[1:]), name))
    store.register({k: v for k, v in types.items() if k not in store.types})


def read_bag(bag_dir: str | Path, topics: set[str] | None = None) -> BagData:
    """Read every message (or those of ``topics``) of a rosbag2 MCAP bag, up to a cut if it has one."""
    from mcap.exceptions import McapError
    from mcap.records import Channel, Message, Schema
    from mcap.stream_reader import StreamReader

    path = _mcap_file(Path(bag_dir))
    data = BagData(path=path)
    schemas: dict[int, Schema] = {}
    channels: dict[int, Channel] = {}
    saw_footer = False
    try:
        with path.open("rb") as stream:
            for record in StreamReader(stream, skip_magic=False, emit_chunks=False).records:
                if isinstance(record, Schema):
                    schemas[record.id] = record
                    _register_foreign_schema(record)
                elif isinstance(record, Channel):
                    channels[record.id] = record
                    data.topics[record.topic] = schemas[record.schema_id].name
                elif isinstance(record, Message):
                    _add_message(data, channels[record.channel_id], schemas, record, topics)
                elif type(record).__name__ == "Footer":
                    saw_footer = True
    except (McapError, EOFError, ValueError, KeyError) as exc:
        if not data.by_topic and not data.topics:
            raise BagError(f"{path}: not a readable MCAP file ({exc})") from None
        data.truncated, data.problem = True, f"file ends mid-record ({type(exc).__name__})"
    if not saw_footer and not data.truncated:
        data.truncated, data.problem = True, "file has no MCAP footer (writer did not close it)"
    return data


def _add_message(
    data: BagData, channel: Channel, schemas: dict[int, Schema], record: Message, topics: set[str] | None
) -> None:
    if topics is not None and channel.topic not in topics:
        return
    typename = schemas[channel.schema_id].name
    data.by_topic[channel.topic].append((record.log_time, rosmsg.deserialize(record.data, typename)))


def repair_bag(bag_dir: str | Path) -> BagData:
    """Rewrite a cut-off bag as a complete one (like ``ros2 bag reindex``); returns what was kept."""
    bag_dir = Path(bag_dir)
    data = read_bag(bag_dir)
    if not data.truncated:
        return data
    damaged = data.path.with_suffix(".mcap.damaged")
    data.path.rename(damaged)
    with BagWriter(bag_dir) as writer:
        rows = [(t, topic, msg) for topic, msgs in data.by_topic.items() for t, msg in msgs]
        for t, topic, msg in sorted(rows, key=lambda r: r[0]):
            writer.write(topic, data.topics[topic], t, msg)
    damaged.unlink()
    return data
