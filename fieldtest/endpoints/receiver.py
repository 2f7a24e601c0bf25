"""The robot end: every command's arrival stamped, receipted with its latency, and handed on.

A ``CommandReceiver`` subscribes to the commands (TwistStamped on /cmd_vel, or for ``cmd_type:
twist`` a Twist on /cmd_vel plus a std_msgs/Header on /fieldtest/cmd_stamp, paired by arrival
order), hands each one to ``on_command(twist, arrival_ns)`` the moment it arrives (the twin's
Create 3 model, the lab's relay to the base), and logs a CommandReceipt per command into the robot
bag (<trial>/robot, robot clock): its ``received`` field the arrival, its log time the take (when
the receiver's callback had the command). It initiates the clock-offset probes (``fieldtest.clocksync``,
``poll`` sends them when due), corrects each receipt's latency with the running estimate and logs
each completed probe as a ClockOffsetSample. ``link_summary`` gives the link's counts for
``robot_status.json``; what drives the robot adds its own fields.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fieldtest import rosmsg
from fieldtest.clocksync import ProbeInitiator, ProbeSample, one_way_latency_s
from fieldtest.endpoints.stop import ESTOP_SEQ
from fieldtest.record import (
    CLOCK_OFFSET_TOPIC,
    CLOCK_PROBE_REPLY_TOPIC,
    CLOCK_PROBE_TOPIC,
    CMD_STAMP_TOPIC,
    CMD_VEL_TOPIC,
    RECEIPTS_TOPIC,
    ROBOT_BAG,
    BagWriter,
    TrialRequest,
)
from fieldtest.transport.base import Transport, prepare, stamped_publisher, timed_subscribe

from .clock import Clock
from .link import close_transport, matched_publishers, warm_up_codecs

NO_SEQ = 2**64 - 1  # receipt seq of a command that carried none (e.g. from a teleop node)
STATUS_FILE = "robot_status.json"
_CODECS = (rosmsg.TWIST_STAMPED, rosmsg.TWIST, rosmsg.HEADER, rosmsg.CLOCK_PROBE, rosmsg.COMMAND_RECEIPT)

CommandFn = Callable[[Any, int], None]


@dataclass
class Arrival:
    received_ns: int
    twist: Any


class ArrivalPairer:
    """Humble mode: pair each Twist with its Header companion in arrival order, whichever is first."""

    def __init__(self) -> None:
        self._twists: deque[Arrival] = deque()
        self._stamps: deque[Any] = deque()
        self._lock = threading.Lock()

    def twist(self, arrival: Arrival) -> tuple[Arrival, Any] | None:
        with self._lock:
            if self._stamps:
                return arrival, self._stamps.popleft()
            self._twists.append(arrival)
            return None

    def stamp(self, header: Any) -> tuple[Arrival, Any] | None:
        with self._lock:
            if self._twists:
                return self._twists.popleft(), header
            self._stamps.append(header)
            return None

    @property
    def unpaired(self) -> tuple[int, int]:
        return len(self._twists), len(self._stamps)


@dataclass
class RobotStats:
    received: int = 0
    unsequenced: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    last_received_ns: int | None = None
    seqs: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, seq: int | None, received_ns: int) -> None:
        with self._lock:
            self._add(seq, received_ns)

    def _add(self, seq: int | None, received_ns: int) -> None:
        self.received += 1
        self.last_received_ns = received_ns
        if seq is None:
            self.unsequenced += 1
            return
        self.seqs.add(seq)
        self.first_seq = seq if self.first_seq is None else min(self.first_seq, seq)
        self.last_seq = seq if self.last_seq is None else max(self.last_seq, seq)

    plan_ticks: int | None = None  # seqs from here on are the host's stop burst, numbered on after the plan

    def missing(self) -> int:
        """Gaps among the plan commands received (first to last) and in the stop burst (from its
        first number): a trial stopped early sent neither the rest of the plan nor is it missing."""
        with self._lock:
            seqs = sorted(self.seqs)
        end = self.plan_ticks if self.plan_ticks is not None else (seqs[-1] + 1 if seqs else 0)
        plan = [s for s in seqs if s < end]
        burst = [s for s in seqs if s >= end and s != ESTOP_SEQ]  # an emergency stop is no burst
        gaps = (plan[-1] - plan[0] + 1 - len(plan)) if plan else 0
        return gaps + ((burst[-1] - end + 1 - len(burst)) if burst else 0)


def offset_sample_msg(sample: ProbeSample) -> Any:
    return rosmsg.msg_class(rosmsg.CLOCK_OFFSET_SAMPLE)(
        id=sample.id,
        t1=rosmsg.time_msg(sample.t1_ns),
        t2=rosmsg.time_msg(sample.t2_ns),
        t3=rosmsg.time_msg(sample.t3_ns),
        t4=rosmsg.time_msg(sample.t4_ns),
        offset_s=sample.offset_s,
        delay_s=sample.delay_s,
    )


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


class CommandReceiver:
    """The robot end of a trial over ``transport``: command subscriptions, receipts, probes, robot bag."""

    def __init__(
        self,
        request: TrialRequest,
        trial_dir: Path,
        transport: Transport,
        clock: Clock,
        on_command: CommandFn | None = None,
        probe_once_matched: bool = False,
    ):
        self.clock = clock
        self.on_command = on_command
        # the twin's host goes once the robot's probes arrive: holding them until the command
        # subscription has matched a publisher makes that go wait for it (the lab's pre-flight
        # reads the match from the robot's status instead)
        self._probe_once_matched = probe_once_matched
        self.probes = ProbeInitiator()
        # where the latency's clock offset comes from: the link's own probes unless another channel
        # is given (use_offset_source: the lab's UDP probes, fieldtest.labrun.nodelogic.udpclock)
        self.offset_probes, self.offset_source = self.probes, "link"
        self.stats = RobotStats(plan_ticks=request.plan.n_ticks())
        self.pairer = ArrivalPairer()
        warm_up_codecs(*_CODECS)
        self.transport = transport
        self.transport_hung = False
        try:
            self.bag = BagWriter(trial_dir / ROBOT_BAG, background=True)
        except BaseException:
            transport.close()
            raise
        # Arrival and send stamps come from the transport, taken as close to the wire as it can.
        self._publish_probe = stamped_publisher(
            transport, CLOCK_PROBE_TOPIC, rosmsg.CLOCK_PROBE, rosmsg.PROBE_T1, clock
        )
        timed_subscribe(transport, CLOCK_PROBE_REPLY_TOPIC, rosmsg.CLOCK_PROBE, self._on_probe_reply, clock)
        self.twist_mode = request.cmd_type == "twist"
        if self.twist_mode:
            timed_subscribe(transport, CMD_VEL_TOPIC, rosmsg.TWIST, self._on_twist, clock)
            transport.subscribe(CMD_STAMP_TOPIC, rosmsg.HEADER, self._on_stamp)
        else:
            timed_subscribe(transport, CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, self._on_twist_stamped, clock)

    # Commands -----------------------------------------------------------------------------
    def _hand_on(self, twist: Any, received_ns: int) -> None:
        if self.on_command is not None:
            self.on_command(twist, received_ns)

    # Each receipt's bag record is logged at the take (the clock read first thing in the callback
    # that completes it); ``received`` stays the arrival: between them, the wait for the receiver.
    def _on_twist_stamped(self, msg: Any, received_ns: int) -> None:
        taken_ns = self.clock.now_ns()
        self._hand_on(msg.twist, received_ns)
        self._log_receipt(msg.header, received_ns, msg.twist, taken_ns)

    def _on_twist(self, msg: Any, received_ns: int) -> None:
        taken_ns = self.clock.now_ns()
        self._hand_on(msg, received_ns)
        pair = self.pairer.twist(Arrival(received_ns, msg))
        if pair is not None:
            self._log_receipt(pair[1], pair[0].received_ns, pair[0].twist, taken_ns)

    def _on_stamp(self, header: Any) -> None:
        taken_ns = self.clock.now_ns()
        pair = self.pairer.stamp(header)
        if pair is not None:
            self._log_receipt(pair[1], pair[0].received_ns, pair[0].twist, taken_ns)

    def _log_receipt(self, header: Any, received_ns: int, twist: Any, taken_ns: int) -> None:
        seq = rosmsg.seq_of(header.frame_id)
        sent_ns = rosmsg.ns_of(header.stamp)
        offset = self.offset_probes.offset_s
        receipt = rosmsg.msg_class(rosmsg.COMMAND_RECEIPT)(
            seq=NO_SEQ if seq is None else seq,
            sent=rosmsg.time_msg(sent_ns),
            received=rosmsg.time_msg(received_ns),
            clock_offset_s=offset,
            latency_s=one_way_latency_s(sent_ns, received_ns, offset),
            twist=twist,
        )
        self.stats.add(seq, received_ns)
        self.bag.write(RECEIPTS_TOPIC, rosmsg.COMMAND_RECEIPT, taken_ns, receipt)

    # Clock probes -------------------------------------------------------------------------
    def poll(self, now_ns: int) -> None:
        """Send a clock probe if one is due (call it from the robot's periodic loop)."""
        if self.probes.due(now_ns) and self._may_probe():
            self._send_probe()

    def _may_probe(self) -> bool:
        if self._probe_once_matched and self.command_publishers() == 0:  # None: cannot tell, go on
            return False
        self._probe_once_matched = False  # matched once: a later loss of the match is the link's
        return True

    def _send_probe(self, follow_up: bool = False) -> None:
        def send(probe_id: int) -> int:
            zero = rosmsg.time_msg(0)
            probe = rosmsg.msg_class(rosmsg.CLOCK_PROBE)(id=probe_id, t1=zero, t2=zero, t3=zero)
            return self._publish_probe(prepare(probe, rosmsg.CLOCK_PROBE))  # stamps t1

        self.probes.send_probe(send, follow_up=follow_up)

    def _on_probe_reply(self, msg: Any, t4: int) -> None:
        t1, t2, t3 = (rosmsg.ns_of(t) for t in (msg.t1, msg.t2, msg.t3))
        sample = self.probes.on_reply(msg.id, t1, t2, t3, t4)
        if self.probes.wants_follow_up(sample):
            self._send_probe(follow_up=True)  # at once, while both ends are warm (fieldtest.clocksync)
        if sample is not None and self.offset_probes is self.probes:
            self.record_offset_sample(sample)

    def use_offset_source(self, probes: ProbeInitiator, name: str) -> None:
        """Correct latency with ``probes`` of another channel (their samples go to the bag through
        ``record_offset_sample``); the link's own probes then only show that the link works."""
        self.offset_probes, self.offset_source = probes, name

    def record_offset_sample(self, sample: ProbeSample) -> None:
        self.bag.write(
            CLOCK_OFFSET_TOPIC, rosmsg.CLOCK_OFFSET_SAMPLE, sample.t4_ns, offset_sample_msg(sample)
        )

    # Status and shutdown ------------------------------------------------------------------
    def command_publishers(self) -> int | None:
        """Publishers matched by the command subscription(s), the fewest of them (Humble's Twist and
        its Header each need one); None where the transport cannot tell. Until it is at least 1 a
        command sent is not taken in: a reliable writer resends nothing from before the match."""
        topics = [CMD_VEL_TOPIC, CMD_STAMP_TOPIC] if self.twist_mode else [CMD_VEL_TOPIC]
        counts = [matched_publishers(self.transport, topic) for topic in topics]
        return None if None in counts else min(c for c in counts if c is not None)

    def link_summary(self) -> dict[str, Any]:
        """The link's counts for robot_status.json (both ends of the kit write these keys)."""
        return {
            "received": self.stats.received,
            "first_seq": self.stats.first_seq,
            "last_seq": self.stats.last_seq,
            "missing_in_range": self.stats.missing(),
            "unsequenced": self.stats.unsequenced,
            "unpaired_twist_stamp": list(self.pairer.unpaired),
            "last_received_ns": self.stats.last_received_ns,
            "clock_offset_s": finite_or_none(self.offset_probes.offset_s),
            "clock_round_trip_s": finite_or_none(self.offset_probes.delay_s),
            "clock_offset_source": self.offset_source,
            "clock_offset_probes": self.offset_probes.completed,
            "link_probe_offset_s": finite_or_none(self.probes.offset_s),
            "link_probe_round_trip_s": finite_or_none(self.probes.delay_s),
            "probes_sent": self.probes.sent,
            "probes_completed": self.probes.completed,
        }

    def close(self) -> None:
        """Leave the link (giving up on a middleware that hangs: ``transport_hung``), close the bag."""
        try:
            self.transport_hung = not close_transport(self.transport, "robot")
        finally:
            self.bag.close()
