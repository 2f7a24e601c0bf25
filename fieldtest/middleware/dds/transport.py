"""CycloneDDS transport, wire-compatible with ROS 2 nodes running rmw_cyclonedds.

ROS topic ``/tb4/cmd_vel`` is DDS topic ``rt/tb4/cmd_vel`` with type
``geometry_msgs::msg::dds_::TwistStamped_`` (see ``ros_idl``). Samples travel as the ROS 2 CDR bytes
rosbags produces: the IdlStruct registers the topic type, and the bytes are handed to the writer
unchanged (``tests/test_transport_dds.py`` checks that they equal cyclonedds' own serialization),
so every middleware in the kit pays the same serialization cost.

Configuration: each process creates its DDS domain from ``cyclonedds_xml(config, role)`` (the
trial's ``dds.discovery``: multicast SPDP as the lab by default, unicast on loopback), followed by
``$CYCLONEDDS_URI`` if set, whose settings win. A domain's configuration is fixed by the first
transport that opens it in a process.

Each transport is one ROS node to the ROS graph (``fieldtest_<role>``): it publishes the
ParticipantEntitiesInfo rmw_cyclonedds would on ``ros_discovery_info`` (``rosgraph``), so
``ros2 node list`` shows it and zenoh-bridge-ros2dds routes its topics.
"""

from __future__ import annotations

import ctypes as ct
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

# The binding's own C layer: write already-serialized CDR (what DataWriter.write does after
# serializing).
from cyclonedds._clayer import ddspy_write
from cyclonedds.core import DDS, DDSException, Entity
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.internal import dds_c_t
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from fieldtest import rosmsg
from fieldtest.errors import FieldtestError
from fieldtest.middleware.dds.cyclonedds_config import CYCLONEDDS_NS, cyclonedds_config_xml  # noqa: F401  (CYCLONEDDS_NS re-exported)
from fieldtest.middleware.dds.ddsstamp import (
    ArrivalQueue,
    ExportedBytes,
    QueuedReaders,
    StampLibraryError,
    library,
    padded_size,
    split_stamp,
    write_stamped,
)
from fieldtest.middleware.dds.settings import DDS_ALLOW_MULTICAST, discovery_used
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
from fieldtest.transport.ros_idl import idl_class
from fieldtest.transport.rosgraph import (
    ROS_DISCOVERY_TOPIC,
    RosNode,
    discovery_user_data,
    participant_entities_info,
    participant_info_class,
)

log = logging.getLogger(__name__)

ROS_TOPIC_PREFIX = "rt"  # rmw_cyclonedds: ROS topics live under "rt", services under "rq"/"rr"
RELIABLE_MAX_BLOCKING_S = 0.1  # Cyclone's default; only KEEP_ALL writers ever block


class DdsError(FieldtestError, RuntimeError):
    """The DDS transport could not be configured or opened."""


def dds_topic_name(namespace: str, topic: str) -> str:
    """ROS topic -> DDS topic as rmw_cyclonedds names it: ('tb4', '/cmd_vel') -> 'rt/tb4/cmd_vel'."""
    return ROS_TOPIC_PREFIX + full_topic(namespace, topic)


def dds_qos(profile: QosProfile) -> Qos:
    """Cyclone QoS for a kit profile; XCDR1 data representation as rmw_cyclonedds uses."""
    history = (
        Policy.History.KeepLast(profile.depth) if profile.history == "keep_last" else Policy.History.KeepAll
    )
    reliability = (
        Policy.Reliability.Reliable(max_blocking_time=duration(seconds=RELIABLE_MAX_BLOCKING_S))
        if profile.reliability == "reliable"
        else Policy.Reliability.BestEffort
    )
    durability = (
        Policy.Durability.TransientLocal
        if profile.durability == "transient_local"
        else Policy.Durability.Volatile
    )
    return Qos(history, reliability, durability, Policy.DataRepresentation(use_cdrv0_representation=True))


def _own_and_peer_addresses(config: TransportConfig, role: Role) -> tuple[str, list[str]]:
    own = config.host_address if role == "host" else config.robot_address
    # Both ends are peers: other kit processes on the same machine (e.g. a simulated mocap next
    # to the host) must find each other too.
    peers = list(dict.fromkeys([config.host_address, config.robot_address]))
    return own, peers


def cyclonedds_xml(config: TransportConfig, role: Role, *, security_xml: str = "") -> str:
    """The CycloneDDS configuration of one kit process.

    Binds to the role's own address and discovers as ``discovery_used(config, role)`` (fieldtest.middleware.dds.settings) says:
    multicast SPDP announcements ("spdp", as the lab), multicast for everything ("all"), or unicast
    to the host and robot addresses ("none", and always on loopback, which has no multicast flag).
    ``security_xml`` is a ``<Security>...</Security>`` element placed inside ``<Domain>``.
    """
    own, peers = _own_and_peer_addresses(config, role)
    discovery = discovery_used(config, role)
    if discovery not in DDS_ALLOW_MULTICAST:
        raise DdsError(f"dds_discovery {discovery}: CycloneDDS has no discovery server (a Fast DDS setting)")
    return cyclonedds_config_xml(
        interface_addresses=[own],
        allow_multicast=DDS_ALLOW_MULTICAST[discovery],
        peers=peers if discovery == "none" else (),
        security_xml=security_xml,
    )


# ---- domains: one per domain id and process, shared by every transport in the process ----

_domain_lock = threading.Lock()
_domains: dict[int, tuple[Domain | None, int]] = {}  # id -> (Domain we created or None, users)


def _acquire_domain(domain_id: int, xml: str) -> None:
    with _domain_lock:
        domain, users = _domains.get(domain_id, (None, 0))
        if users == 0:
            env_uri = os.environ.get("CYCLONEDDS_URI", "").strip()
            config_str = f"{xml},{env_uri}" if env_uri else xml
            try:
                domain = Domain(domain_id, config_str)
            except DDSException as exc:
                # Already created in this process (e.g. by a participant made elsewhere): join it.
                log.warning("DDS domain %d exists already; its configuration stays (%s)", domain_id, exc)
                domain = None
        _domains[domain_id] = (domain, users + 1)


def _release_domain(domain_id: int) -> None:
    with _domain_lock:
        domain, users = _domains.get(domain_id, (None, 0))
        if users <= 1:
            _domains.pop(domain_id, None)
            if domain is not None:
                _delete(domain)
        else:
            _domains[domain_id] = (domain, users - 1)


def _delete(entity: Any) -> None:
    """Delete a cyclonedds entity and its children now (the binding's registry keeps it alive)."""
    entity.__del__()


# ---- the transport ----

# Matched-endpoint counts, read with plain C calls: status listeners would call into Python from
# Cyclone's threads, and a listener waiting for the GIL while ddspy_write (which keeps the GIL)
# delivers locally to the same reader can deadlock.
_lib = DDS._dll_handle
_lib.dds_get_publication_matched_status.argtypes = [
    dds_c_t.entity,
    ct.POINTER(dds_c_t.publication_matched_status),
]
_lib.dds_get_subscription_matched_status.argtypes = [
    dds_c_t.entity,
    ct.POINTER(dds_c_t.subscription_matched_status),
]


def matched_count(entity: Any, is_writer: bool) -> int:
    status: dds_c_t.publication_matched_status | dds_c_t.subscription_matched_status
    if is_writer:
        status = dds_c_t.publication_matched_status()
        ret = _lib.dds_get_publication_matched_status(entity._ref, ct.byref(status))
    else:
        status = dds_c_t.subscription_matched_status()
        ret = _lib.dds_get_subscription_matched_status(entity._ref, ct.byref(status))
    if ret < 0:
        raise DdsError(f"cannot read the matched status of {entity!r} ({ret})")
    return int(status.current_count)


class DdsTransport(QueuedReaders):
    """One DDS participant carrying the kit's topics (see the module docstring).

    Samples are taken in Cyclone's delivering thread by a C listener (``ddsstamp.c``), which
    stamps their arrival; one thread per transport deserializes them and runs the callbacks, one
    at a time, in arrival order.
    """

    error = DdsError

    def __init__(
        self, config: TransportConfig, role: Role, security_xml: str | None = None, *, node_name: str = ""
    ) -> None:
        require_fragment(config, security_xml, "<Security> element")
        self.config = config
        self.role = role
        self.qos = dds_qos(get_qos(config.qos))
        self.xml = cyclonedds_xml(config, role, security_xml=security_xml or "")
        self.write_failures = 0
        self._lock = threading.Lock()
        self._closed = False
        self._topics: dict[str, Topic] = {}
        self._writers: list[tuple[str, DataWriter]] = []
        self._readers: list[tuple[str, DataReader, str, TimedCallback, TimeSource | None]] = []
        self._owned: list[Entity] = []  # every entity made under the participant, for close()
        _acquire_domain(config.domain_id, self.xml)
        try:
            self.participant = DomainParticipant(config.domain_id)
        except DDSException as exc:
            _release_domain(config.domain_id)
            raise DdsError(f"cannot create a DDS participant in domain {config.domain_id}: {exc}") from None
        try:
            self._arrivals = ArrivalQueue(base_ns=0)  # CLOCK_MONOTONIC; each subscription converts
        except StampLibraryError as exc:
            _delete(self.participant)
            _release_domain(config.domain_id)
            raise DdsError(str(exc)) from None
        self.node = RosNode(config.namespace or "/", node_name or f"fieldtest_{role}")
        try:
            self._discovery_writer = self._open_discovery_writer()
        except DDSException as exc:
            _delete(self.participant)
            _release_domain(config.domain_id)
            raise DdsError(f"cannot announce the node on {ROS_DISCOVERY_TOPIC}: {exc}") from None
        self._thread = threading.Thread(target=self._serve_readers, name=f"dds-{role}-readers", daemon=True)
        self._thread.start()

    # -- Transport protocol --

    def publisher(self, topic: str, typename: str) -> Callable[[Any], None]:
        name, ref = self._writer(topic, typename)

        def publish(msg: Any) -> None:
            if self._closed:
                raise DdsError(f"DDS transport is closed; cannot publish on {name}")
            self._check_write(ddspy_write(ref, _padded(rosmsg.serialize(msg, typename))), name)

        return publish

    def stamped_publisher(
        self, topic: str, typename: str, stamp: rosmsg.TimeField, clock: TimeSource
    ) -> StampedPublish:
        """The clock is read in C right before ``dds_write`` (after serialization; the GIL is free)."""
        name, ref = self._writer(topic, typename)
        views, base_ns, offset = ExportedBytes(), clock.monotonic_base_ns, stamp.offset
        lib = library()

        def publish(out: Prepared) -> int:
            if self._closed:
                raise DdsError(f"DDS transport is closed; cannot publish on {name}")
            data = out.cdr
            if len(data) & 3:  # not padded to Cyclone's 4 bytes: written from a padded copy
                ret, sent_ns = write_stamped(ref, data, offset, base_ns)
            else:  # write_stamped's steps inline: each call saved is 5-10 us of cold Python at 10 Hz
                ret, sent_ns = split_stamp(
                    lib.ft_write_stamped(ref, views.view(data), len(data), offset, base_ns), base_ns, lib
                )
            self._check_write(ret, name)
            stamp.set(out.msg, sent_ns)
            return sent_ns

        return publish

    def subscribe(self, topic: str, typename: str, callback: Callable[[Any], None]) -> None:
        self._subscribe(topic, typename, untimed(callback), None)

    def timed_subscribe(self, topic: str, typename: str, callback: TimedCallback, clock: TimeSource) -> None:
        """The arrival is stamped in Cyclone's thread that makes the sample available to the reader."""
        self._subscribe(topic, typename, callback, clock)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._arrivals.wake()
        joined = threading.current_thread() is self._thread
        if not joined:
            self._thread.join(timeout=5.0)
            joined = not self._thread.is_alive()
        _delete(self.participant)  # deletes everything it owns; forget their Python wrappers too
        for entity in self._owned:
            _forget(entity)
        if joined:  # the readers are gone (Cyclone waited for their listeners); nobody waits on it
            self._arrivals.free()
        self._owned.clear()
        self._writers.clear()
        self._readers.clear()
        self._topics.clear()
        _release_domain(self.config.domain_id)

    # -- extras for tests and benchmarks --

    def matched(self, topic: str, readers_only: bool = False) -> list[int]:
        """Remote endpoints matched by each writer and reader this transport opened on ``topic``."""
        name = dds_topic_name(self.config.namespace, topic)
        with self._lock:
            self._check_open()
            counts = [] if readers_only else [matched_count(w, True) for n, w in self._writers if n == name]
            counts += [matched_count(r, False) for n, r, *_ in self._readers if n == name]
        return counts

    # -- internals --

    def _check_open(self) -> None:
        if self._closed:
            raise DdsError("DDS transport is closed")

    def _open_discovery_writer(self) -> DataWriter:
        """The ros_discovery_info writer with rmw_cyclonedds' QoS (reliable, transient local, last 1)."""
        policies = [
            Policy.Reliability.Reliable(max_blocking_time=duration(seconds=RELIABLE_MAX_BLOCKING_S)),
            Policy.Durability.TransientLocal,
            Policy.History.KeepLast(1),
        ]
        if user_data := discovery_user_data():
            policies.append(Policy.Userdata(data=user_data))
        topic = Topic(self.participant, ROS_DISCOVERY_TOPIC, participant_info_class())
        writer = DataWriter(self.participant, topic, qos=Qos(*policies))
        self._owned += [topic, writer]
        return writer

    def _announce(self) -> None:
        """Publish this participant's node with its current readers and writers (lock held)."""
        self.node.writer_guids = [w.guid.bytes for _, w in self._writers]
        self.node.reader_guids = [r.guid.bytes for _, r, *_ in self._readers]
        self._discovery_writer.write(participant_entities_info(self.participant.guid.bytes, [self.node]))

    def _topic(self, name: str, typename: str) -> Topic:
        if name not in self._topics:
            self._topics[name] = Topic(self.participant, name, idl_class(typename))
            self._owned.append(self._topics[name])
        return self._topics[name]

    def _writer(self, topic: str, typename: str) -> tuple[str, int]:
        name = dds_topic_name(self.config.namespace, topic)
        with self._lock:
            self._check_open()
            writer = DataWriter(self.participant, self._topic(name, typename), qos=self.qos)
            self._writers.append((name, writer))
            self._owned.append(writer)
            self._announce()
        return name, writer._ref

    def _check_write(self, ret: int, name: str) -> None:
        if ret < 0:
            # A KEEP_ALL reliable writer whose readers stopped acknowledging times out: the
            # command is lost like on any lossy link, so count it rather than stop the caller.
            self.write_failures += 1
            log.warning("DDS write on %s failed (%s); %d failures", name, ret, self.write_failures)

    def _subscribe(
        self, topic: str, typename: str, callback: TimedCallback, clock: TimeSource | None
    ) -> None:
        name = dds_topic_name(self.config.namespace, topic)
        with self._lock:
            self._check_open()
            reader = DataReader(self.participant, self._topic(name, typename), qos=self.qos)
            self._owned.append(reader)
            self._readers.append((name, reader, typename, callback, clock))
            ret = self._arrivals.attach(reader._ref, len(self._readers) - 1)
            self._announce()
        if ret < 0:
            raise DdsError(f"cannot listen on {name} ({ret})")


def _padded(data: bytes) -> bytes:
    return data.ljust(padded_size(len(data)), b"\0")


def _forget(entity: Any) -> None:
    """Drop the binding's registry entry without deleting (the participant deletes it)."""
    Entity._entities.pop(entity._ref, None)


def open_dds(
    config: TransportConfig, role: Role, *, security_xml: str | None = None, node_name: str = ""
) -> DdsTransport:
    """Join the trial's DDS domain as ``role`` (see ``cyclonedds_xml`` for the configuration).
    A secured ``config`` needs ``security_xml``, the ``<Security>`` element security makes for it.
    ``node_name``: the ROS node the participant announces (default ``fieldtest_<role>``)."""
    return DdsTransport(config, role, security_xml, node_name=node_name)
