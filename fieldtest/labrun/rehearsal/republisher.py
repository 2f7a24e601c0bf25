"""A stand-in for create3_republisher, for rehearsals whose simulated base sits where a Jazzy
TurtleBot 4 puts the Create 3 (``<ns>/_do_not_use``).

    python -m fieldtest.labrun.rehearsal.republisher --namespace /tb4 [--domain-id 0]

What it does is what upstream's node does (create3_examples create3_republisher/republisher.cpp,
with the TurtleBot 4's parameters, turtlebot4_robot turtlebot4_bringup/config/republisher.yaml):
each listed topic is relayed as serialized bytes, type unchanged, from a subscription with QoS depth
1, best effort, volatile to a publisher with depth 1, reliable, transient local. The base's
publications (``odom``, ``battery_state``) go from ``<ns>/_do_not_use/<topic>`` to ``<ns>/<topic>``,
the user's commands the other way. On Jazzy the TurtleBot 4 renames the user side so that
``<ns>/cmd_vel`` is TwistStamped (relayed to the base's ``cmd_vel_stamped``) and
``<ns>/cmd_vel_unstamped`` is Twist (relayed to the base's ``cmd_vel``): a Twist on ``<ns>/cmd_vel``
matches no subscription and the base stands still, as on the real robot. Parameter services are not
relayed (the base's motion_control is read in ``_do_not_use``).

``--record FILE`` (not upstream's) writes one CSV line per message the stand-in's executor took,
every relayed topic, after relaying it unchanged:

    taken_ns,received_ns,topic,command,seq,stamp_ns

``taken_ns`` when the callback got it and ``received_ns`` when the DDS layer received it (the
message info's reception stamp, 0 where rclpy gives none), both on the robot machine's clock
(CLOCK_REALTIME, as the link monitor's and the simulated base's stamps); ``command`` 1 for the
user's commands, whose ``seq`` and ``stamp_ns`` are read from a TwistStamped's serialized header
(its "seq:<k>" frame_id, -1 without one; a Twist, and every other message, has -1 and 0, as in the
simulated base's record, ``fieldtest.record.basecommands``). The takes of the base's publications
show when the executor was free to take a command. The two-machine tests judge what the depth-1
hops lost against it (``fieldtest.testkit.depthonehops``).

Run it with the Python of a ROS 2 environment (rclpy).
"""

from __future__ import annotations

import argparse
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fieldtest.endpoints.status import say
from fieldtest.labrun.nodelogic.create3params import create3_base_namespace
from fieldtest.procs import stop_on_signals, watch_parent
from fieldtest.rosmsg import seq_of

if TYPE_CHECKING:
    from rclpy.qos import QoSProfile

ODOMETRY, BATTERY_STATE = "nav_msgs/msg/Odometry", "sensor_msgs/msg/BatteryState"
TWIST, TWIST_STAMPED = "geometry_msgs/msg/Twist", "geometry_msgs/msg/TwistStamped"


@dataclass(frozen=True)
class Relay:
    source: str  # absolute topic names
    target: str
    typename: str

    @property
    def carries_commands(self) -> bool:
        return self.typename in (TWIST, TWIST_STAMPED)


def relays(robot_namespace: str, distro: str = "jazzy") -> list[Relay]:
    """The topics relayed for a simulated base: base -> user for its publications, user -> base
    for the commands; user-side names as the TurtleBot 4 remaps them on Jazzy."""
    user = "/" + robot_namespace.strip("/") if robot_namespace.strip("/") else ""
    base = create3_base_namespace(robot_namespace, distro)
    out = [Relay(f"{base}/{topic}", f"{user}/{topic}", kind) for topic, kind in (
        ("odom", ODOMETRY), ("battery_state", BATTERY_STATE))]  # fmt: skip
    out += [
        Relay(f"{user}/cmd_vel", f"{base}/cmd_vel_stamped", TWIST_STAMPED),
        Relay(f"{user}/cmd_vel_unstamped", f"{base}/cmd_vel", TWIST),
    ]
    return out


TAKES_HEADER = "taken_ns,received_ns,topic,command,seq,stamp_ns"
NO_SEQ = -1


@dataclass(frozen=True)
class Take:
    taken_ns: int
    received_ns: int  # the DDS layer's reception stamp, 0 if none
    topic: str
    command: bool
    seq: int  # the host's sequence number, NO_SEQ when the message carries none
    stamp_ns: int  # a command's header stamp; 0 for a Twist and other messages


def command_identity(data: bytes, stamped: bool) -> tuple[int, int]:
    """(seq, stamp_ns) of a serialized command, read from the CDR header of a TwistStamped
    (encapsulation, stamp sec and nanosec, frame_id length and text) without decoding the rest."""
    if not stamped or len(data) < 16:
        return NO_SEQ, 0
    order = "<" if data[1] & 1 else ">"  # CDR_LE / CDR_BE representation identifier
    sec, nanosec, length = struct.unpack_from(f"{order}iII", data, 4)
    frame_id = data[16 : 16 + max(length - 1, 0)].decode("utf-8", errors="replace")
    found = seq_of(frame_id)
    return (NO_SEQ if found is None else found), sec * 1_000_000_000 + nanosec


class TakeRecord:
    """Appends one line per message taken to ``path``, flushed per line (read while it runs)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("w")
        self._file.write(TAKES_HEADER + "\n")
        self._file.flush()
        self._lock = threading.Lock()

    def add(self, taken_ns: int, received_ns: int, relay: Relay, data: bytes) -> None:
        seq, stamp_ns = command_identity(data, relay.typename == TWIST_STAMPED)
        line = f"{taken_ns},{received_ns},{relay.source},{int(relay.carries_commands)},{seq},{stamp_ns}\n"
        with self._lock:
            if not self._file.closed:
                self._file.write(line)
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_takes(path: Path) -> list[Take]:
    """A take record's lines; a cut last line (the stand-in killed mid-write) is left out."""
    takes = []
    for line in path.read_text().splitlines()[1:]:
        cells = line.split(",")
        numbers = [cells[i] for i in (0, 1, 3, 4, 5)] if len(cells) == 6 else []
        if numbers and all(c.lstrip("-").isdigit() for c in numbers):
            taken, received, command, seq, stamp = map(int, numbers)
            takes.append(Take(taken, received, cells[2], bool(command), seq, stamp))
    return takes


def relay_callback(publish: Callable[[bytes], None], relay: Relay, record: TakeRecord | None) -> Callable:
    """What the subscription calls: the bytes go on unchanged, then the take is recorded, so the
    record adds nothing before the relay's own publish."""
    if record is None:
        return publish
    from fieldtest.labrun.nodelogic.rclpy_transport import MessageInfoIfGiven

    def relay_and_record(data: bytes, info: dict | None) -> None:
        taken_ns = time.time_ns()
        publish(data)
        record.add(taken_ns, int((info or {}).get("received_timestamp") or 0), relay, data)

    return MessageInfoIfGiven(relay_and_record)


def _qos_pair() -> tuple[QoSProfile, QoSProfile]:
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    subscribe = QoSProfile(
        depth=1, reliability=ReliabilityPolicy.BEST_EFFORT, durability=DurabilityPolicy.VOLATILE
    )
    publish = QoSProfile(
        depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
    )
    return subscribe, publish


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fieldtest.labrun.rehearsal.republisher", description=__doc__.splitlines()[0]
    )
    p.add_argument("--namespace", default="", help="robot namespace, e.g. /tb4")
    p.add_argument("--distro", default="jazzy")
    p.add_argument("--domain-id", type=int, default=0)
    p.add_argument("--record", type=Path, help="CSV of every command taken and relayed (see above)")
    args = p.parse_args(argv)

    import rclpy

    from fieldtest.labrun.nodelogic.rclpy_transport import (
        init_without_signal_handlers,
        message_class,
        spin_in_background,
    )

    init_without_signal_handlers([], domain_id=args.domain_id)
    node = rclpy.create_node("create3_repub", namespace=args.namespace or None)
    subscribe_qos, publish_qos = _qos_pair()
    record = TakeRecord(args.record) if args.record else None
    for relay in relays(args.namespace, args.distro):
        cls = message_class(relay.typename)
        publisher = node.create_publisher(cls, relay.target, publish_qos)
        callback = relay_callback(publisher.publish, relay, record)
        node.create_subscription(cls, relay.source, callback, subscribe_qos, raw=True)
    executor, _thread = spin_in_background(node)
    with stop_on_signals() as stop:
        watch_parent(stop)
        say(
            f"READY republisher stand-in: {', '.join(f'{r.source} -> {r.target}' for r in relays(args.namespace, args.distro))}"
        )
        stop.wait()
    executor.shutdown(timeout_sec=1.0)
    if record is not None:
        record.close()
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
