"""The lab half run for real: rclpy nodes of host_ws/ and robot_ws/ (ROS 2 wheels, Fast DDS) started
from the launch plan, the lab runner, a simulated TurtleBot 4 base and the NatNet emulator as Motive.

Needs the ROS 2 environment that tools/install_ros.sh builds (make test installs it); without it these
tests fail and say so."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import threading
from pathlib import Path

import numpy as np
import psutil
import pytest
import yaml

from fieldtest import rosmsg
from fieldtest.analysis.metrics.latency import history_depth
from fieldtest.analysis.metrics.readerstalls import history_room_ms, lost_to_reader_stalls
from fieldtest.analysis.metrics.summarystats import spans
from fieldtest.endpoints.stop import RELAY_SILENCE_S
from fieldtest.labrun.configuration.launchsettings import LaunchArgError, parse_launch_args
from fieldtest.labrun.orchestration.labrunner import LabOptions
from fieldtest.labrun.orchestration.launchplan import launch_plan
from fieldtest.labrun.orchestration.planrun import EXIT_SIDE_PROCESS, rehearsal_processes
from fieldtest.labrun.orchestration.remote import RobotSide
from fieldtest.labrun.rehearsal.labrehearsal import (
    NODE_ARGS,
    ROS_VENV,
    RehearsalError,
    SimulatedLab,
    rehearse,
    ros_python,
)
from fieldtest.labrun.rehearsal.mqtt_standin import (
    KEEP_NAGLE_ENV,
    STANDIN_BANNER,
    StandinConfigError,
    load_config,
)
from fieldtest.labrun.rehearsal.simbase import BASE_QOS
from fieldtest.machine import MachineMonitor, describe
from fieldtest.middleware.mqtt.lab import MQTT_STANDIN
from fieldtest.middleware.zenoh.bridge import ROBOT_DOMAIN_OFFSET, find_bridge
from fieldtest.procs import lease_dds_domain
from fieldtest.record import CMD_VEL_TOPIC, MOCAP_BAG, MOCAP_POSE_TOPIC, RECEIPTS_TOPIC, read_bag, read_trial
from fieldtest.record.basecommands import BASE_COMMANDS_FILE, BASE_DIR, read_base_commands
from fieldtest.testkit.hangup import as_from_a_terminal
from fieldtest.trialcampaign import CampaignError, load_trials

# Two short laps (8 s each): enough for lap drift, short enough for CI.
SHORT_PLAN = {"side_duration_s": 1.0, "turn_rate_dps": 90.0, "laps": 2, "start_delay_s": 1.0}
# One lap: where the number of laps is not what a test checks
ONE_LAP = {**SHORT_PLAN, "laps": 1}
# The machine's disturbance over a rehearsal (MachineMonitor's report), beside its runs/ folder
MACHINE_REPORT = "machine.json"
# A DDS domain of this test process's own (leased until it exits, with the bridged robot side's):
# concurrent runs on one machine must not drive each other's base.
DOMAIN_LEASE = lease_dds_domain(110 + os.getpid() % 90, offsets=(0, ROBOT_DOMAIN_OFFSET))
DOMAIN_ID = DOMAIN_LEASE.domain_id


@pytest.fixture(scope="module", autouse=True)
def ros_environment():
    try:
        ros_python(ROS_VENV)
    except RuntimeError as exc:
        pytest.fail(str(exc))


def _campaign(
    tmp_path: Path,
    distro: str = "jazzy",
    cmd_type: str = "twist_stamped",
    matrix: dict | None = None,
    plan: dict | None = None,
    transport: dict | None = None,
    exclude: list[dict] | None = None,
    **lab,
) -> Path:
    path = tmp_path / "rehearsal.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "campaign": "rehearsal",
                "base": {
                    "network": "loopback",
                    "robot_model": "turtlebot4-standard",
                    "cmd_type": cmd_type,
                    "plan": plan or SHORT_PLAN,
                    "transport": {
                        "namespace": "/tb4",
                        "domain_id": DOMAIN_ID,
                        **{f"{r}_address": "127.0.0.1" for r in ("host", "robot", "router", "broker")},
                        **(transport or {}),
                    },
                },
                "matrix": matrix or {"middleware": ["dds"]},
                "exclude": exclude or [],
                "lab": {
                    "ros_distro": distro,
                    "countdown_s": 0,
                    "confirm_each_trial": False,
                    # counted once both sides' nodes are up (their imports took over 30 s on a
                    # loaded machine); a passing pre-flight goes at once
                    "preflight_timeout_s": 60,
                    **lab,
                },
            }
        )
    )
    return path


def _rehearse_all(
    tmp_path, lab: SimulatedLab | None = None, say=None, side_args=None, robot_args_only=None, **campaign
) -> tuple[list, list[dict], list[str]]:
    """Every trial of the campaign, with the simulated base's final status of each."""
    source = _campaign(tmp_path, **campaign)
    settings, requests = load_trials(source)
    messages: list[str] = []
    options = LabOptions(
        runs_dir=tmp_path / "runs",
        ros_distro=settings.lab.ros_distro,
        lab=settings.lab,
        robot=RobotSide(),
        host_args=dict(side_args or {}),
        robot_args={**(side_args or {}), **(robot_args_only or {})},
        say=say or messages.append,
    )
    with MachineMonitor() as machine:  # its pauses bound how late the geofence may stop the base
        results = rehearse(requests, options, lab or SimulatedLab())
    (tmp_path / MACHINE_REPORT).write_text(json.dumps(machine.report()))
    return results, _base_statuses(tmp_path / "runs"), messages


def _rehearse(tmp_path, lab: SimulatedLab | None = None, **kwargs):
    [result], bases, messages = _rehearse_all(tmp_path, lab, **kwargs)
    return result, (bases[0] if bases else {}), messages


def _base_statuses(runs: Path) -> list[dict]:
    found = sorted(runs.glob("simulated-hardware/*/base_status.json"))
    return [json.loads(path.read_text()) for path in found]


def _receipts(trial_dir: Path) -> list:
    return [m for _, m in read_bag(trial_dir / "robot").messages(RECEIPTS_TOPIC)]


# A reader's takes: (seq, arrival stamp, take time) per command it took, on its machine's clock
Takes = tuple[np.ndarray, np.ndarray, np.ndarray]


def _monitor_takes(trial_dir: Path) -> Takes:
    """The link monitor's: each receipt's ``received`` and its log time (when the receiver took it)."""
    receipts = read_bag(trial_dir / "robot").messages(RECEIPTS_TOPIC)
    seq = np.array([m.seq for _, m in receipts], dtype=np.uint64).astype(np.int64)  # none: -1
    received = np.array([rosmsg.ns_of(m.received) for _, m in receipts], dtype=np.int64)
    return seq, received, np.array([t for t, _ in receipts], dtype=np.int64)


def _base_takes(trial_dir: Path) -> Takes:
    """The simulated base's numbered commands, from its record (base/commands.csv)."""
    record = read_base_commands(trial_dir / BASE_DIR / BASE_COMMANDS_FILE)
    assert record.taken_ns is not None
    numbered = record.seq >= 0
    return record.seq[numbered], record.received_ns[numbered], record.taken_ns[numbered]


def _lost_to_reader_stalls(
    lost_spans: list, takes: Takes, depth: int | None, reader: str = "the link monitor logged"
) -> int:
    """How many commands a reader did not take (``lost_spans``: inclusive seq spans), each span
    checked against the reader's own takes: its executor takes the commands in order from a
    KEEP_LAST history of ``depth``, so a command is overwritten there only where the reader took
    nothing while that history filled (the command ``depth`` after the span had arrived by the
    reader's next take: fieldtest.analysis.metrics.readerstalls). Nothing else may be missing."""
    lost = sum(last - first + 1 for first, last in lost_spans)
    explained = lost_to_reader_stalls(lost_spans, *takes, depth)
    unexplained = [[int(a), int(b)] for a, b in lost_spans if [a, b] not in explained]
    room = {f"{a}-{b}": history_room_ms([a, b], *takes, depth) for a, b in unexplained} if depth else {}
    assert not unexplained, (
        f"{lost} commands not in what {reader} ({lost_spans}); {unexplained} lost while its history of "
        f"{depth} had room (ms from its next take to the arrival of the command {depth} on): {room}"
    )
    return lost


def _trial_depth(trial_dir: Path) -> int | None:
    return history_depth(read_trial(trial_dir).request.transport.qos)


def _not_taken_spans(takes: Takes, expected: np.ndarray) -> list[list[int]]:
    """The ``expected`` seqs a reader did not take, as inclusive spans."""
    return spans(np.setdiff1d(expected, takes[0]))


def _monitor_lost_in_plan(trial_dir: Path, plan) -> int:
    """The plan's commands the link monitor did not log, each lost only to its own stall."""
    takes = _monitor_takes(trial_dir)
    return _lost_to_reader_stalls(
        _not_taken_spans(takes, np.arange(plan.n_ticks())), takes, _trial_depth(trial_dir)
    )


def _base_lost(trial_dir: Path, expected: np.ndarray) -> int:
    """The ``expected`` commands the simulated base did not take, each lost only to its own stall."""
    takes = _base_takes(trial_dir)
    spans_lost = _not_taken_spans(takes, expected)
    return _lost_to_reader_stalls(spans_lost, takes, history_depth(BASE_QOS), "the base took")


def _segment_changes(trial_dir: Path) -> list[tuple[float, float]]:
    """(base, link monitor) arrival time in s of each command that changed the velocity: what the
    simulated base recorded (base/commands.csv) against the receipts, in the same order."""

    def changes(timeline):
        values = [(t, v) for t, v in timeline]
        return [(t, v) for i, (t, v) in enumerate(values) if i == 0 or v != values[i - 1][1]]

    record = read_base_commands(trial_dir / BASE_DIR / BASE_COMMANDS_FILE)
    receipts = read_bag(trial_dir / "robot").messages(RECEIPTS_TOPIC)
    heard = [
        (int(t), (float(v), float(w)))
        for t, v, w in zip(record.received_ns, record.linear, record.angular, strict=True)
    ]
    heard = _without_relay_silence_stops(trial_dir, heard, [taken for taken, _ in receipts])
    base = changes((t / 1e9, v) for t, v in heard)
    monitor = changes(
        (rosmsg.ns_of(m.received) / 1e9, (m.twist.linear.x, m.twist.angular.z)) for _, m in receipts
    )
    assert [v for _, v in base] == [v for _, v in monitor], "the base did not hear the commands' changes"
    return [(b, m) for (b, _), (m, _) in zip(base, monitor, strict=True)]


def _without_relay_silence_stops(trial_dir: Path, heard: list, takes_ns: list[int]) -> list:
    """The base's commands but the zeros the link monitor's relay sent of its own: a zero the base
    heard while the monitor had taken nothing for the relay's silence time (its takes: the receipts'
    log times), no more of them than the relay counted (robot_status.json)."""
    status = json.loads((trial_dir / "robot_status.json").read_text())
    takes = np.sort(np.asarray(takes_ns, dtype=np.int64))

    def silent_at(t_ns: int) -> bool:
        i = int(np.searchsorted(takes, t_ns, side="right"))
        return i > 0 and t_ns - int(takes[i - 1]) >= RELAY_SILENCE_S * 1e9

    first_take, last_take = int(takes[0]), int(takes[-1])
    stops = [
        i for i, (t, v) in enumerate(heard) if v == (0.0, 0.0) and first_take < t < last_take and silent_at(t)
    ]
    assert len(stops) <= (status.get("relay") or {}).get("silence_stops", 0), (stops, status.get("relay"))
    return [c for i, c in enumerate(heard) if i not in set(stops)]


def _sent_seqs(trial_dir: Path) -> np.ndarray:
    """Every seq the host logged sending (the plan's and the stop burst's)."""
    sent = read_bag(trial_dir / "host").messages(CMD_VEL_TOPIC)
    return np.unique([rosmsg.seq_of(m.header.frame_id) for _, m in sent])


def _metrics(trial_dir: Path) -> dict:
    return json.loads((trial_dir / "analysis" / "metrics.json").read_text())


def _replay_bound_m(trial_dir: Path, plan) -> float:
    """How far the ground truth may end from the base's model replayed on the link monitor's arrival
    times: the emulator's position noise (0.2 mm per axis: two noisy poses differ by 0.2 mm *
    sqrt(pi) on average) and what the base hearing each segment change later or sooner than the
    link monitor moves it (measured in this run: base/commands.csv against the receipts), at most
    (v + omega * side) for each second of difference."""
    heard_apart_s = sum(abs(base_s - monitor_s) for base_s, monitor_s in _segment_changes(trial_dir))
    side_m = plan.linear_speed_mps * plan.side_duration_s
    speed = plan.linear_speed_mps + math.radians(plan.turn_rate_dps) * side_m
    return 0.0002 * math.sqrt(math.pi) + speed * heard_apart_s


def _closing_is_the_replays(drift: dict, causes: dict, bound_m: float) -> None:
    """The ground truth's lap closing (dx, dy) is the replay's, within ``bound_m``."""
    assert causes["replay_closing_m"] is not None, causes
    closing = (drift["closing"]["dx_m"], drift["closing"]["dy_m"])
    assert math.dist(closing, causes["replay_closing_m"]) <= bound_m, (
        closing,
        causes["replay_closing_m"],
        bound_m,
    )


@pytest.mark.parametrize("relay", [False, True], ids=["jazzy", "jazzy-relay"])
def test_lab_trial_with_the_real_nodes_drives_the_simulated_base(tmp_path, relay, real_nodes_rehearsal):
    if relay:
        result, base, messages = _rehearse(tmp_path, side_args={"relay": "true"})
    else:  # the same trial test_lab_base_record reads
        result, base, messages = real_nodes_rehearsal("jazzy", "twist_stamped")
    assert result.end_reason == "completed", (result.detail, messages)
    assert all(c.ok for c in result.preflight if c.check.startswith("create3")), result.preflight
    record = read_trial(result.trial_dir)
    plan = record.request.plan
    # every command logged, but for what the monitor's own stall let its history overwrite
    not_logged = _monitor_lost_in_plan(result.trial_dir, plan)
    # the go waited for the link monitor's subscription to match the host's publisher
    link = next(c for c in result.preflight if c.check == "robot-link")
    assert link.ok and link.detail.endswith("command subscription matched"), link
    assert record.outcome.lab["robot_recording"] == "closed"  # the monitor's final status written
    # the base applied what the robot side heard (relay: the relay's copies, which carry no seq,
    # plus its stop commands), or (no relay) all it took but for its own stalls
    missed = not_logged if relay else _base_lost(result.trial_dir, np.arange(plan.n_ticks()))
    assert base["commands"] >= plan.n_ticks() - missed
    assert base["max_linear_commanded_mps"] == pytest.approx(0.33)
    assert not base["moving"]
    metrics = _metrics(result.trial_dir)
    assert metrics["progress"]["laps_completed"] == plan.laps
    assert metrics["mocap"]["valid_poses"] > 0.9 * 120 * plan.total_s
    # The simulated base drives the square it is told: the ground truth's lap drift and closing are
    # what the base's model replayed on the commands' arrival times at the link monitor gives
    # (drift_causes), within the bound this run measures (_replay_bound_m).
    drift, causes = metrics["drift"], metrics["drift_causes"]
    assert drift["available"] and causes["available"], (drift, causes)
    bound_m = _replay_bound_m(result.trial_dir, plan)
    replayed = causes["replay_drift_m"]["arrival"]
    assert abs(drift["mean_m"] - replayed) <= bound_m, (drift["mean_m"], replayed, bound_m)
    _closing_is_the_replays(drift, causes, bound_m)
    # both nodes and the simulated hardware ran real-time, as the twin's processes do (tests run with the right)
    host_status = json.loads((result.trial_dir / "lab" / "host_status.json").read_text())
    robot_status = json.loads((result.trial_dir / "robot_status.json").read_text())
    assert (host_status["realtime"], robot_status["realtime"], base["realtime"]) == (True, True, True)
    assert not [w for w in record.outcome.warnings if "normal scheduling" in w]
    # the arrival stamp the link monitor used, in the record and the report: Fast DDS's reception stamp
    stamp = record.outcome.lab["arrival_stamp"]
    assert (stamp["source"], stamp["rmw"], stamp["executor_realtime"]) == (
        "reception",
        "rmw_fastrtps_cpp",
        False,
    )
    assert stamp["arrivals"]["rmw_stamp"] >= plan.n_ticks() and stamp["arrivals"]["callback"] == 0
    assert (
        "Arrival stamp: **reception** (rmw_fastrtps_cpp"
        in (result.trial_dir / "analysis" / "report.md").read_text()
    )


# Beyond what the robot side's stop took after the host's end on a loaded machine (7.4 s), within the
# runners' bound (lifecycle.REST_RECORDING_LIMIT_S)
MOCAP_LAG_S = 10.0


def test_a_ground_truth_lagging_the_host_is_recorded_until_the_rest_after_the_run(tmp_path):
    """Motive's frames leave MOCAP_LAG_S after their exposure, as a loaded machine's robot and mocap
    side lag the host: the recording still goes on until it holds the robot's rest after the planned
    end, so the drift closes on the rest pose and the replay gives its closing beside it."""
    result, base, messages = _rehearse(tmp_path, SimulatedLab(mocap_latency_s=MOCAP_LAG_S))  # drift: two laps
    assert result.end_reason == "completed", (result.detail, messages)
    assert not base["moving"]
    record = read_trial(result.trial_dir)
    plan = record.request.plan
    metrics = _metrics(result.trial_dir)
    drift = metrics["drift"]
    assert drift.get("closing", {}).get("end_pose") == "rest after the run", (drift, record.outcome.warnings)
    _closing_is_the_replays(drift, metrics["drift_causes"], _replay_bound_m(result.trial_dir, plan))
    assert not [w for w in record.outcome.warnings if "without the rest after the run" in w]
    # the ground truth did lag: its last tracked frame arrived after the host's stream had ended
    # by more than the lag and the rest window together
    poses = read_bag(result.trial_dir / MOCAP_BAG).messages(MOCAP_POSE_TOPIC)
    last_pose_ns = max(t for t, _ in poses)
    stream_end_ns = record.outcome.stream_start_ns + round(plan.total_s * 1e9)
    assert last_pose_ns - stream_end_ns >= (MOCAP_LAG_S + 1.0) * 1e9, (last_pose_ns - stream_end_ns) / 1e9


def test_nodes_on_fast_dds_drive_a_base_on_cyclonedds(tmp_path):
    """Across vendors: the rclpy nodes on Fast DDS, the base on the kit's CycloneDDS (the Create 3's
    other firmware). The kit's CycloneDDS has no ROS parameter services, so the speed-cap check can
    only warn here: pre-flight in warn-only mode."""
    side = {"preflight_warn_only": "true"}
    lab = SimulatedLab(base_vendor="cyclonedds")
    result, base, messages = _rehearse(tmp_path, lab, robot_args_only=side, plan=ONE_LAP)
    assert result.end_reason == "completed", (result.detail, messages)
    plan = read_trial(result.trial_dir).request.plan
    base_lost = _base_lost(result.trial_dir, np.arange(plan.n_ticks()))
    assert base["commands"] >= plan.n_ticks() - base_lost and not base["moving"]
    assert any("battery at 90 %" in c.detail for c in result.preflight)  # BatteryState crossed too
    assert _metrics(result.trial_dir)["progress"]["laps_completed"] == plan.laps


def test_relay_on_one_side_only_is_refused_before_anything_starts(tmp_path):
    settings, requests = load_trials(_campaign(tmp_path))
    options = LabOptions(runs_dir=tmp_path / "runs", lab=settings.lab, robot_args={"relay": "true"})
    with pytest.raises(LaunchArgError, match="relay must be the same on both sides"):
        rehearse(requests, options, SimulatedLab())
    assert not (tmp_path / "runs").exists()


def test_preflight_refuses_a_base_that_would_clamp_the_speed(tmp_path):
    result, base, messages = _rehearse(tmp_path, SimulatedLab(safety_override="none"))
    assert result.end_reason == "error"
    # the runner reports it from its pre-flight loop, or from the robot side the gate stopped
    refused = [c.detail for c in result.preflight if c.check.startswith("create3") and not c.ok]
    assert any("speed cap" in d and "0.306" in d for d in [*refused, result.detail]), (result.detail, refused)
    assert base["max_linear_commanded_mps"] == 0.0 and base["pose"][:2] == [0.0, 0.0]  # never moved


def test_a_base_that_never_answers_the_gate_is_reported_as_the_gate_with_its_fix(tmp_path):
    """The base's parameter service is on the graph and takes the gate's requests without answering
    (a Fast DDS base to a CycloneDDS client): the trial is refused naming the service, the RMW field
    and the fix, within the pre-flight (the gate gives up after one unanswered request); before, each
    of three reads waited 10 s and a 30 s pre-flight said "robot-link"."""
    lab = SimulatedLab(extra_base_args=["--parameters", "unanswered"])
    result, base, messages = _rehearse(tmp_path, lab)
    assert result.end_reason == "error" and "robot-link" not in result.detail, (result.detail, messages)
    unanswered = (
        r"motion_control/get_parameters did not answer safety_override within 10 s.*RMW_IMPLEMENTATION"
    )
    assert re.search(unanswered, result.detail), result.detail
    assert base["max_linear_commanded_mps"] == 0.0 and base["pose"][:2] == [0.0, 0.0]  # never moved


def test_the_go_waits_for_the_link_monitors_command_subscription(tmp_path):
    """The robot's link monitor asks for transient-local commands (QoS fernandez-b) that the host's
    volatile publisher cannot offer: the base matches the host's publisher and the probes (their own
    QoS) go both ways, but the monitor's subscription never matches. The go waits for it until the
    pre-flight ends, names it, and the base never moves (without the wait the host streamed to the
    base and the robot logged nothing)."""
    side = {"qos": "fernandez-b"}
    result, base, messages = _rehearse(tmp_path, robot_args_only=side, preflight_timeout_s=12)
    assert result.end_reason == "error", (result.detail, messages)
    assert "has not matched a publisher of the commands" in result.detail, result.detail
    assert base["max_linear_commanded_mps"] == 0.0 and not base["moving"], base


def test_preflight_refuses_when_the_base_is_missing(tmp_path):
    result, base, messages = _rehearse(tmp_path, SimulatedLab(base=False))
    assert result.end_reason == "error"
    assert "pre-flight failed" in result.detail or "pre-flight refused" in result.detail, result.detail
    # refused by the robot's Create 3 pre-flight for the missing base, not for anything else slow
    checks = json.loads((result.trial_dir / "lab" / "robot_preflight.json").read_text())["findings"]
    failed = {c["check"]: c["detail"] for c in checks if c["severity"] == "fail"}
    assert set(failed) == {"speed cap", "battery"}, checks
    assert "get_parameters not found" in failed["speed cap"] and "no battery state" in failed["battery"]
    assert not base


def _host_killed(tmp_path: Path, middleware: str) -> tuple:
    """A one-lap trial on ``middleware`` whose square_driver is SIGKILLed mid-side (no stop burst)."""
    messages: list[str] = []
    say = _kill_after_go(tmp_path, "fieldtest_host.square_driver", 2.5, messages)
    result, base, _ = _rehearse(tmp_path, say=say, matrix={"middleware": [middleware]}, plan=ONE_LAP)
    return result, base, messages


@pytest.fixture(scope="module")
def host_killed_on_dds(tmp_path_factory) -> tuple:
    """The DDS trial with square_driver killed, run once for the tests that read it."""
    return _host_killed(tmp_path_factory.mktemp("host-killed-dds"), "dds")


def test_killed_host_node_leaves_the_base_stopped_and_the_recording_whole(host_killed_on_dds):
    """SIGKILL of square_driver mid-trial: no stop burst; the base stops on its own watchdog."""
    result, base, messages = host_killed_on_dds
    assert result.end_reason == "host-killed", (result.detail, messages)
    assert not base["moving"] and base["watchdog_stops"] >= 1
    receipts = _receipts(result.trial_dir)
    plan = read_trial(result.trial_dir).request.plan
    assert 0 < len(receipts) < plan.n_ticks()
    metrics = _metrics(result.trial_dir)
    assert metrics["progress"]["laps_completed"] < plan.laps


def _kill_node(tmp_path: Path, module: str) -> None:
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if module in cmdline and str(tmp_path) in cmdline:
            os.kill(proc.pid, signal.SIGKILL)


def _kill_after_go(tmp_path: Path, module: str, after_s: float, messages: list[str]):
    def say(line: str) -> None:
        messages.append(line)
        if line.strip() == "GO":
            threading.Timer(after_s, _kill_node, (tmp_path, module)).start()

    return say


@pytest.mark.parametrize("middleware", ["dds", "mqtt-local-broker", "zenoh-peer"])
def test_the_emergency_stop_reaches_the_base_whatever_the_middleware(tmp_path, middleware, request):
    """square_driver killed mid-side: no stop burst. The runner's emergency stop runs on the robot's
    own graph (base_stop over the robot shell), so the zeros reach the base even though the host's
    bridge or broker is gone and (Zenoh, MQTT) the host's DDS never reached the base."""
    if middleware.startswith("zenoh"):
        request.getfixturevalue("bridge")
    if middleware == "dds":  # the trial test_killed_host_node_leaves_the_base_stopped_... reads too
        result, base, messages = request.getfixturevalue("host_killed_on_dds")
    else:
        result, base, messages = _host_killed(tmp_path, middleware)
    assert result.end_reason == "host-killed", (result.detail, messages)
    warnings = read_trial(result.trial_dir).outcome.warnings
    # No relay: nothing but the emergency stop sends a zero after the last motion command.
    assert base["trailing_zero_commands"] >= 1, (base, warnings)
    estop = r"emergency stop on the robot: sent \d+ zero commands to /tb4/cmd_vel \(\S+\); subscribers: .*create3_base_sim"
    assert any(re.match(estop, w) for w in warnings), warnings
    assert not base["moving"]


def test_a_killed_link_monitor_is_analyzed_and_its_unflushed_commands_are_not_lost(tmp_path):
    """SIGKILL of link_monitor mid-trial: the robot side ends, the runner stops the host and the
    trial is analyzed as far as the robot's recording goes; what the dead logger never wrote is
    unrecorded, not loss on the link (loopback loses nothing)."""
    messages: list[str] = []
    say = _kill_after_go(tmp_path, "fieldtest_robot.link_monitor", 4.0, messages)
    result, base, _ = _rehearse(tmp_path, say=say, plan=ONE_LAP)
    assert result.end_reason == "robot-exited", (result.detail, messages)
    record = read_trial(result.trial_dir)
    assert record.outcome.lab["robot_recording"] == "cut"
    latency = _metrics(result.trial_dir)["latency"]
    plan = record.request.plan
    assert 0 < latency["commands_received"] < plan.n_ticks()
    assert latency["lost"] == 0, latency
    assert latency["unrecorded"] == latency["commands_sent"] - latency["commands_received"] > 0
    assert "unrecorded" in (result.trial_dir / "analysis" / "report.md").read_text()
    assert not base["moving"]


# ------------------------------------------------------------------ bridged middlewares


@pytest.fixture(scope="module")
def bridge():
    return find_bridge()  # BridgeMissingError names the install command: the tests fail, not skip


def _assert_like_a_lab_trial(result, base: dict, messages: list[str]) -> dict:
    """What a lab trial's analysis must show: every command received once, latency measured for
    each, the laps driven, the base at rest. The base counts each command it heard: with the
    sides' DDS apart, once (through the bridges); a leak between the domains would double it."""
    assert result.end_reason == "completed", (result.detail, messages)
    plan = read_trial(result.trial_dir).request.plan
    metrics = _metrics(result.trial_dir)
    latency = metrics["latency"]
    lost = _lost_to_reader_stalls(
        latency["lost_spans"], _monitor_takes(result.trial_dir), _trial_depth(result.trial_dir)
    )
    assert latency["lost"] == lost and latency["unrecorded"] == 0 and latency["duplicates"] == 0
    assert latency["commands_received"] + lost == latency["commands_sent"] >= plan.n_ticks()
    assert latency["one_way_ms"]["count"] == latency["commands_received"]
    assert latency["one_way_ms"]["median"] > 0
    assert metrics["progress"]["laps_completed"] == plan.laps
    # the base's own reader history, judged alike (a leak between the domains would double its count)
    base_lost = _base_lost(result.trial_dir, _sent_seqs(result.trial_dir))
    assert base["commands"] + base_lost == latency["commands_sent"] and not base["moving"], base
    return latency


def _side_logs(result) -> str:
    return "".join((result.trial_dir / "logs" / f"{side}.log").read_text() for side in ("host", "robot"))


def _processes_under(folder: Path, name: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if name in cmdline and str(folder) in cmdline:
            found.append(cmdline)
    return found


def test_zenoh_trials_run_through_the_real_bridges(tmp_path, bridge, keystore):
    """zenoh-peer plain and zenoh-router over mutual TLS, in one rehearsal: the launch plan's
    bridge (and router) configs under zenohd + the ros2dds plugin, started and stopped per trial.
    The other two pairs run through the same bridges on two machines (test_lab_two_machines)."""
    matrix = {"middleware": ["zenoh-peer", "zenoh-router"], "security": ["none", "mtls-acl"]}
    exclude = [
        {"middleware": "zenoh-peer", "security": "mtls-acl"},
        {"middleware": "zenoh-router", "security": "none"},
    ]
    results, bases, messages = _rehearse_all(
        tmp_path, matrix=matrix, exclude=exclude, plan=ONE_LAP, transport={"keystore": str(keystore)}
    )
    transports = [read_trial(r.trial_dir).request.transport for r in results]
    assert [(t.middleware, t.security) for t in transports] == [
        ("zenoh-peer", "none"),
        ("zenoh-router", "mtls-acl"),
    ]
    assert len(results) == len(bases) == 2
    for result, base in zip(results, bases, strict=True):
        _assert_like_a_lab_trial(result, base, messages)
        request = read_trial(result.trial_dir).request
        logs = _side_logs(result)
        for role in ("host", "robot"):  # the plan's own config file, run by zenohd + the plugin
            assert f"run zenoh_bridge: {bridge.zenohd} -c " in logs
            assert f"/config/{role}/zenoh_bridge_{role}.json5 -P ros2dds:{bridge.plugin}" in logs
        assert logs.count("Successfully started plugin ros2dds") == 2, result.trial_dir
        if request.transport.middleware == "zenoh-router":
            assert f"run zenoh_router: {bridge.zenohd} -c" in logs
    assert not _processes_under(tmp_path, "zenohd")  # every trial stopped its bridges and router


def test_without_the_robots_bridge_nothing_reaches_the_robot(tmp_path, bridge):
    """The sides' DDS domains are apart: with the host's bridge up and the robot's left out, the
    robot hears nothing, so the pre-flight refuses and the base never moves."""
    lab = SimulatedLab(robot_without=("zenoh_bridge",))
    result, base, messages = _rehearse(
        tmp_path, lab, matrix={"middleware": ["zenoh-peer"]}, plan=ONE_LAP, preflight_timeout_s=8
    )
    assert result.end_reason == "error" and "robot-link" in result.detail, (result.detail, messages)
    assert "Successfully started plugin ros2dds" in _side_logs(result)  # the host's bridge was up
    assert base["commands"] == 0 and base["max_linear_commanded_mps"] == 0.0


@pytest.mark.parametrize("middleware, security", [("mqtt-local-broker", "mtls-acl"), ("mqtt-broker", "none")])
def test_mqtt_trials_run_through_mosquitto_and_the_mqtt_client_stand_in(
    tmp_path, keystore, middleware, security
):
    """Real Mosquitto with the kit's broker config (started by the host's launch plan, or as the
    separate broker machine), the stand-in for mqtt_client on each side, with its parameter file."""
    transport = {"keystore": str(keystore)}
    result, base, messages = _rehearse(
        tmp_path,
        matrix={"middleware": [middleware], "security": [security]},
        plan=ONE_LAP,
        transport=transport,
    )
    _assert_like_a_lab_trial(result, base, messages)
    assert any("stand-in" in m and "mqtt_client" in m for m in messages)  # said plainly
    logs = _side_logs(result)
    assert logs.count(STANDIN_BANNER) == 2
    for role in ("host", "robot"):
        assert f"-m {MQTT_STANDIN} " in logs and f"/config/{role}/mqtt_client_{role}.yaml" in logs
    assert ("run mosquitto:" in logs) == (middleware == "mqtt-local-broker")


@pytest.mark.parametrize("middleware, security", [("mqtt-local-broker", "mtls-acl"), ("mqtt-broker", "none")])
def test_an_mqtt_trial_under_nagle_takes_its_clock_offset_over_udp(
    tmp_path, keystore, monkeypatch, middleware, security
):
    """The stand-in sending as Paho C does (Nagle on): probes over MQTT wait for delayed ACKs and
    their offset is off by many ms (the clock pre-flight refused such trials). MQTT trials take the
    offset from plain UDP probes to the host's square_driver, named in the record and the report;
    the link's own probes still prove the link both ways."""
    monkeypatch.setenv(KEEP_NAGLE_ENV, "1")
    result, base, messages = _rehearse(
        tmp_path,
        matrix={"middleware": [middleware], "security": [security]},
        plan=ONE_LAP,
        transport={"keystore": str(keystore)},
    )
    _assert_like_a_lab_trial(result, base, messages)
    clock = next(c for c in result.preflight if c.check == "clock")
    assert clock.severity == "ok" and "probes over udp" in clock.detail, clock
    link = next(c for c in result.preflight if c.check == "robot-link")
    assert link.severity == "ok", link  # the MQTT probes crossed both ways
    lab = read_trial(result.trial_dir).outcome.lab
    assert lab["clock_offset_source"] == "udp" and lab["link_probe_offset_s"] is not None
    metrics = _metrics(result.trial_dir)
    assert metrics["latency"]["clock_offset_source"] == "udp"
    assert (
        "over UDP (not over the measured link)" in (result.trial_dir / "analysis" / "report.md").read_text()
    )
    host_status = json.loads((result.trial_dir / "lab" / "host_status.json").read_text())
    assert host_status["udp_clock_probes_answered"] > 0


# ------------------------------------------------------- the stand-in and planrun, without a trial


@pytest.mark.parametrize("security", ["none", "mtls-acl"])
@pytest.mark.parametrize("role", ["host", "robot"])
def test_mqtt_standin_reads_the_parameter_file_the_kit_generates(tmp_path, keystore, role, security):
    from fieldtest.middleware.labshared import received_by, sent_by, topic_qos, wire_name
    from fieldtest.middleware.mqtt.lab import mqtt_client_params, to_yaml
    from fieldtest.qos import get_qos, mqtt_qos

    extra = {"security": security, "keystore": str(keystore)} if security != "none" else {}
    cfg = parse_launch_args(
        {
            "middleware": "mqtt-broker",
            "namespace": "/tb4",
            "ros_distro": "jazzy",
            "mqtt_port": "1999",
            **extra,
        },
        role,
        environ={},
    )
    path = tmp_path / f"mqtt_client_{role}.yaml"
    path.write_text(to_yaml(mqtt_client_params(cfg)))
    config = load_config(path)
    assert (config.host, config.port, config.client_id) == ("127.0.0.1", 1999, f"fieldtest_{role}")
    assert [b.mqtt_topic for b in config.ros2mqtt] == [wire_name(cfg, t.topic) for t in sent_by(cfg)]
    assert [b.ros_topic for b in config.mqtt2ros] == [f"/tb4{t.topic}" for t in received_by(cfg)]
    assert [b.ros_type for b in config.mqtt2ros] == [t.typename for t in received_by(cfg)]
    # the trial's QoS (default: reliable), the clock probes' own (best effort)
    wanted = [topic_qos(t.topic, cfg.qos) for t in received_by(cfg)]
    assert [(b.mqtt_qos, b.reliability) for b in config.mqtt2ros] == [
        (mqtt_qos(q), get_qos(q).reliability) for q in wanted
    ]
    assert bool(config.tls) == (security != "none")
    if config.tls:
        assert Path(config.tls["certificate"]).is_file() and Path(config.tls["key"]).is_file()


def test_mqtt_standin_refuses_what_it_does_not_carry(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "/**": {
                    "ros__parameters": {
                        "bridge": {
                            "ros2mqtt": {"ros_topics": ["/a"], "/a": {"mqtt_topic": "a", "primitive": True}}
                        }
                    }
                }
            }
        )
    )
    with pytest.raises(StandinConfigError, match=r"params.yaml: bridge.ros2mqtt./a.primitive"):
        load_config(path)
    path.write_text("{}")
    with pytest.raises(StandinConfigError, match="no ros__parameters"):
        load_config(path)


def test_planrun_stops_the_side_when_its_broker_cannot_start(tmp_path):
    """A broker whose port is taken exits at once: the side ends (exit 3) before any node starts."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = [
            f"{k}:={v}"
            for k, v in {
                "middleware": "mqtt-local-broker",
                "mqtt_port": port,
                "ros_distro": "jazzy",
                **NODE_ARGS,
            }.items()
        ]
        done = subprocess.run(
            [ros_python(ROS_VENV), "-m", "fieldtest.labrun.orchestration.planrun", "--rehearsal", "host", *args, f"trial_dir:={tmp_path}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == EXIT_SIDE_PROCESS, done.stdout + done.stderr
    assert (
        "mosquitto exited at start" in done.stdout and "node " not in done.stdout.split("exited at start")[-1]
    )
    assert not (tmp_path / "host").exists()  # square_driver never ran


def test_rehearsal_without_the_bridge_build_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FIELDTEST_CACHE", str(tmp_path / "empty-cache"))
    settings, requests = load_trials(_campaign(tmp_path, matrix={"middleware": ["zenoh-router"]}))
    # the campaign's distro: the rehearsal refuses any other than its rclpy's before the bridge check
    options = LabOptions(runs_dir=tmp_path / "runs", ros_distro=settings.lab.ros_distro, lab=settings.lab)
    with pytest.raises(RehearsalError, match="install_zenoh_bridge.sh"):
        rehearse(requests, options, SimulatedLab())
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("middleware", ["zenoh-peer", "zenoh-router", "mqtt-local-broker"])
def test_rehearsal_runs_the_plans_own_side_processes_with_their_files(tmp_path, bridge, middleware):
    """Only the program changes: same names, same config files (not rewritten), same environment,
    plus what the one-machine bridge needs: its CycloneDDS meets the nodes' Fast DDS on 127.0.0.1
    only with a unicast peer there (without it the plugin created no route)."""
    args = {"middleware": middleware, "ros_distro": "jazzy", "trial_dir": str(tmp_path), **NODE_ARGS}
    plan = launch_plan(args, "host", environ={"PATH": ""})  # no zenohd on PATH: the plan's fallback router
    replaced = {p.name: p for p in rehearsal_processes(plan, python="/ros/python")}
    for proc in plan.processes:
        assert replaced[proc.name].config_files == proc.config_files
        kept = dict(proc.env)
        if proc.name == "zenoh_bridge":  # the one-machine peer below replaces the bridge's own
            kept.pop("CYCLONEDDS_URI", None)
        assert replaced[proc.name].env.items() >= kept.items()
    if middleware.startswith("zenoh"):
        bridge_proc = replaced["zenoh_bridge"]
        config = plan.config_dir / "zenoh_bridge_host.json5"
        assert bridge_proc.argv[:4] == [str(bridge.zenohd), "-c", str(config), "-P"]
        assert bridge_proc.env["ROS_DISTRO"] == "jazzy"
        assert '<Peer address="127.0.0.1"/>' in bridge_proc.env["CYCLONEDDS_URI"]
    if middleware == "zenoh-router":
        assert replaced["zenoh_router"].argv == [
            str(bridge.zenohd),
            "-c",
            str(plan.config_dir / "zenoh_router.json5"),
        ]
    if middleware.startswith("mqtt"):
        params = plan.config_dir / "mqtt_client_host.yaml"
        assert replaced["mqtt_client"].argv == ["/ros/python", "-m", MQTT_STANDIN, str(params)]
        assert replaced["mosquitto"].argv == next(p.argv for p in plan.processes if p.name == "mosquitto")


# ------------------------------------------------------------------ stop signals


@pytest.mark.parametrize(
    "signals",
    [[signal.SIGTERM], [signal.SIGHUP], [signal.SIGINT, signal.SIGINT]],
    ids=["term", "hup", "int-twice"],
)
def test_a_stop_signal_ends_the_rehearsal_with_the_robot_stopped(tmp_path, signals):
    """``fieldtest lab rehearse`` of two trials, signalled mid-square (SIGHUP: the terminal closed; a
    second Ctrl-C while the runner stops the robot): the base stopped by the host's stop burst,
    the robot launch stopped, the trial analyzed, no second trial, exit 130, nothing left running."""
    import sys
    import time

    source = _campaign(tmp_path, plan={**SHORT_PLAN, "laps": 4})
    campaign = yaml.safe_load(source.read_text())
    source.write_text(yaml.safe_dump({**campaign, "repetitions": 2}))
    out = tmp_path / "rehearse.out"
    argv = [
        sys.executable,
        "-m",
        "fieldtest.cli",
        "lab",
        "rehearse",
        str(source),
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    with out.open("w") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=as_from_a_terminal
        )
    deadline = time.monotonic() + 120
    while "  GO" not in out.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(4.0)  # into the first side
    for sig in signals:
        proc.send_signal(sig)
        time.sleep(0.3)
    code = proc.wait(timeout=180)
    output = out.read_text()
    assert code == 130, output
    trials = sorted((tmp_path / "runs" / "rehearsal").glob("*/trial.yaml"))
    assert len(trials) == 1, output
    trial_dir = trials[0].parent
    record = read_trial(trial_dir)
    assert record.outcome.end_reason == "interrupted", output
    assert record.outcome.lab["robot_recording"] == "closed"
    plan = record.request.plan
    receipts = _receipts(trial_dir)
    assert 0 < len({r.seq for r in receipts if r.seq < plan.n_ticks()}) < plan.n_ticks()
    assert max(r.seq for r in receipts) == plan.n_ticks() + 4  # the stop burst reached the robot
    assert _metrics(trial_dir)["progress"]["laps_completed"] < plan.laps  # analyzed
    [base] = _base_statuses(tmp_path / "runs" / "rehearsal")
    assert not base["moving"] and base["trailing_zero_commands"] >= 1
    assert not _processes_under(tmp_path, "fieldtest")  # robot launch, nodes, simulated hardware


# ------------------------------------------------------------------ safety: dry run, geofence


@pytest.mark.parametrize("middleware", ["dds", "mqtt-local-broker"])
def test_a_dry_run_streams_the_whole_plan_and_never_drives_the_base(tmp_path, middleware):
    """The lab day's first step: real nodes, the real command path (bridges and broker too), every
    command logged by the link monitor, and not one command at the base."""
    result, base, messages = _rehearse(
        tmp_path, side_args={"dry_run": "true"}, matrix={"middleware": [middleware]}, plan=ONE_LAP
    )
    assert result.end_reason == "completed", (result.detail, messages)
    record = read_trial(result.trial_dir)
    plan = record.request.plan
    _monitor_lost_in_plan(result.trial_dir, plan)  # whole plan logged
    assert base["commands"] == 0 and base["pose"][:2] == [0.0, 0.0]
    assert record.outcome.lab["dry_run"] is True
    assert any(w.startswith("dry run: the base was not driven") for w in record.outcome.warnings)


def test_the_geofence_stops_the_trial_when_the_robot_leaves_the_box(tmp_path):
    """A 1 m first side against a fence at x = 0.3 m: the runner reads the live mocap, stops the
    trial (host stop burst) as the rigid body crosses, and the base stops well short of the side."""
    plan = {**SHORT_PLAN, "side_duration_s": 3.0, "laps": 1}
    result, base, messages = _rehearse(tmp_path, plan=plan, geofence_m=[-0.3, 0.3, -0.3, 0.3])
    assert result.end_reason == "geofence", (result.detail, messages)
    assert any(line.startswith("  GEOFENCE: ") for line in messages)
    record = read_trial(result.trial_dir)
    # Seen within a poll and a frame of the crossing (0.1 m at the plan's speed), the base stopped
    # within 0.3 m of it, each later by no more than the machine's longest pause in this rehearsal
    # (the runner polls the fence in this process; the stop burst goes out once it has seen it).
    report = json.loads((tmp_path / MACHINE_REPORT).read_text())
    late_m = record.request.plan.linear_speed_mps * report["timer_late_max_ms"] / 1e3
    seen = re.search(r"at x ([+-][\d.]+) m, y [+-][\d.]+ m left the geofence", result.detail)
    assert seen and 0.3 <= float(seen[1]) < 0.4 + late_m, (result.detail, describe(report))
    assert not base["moving"] and 0.3 <= base["pose"][0] < min(0.6 + late_m, 1.0), (base, describe(report))
    receipts = _receipts(result.trial_dir)
    n = record.request.plan.n_ticks()
    assert max(r.seq for r in receipts) == n + 4 and len([r for r in receipts if r.seq < n]) < n
    assert _metrics(result.trial_dir)["progress"]["laps_completed"] == 0  # analyzed


def test_a_geofence_must_be_a_box(tmp_path):
    source = _campaign(tmp_path, geofence_m=[0.5, -0.5, -1.0, 1.0])
    with pytest.raises(CampaignError, match=r"geofence_m.*min < max"):
        load_trials(source)


@pytest.mark.parametrize("middleware", ["dds", "zenoh-peer", "mqtt-local-broker"])
def test_a_rehearsal_of_another_distro_than_its_rclpy_is_refused_at_once(tmp_path, middleware):
    """The nodes are Jazzy's rclpy: a Humble trial would claim a distro it never ran (Humble's rclpy
    calls callbacks differently, its bridge reads other GIDs). Refused before anything starts,
    naming the distro and the fix."""
    with pytest.raises(RehearsalError, match=r"ros_distro humble: .*jazzy's rclpy.*--ros-distro jazzy"):
        _rehearse_all(tmp_path, distro="humble", cmd_type="twist", matrix={"middleware": [middleware]})
    assert not (tmp_path / "runs" / "simulated-hardware").exists()
