"""Run in the ROS 2 environment (.venv-ros) on rmw_fastrtps_cpp, the Create 3's RMW: a ROS node's
real parameter service, or a real GetParameters client (rclpy's own encodings on Fast DDS).

    parameter_node.py serve NAMESPACE NAME    a node NAMESPACE/NAME with safety_override "full" and
                                              reflexes_enabled false; prints READY, stops when stdin closes
    parameter_node.py get SECONDS NODE...     GetParameters of those two on each NODE; prints JSON
                                              {NODE: {"server": matched, "values": [...] or null (no reply)}}
"""

from __future__ import annotations

import faulthandler
import json
import sys
import threading
import time

import rclpy
from rcl_interfaces.srv import GetParameters
from rclpy.parameter import parameter_value_to_python

NAMES = ["safety_override", "reflexes_enabled"]


def serve(namespace: str, name: str) -> None:
    rclpy.init()
    node = rclpy.create_node(name, namespace=namespace)
    node.declare_parameter("safety_override", "full")
    node.declare_parameter("reflexes_enabled", False)
    print("READY", flush=True)
    stdin_closed = threading.Event()

    def wait_for_stdin_to_close() -> None:
        sys.stdin.read()
        stdin_closed.set()
        # the answers are given: a hang from here on is the teardown's, said on stderr, not the test's
        faulthandler.dump_traceback_later(5, exit=True)

    threading.Thread(target=wait_for_stdin_to_close, daemon=True).start()
    while not stdin_closed.is_set():
        rclpy.spin_once(node, timeout_sec=0.1)
    node.destroy_node()
    rclpy.shutdown()


def get(node, target: str, seconds: float) -> dict:
    client = node.create_client(GetParameters, f"{target}/get_parameters")
    server = client.wait_for_service(timeout_sec=seconds)
    time.sleep(1.0)  # the graph may show the server before this client's request writer matched it
    future = client.call_async(GetParameters.Request(names=NAMES))
    deadline = time.monotonic() + seconds
    while not future.done() and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    values = [parameter_value_to_python(v) for v in future.result().values] if future.done() else None
    return {"server": server, "values": values}


def get_each(seconds: float, targets: list[str]) -> dict:
    rclpy.init()
    node = rclpy.create_node("parameter_reader")
    answers = {target: get(node, target, seconds) for target in targets}
    node.destroy_node()
    rclpy.shutdown()
    return answers


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])
    else:
        print(json.dumps(get_each(float(sys.argv[2]), sys.argv[3:])), flush=True)
