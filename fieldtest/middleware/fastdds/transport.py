"""Fast DDS transport, wire-compatible with ROS 2 nodes on rmw_fastrtps_cpp (the TurtleBot 4's DDS).

A real Fast DDS participant (Debian's libfastrtps 2.9, through ``fastddsstamp.cpp``) per transport.
ROS topic ``/tb4/cmd_vel`` is DDS topic ``rt/tb4/cmd_vel`` of type
``geometry_msgs::msg::dds_::TwistStamped_``, as rmw_fastrtps names them; samples are the ROS 2 CDR
bytes the kit serializes (rosbags), which Fast DDS copies as they are (no padding: Fast DDS carries
the serialized length).

Discovery (the dds family's ``discovery`` setting): "spdp", Fast DDS's default simple discovery with multicast
participant announcements, as a stock TurtleBot 4 ships; "all" adds multicast user data; "none"
announces by unicast to the host and robot addresses (always on loopback, which has no multicast);
"server", a client of the discovery server ``fastdds discovery`` on the robot, as the TurtleBot 4's
discovery-server mode (``ROS_DISCOVERY_SERVER``) sets it (``fieldtest.middleware.fastdds.discovery``).
Each participant sends and receives on UDPv4 bound to its role's address only: no shared-memory
transport, which would carry the samples beside the emulated link.

Stamps: a stamped publish reads the clock in C right before ``DataWriter::write``; a timed
subscription's arrival is read first thing in ``DataReaderListener::on_data_available``, which Fast
DDS calls in the thread that received and parsed the datagram, before the sample is taken.
"""

from __future__ import annotations

import ctypes as ct
import logging
import threading
from collections.abc import Callable
from typing import Any

from fieldtest import rosmsg
from fieldtest.errors import FieldtestError
from fieldtest.middleware.dds.ddsstamp import ArrivalQueue, ExportedBytes, QueuedReaders, split_stamp
from fieldtest.middleware.dds.settings import discovery_used
from fieldtest.middleware.fastdds.discovery import server_locator
from fieldtest.middleware.fastdds.stamp import FastDdsLibraryError, library
from fieldtest.qos import QosProfile, get_qos
from fieldtest.transport.base import (
    Prepared,
    Role,
    StampedPublish,
    TimedCallback,
    TimeSource,
    TransportConfig,
    full_topic,
    require_fragment,
    untimed,
)
from fieldtest.transport.ros_idl import dds_type_name

log = logging.getLogger(__name__)

ROS_TOPIC_PREFIX = "rt"  # rmw_fastrtps, like every ROS 2 DDS RMW: topics under "rt"
# The helper's discovery modes (fastddsstamp.cpp, enum Discovery)
DISCOVERY_MODES = {"spdp": 0, "all": 1, "none": 2, "server": 3}
_ERROR_BUFFER = 512
LOOPBACK = "127.0.0.1"


class FastDdsError(FieldtestError, RuntimeError):
    """The Fast DDS transport could not be configured or opened."""


def fastdds_topic_name(namespace: str, topic: str) -> str:
    """ROS topic -> DDS topic as rmw_fastrtps names it: ('tb4', '/cmd_vel') -> 'rt/tb4/cmd_vel'."""
    return ROS_TOPIC_PREFIX + full_topic(namespace, topic)


def qos_args(profile: QosProfile) -> tuple[int, int, int, int]:
    """(reliable, keep_all, depth, transient_local) of a kit profile, as the helper takes them."""
    return (
        int(profile.reliability == "reliable"),
        int(profile.history == "keep_all"),
        profile.depth,
        int(profile.durability == "transient_local"),
    )


class FastDdsTransport(QueuedReaders):
    """One Fast DDS participant carrying the kit's topics (see the module docstring). One thread per
    transport deserializes the queued samples and runs the callbacks, in arrival order."""

    error = FastDdsError

    def __init__(
        self,
        config: TransportConfig,
        role: Role,
        security_properties: dict[str, str] | None = None,
        *,
        node_name: str = "",
    ) -> None:
        require_fragment(config, security_properties, "dds.sec.* participant properties")
        try:
            self._lib = library()
        except FastDdsLibraryError as exc:
            raise FastDdsError(str(exc)) from None
        self.config = config
        self.role = role
        self.qos = qos_args(get_qos(config.qos))
        self.write_failures = 0
        self._lock = threading.Lock()
        self._closed = False
        self._writers: list[tuple[str, int]] = []
        self._readers: list[tuple[str, int, str, TimedCallback, TimeSource | None]] = []
        own = config.host_address if role == "host" else config.robot_address
        peers = ",".join(dict.fromkeys([config.host_address, config.robot_address]))
        mode = discovery_used(config, role)
        if mode not in DISCOVERY_MODES:  # cyclonedds-default: a CycloneDDS notion
            raise FastDdsError(f"dds_discovery {mode}: CycloneDDS's own default, not a Fast DDS setting")
        listen = own
        if mode == "server" and own == config.robot_address and own != LOOPBACK:
            # The server shares the robot's address, so Fast DDS takes the robot's participants for
            # local ones and answers them on 127.0.0.1: they listen there too.
            listen = f"{own},{LOOPBACK}"
        properties = "\n".join(f"{k}={v}" for k, v in (security_properties or {}).items())
        error = ct.create_string_buffer(_ERROR_BUFFER)
        self._participant = self._lib.ft_participant_new(
            config.domain_id,
            (node_name or f"fieldtest_{role}").encode(),
            listen.encode(),
            DISCOVERY_MODES[mode],
            peers.encode(),
            server_locator(config).encode() if mode == "server" else b"",
            properties.encode(),
            error,
            _ERROR_BUFFER,
        )
        if not self._participant:
            raise FastDdsError(
                f"cannot create a Fast DDS participant in domain {config.domain_id} at {own}: "
                f"{error.value.decode(errors='replace')}"
            )
        self._arrivals = ArrivalQueue(base_ns=0, lib=self._lib)  # CLOCK_MONOTONIC; readers convert
        self._thread = threading.Thread(
            target=self._serve_readers, name=f"fastdds-{role}-readers", daemon=True
        )
        self._thread.start()

    # -- Transport protocol --

    def publisher(self, topic: str, typename: str) -> Callable[[Any], None]:
        name, writer = self._writer(topic, typename)

        def publish(msg: Any) -> None:
            data = rosmsg.serialize(msg, typename)
            self._check_open(name)
            self._check_write(self._lib.ft_write(writer, data, len(data)), name)

        return publish

    def stamped_publisher(
        self, topic: str, typename: str, stamp: rosmsg.TimeField, clock: TimeSource
    ) -> StampedPublish:
        """The clock is read in C right before ``DataWriter::write`` (after serialization)."""
        name, writer = self._writer(topic, typename)
        base_ns = clock.monotonic_base_ns
        views = ExportedBytes()  # stamped in place, no copy
        write = self._lib.ft_write_stamped

        def publish(out: Prepared) -> int:
            self._check_open(name)
            result = write(writer, views.view(out.cdr), len(out.cdr), stamp.offset, base_ns)
            ret, sent_ns = split_stamp(result, base_ns, self._lib)
            self._check_write(ret, name)
            stamp.set(out.msg, sent_ns)
            return sent_ns

        return publish

    def subscribe(self, topic: str, typename: str, callback: Callable[[Any], None]) -> None:
        self._subscribe(topic, typename, untimed(callback), None)

    def timed_subscribe(self, topic: str, typename: str, callback: TimedCallback, clock: TimeSource) -> None:
        """The arrival is stamped in Fast DDS's receiving thread, in the reader's listener."""
        self._subscribe(topic, typename, callback, clock)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._arrivals.wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5.0)
        self._lib.ft_participant_free(self._participant)  # waits for running listeners
        if not self._thread.is_alive():
            self._arrivals.free()
        self._writers.clear()
        self._readers.clear()

    # -- extras for tests and benchmarks --

    def matched(self, topic: str, readers_only: bool = False) -> list[int]:
        """Remote endpoints matched by each writer and reader this transport opened on ``topic``."""
        name = fastdds_topic_name(self.config.namespace, topic)
        with self._lock:
            if self._closed:
                raise FastDdsError("Fast DDS transport is closed")
            endpoints = [] if readers_only else [e for n, e in self._writers if n == name]
            endpoints += [e for n, e, *_ in self._readers if n == name]
            return [self._lib.ft_matched(e) for e in endpoints]

    # -- internals --

    def _check_open(self, name: str) -> None:
        if self._closed:
            raise FastDdsError(f"Fast DDS transport is closed; cannot publish on {name}")

    def _check_write(self, ret: int, name: str) -> None:
        if ret < 0:
            # A reliable writer whose history is full of unacknowledged samples times out: the
            # command is lost as on any lossy link, so it is counted rather than raised.
            self.write_failures += 1
            log.warning("Fast DDS write on %s failed (%s); %d failures", name, ret, self.write_failures)

    def _writer(self, topic: str, typename: str) -> tuple[str, int]:
        name = fastdds_topic_name(self.config.namespace, topic)
        with self._lock:
            if self._closed:
                raise FastDdsError("Fast DDS transport is closed")
            writer = self._lib.ft_writer_new(
                self._participant, name.encode(), dds_type_name(typename).encode(), *self.qos
            )
            if not writer:
                raise FastDdsError(f"Fast DDS refused a writer on {name} (its log says why)")
            self._writers.append((name, writer))
        return name, writer

    def _subscribe(
        self, topic: str, typename: str, callback: TimedCallback, clock: TimeSource | None
    ) -> None:
        name = fastdds_topic_name(self.config.namespace, topic)
        with self._lock:
            if self._closed:
                raise FastDdsError("Fast DDS transport is closed")
            tag = len(self._readers)
            # listed before the reader exists: its listener may deliver before ft_reader_new returns
            self._readers.append((name, 0, typename, callback, clock))
        reader = self._lib.ft_reader_new(
            self._participant, name.encode(), dds_type_name(typename).encode(), *self.qos,
            self._arrivals._queue, tag,
        )  # fmt: skip
        if not reader:
            raise FastDdsError(f"Fast DDS refused a reader on {name} (its log says why)")
        with self._lock:
            self._readers[tag] = (name, reader, typename, callback, clock)


def open_fastdds(
    config: TransportConfig,
    role: Role,
    *,
    security_properties: dict[str, str] | None = None,
    node_name: str = "",
) -> FastDdsTransport:
    """Join the trial's DDS domain on Fast DDS as ``role``. A secured ``config`` needs
    ``security_properties``, the ``dds.sec.*`` properties security makes for it."""
    return FastDdsTransport(config, role, security_properties, node_name=node_name)
