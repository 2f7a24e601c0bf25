"""The twin robot process: a Create 3 model driven by /cmd_vel over the trial's middleware.

    python -m fieldtest.twin.robot --trial-dir D [--config REQUEST.{json,yaml}]

It subscribes to the commands (TwistStamped on /cmd_vel, or for ``cmd_type: twist`` a Twist on
/cmd_vel plus a std_msgs/Header on /fieldtest/cmd_stamp, paired by arrival order), applies each
one to the model the moment it arrives, and logs a CommandReceipt per command into its own bag
(D/robot, robot clock). It starts the clock-offset probes (``fieldtest.clocksync``) and corrects
each receipt's latency with the running estimate. A physics loop advances the model, feeds the
true pose to the NatNet emulator (UDP pose feed, ``twin.truth_port``) and logs it at 50 Hz on
/twin/true_pose. It prints ``READY`` once subscribed and runs until SIGTERM/SIGINT (or its parent
dies), then closes its bag and adds its clock estimate to trial.yaml's outcome.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fieldtest import rosmsg
from fieldtest.clocksync import ProbeInitiator, ProbeSample, one_way_latency_s
from fieldtest.machine import lateness_summary
from fieldtest.middleware.registry import open_transport
from fieldtest.natnet.feed import PoseFeedSender
from fieldtest.procs import stop_on_signals, watch_parent
from fieldtest.realtime import leave_realtime, try_realtime
from fieldtest.record import (
    CLOCK_OFFSET_TOPIC,
    CLOCK_PROBE_REPLY_TOPIC,
    CLOCK_PROBE_TOPIC,
    CMD_STAMP_TOPIC,
    CMD_VEL_TOPIC,
    RECEIPTS_TOPIC,
    ROBOT_BAG,
    TWIN_TRUTH_TOPIC,
    BagWriter,
    TrialFormatError,
    TrialOutcome,
    TrialRequest,
)
from fieldtest.security.keystore import KeystoreError
from fieldtest.transport import Transport
from fieldtest.transport.base import prepare, stamped_publisher, timed_subscribe
from fieldtest.twin.clock import Clock
from fieldtest.twin.common import (
    GIL_SWITCH_S,
    TwinConfigError,
    close_transport,
    load_request,
    say,
    update_outcome,
    warm_up_codecs,
    write_status,
)
from fieldtest.twin.create3 import Create3Model, Imperfections

NO_SEQ = 2**64 - 1  # receipt seq of a command that carried none (e.g. from a teleop node)
TRUTH_FRAME = "twin_world"
PHYSICS_HZ = 250.0
TRUTH_LOG_HZ = 50.0
STATUS_FILE = "robot_status.json"
_CODECS = (
    rosmsg.TWIST_STAMPED,
    rosmsg.TWIST,
    rosmsg.HEADER,
    rosmsg.CLOCK_PROBE,
    rosmsg.COMMAND_RECEIPT,
    rosmsg.POSE_STAMPED,
)


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
        burst = [s for s in seqs if s >= end]
        gaps = (plan[-1] - plan[0] + 1 - len(plan)) if plan else 0
        return gaps + ((burst[-1] - end + 1 - len(burst)) if burst else 0)


def model_for(request: TrialRequest) -> Create3Model:
    twin = request.twin
    imperfections = Imperfections(
        wheel_speed_error=twin.wheel_speed_error,
        heading_bias_dps=twin.heading_bias_dps,
        slip=twin.slip,
        seed=request.seed,
    )
    return Create3Model(twin.safety_override, imperfections)


class TwinRobot:
    """One twin robot: model, transport endpoints, bag and probes. ``run(stop)`` blocks."""

    def __init__(
        self,
        request: TrialRequest,
        trial_dir: Path,
        *,
        transport: Transport | None = None,
        physics_hz: float = PHYSICS_HZ,
        truth_log_hz: float = TRUTH_LOG_HZ,
        realtime: bool = False,
    ):
        self.request = request
        self.realtime = realtime
        self.trial_dir = trial_dir
        self.clock = Clock(request.twin.robot_clock_offset_s)
        self.model = model_for(request)
        self.physics_period_ns = round(1e9 / physics_hz)
        self.truth_every = max(1, round(physics_hz / truth_log_hz))
        self.probes = ProbeInitiator()
        self.stats = RobotStats(plan_ticks=request.plan.n_ticks())
        self.pairer = ArrivalPairer()
        self.started_ns = self.clock.now_ns()
        self._t0_ns = self.started_ns
        self._lock = threading.Lock()  # the model: commands arrive on middleware threads
        self._watchdog_reported = 0
        # the robot's own timing faults (docs/analysis.md, "Stack faults and the machine"): how long
        # after its arrival stamp each command reached the model, and how late each physics step woke
        self.apply_late_ms: list[float] = []
        self.step_late_ms: list[float] = []
        self.steps_skipped = 0
        warm_up_codecs(*_CODECS)
        self.transport = transport or open_transport(request.transport, "robot")
        self.transport_hung = False
        try:
            self.bag = BagWriter(trial_dir / ROBOT_BAG, background=True)
        except BaseException:
            self.transport.close()
            raise
        port, path = request.twin.truth_port, request.twin.truth_socket
        self.feed = PoseFeedSender(path) if path else PoseFeedSender("127.0.0.1", port) if port else None
        # Arrival and send stamps come from the transport, taken as close to the wire as it can.
        t = self.transport
        self._publish_probe = stamped_publisher(
            t, CLOCK_PROBE_TOPIC, rosmsg.CLOCK_PROBE, rosmsg.PROBE_T1, self.clock
        )
        timed_subscribe(t, CLOCK_PROBE_REPLY_TOPIC, rosmsg.CLOCK_PROBE, self._on_probe_reply, self.clock)
        if request.cmd_type == "twist":
            timed_subscribe(t, CMD_VEL_TOPIC, rosmsg.TWIST, self._on_twist, self.clock)
            t.subscribe(CMD_STAMP_TOPIC, rosmsg.HEADER, self._on_stamp)
        else:
            timed_subscribe(t, CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, self._on_twist_stamped, self.clock)

    # Time ---------------------------------------------------------------------------------
    def _model_t(self, robot_ns: int) -> float:
        return (robot_ns - self._t0_ns) / 1e9

    def robot_ns_of_model(self, t: float) -> int:
        return self._t0_ns + round(t * 1e9)

    # Commands -----------------------------------------------------------------------------
    def _apply(self, twist: Any, received_ns: int) -> None:
        with self._lock:
            self.apply_late_ms.append(max(0, self.clock.now_ns() - received_ns) / 1e6)
            self.model.set_command(twist.linear.x, twist.angular.z, self._model_t(received_ns))

    def _on_twist_stamped(self, msg: Any, received_ns: int) -> None:
        self._apply(msg.twist, received_ns)
        self._log_receipt(msg.header, received_ns, msg.twist)

    def _on_twist(self, msg: Any, received_ns: int) -> None:
        self._apply(msg, received_ns)
        pair = self.pairer.twist(Arrival(received_ns, msg))
        if pair is not None:
            self._log_receipt(pair[1], pair[0].received_ns, pair[0].twist)

    def _on_stamp(self, header: Any) -> None:
        pair = self.pairer.stamp(header)
        if pair is not None:
            self._log_receipt(pair[1], pair[0].received_ns, pair[0].twist)

    def _log_receipt(self, header: Any, received_ns: int, twist: Any) -> None:
        seq = rosmsg.seq_of(header.frame_id)
        sent_ns = rosmsg.ns_of(header.stamp)
        offset = self.probes.offset_s
        receipt = rosmsg.msg_class(rosmsg.COMMAND_RECEIPT)(
            seq=NO_SEQ if seq is None else seq,
            sent=rosmsg.time_msg(sent_ns),
            received=rosmsg.time_msg(received_ns),
            clock_offset_s=offset,
            latency_s=one_way_latency_s(sent_ns, received_ns, offset),
            twist=twist,
        )
        self.stats.add(seq, received_ns)
        self.bag.write(RECEIPTS_TOPIC, rosmsg.COMMAND_RECEIPT, received_ns, receipt)

    # Clock probes -------------------------------------------------------------------------
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
        if sample is not None:
            self.bag.write(CLOCK_OFFSET_TOPIC, rosmsg.CLOCK_OFFSET_SAMPLE, t4, offset_sample_msg(sample))

    # Physics ------------------------------------------------------------------------------
    def step(self, tick: int) -> None:
        """Advance the model to now, feed and log the true pose, probe if due."""
        now = self.clock.now_ns()
        with self._lock:
            self.model.checkpoint()  # a command stamped after this, applied late, is replayed from here
            self.model.advance_to(self._model_t(now))
            x, y, yaw = self.model.pose
            trips = list(self.model.watchdog_trips)
        if self.feed is not None:
            true_s = (now - self.clock.offset_ns) / 1e9  # the mocap sees true (unshifted) time
            self.feed.send((x, y, 0.0, *rosmsg.yaw_quaternion(yaw)), t=true_s)
        if tick % self.truth_every == 0:
            pose = rosmsg.pose_stamped(now, TRUTH_FRAME, (x, y, 0.0), rosmsg.yaw_quaternion(yaw))
            self.bag.write(TWIN_TRUTH_TOPIC, rosmsg.POSE_STAMPED, now, pose)
        if self.probes.due(now):
            self._send_probe()
        for t in trips[self._watchdog_reported :]:
            say(
                f"WATCHDOG stop at robot time {self.robot_ns_of_model(t)}: no command for {self.model.watchdog_s} s"
            )
        self._watchdog_reported = len(trips)

    def run(self, stop: threading.Event, max_runtime_s: float | None = None) -> None:
        deadline = self.clock.now_ns() + round(max_runtime_s * 1e9) if max_runtime_s else None
        tick = 0
        next_ns = self.clock.now_ns()
        while not stop.is_set():
            self.step(tick)
            tick += 1
            next_ns += self.physics_period_ns
            now = self.clock.now_ns()
            if next_ns < now:  # fell behind (loaded machine): skip, the model is event-exact anyway
                self.step_late_ms.append((now - next_ns) / 1e6)  # the step due then ran this late, or never
                self.steps_skipped += (now - next_ns) // self.physics_period_ns + 1
                next_ns = now + self.physics_period_ns
            if deadline is not None and now >= deadline:
                break
            self.clock.sleep_until(next_ns, stop, spin_ns=0)
            self.step_late_ms.append(max(0, self.clock.now_ns() - next_ns) / 1e6)

    # Shutdown -----------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        with self._lock:
            x, y, yaw = self.model.pose
            v, w = self.model.velocity()
            trips = [self.robot_ns_of_model(t) for t in self.model.watchdog_trips]
        return {
            "received": self.stats.received,
            "first_seq": self.stats.first_seq,
            "last_seq": self.stats.last_seq,
            "missing_in_range": self.stats.missing(),
            "unsequenced": self.stats.unsequenced,
            "unpaired_twist_stamp": list(self.pairer.unpaired),
            "last_received_ns": self.stats.last_received_ns,
            "clock_offset_s": _finite_or_none(self.probes.offset_s),
            "clock_round_trip_s": _finite_or_none(self.probes.delay_s),
            "probes_sent": self.probes.sent,
            "probes_completed": self.probes.completed,
            "watchdog_stops_ns": trips,
            # commands whose callback ran after the physics step passed their arrival: replayed at
            # their own time, or (older than the step's checkpoint) applied late
            "late_command_replays": self.model.late_replays,
            "late_commands_applied": self.model.late_applied,
            "apply_late": lateness_summary(self.apply_late_ms),
            "step_late": lateness_summary(self.step_late_ms),
            "steps_skipped": self.steps_skipped,
            "final_pose": [x, y, yaw],
            "final_velocity": [v, w],
            "robot_clock_shift_s": self.request.twin.robot_clock_offset_s,
            "realtime": self.realtime,
            "started_ns": self.started_ns,
        }

    def close(self) -> dict[str, Any]:
        """Leave the link, close the bag, write the status; safe to call twice."""
        leave_realtime()  # the run is over: shutdown work must not hold up other trials
        try:
            self.transport_hung = not close_transport(self.transport, "robot")
        finally:
            with self._lock:
                self.model.advance_to(self._model_t(self.clock.now_ns()))
            self.bag.close()
            if self.feed is not None:
                self.feed.close()
        status = self.summary()
        status["stopped_ns"] = self.clock.now_ns()
        write_status(self.trial_dir / STATUS_FILE, status)
        update_outcome(self.trial_dir, lambda outcome: _add_to_outcome(outcome, status))
        return status


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _add_to_outcome(outcome: TrialOutcome, status: dict[str, Any]) -> None:
    outcome.started_ns["robot"] = status["started_ns"]
    outcome.stopped_ns["robot"] = status["stopped_ns"]
    outcome.clock_offset_s = status["clock_offset_s"]
    outcome.clock_round_trip_s = status["clock_round_trip_s"]
    outcome.stack["robot"] = {
        key: status[key]
        for key in (
            "apply_late",
            "step_late",
            "steps_skipped",
            "late_command_replays",
            "late_commands_applied",
        )
    }
    if status["clock_offset_s"] is None:
        outcome.warnings.append("robot: no clock-offset probe completed; latencies are not corrected")
    for t in status["watchdog_stops_ns"]:
        outcome.warnings.append(f"robot: command watchdog stopped the robot at robot time {t} ns")
    if status["missing_in_range"]:
        outcome.warnings.append(
            f"robot: {status['missing_in_range']} commands missing between first and last seq"
        )


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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fieldtest.twin.robot", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--trial-dir", type=Path, required=True, help="trial directory (bag goes to DIR/robot)"
    )
    parser.add_argument("--config", type=Path, help="TrialRequest as JSON/YAML (default: DIR/trial.yaml)")
    parser.add_argument("--max-runtime-s", type=float, help="stop by itself after this long")
    parser.add_argument("--physics-hz", type=float, default=PHYSICS_HZ)
    parser.add_argument(
        "--no-realtime", action="store_true", help="do not ask for SCHED_FIFO (also: FIELDTEST_REALTIME=0)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    sys.setswitchinterval(GIL_SWITCH_S)
    realtime = not args.no_realtime and try_realtime()
    try:
        request = load_request(args.trial_dir, args.config)
    except (TrialFormatError, TwinConfigError) as exc:
        print(f"twin robot: {exc}", file=sys.stderr)
        return 2
    with stop_on_signals() as stop:
        watch_parent(stop)
        try:
            robot = TwinRobot(request, args.trial_dir, physics_hz=args.physics_hz, realtime=realtime)
        except (KeystoreError, ValueError, OSError) as exc:  # keys, settings, link: refuse to start
            print(f"twin robot: cannot start: {exc}".splitlines()[0], file=sys.stderr)
            return 2
        try:
            say(f"READY robot {request.transport.middleware} cmd_type={request.cmd_type} realtime={realtime}")
            robot.run(stop, args.max_runtime_s)
        finally:
            status = robot.close()
    say(
        f"ROBOT DONE received={status['received']} seq={status['first_seq']}..{status['last_seq']} "
        f"missing={status['missing_in_range']} offset_s={status['clock_offset_s']} "
        f"watchdog_stops={len(status['watchdog_stops_ns'])}"
    )
    if robot.transport_hung:  # the middleware's own threads may block interpreter exit
        sys.stdout.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
