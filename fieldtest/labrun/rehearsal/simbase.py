"""A simulated TurtleBot 4 base for lab rehearsals: the twin's Create 3 model as a ROS 2 participant.

    python -m fieldtest.labrun.rehearsal.simbase --namespace /tb4 --distro jazzy [--vendor fastdds|cyclonedds]
        [--safety-override full] [--feed-port 15110] [--status FILE]

It plays what the lab nodes meet on a real TurtleBot 4 (create3_docs, turtlebot4_setup):

- ``<ns>/cmd_vel``: TwistStamped on Jazzy (the user-facing topic create3_republisher relays to the
  base), Twist on Humble. Each command drives ``fieldtest.twin.create3model.Create3Model`` the moment it
  arrives: speed cap 0.306 m/s unless ``safety_override`` is ``full`` (0.46 m/s), wheel acceleration
  0.9 m/s^2, and the stop when commands stop (the model's watchdog).
- ``motion_control`` parameters (``safety_override``, ``reflexes_enabled``, ...) served by a node
  named ``motion_control`` the way the base serves them: under ``<ns>/_do_not_use`` on Jazzy, where
  the base sits behind create3_republisher (which does not relay parameter services), under
  ``<ns>`` on Humble. Only with ``--vendor fastdds`` (rclpy): the kit's CycloneDDS transport has no
  ROS services, so a CycloneDDS base serves topics only and says so.
- ``<ns>/odom`` (nav_msgs/Odometry, 20 Hz) and ``<ns>/battery_state`` (sensor_msgs/BatteryState).
- Its true pose goes to the NatNet emulator's pose feed (``fieldtest.natnet.feed``), which plays
  Motive for the kit's recorder.
- ``--behind-republisher`` (Jazzy): the base itself sits under ``<ns>/_do_not_use`` with the
  Create 3's own topics (``cmd_vel`` Twist, ``cmd_vel_stamped`` TwistStamped, ``odom``,
  ``battery_state``), as on a TurtleBot 4; ``fieldtest.labrun.rehearsal.republisher`` then plays
  create3_republisher in front of it.
- ``--parameters unanswered``: motion_control's get_parameters service is on the graph, takes each
  request and never answers, as a Fast DDS base does a CycloneDDS client's request.

Fast DDS is what rclpy from the ROS 2 wheels links (and the Create 3's default firmware); CycloneDDS
is the kit's own transport (the other Create 3 firmware), for a base on the other vendor.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any

from fieldtest import rosmsg
from fieldtest.endpoints.clock import Clock
from fieldtest.endpoints.status import say, write_status
from fieldtest.labrun.nodelogic.create3params import create3_base_namespace, motion_control_node
from fieldtest.natnet.feed import DEFAULT_FEED_PORT, PoseFeedSender
from fieldtest.procs import stop_on_signals, watch_parent
from fieldtest.realtime import is_realtime, try_realtime
from fieldtest.record import CMD_VEL_TOPIC
from fieldtest.record.basecommands import BaseCommandLog
from fieldtest.transport.base import Transport, timed_subscribe
from fieldtest.twin.create3model import Create3Model, SafetyOverride

BATTERY_STATE = "sensor_msgs/msg/BatteryState"
ODOM_TOPIC, BATTERY_TOPIC = "odom", "battery_state"
PHYSICS_HZ = 250.0
ODOM_HZ = 20.0  # create3_docs: /odom at 20 Hz
BATTERY_HZ = 1.0
STATUS_PERIOD_S = 0.5
BASE_QOS = "default"  # the base's subscriptions: ROS 2's default profile, whatever the trial's
ODOM_FRAME, BASE_FRAME = "odom", "base_link"
# The Create 3's command topics and types (turtlebot4_robot turtlebot4_bringup/config/republisher.yaml,
# robot_subscriptions): what the base itself listens to under <ns>/_do_not_use.
CREATE3_COMMAND_TOPICS = {CMD_VEL_TOPIC: "twist", "/cmd_vel_stamped": "twist_stamped"}
# Set at exit: lets a held (--parameters unanswered) request go so its executor can stop.
UNANSWERED_RELEASE = threading.Event()


def motion_control_name(robot_namespace: str, distro: str) -> tuple[str, str]:
    """(namespace, node name) of the base's motion_control node on ``distro``."""
    full = f"{robot_namespace.rstrip('/')}/{motion_control_node(distro)}"
    namespace, _, name = full.rpartition("/")
    return namespace or "/", name


def motion_control_parameters(safety_override: SafetyOverride, reflexes_enabled: bool) -> dict[str, Any]:
    """The motion_control parameters the pre-flight reads (create3_docs, parameters of motion_control)."""
    return {"safety_override": safety_override, "reflexes_enabled": reflexes_enabled}


class SimulatedBase:
    """The Create 3 model behind ``transport``'s topics; ``run(stop)`` steps it until stopped."""

    def __init__(
        self,
        transport: Transport,
        *,
        cmd_type: str = "twist_stamped",
        command_topics: dict[str, str] | None = None,
        safety_override: SafetyOverride = "full",
        feed: PoseFeedSender | None = None,
        physics_hz: float = PHYSICS_HZ,
        battery_percentage: float = 0.9,
        record: BaseCommandLog | None = None,
    ):
        self.transport = transport
        self.clock = Clock()
        self.model = Create3Model(safety_override)
        self.feed = feed
        self.record = record  # every command taken, for the analysis' base check
        self.battery_percentage = battery_percentage
        self.period_ns = round(1e9 / physics_hz)
        self.odom_every = max(1, round(physics_hz / ODOM_HZ))
        self.battery_every = max(1, round(physics_hz / BATTERY_HZ))
        self.commands = 0
        self.trailing_zero_commands = (
            0  # since the last motion command: stop bursts, relay and emergency stops
        )
        self.max_linear_commanded = 0.0
        self._t0_ns = self.clock.now_ns()
        self._lock = threading.Lock()
        self._publish_odom = transport.publisher(ODOM_TOPIC, rosmsg.ODOMETRY)
        self._publish_battery = transport.publisher(BATTERY_TOPIC, BATTERY_STATE)
        for topic, kind in (command_topics or {CMD_VEL_TOPIC: cmd_type}).items():
            typename = rosmsg.TWIST if kind == "twist" else rosmsg.TWIST_STAMPED
            timed_subscribe(transport, topic, typename, self._on_command, self.clock)

    def _model_t(self, ns: int) -> float:
        return (ns - self._t0_ns) / 1e9

    def _on_command(self, msg: Any, received_ns: int) -> None:
        taken_ns = self.clock.now_ns()  # the take, beside the middleware's arrival stamp
        twist = getattr(msg, "twist", msg)
        if self.record is not None:
            self.record.add(msg, received_ns, taken_ns)
        with self._lock:
            self.model.set_command(twist.linear.x, twist.angular.z, self._model_t(received_ns))
            self.commands += 1
            zero = twist.linear.x == 0.0 and twist.angular.z == 0.0
            self.trailing_zero_commands = self.trailing_zero_commands + 1 if zero else 0
            self.max_linear_commanded = max(self.max_linear_commanded, abs(twist.linear.x))

    def step(self, tick: int) -> None:
        now = self.clock.now_ns()
        with self._lock:
            self.model.checkpoint()
            self.model.advance_to(self._model_t(now))
            x, y, yaw = self.model.pose
            v, w = self.model.velocity()
        quat = rosmsg.yaw_quaternion(yaw)
        if self.feed is not None:
            self.feed.send((x, y, 0.0, *quat), t=now / 1e9)
        if tick % self.odom_every == 0:
            self._publish_odom(odometry(now, (x, y), quat, v, w))
        if tick % self.battery_every == 0:
            self._publish_battery(battery_state(now, self.battery_percentage))

    def run(self, stop: threading.Event, status: Path | None = None) -> None:
        tick, next_ns = 0, self.clock.now_ns()
        status_every = max(1, round(STATUS_PERIOD_S * 1e9 / self.period_ns))
        while not stop.is_set():
            self.step(tick)
            if status is not None and tick % status_every == 0:
                write_status(status, self.summary())
            tick += 1
            next_ns = max(next_ns + self.period_ns, self.clock.now_ns())
            self.clock.sleep_until(next_ns, stop, spin_ns=0)
        if status is not None:
            write_status(status, self.summary())

    def summary(self) -> dict[str, Any]:
        with self._lock:
            x, y, yaw = self.model.pose
            v, w = self.model.velocity()
            return {
                "commands": self.commands,
                "trailing_zero_commands": self.trailing_zero_commands,
                "max_speed_mps": self.model.max_speed_mps,
                "max_linear_commanded_mps": self.max_linear_commanded,
                "pose": [x, y, yaw],
                "velocity": [v, w],
                "moving": not self.model.stopped,
                "watchdog_stops": len(self.model.watchdog_trips),
                "realtime": is_realtime(),
            }


def odometry(stamp_ns: int, xy: tuple[float, float], quat: tuple[float, ...], v: float, w: float) -> Any:
    cls = rosmsg.msg_class
    odom = cls(rosmsg.ODOMETRY)(
        header=rosmsg.header(stamp_ns, ODOM_FRAME),
        child_frame_id=BASE_FRAME,
        pose=cls("geometry_msgs/msg/PoseWithCovariance")(
            pose=rosmsg.pose_stamped(stamp_ns, ODOM_FRAME, (*xy, 0.0), quat).pose,
            covariance=_zeros(36),
        ),
        twist=cls("geometry_msgs/msg/TwistWithCovariance")(twist=rosmsg.twist(v, w), covariance=_zeros(36)),
    )
    return odom


def battery_state(stamp_ns: int, percentage: float) -> Any:
    import numpy as np

    nan = float("nan")
    return rosmsg.msg_class(BATTERY_STATE)(
        header=rosmsg.header(stamp_ns),
        voltage=14.4,
        temperature=nan,
        current=nan,
        charge=nan,
        capacity=nan,
        design_capacity=nan,
        percentage=percentage,
        power_supply_status=2,  # DISCHARGING
        power_supply_health=1,  # GOOD
        power_supply_technology=2,  # LION
        present=True,
        cell_voltage=np.zeros(0, dtype=np.float32),
        cell_temperature=np.zeros(0, dtype=np.float32),
        location="",
        serial_number="",
    )


def _zeros(n: int) -> Any:
    import numpy as np

    return np.zeros(n, dtype=np.float64)


# --------------------------------------------------------------------------------------------- process
def _rclpy_base(args: argparse.Namespace) -> tuple[Transport, list[Any]]:
    """Fast DDS through rclpy: the topics on one node, motion_control's parameters on another."""
    import rclpy

    from fieldtest.labrun.nodelogic.rclpy_transport import (
        RclpyTransport,
        init_without_signal_handlers,
        spin_in_background,
    )

    init_without_signal_handlers([], domain_id=args.domain_id)  # the robot side's domain, not $ROS_DOMAIN_ID
    topics_ns = base_topics_namespace(args)
    node = rclpy.create_node("create3_base_sim", namespace=topics_ns or None)
    namespace, name = motion_control_name(args.namespace, args.distro)
    answered = args.parameters == "answered"
    params_node = rclpy.create_node(name, namespace=namespace, start_parameter_services=answered)
    for name, value in motion_control_parameters(args.safety_override, args.reflexes_enabled).items():
        params_node.declare_parameter(name, value)
    if not answered:
        from rcl_interfaces.srv import GetParameters

        def hold(_request: Any, response: Any) -> Any:
            UNANSWERED_RELEASE.wait()  # on this node's own executor thread: the topics keep going
            return response

        params_node.create_service(GetParameters, "~/get_parameters", hold)
    spun = [spin_in_background(n) for n in (node, params_node)]
    return RclpyTransport(node, topics_ns, BASE_QOS), [node, params_node, spun]


def base_topics_namespace(args: argparse.Namespace) -> str:
    """Where the base's topics are: behind the republisher its own hidden namespace."""
    if args.behind_republisher:
        return create3_base_namespace(args.namespace, args.distro)
    return args.namespace


def _cyclone_base(args: argparse.Namespace) -> Transport:
    from fieldtest.middleware.registry import open_transport
    from fieldtest.transport.base import TransportConfig

    config = TransportConfig(
        middleware="dds", namespace=base_topics_namespace(args), domain_id=args.domain_id, qos=BASE_QOS
    )
    return open_transport(config, "robot")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fieldtest.labrun.rehearsal.simbase", description=__doc__.splitlines()[0]
    )
    p.add_argument("--namespace", default="", help="robot namespace, e.g. /tb4")
    p.add_argument(
        "--distro", default="jazzy", help="jazzy (TwistStamped, base behind the republisher) or humble"
    )
    p.add_argument("--vendor", choices=("fastdds", "cyclonedds"), default="fastdds")
    p.add_argument("--safety-override", choices=("none", "backup_only", "full"), default="full")
    p.add_argument("--reflexes-enabled", action="store_true")
    p.add_argument("--domain-id", type=int, default=0)
    p.add_argument(
        "--feed-port", type=int, default=DEFAULT_FEED_PORT, help="NatNet emulator pose feed; 0 = none"
    )
    p.add_argument(
        "--feed-address",
        default="127.0.0.1",
        help="the emulator's pose feed: an address, or a Unix socket path (crosses network namespaces)",
    )
    p.add_argument(
        "--behind-republisher",
        action="store_true",
        help="the Create 3's own topics under <ns>/_do_not_use (a republisher relays them)",
    )
    p.add_argument(
        "--parameters",
        choices=("answered", "unanswered"),
        default="answered",
        help="unanswered: motion_control's get_parameters takes requests and never answers",
    )
    p.add_argument("--status", type=Path, help="JSON status file, rewritten twice a second")
    p.add_argument("--record", type=Path, help="CSV of every command taken (fieldtest.record.basecommands)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cmd_type = "twist" if args.distro.lower() in ("humble", "iron") else "twist_stamped"
    keep: list[Any] = []
    # The real base has a processor of its own; here it must not wait behind the nodes (as the twin's
    # robot model does). Before the middleware starts, so that its threads inherit SCHED_FIFO.
    try_realtime()
    if args.vendor == "fastdds":
        transport, keep = _rclpy_base(args)
    else:
        transport = _cyclone_base(args)
    feed = PoseFeedSender(args.feed_address, args.feed_port) if args.feed_port else None
    topics = CREATE3_COMMAND_TOPICS if args.behind_republisher else None
    record = BaseCommandLog(args.record) if args.record else None
    base = SimulatedBase(
        transport,
        cmd_type=cmd_type,
        command_topics=topics,
        safety_override=args.safety_override,
        feed=feed,
        record=record,
    )
    where = "/".join(motion_control_name(args.namespace, args.distro)).replace("//", "/")
    params = f"parameters on {where}" if args.vendor == "fastdds" else "no parameter services"
    with stop_on_signals() as stop:
        watch_parent(stop)
        heard = ", ".join(f"{base_topics_namespace(args)}{t}" for t in topics or {CMD_VEL_TOPIC: cmd_type})
        say(f"READY simulated base {args.vendor} {cmd_type} on {heard}, {params}")
        base.run(stop, args.status)
    if record is not None:
        record.close()
    say(f"BASE DONE {json.dumps(base.summary())}")
    transport.close()
    if keep:
        import rclpy

        UNANSWERED_RELEASE.set()
        for executor, _thread in keep[2]:
            executor.shutdown(timeout_sec=1.0)
        for node in keep[:2]:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
