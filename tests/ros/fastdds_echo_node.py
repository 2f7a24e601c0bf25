"""Run in the ROS 2 environment (.venv-ros) on rmw_fastrtps_cpp, the TurtleBot 4's RMW: a ROS node
that echoes every TwistStamped it gets on ``<namespace>/cmd_vel`` to ``<namespace>/echo``, for
at most ``seconds`` or until its stdin closes; prints READY once its endpoints exist and, at the end,
the seqs it received as JSON."""

from __future__ import annotations

import json
import sys
import threading

import rclpy
from rclpy.executors import SingleThreadedExecutor

from fieldtest import rosmsg
from fieldtest.labrun.nodelogic.rclpy_transport import RclpyTransport


def main(namespace: str, seconds: float) -> dict:
    rclpy.init()
    node = rclpy.create_node("fastdds_echo")
    transport = RclpyTransport(node, namespace, "default")
    echo = transport.publisher("echo", rosmsg.TWIST_STAMPED)
    seqs: list[int] = []

    def on_command(msg) -> None:
        seqs.append(rosmsg.seq_of(msg.header.frame_id))
        echo(msg)

    transport.subscribe("cmd_vel", rosmsg.TWIST_STAMPED, on_command)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    print("READY", flush=True)
    stdin_closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stdin_closed.set()), daemon=True).start()
    stdin_closed.wait(seconds)
    executor.shutdown(timeout_sec=2.0)
    spinner.join(timeout=2.0)
    transport.close()
    node.destroy_node()
    rclpy.try_shutdown()
    return {"received": seqs}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], float(sys.argv[2]))))
