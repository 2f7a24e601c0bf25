"""The robot's own traffic in a twin trial: the TurtleBot 4's topics published on the robot and
pulled by the host as RViz or Foxglove would, over the trial's middleware and link.

The preset (``TrialRequest.robot_traffic``, ``fieldtest.robottraffic``) names the topics; each is
published at its upstream rate on absolute deadlines, its header stamped with the send time. On
DDS (the trial's own, or each side's DDS of the bridged Zenoh path) the robot side is a
TurtleBot-4-sized ROS graph: one CycloneDDS participant per process that upstream's Jazzy
``standard.launch.py`` starts, announcing its node's topics on ``ros_discovery_info``, so their
discovery crosses the link as in the lab; each topic is written by the participant of the node
that publishes it upstream. The host pulls on a participant of its own (``rviz2``), as the
operator's tool is a process of its own. On Zenoh and MQTT the traffic shares the robot's and the
host's session, as the bridge would carry it.

``RobotTrafficSource.close()`` and ``RobotTrafficSink.close()`` add their counts to trial.yaml's
``outcome.robot_traffic`` (sent by the robot, received by the host, per topic).
"""

from __future__ import annotations

import heapq
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fieldtest import robottraffic, rosmsg
from fieldtest.endpoints.clock import Clock
from fieldtest.linkconfig import Role, TransportConfig
from fieldtest.realtime import leave_thread_realtime
from fieldtest.record import TrialOutcome, TrialRequest
from fieldtest.record.recordnames import CMD_VEL_TOPIC
from fieldtest.robottraffic import RobotTopic
from fieldtest.transport import Transport

log = logging.getLogger(__name__)

STRING = "std_msgs/msg/String"  # stands in for types the kit's typestore lacks (same discovery size class)
ROSOUT = ("/rosout", "rcl_interfaces/msg/Log")
PARAMETER_EVENTS = ("/parameter_events", "rcl_interfaces/msg/ParameterEvent")


@dataclass(frozen=True)
class GraphNode:
    """One process of the TurtleBot 4's bringup: its node name, what it publishes and subscribes."""

    name: str
    publishes: tuple[tuple[str, str], ...] = ()
    subscribes: tuple[tuple[str, str], ...] = ()


def _t(topic: str) -> tuple[str, str]:
    """A workload topic with its own type, or a topic of a type the typestore lacks."""
    known = robottraffic.TOPICS.get(topic)
    return (topic, known.typename if known else STRING)


# The processes turtlebot4_robot (jazzy) turtlebot4_bringup/launch/standard.launch.py starts and the
# topics they declare: robot.launch.py (turtlebot4_node, turtlebot4_base_node, create3_republisher
# with config/republisher.yaml's robot_publishers/robot_subscriptions), joy_teleop.launch.py
# (joy_linux_node, teleop_twist_joy_node with publish_stamped_twist), rplidar.launch.py
# (rplidar_composition), oakd.launch.py (oakd_container holding the depthai "oakd" component),
# turtlebot4_description's robot_description.launch.py (robot_state_publisher,
# joint_state_publisher) and turtlebot4_diagnostics' diagnostics.launch.py (diagnostic_aggregator's
# "analyzers", turtlebot4_diagnostics' updater). Every rclcpp/rclpy node also has /rosout and
# /parameter_events (added below); its parameter services are left out (the kit's DDS transport
# names topics only). The republisher's cmd_vel subscriptions are left out too: the kit's robot
# process is the command subscriber.
TURTLEBOT4_GRAPH: tuple[GraphNode, ...] = (
    GraphNode(
        "turtlebot4_node",
        publishes=(_t("/hmi/display"), _t("/ip"), _t("/function_calls")),
        subscribes=tuple(
            map(
                _t,
                (
                    "/battery_state",
                    "/dock_status",
                    "/wheel_status",
                    "/interface_buttons",
                    "/hmi/buttons",
                    "/joy",
                ),
            )
        ),
    ),  # fmt: skip
    GraphNode(
        "turtlebot4_base_node",
        publishes=(_t("/hmi/buttons"),),
        subscribes=(_t("/hmi/display"),)
        + tuple(
            _t(f"/hmi/led/_{led}")
            for led in ("power", "motors", "comms", "wifi", "battery", "user1", "user2")
        ),
    ),  # fmt: skip
    GraphNode(
        "create3_repub",
        publishes=tuple(
            map(
                _t,
                (
                    "/battery_state",
                    "/dock_status",
                    "/imu",
                    "/interface_buttons",
                    "/odom",
                    "/tf",
                    "/wheel_status",
                ),
            )
        )
        + (("/tf_static", robottraffic.TF_MESSAGE),),
        subscribes=(_t("/cmd_audio"), _t("/cmd_lightring")),
    ),  # fmt: skip
    GraphNode("joy_linux_node", publishes=(("/joy", "sensor_msgs/msg/Joy"), _t("/diagnostics"))),
    GraphNode(
        "teleop_twist_joy_node",
        publishes=(("/cmd_vel", "geometry_msgs/msg/TwistStamped"),),
        subscribes=(("/joy", "sensor_msgs/msg/Joy"),),
    ),
    GraphNode("rplidar_composition", publishes=(_t("/scan"),)),
    GraphNode(
        "oakd",
        publishes=(
            _t("/oakd/rgb/preview/image_raw"),
            ("/oakd/rgb/preview/camera_info", "sensor_msgs/msg/CameraInfo"),
        ),
    ),
    GraphNode(
        "robot_state_publisher",
        publishes=(_t("/tf"), ("/tf_static", robottraffic.TF_MESSAGE), _t("/robot_description")),
        subscribes=(_t("/joint_states"),),
    ),
    GraphNode(
        "joint_state_publisher", publishes=(_t("/joint_states"),), subscribes=(_t("/robot_description"),)
    ),
    GraphNode(
        "analyzers",
        publishes=(_t("/diagnostics_agg"), _t("/diagnostics_toplevel_state")),
        subscribes=(_t("/diagnostics"),),
    ),
    GraphNode(
        "turtlebot4_diagnostics",
        publishes=(_t("/diagnostics"),),
        subscribes=tuple(
            map(
                _t,
                (
                    "/battery_state",
                    "/wheel_status",
                    "/dock_status",
                    "/scan",
                    "/oakd/rgb/preview/image_raw",
                    "/hazard_detection",
                    "/imu",
                    "/mouse",
                ),
            )
        ),
    ),  # fmt: skip
)
HOST_TOOL_NODE = "rviz2"  # the operator's tool, a participant of its own on the host


def _ignore(_msg: Any, _arrival_ns: int) -> None:
    """Graph subscriptions only announce themselves (the upstream node would consume the data)."""


class Graph:
    """The TurtleBot 4's ROS graph as CycloneDDS participants, one per process (see TURTLEBOT4_GRAPH);
    ``publisher(topic)`` is the publish function of the node that publishes it upstream."""

    def __init__(
        self,
        config: TransportConfig,
        role: Role,
        nodes: tuple[GraphNode, ...] = TURTLEBOT4_GRAPH,
        *,
        cmd_typename: str = rosmsg.TWIST_STAMPED,
    ):
        """``cmd_typename``: the trial's command type, which teleop's cmd_vel writer takes too (one
        topic name, one type in a process)."""
        from fieldtest.middleware.dds.transport import open_dds

        self.participants: dict[str, Any] = {}
        self._publishers: dict[str, Any] = {}
        try:
            for node in nodes:
                dds = self.participants[node.name] = open_dds(config, role, node_name=node.name)
                for topic, typename in (*node.publishes, ROSOUT, PARAMETER_EVENTS):
                    typename = cmd_typename if topic == CMD_VEL_TOPIC else typename
                    publish = dds.publisher(topic, typename)
                    self._publishers.setdefault(f"{node.name}:{topic}", publish)
                for topic, typename in (*node.subscribes, PARAMETER_EVENTS):
                    dds.timed_subscribe(topic, typename, _ignore, Clock())
        except BaseException:
            self.close()
            raise

    def publisher(self, node: str, topic: str) -> Any:
        return self._publishers[f"{node}:{topic}"]

    def close(self) -> None:
        for dds in self.participants.values():
            dds.close()
        self.participants.clear()


def _dds_config(transport: Transport) -> TransportConfig | None:
    """The DDS configuration the transport joined (the side's DDS when bridged), else None."""
    from fieldtest.middleware.dds.transport import DdsTransport

    return transport.config if isinstance(transport, DdsTransport) else None


@dataclass
class _Span:
    first_stamp_ns: int
    first_arrival_ns: int
    last_stamp_ns: int
    last_arrival_ns: int


@dataclass
class _Counts:
    sent: int = 0
    send_failures: int = 0
    received: int = 0
    bytes_received: int = 0
    span: _Span | None = None  # from the first message received to the last
    ages_ms: list[float] = field(default_factory=list)
    # each message's capture stamp, in send or arrival order
    stamps_ns: list[int] = field(default_factory=list)


class RobotTrafficSource:
    """The robot side: publishes the preset's topics until ``close()``."""

    def __init__(self, request: TrialRequest, transport: Transport, clock: Clock):
        self.preset = request.robot_traffic
        self.topics = robottraffic.preset_topics(self.preset)
        self.clock = clock
        self.counts = {t.topic: _Counts() for t in self.topics}
        self.graph: Graph | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if not self.topics:
            return
        config = _dds_config(transport)
        if config is not None:
            cmd_typename = rosmsg.TWIST if request.cmd_type == "twist" else rosmsg.TWIST_STAMPED
            self.graph = Graph(config, "robot", cmd_typename=cmd_typename)
            self._publish = {t.topic: self.graph.publisher(t.node, t.topic) for t in self.topics}
        else:
            self._publish = {t.topic: transport.publisher(t.topic, t.typename) for t in self.topics}
        self._thread = threading.Thread(target=self._run, name="robot-traffic", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        leave_thread_realtime()  # upstream, the sensors are processes of their own, not the kit's timed ones
        start = self.clock.now_ns()
        due = [(start, i) for i in range(len(self.topics))]
        heapq.heapify(due)
        periods = [round(1e9 / t.rate_hz) for t in self.topics]
        while not self._stop.is_set():
            at, i = heapq.heappop(due)
            self.clock.sleep_until(at, self._stop, spin_ns=0)
            if self._stop.is_set():
                break
            self._send(self.topics[i], at)
            heapq.heappush(due, (at + periods[i], i))  # absolute deadlines: late sends do not accumulate

    def _send(self, topic: RobotTopic, stamp_ns: int) -> None:
        """Publish one message stamped with its scheduled capture time, as a sensor stamps its
        sample: a publish made late by a loaded machine shows in the age, not in the schedule."""
        counts = self.counts[topic.topic]
        try:
            self._publish[topic.topic](topic.stamped(stamp_ns))
            counts.sent += 1
            counts.stamps_ns.append(stamp_ns)
        except Exception as exc:  # a closed or failing link: counted, the command path goes on
            counts.send_failures += 1
            if counts.send_failures == 1:
                log.warning("robot traffic on %s: publish failed (%s)", topic.topic, exc)

    def summary(self) -> dict[str, Any]:
        return {
            t.topic: {
                "type": t.typename,
                "node": t.node,
                "rate_hz": t.rate_hz,
                "size_bytes": t.size_bytes,
                "sent": self.counts[t.topic].sent,
                "send_failures": self.counts[t.topic].send_failures,
            }
            for t in self.topics
        }

    def graph_summary(self) -> dict[str, Any] | None:
        if self.graph is None:
            return None
        return {"participants": len(TURTLEBOT4_GRAPH), "nodes": [n.name for n in TURTLEBOT4_GRAPH]}

    def close(self) -> dict[str, Any]:
        """Stop publishing and leave the graph; returns the per-topic counts; safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self.graph is not None:
            self.graph.close()
        return self.summary()


class RobotTrafficSink:
    """The host side: subscribes to the preset's topics as the operator's tool would and counts
    what arrives (messages, bytes, the span of capture stamps and arrivals, age on arrival)."""

    def __init__(self, request: TrialRequest, transport: Transport, clock: Clock):
        from fieldtest.transport.base import timed_subscribe

        self.preset = request.robot_traffic
        self.topics = robottraffic.preset_topics(self.preset)
        self.clock = clock
        self.counts = {t.topic: _Counts() for t in self.topics}
        self._lock = threading.Lock()
        self._own: Any = None
        if not self.topics:
            return
        config = _dds_config(transport)
        if config is not None:  # the tool is a process of its own: a participant of its own
            from fieldtest.middleware.dds.transport import open_dds

            transport = self._own = open_dds(config, "host", node_name=HOST_TOOL_NODE)
        for topic in self.topics:
            timed_subscribe(transport, topic.topic, topic.typename, self._receiver(topic), clock)

    def _receiver(self, topic: RobotTopic) -> Any:
        size = topic.size_bytes
        counts = self.counts[topic.topic]

        def receive(msg: Any, arrival_ns: int) -> None:
            stamp = topic.sent_ns_of(msg)
            with self._lock:
                counts.received += 1
                counts.bytes_received += size
                if counts.span is None:
                    counts.span = _Span(stamp, arrival_ns, stamp, arrival_ns)
                else:
                    counts.span.last_stamp_ns, counts.span.last_arrival_ns = stamp, arrival_ns
                counts.ages_ms.append((arrival_ns - stamp) / 1e6)
                counts.stamps_ns.append(stamp)

        return receive

    def summary(self) -> dict[str, Any]:
        with self._lock:
            return {t.topic: received_figures(t, self.counts[t.topic]) for t in self.topics}

    def close(self) -> dict[str, Any]:
        if self._own is not None:
            self._own.close()
            self._own = None
        return self.summary()


def received_figures(topic: RobotTopic, counts: _Counts) -> dict[str, Any]:
    """What the host saw of one topic: count, bytes, rate over its arrivals, and the loss against
    the robot's schedule between the first and last capture stamps it received (the stamps are the
    schedule's own times, so the count is exact)."""
    import numpy as np

    out: dict[str, Any] = {"received": counts.received, "bytes_received": counts.bytes_received}
    span = counts.span
    if counts.received >= 2 and span is not None:
        span_s = (span.last_arrival_ns - span.first_arrival_ns) / 1e9
        stamps_s = (span.last_stamp_ns - span.first_stamp_ns) / 1e9
        expected = round(stamps_s * topic.rate_hz) + 1
        out["received_hz"] = (counts.received - 1) / span_s if span_s > 0 else None
        out["expected_in_span"] = expected
        out["lost_in_span"] = max(0, expected - counts.received)
    if counts.ages_ms:  # capture stamp to arrival (robot clock to host clock; shared in the twin)
        ages = np.asarray(counts.ages_ms)
        out["age_ms"] = {"median": float(np.median(ages)), "p95": float(np.percentile(ages, 95))}
    return out


# trial.yaml --------------------------------------------------------------------------------


def add_to_outcome(
    outcome: TrialOutcome, preset: str, figures: dict[str, Any], graph: dict[str, Any] | None = None
) -> None:
    """Merge one side's per-topic figures (the robot's sent, the host's received) into the record."""
    section = outcome.robot_traffic
    section["preset"] = preset
    if graph is not None:
        section["graph"] = graph
    topics = section.setdefault("topics", {})
    for topic, values in figures.items():
        topics.setdefault(topic, {}).update(values)


def close_source(source: RobotTrafficSource | None, trial_dir: Path) -> None:
    """Stop the robot's traffic and record what it sent (nothing for the preset ``none``)."""
    from fieldtest.endpoints.status import update_outcome

    if source is None or not source.topics:
        return
    sent = source.close()
    graph = source.graph_summary()
    update_outcome(trial_dir, lambda outcome: add_to_outcome(outcome, source.preset, sent, graph))


def close_sink(sink: RobotTrafficSink | None, trial_dir: Path) -> None:
    from fieldtest.endpoints.status import update_outcome

    if sink is None or not sink.topics:
        return
    received = sink.close()
    update_outcome(trial_dir, lambda outcome: add_to_outcome(outcome, sink.preset, received))
