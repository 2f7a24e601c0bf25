"""Run in the ROS 2 environment (.venv-ros): one-way latency of the kit's rclpy transport while the
executor is kept busy, as JSON on stdout. A subscriber whose arrival is the callback's own reading
would count the executor's queueing (here a timer that blocks for ``busy_ms``) as link latency."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor

from fieldtest import rosmsg
from fieldtest.endpoints.clock import Clock
from fieldtest.labrun.nodelogic.rclpy_transport import RclpyTransport
from fieldtest.transport.base import prepare, stamped_publisher, timed_subscribe


def main(busy_ms: float, count: int) -> dict:
    rclpy.init()
    node = rclpy.create_node("arrival_probe")
    clock = Clock()
    transport = RclpyTransport(
        node, f"/arrival_probe_{os.getpid()}", "default"
    )  # own topics: runs side by side
    latencies: list[float] = []

    def on_command(msg, arrival_ns: int) -> None:
        latencies.append((arrival_ns - rosmsg.ns_of(msg.header.stamp)) / 1e6)

    timed_subscribe(transport, "cmd_vel", rosmsg.TWIST_STAMPED, on_command, clock)
    publish = stamped_publisher(transport, "cmd_vel", rosmsg.TWIST_STAMPED, rosmsg.COMMAND_SENT, clock)
    busy = node.create_timer(0.05, lambda: time.sleep(busy_ms / 1000.0))  # the executor's other work
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    time.sleep(1.0)  # discovery within the process
    for seq in range(count):
        publish(prepare(rosmsg.command(seq, 0, 0.1, 0.0), rosmsg.TWIST_STAMPED))
        time.sleep(0.013)
    time.sleep(0.5)
    busy.cancel()
    executor.shutdown(timeout_sec=2.0)
    spinner.join(timeout=2.0)  # no callback may still run when the node goes
    transport.close()
    node.destroy_node()
    rclpy.try_shutdown()
    return {"received": len(latencies), "latencies_ms": latencies}


if __name__ == "__main__":
    print(json.dumps(main(float(sys.argv[1]), int(sys.argv[2]))))
