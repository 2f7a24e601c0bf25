"""A ``Transport`` over an rclpy node: the lab nodes run the twin's code on real ROS 2 topics.

Messages stay rosbags objects (``fieldtest.rosmsg``) end to end. Publishing hands rclpy the CDR
bytes rosbags produced (``Publisher.publish(bytes)`` -> ``publish_raw``, Humble and Jazzy), and
subscriptions are created with ``raw=True`` so callbacks get the CDR bytes rosbags decodes. The
generated message classes (geometry_msgs, std_msgs, fieldtest_msgs) are only needed for the topic
type, so what goes on the wire is exactly what the twin sends over its own transports.

rclpy is imported lazily: this module loads (and its pure helpers are tested) without ROS; the
classes need a sourced ROS 2 environment and the built ``fieldtest_msgs`` package.
"""

from __future__ import annotations

import importlib
import inspect
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fieldtest import rosmsg
from fieldtest.qos import get_qos
from fieldtest.rosmsg import TimeField
from fieldtest.transport.base import (
    CallbackSubscriber,
    StampedPublish,
    TimedCallback,
    TimeSource,
    decoder,
    full_topic,
    stamp_and_send,
)

if TYPE_CHECKING:
    from rclpy.qos import QoSProfile


def type_parts(typename: str) -> tuple[str, str]:
    """'geometry_msgs/msg/TwistStamped' -> ('geometry_msgs.msg', 'TwistStamped')."""
    parts = typename.split("/")
    if len(parts) != 3 or parts[1] != "msg" or not all(parts):
        raise ValueError(f"{typename!r} is not a ROS 2 message type name (package/msg/Name)")
    return f"{parts[0]}.msg", parts[2]


def message_class(typename: str) -> type:
    module, name = type_parts(typename)
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        hint = (
            " (build and source the workspace with fieldtest_msgs)"
            if typename.startswith("fieldtest_msgs")
            else ""
        )
        raise RuntimeError(
            f"message type {typename} is not available in this ROS 2 environment{hint}"
        ) from exc


def qos_policy_names(qos_name: str) -> dict[str, Any]:
    """The kit's QoS profile as rclpy QoSProfile keyword values (enum member names)."""
    qos = get_qos(qos_name)
    return {
        "history": qos.history.upper(),
        "depth": qos.depth,
        "reliability": qos.reliability.upper(),
        "durability": qos.durability.upper(),
    }


def rclpy_qos(qos_name: str) -> QoSProfile:
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    names = qos_policy_names(qos_name)
    return QoSProfile(
        history=HistoryPolicy[names["history"]],
        depth=names["depth"],
        reliability=ReliabilityPolicy[names["reliability"]],
        durability=DurabilityPolicy[names["durability"]],
    )


class MessageInfoIfGiven:
    """A subscription callback for both rclpy calling conventions. Jazzy's rclpy (Iron on) passes the
    message info to a callback whose signature takes two arguments (subscription.py, the callback
    setter: it binds one argument, then two); Humble's calls every callback with the message only
    (executors.py ``_execute_subscription``, humble branch). So the signature rclpy reads says two,
    and a call with one gets ``info=None``."""

    __signature__ = inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_ONLY) for name in ("msg", "info")]
    )

    def __init__(self, callback: Callable[[Any, dict | None], None]):
        self.callback = callback

    def __call__(self, msg: Any, info: dict | None = None) -> None:
        self.callback(msg, info)


class RclpyTransport(CallbackSubscriber):
    """Transport over ``node``; topics are placed under ``namespace`` (absolute names). Each topic
    gets the QoS ``qos`` names, except those with their own (the clock probes, best effort:
    ``fieldtest.middleware.labshared.topic_qos``)."""

    def __init__(self, node: Any, namespace: str = "", qos: str = "default"):
        self.node = node
        # arrivals stamped by the RMW's message info vs by the callback's own reading (``arrival_ns``)
        self.arrivals = {"rmw_stamp": 0, "callback": 0}
        self.namespace = namespace
        self.qos_name = qos
        rclpy_qos(qos)  # an unknown profile fails here, not at the first topic
        self._publishers: dict[str, Any] = {}
        self._subscriptions: list[Any] = []
        self._subscription_of: dict[str, Any] = {}  # full topic name -> its (latest) subscription
        self._lock = threading.Lock()
        self._closed = False

    def qos_for(self, topic: str) -> QoSProfile:
        """The rclpy QoS profile of ``topic`` (a name under the namespace)."""
        from fieldtest.middleware.labshared import topic_qos

        return rclpy_qos(topic_qos(topic, self.qos_name))

    def topic(self, topic: str) -> str:
        return full_topic(self.namespace, topic)

    def _publisher(self, topic: str, typename: str) -> Any:
        name = self.topic(topic)
        with self._lock:
            if name not in self._publishers:
                self._publishers[name] = self.node.create_publisher(
                    message_class(typename), name, self.qos_for(topic)
                )
            return self._publishers[name]

    def publisher(self, topic: str, typename: str) -> Callable[[Any], None]:
        pub = self._publisher(topic, typename)

        def publish(msg: Any) -> None:
            pub.publish(rosmsg.serialize(msg, typename))

        return publish

    def stamped_publisher(
        self, topic: str, typename: str, stamp: TimeField, clock: TimeSource
    ) -> StampedPublish:
        """The stamp goes into the prepared bytes right before rclpy publishes them."""
        pub = self._publisher(topic, typename)
        return lambda out: stamp_and_send(out, stamp, clock, pub.publish)

    def _subscribe(
        self, topic: str, typename: str, deliver: TimedCallback, now_ns: Callable[[], int]
    ) -> None:
        name = self.topic(topic)
        decode = decoder(typename, deliver, name)

        def on_raw(data: bytes, info: dict | None) -> None:
            now, wall = now_ns(), time.time_ns()  # the arrival first, before decoding
            arrival = arrival_ns(now, wall, info)
            self.arrivals["rmw_stamp" if arrival != now else "callback"] += 1
            decode(data, arrival)

        qos = self.qos_for(topic)
        callback = MessageInfoIfGiven(on_raw)
        sub = self.node.create_subscription(message_class(typename), name, callback, qos, raw=True)
        with self._lock:
            self._subscriptions.append(sub)
            self._subscription_of[name] = sub

    def matched_subscriptions(self, topic: str) -> int:
        """How many subscriptions this transport's publisher of ``topic`` has matched (0: none yet)."""
        with self._lock:
            pub = self._publishers.get(self.topic(topic))
        return pub.get_subscription_count() if pub is not None else 0

    def matched_publishers(self, topic: str) -> int | None:
        """How many publishers this transport's subscription of ``topic`` has matched: the reader's
        own side of discovery, which a publisher's count of its subscribers does not show (0: none
        yet, no subscription, or the transport closed; None: this rclpy cannot tell)."""
        with self._lock:  # held while counting: close() destroys the subscriptions only after it
            sub = self._subscription_of.get(self.topic(topic))
            if sub is None or self._closed:  # a destroyed subscription raises InvalidHandle
                return 0
            count = getattr(sub, "get_publisher_count", None)
            return None if count is None else int(count())

    def wait_matched(self, topic: str, timeout_s: float) -> bool:
        """True once a subscriber of ``topic`` is matched (DDS discovery or the local bridge)."""
        name = self.topic(topic)
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                pub = self._publishers.get(name)
            if pub is not None and pub.get_subscription_count() > 0:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pubs, subs = list(self._publishers.values()), list(self._subscriptions)
        for sub in subs:
            self.node.destroy_subscription(sub)
        for pub in pubs:
            self.node.destroy_publisher(pub)


def arrival_ns(now_ns: int, wall_now_ns: int, info: dict | None) -> int:
    """When the sample reached the middleware, on the caller's clock (``now_ns`` read with ``wall_now_ns``).

    The RMW's reception timestamp (rmw_fastrtps: Fast DDS SampleInfo reception_timestamp, system
    clock) is taken when the DDS layer received the sample; the time since then is the executor's
    delay, which is the node's, not the link's, so it is taken off. Without a usable stamp (absent,
    zero, or in the future) the callback's own reading stands."""
    received = (info or {}).get("received_timestamp") or 0
    if 0 < received <= wall_now_ns:
        return now_ns - (wall_now_ns - received)
    return now_ns


# What the message info's received_timestamp is, per RMW (and distro where they differ): the
# link monitor's arrival stamp, recorded with each trial (docs/trial-format.md, "Lab trials").
RECEPTION = (
    "reception",
    "the DDS layer's reception stamp (Fast DDS SampleInfo reception_timestamp, set by its receive "
    "thread): the link's delay, not the executor's",
)
TAKE = (
    "take",
    "rmw_cyclonedds sets received_timestamp when the executor takes the sample (rmw_node.cpp "
    "message_info_from_sample_info, jazzy branch): "
    "it includes the wait for the executor, which therefore runs at the node's real-time priority",
)
CALLBACK = (
    "callback",
    "no message info: Humble's rclpy calls a subscription callback with the message only "
    "(executors.py _execute_subscription, humble branch), whatever the RMW stamps. The "
    "callback's own clock reading, including the executor's delay, which therefore runs at the "
    "node's real-time priority",
)
ARRIVAL_STAMPS = {
    ("rmw_fastrtps_cpp", "humble"): CALLBACK,
    ("rmw_fastrtps_cpp", "jazzy"): RECEPTION,
    ("rmw_cyclonedds_cpp", "jazzy"): TAKE,
    ("rmw_cyclonedds_cpp", "humble"): CALLBACK,
}


def arrival_stamp_source(rmw: str, distro: str) -> dict[str, str]:
    """Which arrival stamp the link monitor gets on this RMW and distro, and what it includes."""
    source, includes = ARRIVAL_STAMPS.get(
        (rmw, distro), ("unknown", f"not established for {rmw} on {distro}: the counts say which was used")
    )
    return {"source": source, "includes": includes, "rmw": rmw, "ros_distro": distro}


def executor_needs_realtime(rmw: str, distro: str) -> bool:
    """Whether the arrival stamp waits for the executor (take time or callback reading)."""
    return arrival_stamp_source(rmw, distro)["source"] != "reception"


def init_without_signal_handlers(
    args: list[str] | None = None, context: Any = None, domain_id: int | None = None
) -> None:
    """rclpy.init that leaves SIGINT/SIGTERM to the node: rclpy's own handler shuts the context
    down at once, after which the stop burst could no longer be published."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(
        args=args, context=context, domain_id=domain_id, signal_handler_options=SignalHandlerOptions.NO
    )


def spin_in_background(
    node: Any, context: Any = None, realtime: bool = False
) -> tuple[Any, threading.Thread]:
    """A single-threaded executor spinning ``node`` on a daemon thread; returns (executor, thread).

    Single-threaded: rclpy's MultiThreadedExecutor polls a ready entity again until a worker has taken
    it, which at 100 Hz kept its spin thread at 40-100 % of a core (at SCHED_FIFO it starved its own
    workers: both nodes and the base spun and no command went out). The nodes' callbacks never block.
    At normal priority even in a real-time node where the arrivals are the middleware's reception
    stamps (``arrival_ns``); ``realtime=True`` keeps the node's priority, for an RMW whose stamp
    waits for the executor (``executor_needs_realtime``)."""
    from rclpy.executors import SingleThreadedExecutor

    from fieldtest.realtime import leave_thread_realtime

    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)

    def spin() -> None:
        if not realtime:
            leave_thread_realtime()
        executor.spin()

    thread = threading.Thread(target=spin, name="rclpy-executor", daemon=True)
    thread.start()
    return executor, thread
