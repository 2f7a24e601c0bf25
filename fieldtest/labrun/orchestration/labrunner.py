"""The lab runner: one real trial (or a campaign of them) from pre-flight to analysis.

Per trial:

1. trial directory and ``trial.yaml`` (request, software versions, plan warnings);
2. the mocap recorder (ROS-free NatNet client) starts writing ``<trial>/mocap``;
3. the robot side starts (``ros2 launch fieldtest_robot robot.launch.py`` over ssh, recording into
   ``<remote_root>/<trial_id>``), then the host side (``ros2 launch fieldtest_host host.launch.py``
   recording into the trial directory); the host's driver waits for the go file;
4. pre-flight, repeated until every check passes or ``preflight_timeout_s`` after both sides' nodes
   are up (their status files: the time the machines take to start them is not the link's): robot link both ways
   over the trial's middleware (and the robot's command subscription matched to a publisher: a
   command sent before that is lost, however reliable the QoS), clock offset and round trip, mocap streaming the rigid body,
   keystore, the robot's Create 3 pre-flight (speed cap, reflexes, watchdog, battery);
5. confirmation (robot at the start pose?) and a countdown, then the go file;
6. the host streams the plan and exits; the runner watches it (and the stop signals);
7. stop: host first (its stop burst must reach a robot that still listens), robot, recorder - on
   every path; after a completed run the robot side and the recorder go on until the recording
   holds the robot's rest after the planned end (``lifecycle.record_rest_after_run``: the drift's
   closing reads it; bounded, a note if the bound ends it). If the host cannot confirm its stop
   burst, an emergency stop: zero commands
   published on the robot's own graph to the base (over ssh, ``RobotSide.emergency_stop``), which
   needs neither the link nor the bridge, router or broker the host launch has just stopped; then
   the robot's recording is copied in, ``trial.yaml`` gets its outcome and the analysis runs.

Stop signals: SIGINT (Ctrl-C), SIGTERM and SIGHUP (a closed terminal) stop the trial as the twin
runner does (``procs.run_stop_event``): the handler only sets an event, the trial's loops see it
and end the trial the normal way (host stop burst, robot launch stopped over ssh, recording
collected and analyzed); no further trial of the campaign starts, and ``fieldtest lab run`` exits
130. A second signal while the runner stops the robot changes nothing: the stop runs to its end.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fieldtest.endpoints.receiver import STATUS_FILE as ROBOT_STATUS
from fieldtest.endpoints.stop import RELAY_SILENCE_S
from fieldtest.endpoints.streamer import EXIT_NO_ROBOT
from fieldtest.labrun.configuration.launchsettings import (
    LaunchArgError,
    launch_args_for_trial,
    parse_launch_args,
)
from fieldtest.labrun.nodelogic.driver import (
    CONTROL_DIR,
    EXIT_NO_GO,
    EXIT_ROBOT_LOST,
    GO_FILE,
    HOST_STATUS,
    STOP_FILE,
)
from fieldtest.labrun.nodelogic.geofence import MAX_UNTRACKED_S, Geofence
from fieldtest.labrun.orchestration.clockstate import CLOCK_STATE_SCRIPT, local_clock_state, parse_clock_state
from fieldtest.labrun.orchestration.clockstate import summary as clock_summary
from fieldtest.labrun.orchestration.preflight import (
    CheckResult,
    MocapSnapshot,
    check_clock,
    check_keystore,
    check_mocap,
    check_robot_link,
    check_robot_preflight,
    format_results,
    gate_unfinished,
    summarize,
    with_gate,
)
from fieldtest.labrun.orchestration.remote import PID_FILE, RemoteError, RobotSide, json_file
from fieldtest.lifecycle import (
    Interrupted,
    RecordingProgress,
    TrialResult,
    analyze,
    finish_record,
    host_exit_kind,
    not_run,
    open_record,
    record_rest_after_run,
    start_in_order,
)
from fieldtest.procs import ProcessGroup, ignored_stop_signals, interruption, run_stop_event
from fieldtest.realtime import REALTIME_HELP
from fieldtest.record import MOCAP_BAG, TrialRecord, TrialRequest, new_trial_id, read_trial, write_trial
from fieldtest.trialcampaign import LabSettings

if TYPE_CHECKING:
    from fieldtest.record.trial import EndReason

HOST_LAUNCH = ("ros2", "launch", "fieldtest_host", "host.launch.py")
ROBOT_PREFLIGHT = f"{CONTROL_DIR}/robot_preflight.json"
PREFLIGHT_FILE = f"{CONTROL_DIR}/preflight.json"
ROBOT_ARGS_FILE = f"{CONTROL_DIR}/robot_launch_args.json"  # what the robot launch (and its e-stop) got
POLL_S = 0.25
STOP_GRACE_S = 1.5  # after a stopped run's stop burst: let the robot log it before it stops
HOST_MARGIN_S = 30.0  # beyond the plan: robot wait, stop burst, shutdown
# How long the sides' nodes may take to write their first status before the pre-flight window
# starts anyway: a loaded machine's robot side took over 30 s for its imports alone
NODES_START_LIMIT_S = 120.0
# Trials with a recording worth analyzing: the analysis says how far a stopped or killed one got.
ANALYZED_END_REASONS = ("completed", "host-stopped", "host-killed", "robot-exited", "geofence", "interrupted")


SSH_FAILED = 255  # ssh's exit code for its own errors (a lost connection among them), ssh(1)


class AbortTrial(Exception):
    """The trial cannot go on; the message says why (one line)."""


@dataclass
class LabOptions:
    runs_dir: Path
    ros_distro: str = "jazzy"  # TurtleBot 4 images today: Ubuntu 24.04 + Jazzy
    lab: LabSettings = field(default_factory=LabSettings)
    robot: RobotSide = field(default_factory=RobotSide)
    host_launch: tuple[str, ...] = HOST_LAUNCH
    host_args: dict[str, str] = field(default_factory=dict)  # e.g. network_interface, relay
    robot_args: dict[str, str] = field(default_factory=dict)  # e.g. base_interface, preflight_warn_only
    mocap: Any = None  # fieldtest.natnet.recorder.RecorderConfig, or None (mocap check then fails/warns)
    confirm: Callable[[str], bool] | None = None  # asked before each trial; None = no question
    say: Callable[[str], None] = print
    analyze: bool = True
    plots: bool = True  # the analysis's PNG plots (``fieldtest analyze`` draws them later too)
    emergency_stop: Callable[[TrialRequest], object] | None = None  # what it returns is not used


@dataclass
class LabTrialResult(TrialResult):
    preflight: list[CheckResult] = field(default_factory=list)


class LabRunner:
    """``stop`` is set by the stop signals while a trial runs (or by the caller): once set, the
    running trial ends as an interruption and no further trial starts."""

    def __init__(self, options: LabOptions, stop: threading.Event | None = None):
        self.options = options
        self.say = options.say
        self.stop = stop if stop is not None else threading.Event()
        self._signals_handled = False

    @property
    def interrupted(self) -> bool:
        return self.stop.is_set()

    @contextlib.contextmanager
    def stop_signals(self) -> Iterator[None]:
        """SIGINT, SIGTERM and SIGHUP set ``stop`` (``procs.run_stop_event``; nested: once)."""
        if self._signals_handled:
            yield
            return
        if "SIGINT" in ignored_stop_signals():
            # a background job of a script (nohup ... &): Unix convention, kept; the user must know
            self.say(
                "warning: this process ignores SIGINT (started in the background?): Ctrl-C will not "
                f"stop the robot; stop the run with kill {os.getpid()} (SIGTERM)"
            )
        with run_stop_event(self.stop):
            self._signals_handled = True
            try:
                yield
            finally:
                self._signals_handled = False

    # ------------------------------------------------------------------------------- a campaign
    def run_all(self, requests: list[TrialRequest]) -> list[LabTrialResult]:
        """The trials in order; a stop signal (or Ctrl-C at the confirmation) ends the campaign."""
        check_side_args(self.options.host_args, self.options.robot_args)
        results = []
        for i, request in enumerate(requests):
            if self.stop.is_set():
                break
            self.say(f"trial {i + 1}/{len(requests)}: {request.name}")
            try:
                confirmed = self.options.confirm is None or self.options.confirm(
                    f"{request.name}: robot at the start pose, area clear? [y/N] "
                )
            except (KeyboardInterrupt, EOFError):  # at the prompt no trial runs: nothing to stop
                self.stop.set()
                break
            if not confirmed:
                self.say("stopping the campaign (not confirmed)")
                break
            result = self.run_trial(request)
            results.append(result)
            self.say(f"  {result.end_reason}: {result.trial_dir} {result.detail}")
            if i + 1 < len(requests) and self.options.lab.pause_between_trials_s and not self.stop.is_set():
                with self.stop_signals():
                    self.stop.wait(self.options.lab.pause_between_trials_s)
        if self.stop.is_set():
            not_run(requests, len(results), self.stop, self.say)
        return results

    # ------------------------------------------------------------------------------- one trial
    def run_trial(self, request: TrialRequest) -> LabTrialResult:
        with self.stop_signals():
            return self._run_trial(request)

    def _run_trial(self, request: TrialRequest) -> LabTrialResult:
        trial_dir = self.options.runs_dir / new_trial_id(request.name)
        record = open_record(trial_dir, request)
        write_trial(trial_dir, record)
        (trial_dir / CONTROL_DIR).mkdir(parents=True, exist_ok=True)
        trial = _Trial(self, request, trial_dir)
        record.outcome.lab["clock_sync"] = {"start": trial.clock_sync()}
        write_trial(trial_dir, record)
        reason: EndReason = "error"
        detail = ""
        try:
            with trial.running():
                trial.preflight()
                trial.countdown()
                reason, detail = trial.stream()
        except AbortTrial as exc:
            reason, detail = "error", str(exc)
        except (Interrupted, KeyboardInterrupt):
            self.stop.set()  # KeyboardInterrupt: Ctrl-C where no handler of ours was installed
            reason, detail = "interrupted", f"{interruption(self.stop)}: robot stopped"
        trial.finish(reason, detail)
        if self.options.analyze and reason in ANALYZED_END_REASONS:
            trial.analyze()
        record = read_trial(trial_dir)
        return LabTrialResult(trial_dir, record.outcome.end_reason, record.outcome.end_detail, trial.checks)


class _Trial:
    """The moving parts of one trial; ``running()`` guarantees the stop sequence."""

    def __init__(self, runner: LabRunner, request: TrialRequest, trial_dir: Path):
        self.runner = runner
        self.options = runner.options
        self.request = request
        self.trial_dir = trial_dir
        self.trial_id = trial_dir.name
        self.procs = ProcessGroup(trial_dir / "logs")
        self.robot_proc: subprocess.Popen | None = None
        self.robot_args: dict[str, str] = {}
        self.command_publisher_expected = True  # before the first command (check_robot_link)
        self.recorder: Any = None
        self.checks: list[CheckResult] = []
        self.sides_up = False  # both sides' nodes have written a status (the pre-flight window runs)
        self.go_sent = False
        self.run_completed = False  # the host streamed the whole plan: the rest after it is recorded
        self.robot_stop_logged = False
        self.robot_exited_mid_trial = False
        self.stopped_by_runner = False
        self.notes: list[str] = []

    def clock_sync(self) -> dict[str, Any]:
        """Both machines' clock sync state (``clockstate``), said in one line each."""
        done = None
        try:
            done = self.options.robot.shell.run(CLOCK_STATE_SCRIPT, timeout_s=15.0, check=False)
        except RemoteError as exc:
            robot = {"sync": "unknown", "why": f"robot not reached: {exc}"}
        if done is not None:
            robot = parse_clock_state(done.stdout)
        states = {"host": local_clock_state(), "robot": robot}
        for machine, state in states.items():
            self.runner.say(f"  {machine} clock: {clock_summary(state)}")
        return states

    # --- start and always stop ----------------------------------------------------------------
    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        try:
            start_in_order((self._start_mocap, self._start_robot, self._start_host), self.runner.stop)
            yield
        finally:
            self.stop_everything()

    def _start_mocap(self) -> None:
        if self.options.mocap is None:
            return
        from fieldtest.natnet.recorder import MocapRecorder

        config = self.options.mocap
        config.rigid_body_id = self.request.rigid_body_id
        self.recorder = MocapRecorder(self.trial_dir / MOCAP_BAG, config).start()

    def _start_robot(self) -> None:
        args = launch_args_for_trial(
            self.request,
            "robot",
            ros_distro=self.options.ros_distro,
            trial_dir=self.options.robot.trial_dir(self.trial_id),
            extra=self.options.robot_args,
        )
        self.robot_args = args
        self.command_publisher_expected = command_publisher_expected(args)
        for left in self.options.robot.clear_left_over():
            self.notes.append(f"an earlier trial's robot launch was still running ({left}): stopped it first")
            self.runner.say(f"  {self.notes[-1]}")
        (self.trial_dir / ROBOT_ARGS_FILE).write_text(json.dumps(args, indent=2) + "\n")  # a manual e-stop's
        log_path = self.trial_dir / "logs" / "robot.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("w") as log_file:
            self.robot_proc = self.options.robot.start(self.trial_id, args, log_file)

    def _start_host(self) -> None:
        args = launch_args_for_trial(
            self.request,
            "host",
            ros_distro=self.options.ros_distro,
            trial_dir=self.trial_dir.absolute(),
            extra=self.options.host_args,
        )
        argv = [*self.options.host_launch, *(f"{k}:={v}" for k, v in args.items())]
        self.procs.start("host", argv)

    def stop_everything(self) -> None:
        """Host (stop burst), the rest after the run recorded (or a grace), robot, recorder. Never
        raises; every step runs."""
        self._stop_host()
        if self.run_completed:
            host = json_file(self.trial_dir / CONTROL_DIR / HOST_STATUS) or {}
            note = record_rest_after_run(
                self._recording_progress, self.request.plan, host.get("stream_start_ns"), self.runner.stop
            )
            if note:
                self.notes.append(note)
                self.runner.say(f"  {note}")
        else:
            time.sleep(STOP_GRACE_S if self.go_sent else 0.2)
        try:
            self.options.robot.stop(self.trial_id)
        except RemoteError as exc:
            self.notes.append(f"robot stop: {exc}")
        if self.robot_proc is not None:
            try:
                self.robot_proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                self.robot_proc.kill()
                self.robot_proc.wait()
            if self.robot_proc.stdin is not None:
                self.robot_proc.stdin.close()
            if self._robot_ended().startswith("the ssh session"):
                self.notes.append(self._robot_ended())
        if self.recorder is not None:
            stats = self.recorder.stop()
            self.notes.append(f"mocap: {stats.summary()}")

    def _recording_progress(self) -> RecordingProgress:
        """The mocap recorder's stamps and whether the robot side has logged the stop burst (its
        status, rewritten twice a second); a side that has stopped is not waited for."""
        robot_running = self.robot_proc is not None and self.robot_proc.poll() is None
        if robot_running and not self.robot_stop_logged:
            try:
                status = self.options.robot.read_json(self.trial_id, ROBOT_STATUS) or {}
            except RemoteError:
                status = {}
            self.robot_stop_logged = (status.get("last_seq") or -1) >= self.request.plan.n_ticks()
        recorder = self.recorder
        if recorder is None:
            return RecordingProgress(robot_stop_logged=self.robot_stop_logged or not robot_running)
        return RecordingProgress(
            mocap_running=recorder.running,
            mocap_moved_ns=recorder.stats.moved_ns,
            mocap_last_ns=recorder.stats.last_valid_ns,
            robot_stop_logged=self.robot_stop_logged or not robot_running,
        )

    def _stop_host(self) -> None:
        host = self.procs.procs.get("host")
        if host is None:
            return
        if host.popen.poll() is None:
            self.stopped_by_runner = True
            (self.trial_dir / CONTROL_DIR / STOP_FILE).touch()
            # the launch alone: its driver stops on the stop file (burst first) while the bridge
            # or broker it sends through still runs; launch SIGTERMs the rest after 5 s
            host.popen.send_signal(signal.SIGINT)
            try:
                host.popen.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                self.procs.stop("host")
        status = json_file(self.trial_dir / CONTROL_DIR / HOST_STATUS) or {}
        if self.go_sent and not status.get("stop_burst_sent"):
            self._emergency_stop("the host did not confirm its stop burst")
        elif self.robot_exited_mid_trial:  # its bridge and relay went with it: the burst had no way in
            self._emergency_stop("the robot side exited mid-trial")

    def _emergency_stop(self, why: str) -> None:
        """Zero commands to the base from the robot's own side (its local graph, whatever the
        middleware), then the host-side one if the options name it (stand-ins, tests)."""
        self.notes.append(f"emergency stop: {why}")
        self.runner.say(f"  EMERGENCY STOP: {why}")
        if self.options.robot.estop:
            try:
                sent = self.options.robot.emergency_stop(self.trial_id, self.robot_args)
                self.notes.append(f"emergency stop on the robot: {sent}")
            except RemoteError as exc:
                self.notes.append(f"emergency stop on the robot failed ({exc}); {last_stop(self.robot_args)}")
        if self.options.emergency_stop is not None:
            try:
                self.options.emergency_stop(self.request)
            except Exception as exc:  # what stops the base then is the last line; say which
                self.notes.append(f"emergency stop failed ({exc}); {last_stop(self.robot_args)}")

    def _wait(self, seconds: float) -> None:
        """Sleep, or raise Interrupted as soon as a stop signal arrives."""
        if self.runner.stop.wait(seconds):
            self.runner.say(
                f"  {interruption(self.runner.stop)}: stopping the robot (a second signal does not skip it)"
            )
            raise Interrupted

    # --- pre-flight ----------------------------------------------------------------------------
    def _mocap_snapshot(self) -> MocapSnapshot | None:
        if self.recorder is None:
            return None
        if self.recorder.stats.fatal:  # it refused the stream (fieldtest.natnet.recorder): no ground truth
            raise AbortTrial(f"the mocap recorder stopped: {self.recorder.stats.fatal}")
        return MocapSnapshot(self.recorder.stats.frames, self.recorder.stats.valid, time.monotonic())

    def _exited(self) -> str | None:
        host = self.procs.procs["host"].popen.poll()
        if host is not None:
            gate = self._unfinished_gate()
            if gate:  # the host gave up on a robot whose nodes had not started: the gate is the cause
                return f"pre-flight failed: {gate.check}: {gate.detail} (the host side exited, code {host})"
            return f"the host side exited (code {host}) before the trial: {self.procs.tail('host')}"
        if self.robot_proc is not None and self.robot_proc.poll() is not None:
            refusal = preflight_refusal(self.options.robot.read_json(self.trial_id, ROBOT_PREFLIGHT))
            if refusal:  # the launch's gate stopped the robot side: say why, not just that it exited
                return f"the robot's Create 3 pre-flight refused the trial: {refusal}"
            return f"{self._robot_ended()}: see {self.trial_dir}/logs/robot.log"
        return None

    def _unfinished_gate(self) -> CheckResult | None:
        """The robot's Create 3 gate's check while that gate is still running, else None."""
        if not _true(self.robot_args.get("preflight", "true")):
            return None
        report = self.options.robot.read_json(self.trial_id, ROBOT_PREFLIGHT)
        return check_robot_preflight(report)[0] if gate_unfinished(report) else None

    def _robot_ended(self) -> str:
        """How the robot side's session ended, in words: ssh's own failure (exit 255) is a lost
        session, after which the robot side stops itself once sshd sees the session gone."""
        code = self.robot_proc.returncode if self.robot_proc is not None else None
        if self.options.robot.shell.target is not None and code == SSH_FAILED:
            return f"the ssh session to the robot was lost (ssh exit {code}; the robot side stops itself)"
        return f"the robot side exited (code {code})"

    def run_checks(self, before: MocapSnapshot | None) -> list[CheckResult]:
        lab = self.options.lab
        robot_side = self.options.robot
        host_status = json_file(self.trial_dir / CONTROL_DIR / HOST_STATUS)
        robot_status = robot_side.read_json(self.trial_id, ROBOT_STATUS)
        self.sides_up = host_status is not None and robot_status is not None
        results = [
            check_robot_link(
                host_status, robot_status, command_publisher_expected=self.command_publisher_expected
            ),
            check_clock(robot_status, lab.max_clock_offset_ms, lab.max_clock_round_trip_ms),
            check_mocap(
                before, self._mocap_snapshot(), self.request.rigid_body_id, lab.min_mocap_valid_fraction
            ),
            check_keystore(self.request, trial_length_s=self.request.plan.total_s),
        ]
        report = robot_side.read_json(self.trial_id, ROBOT_PREFLIGHT)
        return with_gate(results, report, gated=_true(self.robot_args.get("preflight", "true")))

    def preflight(self) -> None:
        """The checks, until all pass or ``preflight_timeout_s`` after both sides' nodes are up
        (the robot's status comes from its link monitor, which starts after the Create 3 gate)."""
        lab = self.options.lab
        start_limit = time.monotonic() + NODES_START_LIMIT_S
        deadline: float | None = None
        before = self._mocap_snapshot()
        while True:
            self._wait(1.0)  # also the mocap rate window
            exited = self._exited()
            if exited:
                raise AbortTrial(exited)
            go, self.checks = summarize(self.run_checks(before), lab.warn_only)
            before = self._mocap_snapshot()
            now = time.monotonic()
            if deadline is None and (self.sides_up or now > start_limit):
                deadline = now + lab.preflight_timeout_s
            if go or (deadline is not None and now > deadline):
                break
        (self.trial_dir / PREFLIGHT_FILE).write_text(
            json.dumps([c.as_dict() for c in self.checks], indent=2) + "\n"
        )
        for line in format_results(self.checks):
            self.runner.say(f"  {line}")
        if not go:
            failed = next(c for c in self.checks if not c.ok)
            raise AbortTrial(f"pre-flight failed: {failed.check}: {failed.detail}")

    # --- the run -----------------------------------------------------------------------------
    def countdown(self) -> None:
        seconds = int(round(self.options.lab.countdown_s))
        for left in range(seconds, 0, -1):
            self.runner.say(f"  starting in {left} s (Ctrl-C aborts)")
            self._wait(1.0)
            exited = self._exited()
            if exited:
                raise AbortTrial(exited)

    def stream(self) -> tuple[EndReason, str]:
        if self.recorder is not None:  # the robot was placed before: motion counts from its pose at the go
            self.recorder.watch_motion_from_here()
        (self.trial_dir / CONTROL_DIR / GO_FILE).touch()
        self.go_sent = True
        self.runner.say("  GO")
        host = self.procs.procs["host"]
        limit = time.monotonic() + self.request.plan.total_s + HOST_MARGIN_S
        fence = Geofence.from_settings(self.options.lab.geofence_m)
        while host.popen.poll() is None:
            breach = self._geofence_breach(fence)
            if breach:
                self.runner.say(f"  GEOFENCE: {breach}: stopping the robot")
                return "geofence", breach
            self.procs.sample_cpu()
            if time.monotonic() > limit:
                raise AbortTrial(f"the host did not finish within the plan + {HOST_MARGIN_S:g} s")
            if self.robot_proc is not None and self.robot_proc.poll() is not None:
                self.robot_exited_mid_trial = True
                return "robot-exited", (
                    f"{self._robot_ended()} mid-trial: its recording ends there; "
                    f"see {self.trial_dir}/logs/robot.log"
                )
            self._wait(POLL_S)
        reason, detail = host_end_reason(
            host.popen.returncode, json_file(self.trial_dir / CONTROL_DIR / HOST_STATUS)
        )
        self.run_completed = reason == "completed"
        return reason, detail

    def _geofence_breach(self, fence: Geofence | None) -> str:
        """Why the trial must stop for the geofence ('' while the rigid body is inside, or no fence)."""
        if fence is None or self.recorder is None:
            return ""
        latest = self.recorder.latest_position
        if latest is None or time.monotonic() - latest[1] > MAX_UNTRACKED_S:
            return f"the rigid body has not been tracked for over {MAX_UNTRACKED_S:g} s: the geofence cannot hold"
        (x, y, _z), _ = latest
        return fence.outside(x, y)

    # --- afterwards --------------------------------------------------------------------------
    def finish(self, reason: EndReason, detail: str) -> None:
        try:
            self.options.robot.collect(self.trial_id, self.trial_dir)
            (self.trial_dir / PID_FILE).unlink(missing_ok=True)
        except RemoteError as exc:
            self.notes.append(f"robot recording not collected: {exc}")
        finish_record(self.trial_dir, reason, detail, self.procs.cpu(), self._fill_outcome)

    def _fill_outcome(self, record: TrialRecord) -> None:
        """The lab's outcome fields: the robot's recording, clocks, dry run, warnings and notes."""
        outcome = record.outcome
        host = json_file(self.trial_dir / CONTROL_DIR / HOST_STATUS) or {}
        robot = json_file(self.trial_dir / ROBOT_STATUS) or {}
        if host.get("stream_start_ns"):
            outcome.stream_start_ns = host["stream_start_ns"]
        outcome.lab["robot_recording"] = robot_recording(robot)
        if _true(self.robot_args.get("dry_run", "")):
            outcome.lab["dry_run"] = True
            outcome.warnings.append("dry run: the base was not driven (the link monitor forwarded nothing)")
        outcome.lab.setdefault("clock_sync", {})["end"] = self.clock_sync()
        for key in ("clock_offset_source", "link_probe_offset_s", "link_probe_round_trip_s"):
            if key in robot:
                outcome.lab[key] = robot[key]
        if robot.get("arrival_stamp"):
            outcome.lab["arrival_stamp"] = robot["arrival_stamp"]
        if robot:
            outcome.clock_offset_s = robot.get("clock_offset_s")
            outcome.clock_round_trip_s = robot.get("clock_round_trip_s")
            if robot.get("started_ns"):
                outcome.started_ns["robot"] = robot["started_ns"]
            if robot.get("stopped_ns"):
                outcome.stopped_ns["robot"] = robot["stopped_ns"]
            if robot.get("missing_in_range"):
                outcome.warnings.append(
                    f"robot: {robot['missing_in_range']} commands missing between first and last seq"
                )
        outcome.warnings += [f"pre-flight {c.check}: {c.detail}" for c in self.checks if c.severity == "warn"]
        outcome.warnings += [
            f"{side} node ran at normal scheduling: its latency tails may be its own ({REALTIME_HELP})"
            for side, status in (("host", host), ("robot", robot))
            if status.get("realtime") is False
        ]
        outcome.warnings += self.notes

    def analyze(self) -> None:
        analyze(self.trial_dir, lambda line: self.runner.say(f"  {line}"), plots=self.options.plots)


# Launch arguments that must be the same on both sides: with relay on the robot only, the host would
# drive the base directly on cmd_vel while the robot listens (and logs) on fieldtest/cmd_vel.
BOTH_SIDES_ARGS = ("relay", "dry_run")


def check_side_args(host_args: dict[str, str], robot_args: dict[str, str]) -> None:
    """A LaunchArgError if an argument both sides must share differs between them."""
    for name in BOTH_SIDES_ARGS:
        host, robot = host_args.get(name, ""), robot_args.get(name, "")
        if host.strip().lower() != robot.strip().lower():
            raise LaunchArgError(
                f"launch argument {name} must be the same on both sides: host {host or '(default)'}, "
                f"robot {robot or '(default)'} (give it as --host-arg and --robot-arg)"
            )


def command_publisher_expected(robot_args: dict[str, str]) -> bool:
    """Whether the robot's command subscription matches a publisher before the first command, on
    this trial's middleware and settings (the pre-flight then waits for it). Arguments the robot's
    launch will refuse count as yes: that launch exits and the pre-flight says why."""
    try:
        cfg = parse_launch_args(robot_args, "robot", environ={})
    except LaunchArgError:
        return True
    from fieldtest.middleware import registry

    return registry.get(cfg.middleware).lab_command_publisher_before_commands(cfg)


def preflight_refusal(report: dict[str, Any] | None) -> str:
    """The failed findings of a Create 3 pre-flight report that said no-go, '' otherwise."""
    if not report or report.get("go", True):
        return ""
    failed = [f for f in report.get("findings", []) if f.get("severity") == "fail"]
    return "; ".join(f"{f.get('check')}: {f.get('detail')}" for f in failed) or "no-go"


def last_stop(robot_args: dict[str, str]) -> str:
    """What stops the base when the emergency stop could not, as far as the kit knows it: the relay's
    own silence stop where the robot relays, else the Create 3's stop-on-silence timeout, whose length
    no upstream document gives (the kit's 0.5 s is an assumption until measured)."""
    base = (
        "the Create 3's own stop-on-silence timeout (motion_control wheels_stop_threshold_sec: "
        "not documented upstream, measure it, lab guide section 5)"
    )
    if _true(robot_args.get("relay", "")):
        return f"the robot's relay sends a zero after {RELAY_SILENCE_S} s without a command, if it still runs; else {base}"
    return f"{base} stops it"


def _true(text: str) -> bool:
    return text.strip().lower() in ("true", "1", "yes", "on")


def robot_recording(status: dict[str, Any]) -> str:
    """How the robot's recording ended: ``closed`` by its logger, ``cut`` (the logger died: its
    last status still says running, receipts after the last flushed one are unknown), ``missing``."""
    if not status:
        return "missing"
    return "closed" if status.get("state") == "closed" else "cut"


def host_end_reason(code: int | None, status: dict[str, Any] | None) -> tuple[EndReason, str]:
    """The trial's end reason from the host side's exit code and final status."""
    status = status or {}
    sent = f"{status.get('plan_sent', '?')}/{status.get('plan_ticks', '?')} commands, stop burst {status.get('stop_burst_sent', '?')}"
    kind = host_exit_kind(code)
    if kind == "completed":
        return "completed", ""
    if code == EXIT_ROBOT_LOST:
        return "error", f"robot lost mid-trial ({status.get('end_detail', '')}); {sent}"
    if code == EXIT_NO_ROBOT:
        return "error", "the robot never appeared on the link"
    if code == EXIT_NO_GO:
        return "error", "the host was stopped before the go"
    if kind == "host-killed":
        return "host-killed", f"the host side was killed: no stop burst from it; {sent}"
    if kind == "host-stopped":
        return "host-stopped", f"the host side was stopped; {sent}"
    return "error", f"the host side exited with code {code}; {sent}"
