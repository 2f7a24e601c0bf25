"""The twin robot process: a Create 3 model driven by /cmd_vel over the trial's middleware.

    python -m fieldtest.twin.robot --trial-dir D [--config REQUEST.{json,yaml}]

The link end is ``fieldtest.endpoints.receiver``'s ``CommandReceiver`` (the same code the lab's
link monitor runs): arrival stamps, Humble pairing, a CommandReceipt per command with its
latency, the clock-offset probes, the robot bag (D/robot, robot clock). This process adds the
simulation: each command is applied to the model the moment it arrives, and a physics loop
advances the model, feeds the true pose to the NatNet emulator (UDP pose feed,
``twin.truth_port``) and logs it at 50 Hz on /twin/true_pose. It prints ``READY`` once subscribed
and runs until SIGTERM/SIGINT (or its parent dies), then closes its bag and adds its clock
estimate to trial.yaml's outcome.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path
from typing import Any

from fieldtest import rosmsg
from fieldtest.endpoints.clock import Clock
from fieldtest.endpoints.link import warm_up_codecs
from fieldtest.endpoints.loop import PeriodicLoop
from fieldtest.endpoints.receiver import STATUS_FILE, CommandReceiver
from fieldtest.endpoints.status import say, update_outcome, write_status
from fieldtest.machine import lateness_summary
from fieldtest.middleware.registry import open_transport
from fieldtest.natnet.feed import PoseFeedSender
from fieldtest.procs import stop_on_signals, watch_parent
from fieldtest.realtime import leave_realtime, settle_heap, try_realtime
from fieldtest.record import TWIN_TRUTH_TOPIC, TrialFormatError, TrialOutcome, TrialRequest
from fieldtest.security.keystore import KeystoreError
from fieldtest.transport import Transport
from fieldtest.twin.common import GIL_SWITCH_S, TwinConfigError, load_request
from fieldtest.twin.create3model import Create3Model, Imperfections
from fieldtest.twin.trafficpubsub import RobotTrafficSource, close_source

TRUTH_FRAME = "twin_world"
PHYSICS_HZ = 250.0
TRUTH_LOG_HZ = 50.0


def model_for(request: TrialRequest) -> Create3Model:
    twin = request.twin
    imperfections = Imperfections(
        wheel_speed_error=twin.wheel_speed_error,
        heading_bias_dps=twin.heading_bias_dps,
        slip=twin.slip,
        seed=request.seed,
        wheel_diameter_ratio=twin.wheel_diameter_ratio,
        wheelbase_ratio=twin.wheelbase_ratio,
        turn_slip=twin.turn_slip,
    )
    return Create3Model(twin.safety_override, imperfections)


class TwinRobot:
    """One twin robot: the link's receiver driving a Create 3 model, and the truth feed. ``run(stop)`` blocks."""

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
        self.loop = PeriodicLoop(self.clock, physics_hz)
        self.truth_every = max(1, round(physics_hz / truth_log_hz))
        self.started_ns = self.clock.now_ns()
        self._t0_ns = self.started_ns
        self._lock = threading.Lock()  # the model: commands arrive on middleware threads
        self._watchdog_reported = 0
        # how long after its arrival stamp each command reached the model (docs/analysis.md,
        # "Stack faults and the machine"); how late each physics step woke is the loop's
        self.apply_late_ms: list[float] = []
        warm_up_codecs(rosmsg.POSE_STAMPED)
        self.receiver = CommandReceiver(
            request,
            trial_dir,
            transport or open_transport(request.transport, "robot"),
            self.clock,
            on_command=self._apply,
            probe_once_matched=True,
        )
        self.traffic = RobotTrafficSource(request, self.receiver.transport, self.clock)
        port, path = request.twin.truth_port, request.twin.truth_socket
        self.feed = PoseFeedSender(path) if path else PoseFeedSender("127.0.0.1", port) if port else None

    @property
    def transport_hung(self) -> bool:
        return self.receiver.transport_hung

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
            self.receiver.bag.write(TWIN_TRUTH_TOPIC, rosmsg.POSE_STAMPED, now, pose)
        self.receiver.poll(now)
        for t in trips[self._watchdog_reported :]:
            say(
                f"WATCHDOG stop at robot time {self.robot_ns_of_model(t)}: no command for {self.model.watchdog_s} s"
            )
        self._watchdog_reported = len(trips)

    def run(self, stop: threading.Event, max_runtime_s: float | None = None) -> None:
        self.loop.run(self.step, stop, max_runtime_s)

    # Shutdown -----------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """The link's counts, then the model's and the loop's fields."""
        with self._lock:
            x, y, yaw = self.model.pose
            v, w = self.model.velocity()
            trips = [self.robot_ns_of_model(t) for t in self.model.watchdog_trips]
        return {
            **self.receiver.link_summary(),
            "watchdog_stops_ns": trips,
            # commands whose callback ran after the physics step passed their arrival: replayed at
            # their own time, or (older than the step's checkpoint) applied late
            "late_command_replays": self.model.late_replays,
            "late_commands_applied": self.model.late_applied,
            "apply_late": lateness_summary(self.apply_late_ms),
            "step_late": lateness_summary(self.loop.step_late_ms),
            "steps_skipped": self.loop.steps_skipped,
            "final_pose": [x, y, yaw],
            "final_velocity": [v, w],
            "robot_clock_shift_s": self.request.twin.robot_clock_offset_s,
            "clock_base_ns": self.clock.monotonic_base_ns,
            "realtime": self.realtime,
            "started_ns": self.started_ns,
        }

    def close(self) -> dict[str, Any]:
        """Leave the link, close the bag, write the status; safe to call twice."""
        leave_realtime()  # the run is over: shutdown work must not hold up other trials
        close_source(self.traffic, self.trial_dir)
        try:
            self.receiver.close()
        finally:
            with self._lock:
                self.model.advance_to(self._model_t(self.clock.now_ns()))
            if self.feed is not None:
                self.feed.close()
        status = self.summary()
        status["stopped_ns"] = self.clock.now_ns()
        write_status(self.trial_dir / STATUS_FILE, status)
        update_outcome(self.trial_dir, lambda outcome: _add_to_outcome(outcome, status))
        return status


def _add_to_outcome(outcome: TrialOutcome, status: dict[str, Any]) -> None:
    outcome.started_ns["robot"] = status["started_ns"]
    outcome.stopped_ns["robot"] = status["stopped_ns"]
    outcome.clock_bases_ns["robot"] = status["clock_base_ns"]
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
            settle_heap()
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
