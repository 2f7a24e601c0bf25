"""The one interface every middleware implements: publish and subscribe ROS 2 messages by topic.

Messages are rosbags message objects (see ``fieldtest.rosmsg``); topics are ROS names such as
``/cmd_vel``. Each middleware maps them to its own wire form (DDS ``rt/cmd_vel``, Zenoh key
``cmd_vel``, MQTT topic ``cmd_vel``) and carries ROS 2 CDR bytes, as the ROS 2 bridges do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fieldtest import rosmsg
from fieldtest.errors import FieldtestError
from fieldtest.linkconfig import Role, TransportConfig  # noqa: F401  (re-exported)
from fieldtest.rosmsg import TimeField

log = logging.getLogger(__name__)


class SecurityFragmentMissing(FieldtestError, ValueError):
    """A secured config opened without the fragment security makes for it: open it through
    ``fieldtest.middleware.registry``, which asks ``fieldtest.security`` (transport never does)."""


def require_fragment(config: TransportConfig, fragment: object, what: str) -> None:
    if config.security != "none" and fragment is None:
        raise SecurityFragmentMissing(
            f"security {config.security!r} on {config.middleware}: no {what} given "
            "(open it through fieldtest.middleware.registry, which applies the setting)"
        )


class TimeSource(Protocol):
    """The process clock stamps are taken on (``fieldtest.endpoints.clock.Clock``)."""

    def now_ns(self) -> int: ...

    @property
    def monotonic_base_ns(self) -> int:
        """Add to CLOCK_MONOTONIC nanoseconds to get this clock's reading."""


@dataclass
class Prepared:
    """A message serialized ahead of its send time: a stamped publish then only stamps and writes."""

    msg: Any
    cdr: bytearray


def prepare(msg: Any, typename: str) -> Prepared:
    return Prepared(msg, bytearray(rosmsg.serialize(msg, typename)))


StampedPublish = Callable[[Prepared], int]
TimedCallback = Callable[[Any, int], None]


@dataclass(frozen=True)
class Undecoded:
    """A ``timed_subscribe`` callback that takes each sample's CDR bytes as they came,
    ``callback(data: bytes, arrival_ns)``, not the decoded message: for a receiver that reads a few
    fields at known offsets and must not pay for decoding the rest (perf's relay: rosbags decoding
    an Array1k costs 0.1-0.2 ms when it runs cold, once every 100 ms)."""

    callback: Callable[[bytes, int], None]

    def __call__(self, data: bytes, arrival_ns: int) -> None:
        self.callback(data, arrival_ns)


class Transport(Protocol):
    def publisher(self, topic: str, typename: str) -> Callable[[Any], None]:
        """A function that publishes one message object on ``topic``."""

    def subscribe(self, topic: str, typename: str, callback: Callable[[Any], None]) -> None:
        """Call ``callback(msg)`` for each message arriving on ``topic`` (from a library thread)."""

    def close(self) -> None:
        """Leave the link; safe to call twice."""


def full_topic(namespace: str, topic: str) -> str:
    """ROS topic name with the robot namespace prepended: ('/tb4', '/cmd_vel') -> '/tb4/cmd_vel'."""
    ns = namespace.strip("/")
    name = topic.strip("/")
    return f"/{ns}/{name}" if ns else f"/{name}"


# A transport may also offer ``stamped_publisher`` and ``timed_subscribe`` with the signatures of the
# two functions below, taking its stamps closer to the wire than these portable versions can.


def stamped_publisher(
    transport: Transport, topic: str, typename: str, stamp: TimeField, clock: TimeSource
) -> StampedPublish:
    """``publish(prepare(msg, typename)) -> send time``: the send time (``clock``, ns) goes into the
    message at ``stamp`` and onto the wire. Where the transport can, it is read right before the
    middleware's send call, so neither serialization (done by ``prepare``, ahead of time) nor this
    process's scheduling counts as link latency."""
    native = getattr(transport, "stamped_publisher", None)
    if native is not None:
        return native(topic, typename, stamp, clock)
    publish = transport.publisher(topic, typename)

    def publish_stamped(out: Prepared) -> int:
        sent_ns = clock.now_ns()
        stamp.set(out.msg, sent_ns)
        publish(out.msg)
        return sent_ns

    return publish_stamped


def timed_subscribe(
    transport: Transport, topic: str, typename: str, callback: TimedCallback, clock: TimeSource
) -> None:
    """Call ``callback(msg, arrival_ns)``; the arrival time (``clock``, ns) is read as early as the
    transport allows: in the middleware's own thread before deserialization where it can."""
    native = getattr(transport, "timed_subscribe", None)
    if native is not None:
        native(topic, typename, callback, clock)
        return
    if isinstance(callback, Undecoded):  # this transport decodes itself: the bytes again
        transport.subscribe(
            topic, typename, lambda msg: callback(rosmsg.serialize(msg, typename), clock.now_ns())
        )
        return
    transport.subscribe(topic, typename, lambda msg: callback(msg, clock.now_ns()))


def stamp_and_send(out: Prepared, stamp: TimeField, clock: TimeSource, send: Callable[[bytes], None]) -> int:
    """Read the clock, stamp the prepared bytes and ``send`` them at once (the stamped publish of
    the Python transports); the stamp also goes into the message object."""
    sent_ns = clock.now_ns()
    stamp.patch(out.cdr, sent_ns)
    send(bytes(out.cdr))
    stamp.set(out.msg, sent_ns)
    return sent_ns


def decoder(
    typename: str, deliver: TimedCallback, where: str
) -> Callable[[bytes | bytearray | memoryview, int], None]:
    """``decode(data, arrival_ns)`` for a library's receive callback: deserialize, then deliver (an
    ``Undecoded`` receiver gets the bytes). A sample that does not decode, or whose receiver
    raises, is dropped with a log line: the library's thread must not die, and the next sample
    must still arrive."""
    if isinstance(deliver, Undecoded):
        receive = deliver.callback

        def pass_on(data: bytes | bytearray | memoryview, arrival_ns: int) -> None:
            try:
                receive(bytes(data), arrival_ns)
            except Exception:
                log.exception("error handling a %s sample on %s; dropped", typename, where)

        return pass_on

    def decode(data: bytes | bytearray | memoryview, arrival_ns: int) -> None:
        try:
            msg = rosmsg.deserialize(data, typename)
        except Exception as exc:
            log.warning("dropping undecodable %s on %s: %s", typename, where, exc)
            return
        try:
            deliver(msg, arrival_ns)
        except Exception:
            log.exception("error handling a %s message on %s; dropped", typename, where)

    return decode


def untimed(callback: Callable[[Any], None]) -> TimedCallback:
    """A ``timed_subscribe`` callback for a plain ``subscribe`` one."""
    return lambda msg, _arrival_ns: callback(msg)


class CallbackSubscriber:
    """``subscribe`` and ``timed_subscribe`` of a transport whose library calls back per sample:
    both go to ``_subscribe(topic, typename, deliver, now_ns)``, which reads ``now_ns()`` first
    thing in that callback, before decoding. A plain subscription reads the wall clock (MQTT's
    injected-timestamp latency compares it with the sender's wall clock)."""

    def subscribe(self, topic: str, typename: str, callback: Callable[[Any], None]) -> None:
        self._subscribe(topic, typename, untimed(callback), time.time_ns)

    def timed_subscribe(self, topic: str, typename: str, callback: TimedCallback, clock: TimeSource) -> None:
        self._subscribe(topic, typename, callback, clock.now_ns)

    def _subscribe(
        self, topic: str, typename: str, deliver: TimedCallback, now_ns: Callable[[], int]
    ) -> None:
        raise NotImplementedError
