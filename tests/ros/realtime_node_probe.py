"""Run in the ROS 2 environment (.venv-ros) as root: a lab node's scheduling, as JSON on stdout.

The node asks for SCHED_FIFO first (as square_driver and link_monitor do), then opens rclpy, subscribes
to its own commands and spins in the background while the main thread publishes them at ``rate_hz``.
Reports each thread's policy by kind (main, rclpy executor and its workers, Fast DDS's own threads),
how many commands the executor delivered, and the executor's CPU time per command."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import rclpy

from fieldtest import rosmsg
from fieldtest.endpoints.clock import Clock
from fieldtest.labrun.nodelogic.rclpy_transport import RclpyTransport, spin_in_background
from fieldtest.realtime import try_realtime
from fieldtest.transport.base import prepare, stamped_publisher, timed_subscribe


def cpu_ticks() -> dict[str, int]:
    """Kind of thread -> its threads' CPU time so far (clock ticks)."""
    python = {t.native_id: t.name for t in threading.enumerate()}
    found: dict[str, int] = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            stat = open(f"/proc/self/task/{tid}/stat").read()
            comm = open(f"/proc/self/task/{tid}/comm").read().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        kind = python.get(tid) or comm
        found[kind] = found.get(kind, 0) + int(fields[11]) + int(fields[12])
    return found


def policies() -> dict[str, list[str]]:
    """Kind of thread -> the policies ("fifo"/"other") of this process's threads of that kind: Python
    threads by name (MainThread, rclpy-executor, executor-worker), native ones by their comm ("dds"
    for Fast DDS's dds.* threads, else "native")."""
    python = {t.native_id: t.name for t in threading.enumerate()}
    found: dict[str, list[str]] = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            comm = open(f"/proc/self/task/{tid}/comm").read().strip()
            policy = "fifo" if os.sched_getscheduler(tid) == os.SCHED_FIFO else "other"
        except OSError:
            continue
        name = python.get(tid)
        if name is None:
            kind = "dds" if comm.startswith("dds.") else "native"
        else:
            kind = "executor-worker" if name.startswith("ThreadPoolExecutor") else name
        found.setdefault(kind, []).append(policy)
    return found


def main(rate_hz: float, count: int) -> dict:
    realtime = try_realtime()
    rclpy.init()
    node = rclpy.create_node("realtime_probe")
    clock = Clock()
    transport = RclpyTransport(
        node, f"/realtime_probe_{os.getpid()}", "default"
    )  # own topics: runs side by side
    received: list[int] = []
    timed_subscribe(transport, "cmd_vel", rosmsg.TWIST_STAMPED, lambda m, _t: received.append(1), clock)
    publish = stamped_publisher(transport, "cmd_vel", rosmsg.TWIST_STAMPED, rosmsg.COMMAND_SENT, clock)
    executor, spinner = spin_in_background(node)
    time.sleep(1.0)  # discovery within the process
    ticks0 = cpu_ticks()
    for seq in range(count):
        publish(prepare(rosmsg.command(seq, 0, 0.1, 0.0), rosmsg.TWIST_STAMPED))
        time.sleep(1.0 / rate_hz)
    time.sleep(0.5)
    ticks = {kind: n - ticks0.get(kind, 0) for kind, n in cpu_ticks().items()}
    executor_ms = ticks.get("rclpy-executor", 0) * 1000 / os.sysconf("SC_CLK_TCK")
    threads = policies()
    executor.shutdown(timeout_sec=2.0)
    spinner.join(timeout=2.0)
    transport.close()
    node.destroy_node()
    rclpy.try_shutdown()
    return {
        "realtime": realtime,
        "received": len(received),
        "executor_cpu_ms_per_command": executor_ms / max(1, len(received)),
        "threads": threads,
    }


if __name__ == "__main__":
    print(json.dumps(main(float(sys.argv[1]), int(sys.argv[2]))))
