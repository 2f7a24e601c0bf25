"""Host/robot command exchange for the transport tests; the robot runs as its own OS process.

``exchange_commands(config, count)`` (host, in the test process) starts this file as the robot,
sends ``count`` TwistStamped commands and collects what both sides received.

The robot joins the link as "robot", subscribes /cmd_vel (TwistStamped), answers each command with a
CommandReceipt on /fieldtest/cmd_receipts, prints READY once it can receive, and, after ``--count``
commands (or ``--timeout`` seconds) it waits for the host's line on its stdin, sent once the host
has every receipt (or gave up on them), so its session closes only after its receipts were taken;
then one JSON line per command received, and DONE.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fieldtest import rosmsg
from fieldtest.middleware.registry import open_transport
from fieldtest.transport import TransportConfig

CMD_VEL = "/cmd_vel"
RECEIPTS = "/fieldtest/cmd_receipts"
RECEIPTS_TAKEN = "RECEIPTS-TAKEN"  # the host's line to the robot: close now


def receipt(cmd, received_ns: int):
    return rosmsg.msg_class(rosmsg.COMMAND_RECEIPT)(
        seq=rosmsg.seq_of(cmd.header.frame_id),
        sent=cmd.header.stamp,
        received=rosmsg.time_msg(received_ns),
        clock_offset_s=float("nan"),
        latency_s=float("nan"),
        twist=cmd.twist,
    )


def send_while_holding_gil(
    sender_script: str, config: TransportConfig, count: int, gil_hold_s: float, received: list, close
) -> None:
    """Run ``sender_script`` (``python -c``, args: config JSON, count, seed; it may import this
    module) as its own process while this one holds the GIL in spells of ``gil_hold_s``, until
    ``received`` has ``count`` items; then ``close()`` the receiver. Fails on a sender error or a
    missing item."""
    sender = subprocess.Popen(
        [
            sys.executable,
            "-c",
            sender_script,
            config.model_dump_json(),
            str(count),
            str(round(1e3 * gil_hold_s)),
        ],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _hold_gil_while(lambda: len(received) < count, gil_hold_s)
    finally:
        _, err = sender.communicate(timeout=30)
        close()
    assert sender.returncode == 0, err
    assert len(received) == count


def _hold_gil_while(waiting: Callable[[], bool], gil_hold_s: float, timeout_s: float = 30.0) -> None:
    """While ``waiting()`` (at most ``timeout_s``), hold the GIL for ``gil_hold_s`` at a time with
    short breaks, as the twin robot's physics loop and bag writer do for shorter spells."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(10 * gil_hold_s)  # no forced switch within a hold
    try:
        deadline = time.monotonic() + timeout_s
        while waiting() and time.monotonic() < deadline:
            until = time.monotonic() + gil_hold_s
            while time.monotonic() < until:
                pass  # no call that releases the GIL
            time.sleep(gil_hold_s / 4)  # a break: the receiving thread runs what came meanwhile
    finally:
        sys.setswitchinterval(previous)


@dataclass
class Exchange:
    sent: list  # TwistStamped as the host published them
    robot_received: list[dict]  # what the robot process reported, in arrival order
    receipts: list  # CommandReceipt the host got back, in arrival order
    robot_output: str


def command_for(seq: int):
    """A distinct command per sequence number, so content errors show."""
    return rosmsg.command(
        seq, 1_700_000_000_000_000_000 + seq * 33_333_333, 0.33 + seq * 1e-3, -0.5236 + seq * 1e-4
    )


def exchange_commands(
    config: TransportConfig, count: int, timeout_s: float = 20.0, open_host=open_transport
) -> Exchange:
    """Run the robot process, send ``count`` commands from here as host, collect both sides."""
    robot = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__)),
            "--config-json",
            config.model_dump_json(),
            "--count",
            str(count),
            "--timeout",
            str(timeout_s),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    host = None
    try:
        # zenoh-peer: the host connects to the robot's listener, retrying until it is up
        host = open_host(config, "host")
        receipts: list = []
        all_back = threading.Event()

        def on_receipt(msg) -> None:
            receipts.append(msg)
            if len(receipts) >= count:
                all_back.set()

        host.subscribe(RECEIPTS, rosmsg.COMMAND_RECEIPT, on_receipt)
        ready = robot.stdout.readline()  # bounded: the robot prints within its own timeout
        if ready.strip() != "READY":
            robot.kill()
            raise AssertionError(f"robot not ready: {ready!r}\n{robot.communicate()[0]}")
        if hasattr(host, "wait_matched"):
            assert host.wait_matched(CMD_VEL, timeout_s), "robot subscriber never matched"
        publish = host.publisher(CMD_VEL, rosmsg.TWIST_STAMPED)
        sent = [command_for(seq) for seq in range(count)]
        for cmd in sent:
            publish(cmd)
            time.sleep(0.001)
        all_back.wait(timeout_s)
        # the robot closes its session once told: every receipt is in here (or the wait is over)
        output, _ = robot.communicate(RECEIPTS_TAKEN + "\n", timeout=timeout_s + 10)
    finally:
        if host is not None:
            host.close()
        if robot.poll() is None:
            robot.kill()
            robot.communicate()
    lines = output.splitlines()
    assert lines and lines[-1] == "DONE", f"robot did not finish:\n{output}"
    robot_received = [json.loads(line) for line in lines if line.startswith("{")]
    return Exchange(sent, robot_received, list(receipts), output)


def check_exchange(ex: Exchange, count: int) -> None:
    """Every command reached the robot once, in order, unchanged; every receipt came back in order."""
    assert [r["frame_id"] for r in ex.robot_received] == [f"seq:{i}" for i in range(count)], ex.robot_output
    for cmd, got in zip(ex.sent, ex.robot_received, strict=True):
        assert got["stamp_ns"] == rosmsg.ns_of(cmd.header.stamp)
        assert got["linear_x"] == cmd.twist.linear.x
        assert got["angular_z"] == cmd.twist.angular.z
    assert [r.seq for r in ex.receipts] == list(range(count))
    for cmd, back in zip(ex.sent, ex.receipts, strict=True):
        assert rosmsg.ns_of(back.sent) == rosmsg.ns_of(cmd.header.stamp)
        assert back.twist.linear.x == cmd.twist.linear.x
        assert back.twist.angular.z == cmd.twist.angular.z


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config-json", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args()

    config = TransportConfig.model_validate_json(args.config_json)
    transport = open_transport(config, "robot")
    received: list[dict] = []
    all_in = threading.Event()
    publish_receipt = transport.publisher(RECEIPTS, rosmsg.COMMAND_RECEIPT)

    def on_command(cmd) -> None:
        now = time.time_ns()
        received.append(
            {
                "frame_id": cmd.header.frame_id,
                "stamp_ns": rosmsg.ns_of(cmd.header.stamp),
                "linear_x": cmd.twist.linear.x,
                "angular_z": cmd.twist.angular.z,
            }
        )
        publish_receipt(receipt(cmd, now))
        if len(received) >= args.count:
            all_in.set()

    transport.subscribe(CMD_VEL, rosmsg.TWIST_STAMPED, on_command)
    # Zenoh drops samples nobody subscribes to yet: wait until the host listens for receipts.
    if hasattr(transport, "wait_matched") and not transport.wait_matched(RECEIPTS, args.timeout):
        print("NO-MATCH", flush=True)
    print("READY", flush=True)
    all_in.wait(args.timeout)
    sys.stdin.readline()  # the host has taken the receipts (EOF: it is gone); closing loses none now
    transport.close()
    for item in list(received):
        print(json.dumps(item))
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
