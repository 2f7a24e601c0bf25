"""MQTT transport (paho-mqtt 2.x), wire-compatible with the ika-rwth-aachen ``mqtt_client`` bridge.

What the bridge puts on the wire (``MqttClient.ros2.cpp``, ``ros2mqtt()``), and so does this module:

- Data: ROS topic ``/cmd_vel`` is bridged to the configured MQTT topic; the kit configures
  ``cmd_vel`` (namespace prepended: ``/tb4/cmd_vel`` -> ``tb4/cmd_vel``). A non-primitive message
  travels as the bytes of its ``rclcpp::SerializedMessage``: ROS 2 CDR *including* the 4-byte
  encapsulation header, nothing prepended, when ``inject_timestamp`` is off.
- ``inject_timestamp: true`` makes the payload ``[S, R]``: S is a serialized
  ``builtin_interfaces/msg/Time`` (CDR with its own 4-byte header: 12 bytes; the sender's system
  clock when the bridge forwarded the message), R the serialized message. The receiving bridge
  strips S and publishes ``arrival - S`` in seconds (std_msgs/Float64) on ``~/latencies/<topic>``;
  here ``on_latency(ros_topic, seconds)`` gets that figure.
- Type announcement: before every data message the bridge publishes, retained and with the same
  MQTT QoS, a serialized ``mqtt_client_interfaces/msg/RosMsgType`` (md5 "", name = ROS type,
  definition "", stamped = inject_timestamp) on ``mqtt_client/ros_msg_type/<mqtt topic>``. A
  receiving bridge without a fixed ``ros_type`` waits for it before subscribing the data topic and
  takes ``stamped`` from it. ``announce_type=True`` (default) reproduces this.

A receiver here knows its message type (as a bridge with ``ros_type`` set) and subscribes the data
topic directly; its ``inject_timestamp`` must match the sender's.

QoS: a RELIABLE profile maps to MQTT QoS 1, BEST_EFFORT to QoS 0 (history, depth and durability
have no MQTT equivalent and are not applied).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import paho.mqtt.client as paho
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from fieldtest import rosmsg
from fieldtest.errors import FieldtestError
from fieldtest.middleware.mqtt.infra import mqtt_broker_address
from fieldtest.middleware.mqtt.settings import Settings
from fieldtest.qos import mqtt_qos
from fieldtest.transport import pollstamp
from fieldtest.transport.base import (
    CallbackSubscriber,
    Prepared,
    Role,
    StampedPublish,
    TimedCallback,
    TimeSource,
    TransportConfig,
    decoder,
    full_topic,
    require_fragment,
    stamp_and_send,
)

log = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT_S = 10.0
ACK_TIMEOUT_S = 5.0
KEEPALIVE_S = 60  # the bridge's default client.keep_alive_interval
MAX_INFLIGHT = 65535  # the bridge's default client.max_inflight
TIME_TYPE = "builtin_interfaces/msg/Time"
STAMP_LENGTH = 12  # serialized builtin_interfaces/Time: 4-byte CDR header + int32 sec + uint32 nanosec
ROS_MSG_TYPE = "mqtt_client_interfaces/msg/RosMsgType"
ROS_MSG_TYPE_TOPIC_PREFIX = "mqtt_client/ros_msg_type/"
ROS_MSG_TYPE_DEFINITION = "string md5\nstring name\nstring definition\nbool stamped\n"

RECONNECT_DELAYS_S = (1.0, 2.0, 4.0)  # after a lost connection, as reconnect_delay_set(1, 4)
LOOP_IDLE_S = 1.0  # the network thread wakes at least this often (keepalive, reconnect)

_client_ids = itertools.count()


class MqttTransportError(FieldtestError, RuntimeError):
    """The MQTT link cannot be set up as configured."""


def mqtt_topic(namespace: str, topic: str) -> str:
    """MQTT topic of a ROS topic as the kit configures mqtt_client: ('/tb4', '/cmd_vel') -> 'tb4/cmd_vel'."""
    return full_topic(namespace, topic).lstrip("/")


@functools.lru_cache(maxsize=1)
def _ros_msg_type_store() -> Typestore:
    store = get_typestore(Stores.EMPTY)
    store.register(get_types_from_msg(ROS_MSG_TYPE_DEFINITION, ROS_MSG_TYPE))
    return store


def ros_msg_type_payload(typename: str, stamped: bool) -> bytes:
    """The bridge's type announcement: serialized RosMsgType(md5="", name, definition="", stamped)."""
    store = _ros_msg_type_store()
    msg = store.types[ROS_MSG_TYPE](md5="", name=typename, definition="", stamped=stamped)
    return bytes(store.serialize_cdr(msg, ROS_MSG_TYPE))


def parse_ros_msg_type(payload: bytes | bytearray) -> tuple[str, bool]:
    """(type name, stamped) from a type announcement."""
    # a RosMsgType: the typestore makes its class at run time, so no static type names it
    msg: Any = _ros_msg_type_store().deserialize_cdr(bytes(payload), ROS_MSG_TYPE)
    return msg.name, bool(msg.stamped)


def stamped_payload(data: bytes, stamp_ns: int) -> bytes:
    """``[S, R]``: the serialized send time followed by the serialized message."""
    return rosmsg.serialize(rosmsg.time_msg(stamp_ns), TIME_TYPE) + data


def split_stamped_payload(payload: bytes | bytearray) -> tuple[int, bytes | bytearray]:
    """(stamp ns, message bytes) of an ``[S, R]`` payload."""
    if len(payload) < STAMP_LENGTH:
        raise MqttTransportError(f"stamped payload of {len(payload)} bytes is shorter than its timestamp")
    stamp = rosmsg.deserialize(payload[:STAMP_LENGTH], TIME_TYPE)
    return rosmsg.ns_of(stamp), payload[STAMP_LENGTH:]


class NetworkLoop:
    """paho's network loop, with every publish written by the thread that publishes it.

    paho's own thread (``loop_start``) does all the writing: a publish from another thread only
    queues the packet and wakes that thread, which then has to get the GIL. From the send stamp to
    the wire that took 0.3 ms (p50, up to 2.6 ms) on the development VM, and a packet queued inside
    a message callback waited for the next turn of the loop. Here ``publish`` writes the packet at
    once, in the caller's thread; this object's thread reads, answers the broker (acks, pings) and
    reconnects, through paho's external-loop API (``loop_read``/``loop_write``/``loop_misc``).

    Writes are serialized by one lock (paho's write path is not safe from two threads). Reads take
    the same lock only over TLS, where OpenSSL must not read and write one connection at once; over
    plain TCP a publish never waits for a message callback. Message callbacks never run under that
    lock (``deliver``): a callback that waits for a lock the publishing thread holds while it
    publishes (the clock probes' own) would otherwise deadlock both threads, and the robot stopped
    hearing the host mid-trial over TLS.
    """

    def __init__(self, client: paho.Client):
        try:
            pollstamp.library()  # here, not first in the network thread, where it would end the loop
        except pollstamp.PollStampError as exc:
            raise MqttTransportError(str(exc)) from None
        self.client = client
        self._io = threading.RLock()  # a callback may publish from within a locked read
        self._stop = threading.Event()
        self._local = threading.local()  # .writing: this thread writes what it queues itself
        self._wake_r, self._wake_w = socket.socketpair()
        for end in (self._wake_r, self._wake_w):
            end.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="mqtt-network", daemon=True)
        self._deferred: list[Callable[[], None]] = []  # callbacks of a locked read, run after it
        self._woke_ns: int | None = None  # CLOCK_MONOTONIC when the socket last woke the thread
        self._in_locked_read = False
        client.on_socket_register_write = self._on_register_write
        client.on_socket_unregister_write = None

    # ---- writing, from any thread
    def publish(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> None:
        self._queue_and_write(lambda: self.client.publish(topic, payload, qos, retain=retain))

    def _queue_and_write(self, queue: Callable[[], Any]) -> None:
        """Let paho queue a packet (``queue()``), then write it from this thread, not the loop's."""
        self._local.writing = True
        try:
            queue()
        finally:
            self._local.writing = False
        self.flush()

    def flush(self) -> None:
        with self._io:
            if self.client.want_write():
                self.client.loop_write()

    def _on_register_write(self, client: paho.Client, userdata: object, sock: paho.SocketLike) -> None:
        """paho queued a packet: unless the queueing thread writes it itself, wake the loop for it."""
        if threading.current_thread() is not self._thread and not getattr(self._local, "writing", False):
            self.wake()

    def publish_disconnect(self) -> None:
        """Send DISCONNECT and close the connection (paho closes it once the packet is written)."""
        self._queue_and_write(self.client.disconnect)

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"x")

    # ---- the network thread
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self.wake()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        self._wake_r.close()
        self._wake_w.close()

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            paho_sock = self.client.socket()
            if paho_sock is None:
                failures = self._reconnect(failures)
                continue
            sock = cast(socket.socket, paho_sock)  # TCP or TLS: the kit never connects over websockets
            try:
                readable = self._wait(sock)
            except (OSError, ValueError):  # the socket was closed meanwhile (disconnect)
                continue
            try:
                self._turn(sock, readable)
            except Exception:
                # paho's read state is undefined after an exception: drop the connection (the loop
                # reconnects and the transport subscribes again) rather than end the loop.
                log.exception("MQTT network loop: error on the connection; reconnecting")
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            if self.client.is_connected():
                failures = 0

    def deliver(self, callback: Callable[[], None]) -> None:
        """Run a message callback: at once, or, inside a read that holds the I/O lock (TLS), right
        after that read lets the lock go, in arrival order."""
        if self._in_locked_read and threading.current_thread() is self._thread:
            self._deferred.append(callback)
        else:
            callback()

    def _turn(self, sock: socket.socket, readable: bool) -> None:
        """Read what arrived (callbacks run here), write what is queued, keep the connection alive."""
        if readable and isinstance(sock, ssl.SSLSocket):
            with self._io:
                self._in_locked_read = True
                try:
                    self.client.loop_read()
                finally:
                    self._in_locked_read = False
            pending, self._deferred = self._deferred, []
            for callback in pending:
                callback()
        elif readable:
            self.client.loop_read()
        with self._io:
            if self.client.want_write():
                self.client.loop_write()
            self.client.loop_misc()

    def _wait(self, sock: socket.socket) -> bool:
        """Block until the connection has data to read (True) or something else to do (False)."""
        self._woke_ns = None  # a stamp holds for the turn it was taken in only
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True  # decrypted bytes already buffered: poll would not see them
        if sock.fileno() < 0:
            raise ValueError("the connection's socket is closed")
        events = select.POLLIN | (select.POLLOUT if self.client.want_write() else 0)
        (conn, wake), woke_ns = pollstamp.poll_stamped(
            [(sock.fileno(), events), (self._wake_r.fileno(), select.POLLIN)], LOOP_IDLE_S
        )
        if wake:
            with contextlib.suppress(BlockingIOError, OSError):
                self._wake_r.recv(4096)
        if conn & select.POLLNVAL:
            raise ValueError("the connection's socket is closed")
        if conn & pollstamp.READABLE:
            self._woke_ns = woke_ns
        return bool(conn & pollstamp.READABLE)

    def take_arrival(self, now_ns: Callable[[], int]) -> int:
        """Arrival stamp, on ``now_ns``'s clock, of a message read in this turn: when the socket woke
        the thread (stamped in C), for the first message since that wake-up; now for later ones,
        which may have come in while the first was being read."""
        woke_ns, self._woke_ns = self._woke_ns, None
        if woke_ns is None:
            return now_ns()
        return woke_ns + _offset_from_monotonic(now_ns)

    def _reconnect(self, failures: int) -> int:
        """After a lost connection: wait (1, 2, 4, 4 ... s), then try again; the failure count."""
        if self._stop.wait(RECONNECT_DELAYS_S[min(failures, len(RECONNECT_DELAYS_S) - 1)]):
            return failures
        try:
            with self._io:
                self.client.reconnect()
        except OSError as exc:
            log.info("MQTT broker not reachable yet: %s", exc)
        return failures + 1


def _offset_from_monotonic(now_ns: Callable[[], int], reads: int = 3) -> int:
    """``now_ns()`` minus CLOCK_MONOTONIC, read between two monotonic reads, the narrowest of
    ``reads`` tries: a thread switch between two reads (the GIL's, 5 ms) would shift a stamp moved
    from one clock to the other by that switch's length."""
    best_window, offset = None, 0
    for _ in range(reads):
        before = time.monotonic_ns()
        reading = now_ns()
        after = time.monotonic_ns()
        if best_window is None or after - before < best_window:
            best_window, offset = after - before, reading - (before + after) // 2
    return offset


class MqttTransport(CallbackSubscriber):
    """A Transport over one paho client; its network loop is a ``NetworkLoop``."""

    def __init__(
        self,
        client: paho.Client,
        config: TransportConfig,
        loop: NetworkLoop,
        *,
        inject_timestamp: bool = False,
        announce_type: bool = True,
        on_latency: Callable[[str, float], None] | None = None,
    ):
        self.client = client
        self.config = config
        self.loop = loop
        self.qos = mqtt_qos(config.qos)
        self.inject_timestamp = inject_timestamp
        self.announce_type = announce_type
        self.on_latency = on_latency
        self._subscriptions: dict[str, int] = {}  # MQTT topic -> QoS, re-subscribed on reconnect
        self._acks: dict[int, list[Any]] = {}
        self._cond = threading.Condition()
        self._connect_result: Any = None
        self._closed = False
        client.on_connect = self._on_connect
        client.on_subscribe = self._on_subscribe

    # ---- paho callbacks (network thread)
    def _on_connect(
        self,
        client: paho.Client,
        userdata: object,
        flags: paho.ConnectFlags,
        reason_code: paho.ReasonCode,
        properties: paho.Properties | None,
    ) -> None:
        with self._cond:
            self._connect_result = reason_code
            topics = list(self._subscriptions.items())
            self._cond.notify_all()
        if not reason_code.is_failure:
            for topic, qos in topics:  # a clean session forgets subscriptions: renew after a reconnect
                client.subscribe(topic, qos)

    def _on_subscribe(
        self,
        client: paho.Client,
        userdata: object,
        mid: int,
        reason_codes: list[paho.ReasonCode],
        properties: paho.Properties | None,
    ) -> None:
        with self._cond:
            self._acks[mid] = list(reason_codes)
            self._cond.notify_all()

    # ---- connection
    def wait_connected(self, timeout_s: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._connect_result is not None, timeout=timeout_s)
            result = self._connect_result
        if result is None:
            raise MqttTransportError(f"no CONNACK from the MQTT broker within {timeout_s:g} s")
        if result.is_failure:
            raise MqttTransportError(f"MQTT broker refused the connection: {result}")

    def topic(self, ros_topic: str) -> str:
        return mqtt_topic(self.config.namespace, ros_topic)

    # ---- Transport
    def write_backlog(self) -> int:
        """Messages paho holds for this client: packets not yet written and QoS 1 messages not yet
        acknowledged. paho queues publishes without limit (``max_queued_messages`` 0, paho-mqtt
        2.x client.py), so a caller that must not outrun the link waits on this."""
        return len(self.client._out_packet) + len(self.client._out_messages)

    def _senders(self, topic: str, typename: str) -> tuple[Callable[[], None], Callable[[bytes], None]]:
        """(announce the type, send serialized bytes) as the mqtt_client bridge does: the type on a
        retained topic; the bridge's injected stamp, if on, taken last."""
        data_topic = self.topic(topic)
        type_topic = ROS_MSG_TYPE_TOPIC_PREFIX + data_topic
        type_payload = ros_msg_type_payload(typename, self.inject_timestamp)

        def announce() -> None:
            if self.announce_type:
                self.loop.publish(type_topic, type_payload, self.qos, retain=True)

        def send(payload: bytes) -> None:
            if self.inject_timestamp:
                payload = stamped_payload(payload, time.time_ns())
            self.loop.publish(data_topic, payload, self.qos)

        return announce, send

    def publisher(self, topic: str, typename: str) -> Callable[[Any], None]:
        announce, send = self._senders(topic, typename)

        def publish(msg: Any) -> None:
            payload = rosmsg.serialize(msg, typename)
            announce()
            send(payload)

        return publish

    def stamped_publisher(
        self, topic: str, typename: str, stamp: rosmsg.TimeField, clock: TimeSource
    ) -> StampedPublish:
        announce, send = self._senders(topic, typename)

        def publish(out: Prepared) -> int:
            announce()
            return stamp_and_send(out, stamp, clock, send)

        return publish

    def _subscribe(
        self, topic: str, typename: str, deliver: TimedCallback, now_ns: Callable[[], int]
    ) -> None:
        """Subscribe and wait for the broker's SUBACK, so messages published afterwards arrive."""
        data_topic = self.topic(topic)

        decode = decoder(typename, deliver, data_topic)

        def handle(payload: bytes | bytearray, arrival_ns: int) -> None:
            if self.inject_timestamp:
                try:
                    stamp_ns, payload = split_stamped_payload(payload)
                except Exception as exc:  # a malformed message must not stop the network loop
                    log.warning("dropping unstamped %s message on %s: %s", typename, data_topic, exc)
                    return
                if self.on_latency is not None:
                    self.on_latency(topic, (arrival_ns - stamp_ns) / 1e9)
            decode(payload, arrival_ns)

        def on_message(client: paho.Client, userdata: object, message: paho.MQTTMessage) -> None:
            arrival_ns = self.loop.take_arrival(now_ns)  # before the read; deliver may run later
            payload = message.payload
            self.loop.deliver(lambda: handle(payload, arrival_ns))

        self.client.message_callback_add(data_topic, on_message)
        with self._cond:
            self._subscriptions[data_topic] = self.qos
        result, mid = self.client.subscribe(data_topic, self.qos)
        if result != paho.MQTT_ERR_SUCCESS or mid is None:
            raise MqttTransportError(f"cannot subscribe {data_topic!r}: {paho.error_string(result)}")
        with self._cond:
            self._cond.wait_for(lambda: mid in self._acks, timeout=ACK_TIMEOUT_S)
            codes = self._acks.pop(mid, None)
        if codes is None:
            raise MqttTransportError(f"no SUBACK for {data_topic!r} within {ACK_TIMEOUT_S:g} s")
        if any(code.is_failure for code in codes):
            raise MqttTransportError(f"broker refused subscription to {data_topic!r}: {codes}")

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
        self.loop.publish_disconnect()
        self.loop.stop()


def disable_nagle(client: paho.Client, userdata: object, sock: paho.SocketLike) -> None:
    """Paho's ``on_socket_open``: send each small message at once (``mqtt: {nagle: false}``, and
    the lab's mqtt_client stand-in; the kit's broker sets set_tcp_nodelay). Otherwise a small write
    waits while an earlier segment is unacknowledged."""
    if isinstance(sock, socket.socket):  # TLS too (ssl.SSLSocket); not a WebSocket wrapper
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _connect_with_retries(client: paho.Client, address: str, port: int, timeout_s: float) -> None:
    """TCP-connect to the broker, retrying while it is not up yet (bounded by ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.connect(address, port, keepalive=KEEPALIVE_S)
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise MqttTransportError(f"cannot reach MQTT broker at {address}:{port}: {exc}") from exc
            time.sleep(0.2)


def open_mqtt(
    config: TransportConfig,
    role: Role,
    *,
    inject_timestamp: bool = False,
    announce_type: bool = True,
    on_latency: Callable[[str, float], None] | None = None,
    configure_client: Callable[[paho.Client], None] | None = None,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
) -> MqttTransport:
    """Connect to the trial's broker as ``role``.

    ``configure_client(client)`` runs before connecting (security: ``client.tls_set(...)`` with the
    role's client certificate, made by security from the keystore); a secured ``config`` needs it.
    """
    require_fragment(config, configure_client, "MQTT client TLS configuration")
    address = mqtt_broker_address(config)
    client_id = f"fieldtest-{role}-{os.getpid()}-{next(_client_ids)}"
    client = paho.Client(
        paho.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=True, protocol=paho.MQTTv311
    )
    client.max_inflight_messages_set(MAX_INFLIGHT)
    loop = NetworkLoop(client)
    transport = MqttTransport(
        client,
        config,
        loop,
        inject_timestamp=inject_timestamp,
        announce_type=announce_type,
        on_latency=on_latency,
    )
    if not config.settings(Settings).nagle:
        client.on_socket_open = disable_nagle
    if configure_client is not None:
        configure_client(client)
    _connect_with_retries(client, address, config.settings(Settings).port, connect_timeout_s)
    loop.start()
    try:
        transport.wait_connected(connect_timeout_s)
    except MqttTransportError:
        transport.close()
        raise
    return transport
