"""The lab's rclpy transport measures the link, not its own executor: the arrival is the RMW's
reception timestamp (message info), so time a sample waits for a busy executor is not latency.
Runs the real rclpy (ROS 2 wheels, Fast DDS) in .venv-ros; fails without it."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import pytest

from fieldtest.labrun.nodelogic.rclpy_transport import (
    arrival_ns,
    arrival_stamp_source,
    executor_needs_realtime,
)
from fieldtest.labrun.rehearsal.labrehearsal import ROS_VENV, ros_python

PROBE = Path(__file__).parent / "ros" / "rclpy_arrival_probe.py"


def test_arrival_takes_the_reception_stamp_on_the_callers_clock():
    # the caller's clock reads 5 s ahead of the wall clock; the sample arrived 30 ms before the callback
    wall = 1_800_000_000_000_000_000
    received = wall - 30_000_000
    assert (
        arrival_ns(wall + 5_000_000_000, wall, {"received_timestamp": received}) == received + 5_000_000_000
    )


@pytest.mark.parametrize("info", [None, {}, {"received_timestamp": 0}, {"received_timestamp": 200}])
def test_without_a_usable_reception_stamp_the_callback_reading_stands(info):
    assert arrival_ns(7_000, 100, info) == 7_000


@pytest.mark.parametrize(
    "rmw, distro, source, executor_realtime",
    [
        ("rmw_fastrtps_cpp", "jazzy", "reception", False),
        ("rmw_fastrtps_cpp", "humble", "callback", True),
        ("rmw_cyclonedds_cpp", "jazzy", "take", True),
        ("rmw_cyclonedds_cpp", "humble", "callback", True),
        ("rmw_zenoh_cpp", "jazzy", "unknown", True),
    ],
)
def test_each_rmw_names_its_arrival_stamp_and_what_it_includes(rmw, distro, source, executor_realtime):
    """rmw_cyclonedds sets received_timestamp at take time on Jazzy and leaves it 0 on Humble
    (rmw_cyclonedds_cpp src/rmw_node.cpp): its stamp waits for the executor, which then keeps the
    node's real-time priority. Not run here: no rmw_cyclonedds among the ROS 2 wheels."""
    stamp = arrival_stamp_source(rmw, distro)
    assert (stamp["source"], stamp["rmw"], stamp["ros_distro"]) == (source, rmw, distro)
    assert stamp["includes"]
    assert ("executor" in stamp["includes"]) == (source in ("reception", "take", "callback"))
    assert executor_needs_realtime(rmw, distro) is executor_realtime


@pytest.mark.parametrize("busy_ms", [0.0, 20.0, 40.0])
def test_a_busy_executor_does_not_count_as_link_latency(busy_ms):
    python = ros_python(ROS_VENV)
    done = subprocess.run(
        [python, str(PROBE), str(busy_ms), "80"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    latencies = sorted(result["latencies_ms"])
    assert result["received"] >= 60  # keep-last history: a starved executor (a loaded machine) drops some
    # Loopback within one process: well under a millisecond unless the OS delays DDS's own thread;
    # the executor's queueing (up to busy_ms) must not appear in the median.
    assert statistics.median(latencies) < 1.0 + busy_ms / 10, latencies


REALTIME_PROBE = Path(__file__).parent / "ros" / "realtime_node_probe.py"


@pytest.mark.parametrize("rate_hz", [20.0, 100.0])
def test_a_realtime_node_keeps_its_executor_at_normal_priority(rate_hz):
    """A lab node at SCHED_FIFO (tests run with the right): Fast DDS's threads inherit it, rclpy's
    executor does not, and it does not spin. rclpy's MultiThreadedExecutor re-polls a ready entity
    until a worker takes it; at FIFO that kept its workers off the core (both nodes spun at 90 % CPU
    and no command was sent), and even at normal priority it burnt most of a core at 100 Hz."""
    count = int(rate_hz * 2)
    done = subprocess.run(
        [ros_python(ROS_VENV), str(REALTIME_PROBE), str(rate_hz), str(count)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    threads = result["threads"]
    assert result["realtime"], "tests run with the right to SCHED_FIFO"
    assert threads["MainThread"] == ["fifo"], threads  # the send loop
    assert set(threads["dds"]) == {"fifo"}, threads  # the middleware's receive and event threads
    assert threads["rclpy-executor"] == ["other"], threads
    assert result["received"] == count, result
    # no spinning executor: rclpy's MultiThreadedExecutor spent 4-15 ms of CPU per command at 100 Hz
    assert result["executor_cpu_ms_per_command"] < 3.0, result
