"""base_stop: the robot side's emergency stop. Publishes zero commands straight to the base on the
robot's own ROS graph (the one link_monitor's relay and create3_preflight use), so it needs
neither the link between the machines nor the host's bridge, router or broker.

The lab runner starts it over ssh (``fieldtest.labrun.nodelogic.estop``, ``RobotSide.emergency_stop``) when the
host side did not confirm its stop burst. It is started with the robot launch's environment and
the namespace of the trial; it prints one line: how many zero commands went to which topic and how
many subscribers (the base, a relay) had matched.

Parameters:
  cmd_type (str)      twist (Humble's base) or twist_stamped (Jazzy's create3_republisher)
  match_wait_s (float)  how long to keep sending zeros while waiting for the base's subscription
"""

from __future__ import annotations

import sys
import time

KIT_SUBSCRIBERS = ("link_monitor", "rosbag2")  # the kit's own readers of cmd_vel on the robot
HOLD_S = 1.0  # zeros keep going this long once the base has matched (about 20 at 20 Hz)
# The graph's name for an endpoint whose participant's node names have not arrived yet on
# ros_discovery_info (rmw_dds_common graph_cache.cpp): the reader is known, not yet whose it is.
UNKNOWN_NODE = "_NODE_NAME_UNKNOWN_"


def _base_matched(node, transport) -> tuple[bool, bool]:
    """(a subscriber other than the kit's is in the graph and every subscriber has matched us,
    every subscriber's node is named): the report line should say who heard the zeros."""
    from fieldtest.record import CMD_VEL_TOPIC

    infos = node.get_subscriptions_info_by_topic(transport.topic(CMD_VEL_TOPIC))
    base = [i for i in infos if not i.node_name.startswith(KIT_SUBSCRIBERS)]
    matched = bool(base) and transport.matched_subscriptions(CMD_VEL_TOPIC) >= len(infos)
    return matched, all(i.node_name != UNKNOWN_NODE for i in infos)


def main(argv: list[str] | None = None) -> int:
    import rclpy

    from fieldtest import rosmsg
    from fieldtest.endpoints.stop import zero_commands
    from fieldtest.labrun.nodelogic.rclpy_transport import RclpyTransport, init_without_signal_handlers
    from fieldtest.record import CMD_VEL_TOPIC

    init_without_signal_handlers(list(sys.argv if argv is None else argv))
    node = rclpy.create_node("base_stop")
    cmd_type = node.declare_parameter("cmd_type", "twist_stamped").value
    match_wait_s = float(node.declare_parameter("match_wait_s", 2.0).value)
    namespace = node.get_namespace().rstrip("/")
    transport = RclpyTransport(node, namespace, "default")
    typename = rosmsg.TWIST if cmd_type == "twist" else rosmsg.TWIST_STAMPED
    topic = transport.topic(CMD_VEL_TOPIC)
    transport.publisher(CMD_VEL_TOPIC, typename)  # the writer zero_commands uses: discovery starts now
    # Zeros go out from the start (harmless to a standing base) until the base itself (not the kit's
    # own link_monitor or bag recorder on the same topic) is in the graph and every subscriber has
    # matched this writer (then HOLD_S more, below); on a loaded machine discovery can take seconds.
    # The wait also covers the subscribers' node names, which arrive after the endpoints.
    sent, deadline = 0, time.monotonic() + match_wait_s
    while True:
        matched, named = _base_matched(node, transport)
        if (matched and named) or time.monotonic() >= deadline:
            break
        sent += zero_commands(transport, cmd_type)
    # Then hold zeros for HOLD_S: the base's reader may not have seen this writer yet (discovery is
    # not symmetric), and a motion command still in flight on the robot's graph must not be last.
    hold_until = time.monotonic() + HOLD_S
    while True:
        sent += zero_commands(transport, cmd_type)
        if time.monotonic() >= hold_until:
            break
    others = sorted({i.node_name for i in node.get_subscriptions_info_by_topic(topic)})
    print(
        f"sent {sent} zero commands to {topic} ({typename}); subscribers: {', '.join(others) or 'none'}",
        flush=True,
    )
    transport.close()
    node.destroy_node()
    rclpy.try_shutdown()
    return 0 if matched else 1


if __name__ == "__main__":
    sys.exit(main())
