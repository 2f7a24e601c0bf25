"""One end of the two-process DDS test (run by tests/test_transport_dds.py, not collected by pytest).

usage: dds_peer.py pub|sub DOMAIN NAMESPACE QOS COUNT

Both ends print "READY" once discovery matched their writer/reader. The publisher then waits for
a "GO" line on stdin and sends COUNT commands; the subscriber prints one JSON line per received
command (seq, stamp ns, v, w) and exits after COUNT messages or a timeout. The publisher keeps its
participant (and so its reliable writer's retransmissions) until a "DONE" line on stdin, which the
test sends once the subscriber has exited.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from fieldtest import rosmsg
from fieldtest.middleware.dds.transport import open_dds
from fieldtest.transport import TransportConfig

TOPIC = "/cmd_vel"
MATCH_TIMEOUT_S = 15.0
RECEIVE_TIMEOUT_S = 15.0
SEND_PERIOD_S = 0.005


def command_values(seq: int) -> tuple[float, float]:
    """The (v, w) the publisher sends for ``seq``, so the test can check content."""
    return 0.01 * seq, -0.5 + 0.02 * seq


def publish(transport, count: int) -> None:
    send = transport.publisher(TOPIC, rosmsg.TWIST_STAMPED)
    if not transport.wait_for_match(TOPIC, timeout_s=MATCH_TIMEOUT_S):
        sys.exit("publisher: no subscriber matched")
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "GO":
        sys.exit("publisher: expected GO")
    for seq in range(count):
        send(rosmsg.command(seq, 1_000_000_000 * seq + 7, *command_values(seq)))
        time.sleep(SEND_PERIOD_S)
    sys.stdin.readline()  # "DONE": the subscriber has what it got (EOF: the test is gone)


def subscribe(transport, count: int) -> None:
    received = []
    done = threading.Event()

    def on_command(msg) -> None:
        received.append(msg)
        if len(received) >= count:
            done.set()

    transport.subscribe(TOPIC, rosmsg.TWIST_STAMPED, on_command)
    if not transport.wait_for_match(TOPIC, timeout_s=MATCH_TIMEOUT_S):
        sys.exit("subscriber: no publisher matched")
    print("READY", flush=True)
    done.wait(RECEIVE_TIMEOUT_S)
    for msg in list(received):
        row = {
            "seq": rosmsg.seq_of(msg.header.frame_id),
            "stamp_ns": rosmsg.ns_of(msg.header.stamp),
            "v": msg.twist.linear.x,
            "w": msg.twist.angular.z,
        }
        print(json.dumps(row), flush=True)


def main() -> None:
    role, domain, namespace, qos, count = sys.argv[1:6]
    config = TransportConfig(domain_id=int(domain), namespace=namespace, qos=qos)
    transport = open_dds(config, "host" if role == "pub" else "robot")
    try:
        (publish if role == "pub" else subscribe)(transport, int(count))
    finally:
        transport.close()


if __name__ == "__main__":
    main()
