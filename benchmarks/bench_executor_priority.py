#!/usr/bin/env python3
"""An arrival stamp that waits for rclpy's executor (rmw_cyclonedds: take time on Jazzy, the
callback's reading on Humble) under CPU load: the link monitor's executor at normal priority
against SCHED_FIFO 10 (what link_monitor does on such an RMW, fieldtest.labrun.nodelogic.rclpy_transport).

    .venv-ros/bin/python benchmarks/bench_executor_priority.py [--count 400] [--hogs 4]

No rmw_cyclonedds here (not among the ROS 2 wheels): the subscriber runs on Fast DDS and stamps
each arrival with the callback's own reading, which is what a take-time stamp also measures (the
take happens in the executor, just before the callback). The publisher is another process at
SCHED_FIFO; ``--hogs`` busy-looping processes at normal priority stand in for the Pi's other work.
Prints median, p90, p99 and max one-way latency per case (ms). Needs root or an rtprio limit.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time

import numpy as np

SUBSCRIBER = r"""
import json, os, sys, threading, time
import rclpy
from rclpy.executors import SingleThreadedExecutor
from fieldtest import rosmsg
from fieldtest.endpoints.clock import Clock
from fieldtest.labrun.nodelogic.rclpy_transport import RclpyTransport
from fieldtest.realtime import leave_thread_realtime, try_realtime
from fieldtest.transport.base import timed_subscribe

executor_realtime, count, topic = sys.argv[1] == "1", int(sys.argv[2]), sys.argv[3]
try_realtime()
rclpy.init()
node = rclpy.create_node("executor_priority_sub")
clock = Clock()
transport = RclpyTransport(node, topic, "default")
latencies = []
done = threading.Event()

def on_command(msg, _arrival_ns):
    now = clock.now_ns()  # the callback's own reading: what a take-time stamp also includes
    latencies.append((now - rosmsg.ns_of(msg.header.stamp)) / 1e6)
    if len(latencies) >= count:
        done.set()

timed_subscribe(transport, "cmd_vel", rosmsg.TWIST_STAMPED, on_command, clock)
executor = SingleThreadedExecutor()
executor.add_node(node)

def spin():
    if not executor_realtime:
        leave_thread_realtime()
    executor.spin()

threading.Thread(target=spin, daemon=True).start()
print("READY", flush=True)
done.wait(timeout=count * 0.05 + 30)
print(json.dumps(latencies), flush=True)
os._exit(0)
"""

PUBLISHER = r"""
import sys, time
import rclpy
from fieldtest import rosmsg
from fieldtest.endpoints.clock import Clock
from fieldtest.labrun.nodelogic.rclpy_transport import RclpyTransport
from fieldtest.realtime import try_realtime
from fieldtest.transport.base import prepare, stamped_publisher

count, topic = int(sys.argv[1]), sys.argv[2]
try_realtime()
rclpy.init()
node = rclpy.create_node("executor_priority_pub")
clock = Clock()
transport = RclpyTransport(node, topic, "default")
publish = stamped_publisher(transport, "cmd_vel", rosmsg.TWIST_STAMPED, rosmsg.COMMAND_SENT, clock)
transport.wait_matched("cmd_vel", 10.0)
time.sleep(0.5)
for seq in range(count + 20):
    publish(prepare(rosmsg.command(seq, 0, 0.1, 0.0), rosmsg.TWIST_STAMPED))
    time.sleep(0.05)  # the lab's 20 Hz
"""


def hog() -> None:
    while True:
        pass


def run_case(executor_realtime: bool, count: int) -> np.ndarray:
    topic = f"/executor_priority_{os.getpid()}_{int(executor_realtime)}"
    sub = subprocess.Popen(
        [sys.executable, "-c", SUBSCRIBER, "1" if executor_realtime else "0", str(count), topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sub.stdout is not None
    assert sub.stdout.readline().strip() == "READY"
    pub = subprocess.Popen([sys.executable, "-c", PUBLISHER, str(count), topic])
    out = sub.stdout.readline()
    sub.wait(timeout=60)
    pub.wait(timeout=60)
    return np.array(json.loads(out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--hogs", type=int, default=4, help="busy-looping processes at normal priority")
    args = parser.parse_args()
    hogs = [multiprocessing.Process(target=hog, daemon=True) for _ in range(args.hogs)]
    for h in hogs:
        h.start()
    time.sleep(0.5)
    try:
        print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs, {args.hogs} hogs")
        print("executor      n   median    p90    p99    max  (ms, callback-reading stamp)")
        for realtime in (False, True, False, True):
            lat = run_case(realtime, args.count)
            p50, p90, p99 = np.percentile(lat, [50, 90, 99])
            name = "SCHED_FIFO" if realtime else "normal"
            print(f"{name:<10} {len(lat):4d}  {p50:6.2f} {p90:6.2f} {p99:6.2f} {lat.max():6.2f}")
    finally:
        for h in hogs:
            h.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
