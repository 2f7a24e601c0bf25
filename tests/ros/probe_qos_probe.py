"""Run in the ROS 2 environment (.venv-ros): the QoS the lab nodes' rclpy transport gives each link
topic, read back from the ROS graph, as JSON on stdout (argument: the trial's QoS profile name)."""

from __future__ import annotations

import json
import os
import sys

import rclpy

from fieldtest import rosmsg
from fieldtest.endpoints.clock import Clock
from fieldtest.labrun.nodelogic.rclpy_transport import RclpyTransport
from fieldtest.record.recordnames import CLOCK_PROBE_REPLY_TOPIC, CLOCK_PROBE_TOPIC, CMD_VEL_TOPIC
from fieldtest.transport.base import stamped_publisher, timed_subscribe

TOPICS = {  # topic: (type, the stamp the sender writes)
    CMD_VEL_TOPIC: (rosmsg.TWIST_STAMPED, rosmsg.COMMAND_SENT),
    CLOCK_PROBE_TOPIC: (rosmsg.CLOCK_PROBE, rosmsg.PROBE_T1),
    CLOCK_PROBE_REPLY_TOPIC: (rosmsg.CLOCK_PROBE, rosmsg.PROBE_T3),
}


def main(qos: str) -> dict:
    rclpy.init()
    node = rclpy.create_node("probe_qos")
    namespace = f"/probe_qos_{os.getpid()}"  # own topics: runs side by side
    transport = RclpyTransport(node, namespace, qos)
    clock = Clock()
    out: dict[str, dict[str, str]] = {}
    for topic, (typename, stamp) in TOPICS.items():  # as the nodes make them
        stamped_publisher(transport, topic, typename, stamp, clock)
        timed_subscribe(transport, topic, typename, lambda msg, arrival: None, clock)
        name = transport.topic(topic)
        (pub,) = node.get_publishers_info_by_topic(name)
        (sub,) = node.get_subscriptions_info_by_topic(name)
        out[topic] = {
            "publisher": pub.qos_profile.reliability.name.lower(),
            "subscription": sub.qos_profile.reliability.name.lower(),
        }
    transport.close()
    node.destroy_node()
    rclpy.shutdown()
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
