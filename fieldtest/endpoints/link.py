"""An endpoint's hold on the link: codecs built ahead, topic remapping, matching, a close that may hang."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from fieldtest import rosmsg
from fieldtest.record import CMD_VEL_TOPIC
from fieldtest.record.recordnames import RELAY_CMD_VEL_TOPIC
from fieldtest.rosmsg import TimeField
from fieldtest.transport.base import TimedCallback, TimeSource, Transport, stamped_publisher, timed_subscribe

from .status import say

TRANSPORT_CLOSE_TIMEOUT_S = 5.0


def warm_up_codecs(*typenames: str) -> None:
    """Build rosbags' (de)serializers now: the first use of a type compiles them (10-20 ms),
    which would otherwise land inside the first command's measured latency."""
    samples = {
        rosmsg.TWIST_STAMPED: rosmsg.command(0, 0, 0.0, 0.0),
        rosmsg.TWIST: rosmsg.twist(0.0, 0.0),
        rosmsg.HEADER: rosmsg.header(0, "seq:0"),
        rosmsg.POSE_STAMPED: rosmsg.pose_stamped(0, "w", (0, 0, 0), (0, 0, 0, 1)),
        rosmsg.CLOCK_PROBE: rosmsg.msg_class(rosmsg.CLOCK_PROBE)(
            id=0, t1=rosmsg.time_msg(0), t2=rosmsg.time_msg(0), t3=rosmsg.time_msg(0)
        ),
        rosmsg.COMMAND_RECEIPT: rosmsg.msg_class(rosmsg.COMMAND_RECEIPT)(
            seq=0,
            sent=rosmsg.time_msg(0),
            received=rosmsg.time_msg(0),
            clock_offset_s=0.0,
            latency_s=0.0,
            twist=rosmsg.twist(0.0, 0.0),
        ),
    }
    for typename in typenames:
        msg = samples.get(typename)
        if msg is None:
            continue
        rosmsg.deserialize(rosmsg.serialize(msg, typename), typename)


def wait_matched(transport: Transport, topic: str, timeout_s: float) -> bool | None:
    """Ask the transport whether ``topic`` has a remote subscriber, if it can tell (else None)."""
    for name in ("wait_matched", "wait_for_match"):
        method = getattr(transport, name, None)
        if method is not None:
            return bool(method(topic, timeout_s=timeout_s))
    return None


def matched_publishers(transport: Transport, topic: str) -> int | None:
    """How many publishers the transport's subscription of ``topic`` has matched, if it can tell."""
    count = getattr(transport, "matched_publishers", None)
    return None if count is None else count(topic)


def close_transport(transport: Any, who: str, timeout_s: float = TRANSPORT_CLOSE_TIMEOUT_S) -> bool:
    """Leave the link, giving up after ``timeout_s``: a middleware that hangs on close must not keep
    the process from closing its bag and status. False (and a warning line) if it hung; the caller
    then ends with ``os._exit`` after its own shutdown, as the hung library threads may block exit."""
    closer = threading.Thread(target=transport.close, name=f"{who}-transport-close", daemon=True)
    closer.start()
    closer.join(timeout_s)
    if closer.is_alive():
        say(f"WARNING {who}: the middleware did not close within {timeout_s:g} s; recording kept")
        return False
    return True


class RemappedTransport:
    """A Transport whose topic names are remapped (e.g. /cmd_vel -> /fieldtest/cmd_vel)."""

    def __init__(self, inner: Transport, remap: dict[str, str]):
        self.inner = inner
        self.remap = dict(remap)

    def _name(self, topic: str) -> str:
        return self.remap.get(topic, topic)

    def publisher(self, topic: str, typename: str) -> Callable[[Any], None]:
        return self.inner.publisher(self._name(topic), typename)

    def subscribe(self, topic: str, typename: str, callback: Callable[[Any], None]) -> None:
        self.inner.subscribe(self._name(topic), typename, callback)

    def stamped_publisher(
        self, topic: str, typename: str, stamp: TimeField, clock: TimeSource
    ) -> Callable[[Any], int]:
        return stamped_publisher(self.inner, self._name(topic), typename, stamp, clock)

    def timed_subscribe(self, topic: str, typename: str, callback: TimedCallback, clock: TimeSource) -> None:
        timed_subscribe(self.inner, self._name(topic), typename, callback, clock)

    def wait_matched(self, topic: str, timeout_s: float) -> bool:
        matched = wait_matched(self.inner, self._name(topic), timeout_s)
        return True if matched is None else matched  # the inner transport cannot tell: treat as matched

    def matched_publishers(self, topic: str) -> int | None:
        return matched_publishers(self.inner, self._name(topic))

    def close(self) -> None:
        self.inner.close()


def command_remap(relay: bool) -> dict[str, str]:
    """With a relaying robot the host must not talk to the base's own /cmd_vel."""
    return {CMD_VEL_TOPIC: RELAY_CMD_VEL_TOPIC} if relay else {}
