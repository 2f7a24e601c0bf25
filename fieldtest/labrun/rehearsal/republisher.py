"""A stand-in for create3_republisher, for rehearsals whose simulated base sits where a Jazzy
TurtleBot 4 puts the Create 3 (``<ns>/_do_not_use``).

    python -m fieldtest.labrun.rehearsal.republisher --namespace /tb4 [--domain-id 0]

What it does is what upstream's node does (create3_examples create3_republisher/republisher.cpp,
with the TurtleBot 4's parameters, turtlebot4_robot turtlebot4_bringup/config/republisher.yaml):
each listed topic is relayed as serialized bytes, type unchanged, from a subscription with QoS depth
1, best effort, volatile to a publisher with depth 1, reliable, transient local. The base's
publications (``odom``, ``battery_state``) go from ``<ns>/_do_not_use/<topic>`` to ``<ns>/<topic>``,
the user's commands the other way. On Jazzy the TurtleBot 4 renames the user side so that
``<ns>/cmd_vel`` is TwistStamped (relayed to the base's ``cmd_vel_stamped``) and
``<ns>/cmd_vel_unstamped`` is Twist (relayed to the base's ``cmd_vel``): a Twist on ``<ns>/cmd_vel``
matches no subscription and the base stands still, as on the real robot. Parameter services are not
relayed (the base's motion_control is read in ``_do_not_use``).

Run it with the Python of a ROS 2 environment (rclpy).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fieldtest.endpoints.status import say
from fieldtest.labrun.nodelogic.create3params import create3_base_namespace
from fieldtest.procs import stop_on_signals, watch_parent

if TYPE_CHECKING:
    from rclpy.qos import QoSProfile

ODOMETRY, BATTERY_STATE = "nav_msgs/msg/Odometry", "sensor_msgs/msg/BatteryState"
TWIST, TWIST_STAMPED = "geometry_msgs/msg/Twist", "geometry_msgs/msg/TwistStamped"


@dataclass(frozen=True)
class Relay:
    source: str  # absolute topic names
    target: str
    typename: str


def relays(robot_namespace: str, distro: str = "jazzy") -> list[Relay]:
    """The topics relayed for a simulated base: base -> user for its publications, user -> base
    for the commands; user-side names as the TurtleBot 4 remaps them on Jazzy."""
    user = "/" + robot_namespace.strip("/") if robot_namespace.strip("/") else ""
    base = create3_base_namespace(robot_namespace, distro)
    out = [Relay(f"{base}/{topic}", f"{user}/{topic}", kind) for topic, kind in (
        ("odom", ODOMETRY), ("battery_state", BATTERY_STATE))]  # fmt: skip
    out += [
        Relay(f"{user}/cmd_vel", f"{base}/cmd_vel_stamped", TWIST_STAMPED),
        Relay(f"{user}/cmd_vel_unstamped", f"{base}/cmd_vel", TWIST),
    ]
    return out


def _qos_pair() -> tuple[QoSProfile, QoSProfile]:
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    subscribe = QoSProfile(
        depth=1, reliability=ReliabilityPolicy.BEST_EFFORT, durability=DurabilityPolicy.VOLATILE
    )
    publish = QoSProfile(
        depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
    )
    return subscribe, publish


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fieldtest.labrun.rehearsal.republisher", description=__doc__.splitlines()[0]
    )
    p.add_argument("--namespace", default="", help="robot namespace, e.g. /tb4")
    p.add_argument("--distro", default="jazzy")
    p.add_argument("--domain-id", type=int, default=0)
    args = p.parse_args(argv)

    import rclpy

    from fieldtest.labrun.nodelogic.rclpy_transport import (
        init_without_signal_handlers,
        message_class,
        spin_in_background,
    )

    init_without_signal_handlers([], domain_id=args.domain_id)
    node = rclpy.create_node("create3_repub", namespace=args.namespace or None)
    subscribe_qos, publish_qos = _qos_pair()
    for relay in relays(args.namespace, args.distro):
        cls = message_class(relay.typename)
        publisher = node.create_publisher(cls, relay.target, publish_qos)
        node.create_subscription(cls, relay.source, publisher.publish, subscribe_qos, raw=True)
    executor, _thread = spin_in_background(node)
    with stop_on_signals() as stop:
        watch_parent(stop)
        say(
            f"READY republisher stand-in: {', '.join(f'{r.source} -> {r.target}' for r in relays(args.namespace, args.distro))}"
        )
        stop.wait()
    executor.shutdown(timeout_sec=1.0)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
