"""The lab driver and link monitor (the shared endpoints plus lab control) over real Zenoh,
the relay watchdog, the emergency stop, and the ssh scripts of the robot side (run locally)."""

from __future__ import annotations

import array
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from fieldtest import rosmsg
from fieldtest.endpoints.link import RemappedTransport, command_remap
from fieldtest.endpoints.stop import ESTOP_SEQ, RELAY_FINAL_ZEROS, RELAY_SILENCE_S, RelayWatchdog
from fieldtest.labrun.nodelogic.driver import (
    CONTROL_DIR,
    EXIT_ROBOT_LOST,
    GO_FILE,
    HOST_STATUS,
    STOP_FILE,
    LabDriver,
)
from fieldtest.labrun.nodelogic.estop import ros2_zero_command_argv, zero_commands_over_transport
from fieldtest.labrun.nodelogic.monitor import LabLinkMonitor
from fieldtest.labrun.orchestration.labrunner import host_end_reason
from fieldtest.labrun.orchestration.remote import RemoteShell, local_robot_side
from fieldtest.middleware.registry import open_transport
from fieldtest.names import STOP_BURST_COUNT
from fieldtest.plan import SquarePlan
from fieldtest.procs import free_port
from fieldtest.record import RECEIPTS_TOPIC, TrialRequest, read_bag
from fieldtest.record.recordnames import RELAY_CMD_VEL_TOPIC
from fieldtest.transport.base import TransportConfig

# 0.1 m/s sides of 0.5 s and 0.5 s turns: 2.2 s per lap including the start delay.
SHORT = SquarePlan(linear_speed_mps=0.1, side_duration_s=0.5, turn_rate_dps=180.0, laps=1, start_delay_s=0.2)


def _request(plan: SquarePlan = SHORT, cmd_type: str = "twist") -> TrialRequest:
    transport = TransportConfig(middleware="zenoh-peer", zenoh_port=free_port())
    return TrialRequest(plan=plan, transport=transport, cmd_type=cmd_type)


class Robot:
    """A LabLinkMonitor on its own thread, with a recording relay."""

    def __init__(self, request: TrialRequest, folder: Path, relay: bool):
        self.relayed: list = []
        inner = open_transport(request.transport, "robot")
        transport = RemappedTransport(inner, command_remap(relay))
        self.monitor = LabLinkMonitor(
            request, folder, transport=transport, relay=self.relayed.append if relay else None
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.monitor.run, args=(self.stop,), daemon=True)
        self.thread.start()
        self.status: dict | None = None

    def received(self) -> int:
        return self.monitor.receiver.stats.received

    def close(self) -> dict:
        if self.status is None:
            self.stop.set()
            self.thread.join(10)
            self.status = self.monitor.close()
        return self.status


def _drive(
    request: TrialRequest, folder: Path, relay: bool, **driver_args
) -> tuple[LabDriver, threading.Thread, dict]:
    transport = RemappedTransport(open_transport(request.transport, "host"), command_remap(relay))
    driver = LabDriver(request, folder, transport=transport, **driver_args)
    result: dict = {}
    stop = threading.Event()
    result["stop"] = stop
    thread = threading.Thread(target=lambda: result.setdefault("code", driver.run(stop, 20.0)), daemon=True)
    thread.start()
    return driver, thread, result


def _silences(receipts: list, silence_s: float) -> int:
    """Gaps of at least ``silence_s`` after a moving command, by the robot's arrival stamps."""
    arrivals = [r.received.sec + r.received.nanosec * 1e-9 for r in receipts]
    return sum(
        1
        for before, after, r in zip(arrivals, arrivals[1:], receipts, strict=False)
        if after - before >= silence_s and (r.twist.linear.x != 0.0 or r.twist.angular.z != 0.0)
    )


def _wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _status(folder: Path) -> dict:
    try:
        return json.loads((folder / CONTROL_DIR / HOST_STATUS).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def test_full_stream_with_relay_twist_mode_and_go_file(tmp_path):
    request = _request()
    robot = Robot(request, tmp_path / "pi", relay=True)
    driver, thread, result = _drive(request, tmp_path / "host", relay=True)
    try:
        assert _wait_for(lambda: _status(tmp_path / "host").get("state") == "waiting-go", 15)
        assert not driver.streamer.result.plan_sent  # nothing moves before the go
        (tmp_path / "host" / CONTROL_DIR / GO_FILE).touch()
        thread.join(30)
        assert result["code"] == 0
    finally:
        host_status = driver.close()
        sent = host_status["plan_sent"] + host_status["stop_burst_sent"]
        _wait_for(lambda: robot.received() >= sent, 10)  # the last commands in, before the robot goes
        status = robot.close()
    n = SHORT.n_ticks()
    assert host_status["plan_sent"] == n and host_status["stop_burst_sent"] == STOP_BURST_COUNT
    assert status["received"] == n + 5 and status["missing_in_range"] == 0
    assert status["clock_offset_s"] is not None and status["relay"]["forwarded"] == n + 5
    receipts = [m for _, m in read_bag(tmp_path / "pi" / "robot").messages(RECEIPTS_TOPIC)]
    assert [r.seq for r in receipts] == list(range(n + 5))  # Twist + cmd_stamp paired by arrival
    assert receipts[-1].twist.linear.x == 0.0 and max(r.twist.linear.x for r in receipts) == pytest.approx(
        0.1
    )
    assert all(r.latency_s == r.latency_s for r in receipts[5:])  # corrected once the offset is known
    # the relay forwarded every command and ended with zeros for the base; a zero of its own in
    # between only after a silence of the host's that the receipts show (a loaded machine's)
    stops = status["relay"]["silence_stops"]
    assert stops <= _silences(receipts, RELAY_SILENCE_S), (stops, [r.received for r in receipts])
    assert len(robot.relayed) == n + 5 + stops + RELAY_FINAL_ZEROS
    assert all(t.linear.x == 0.0 and t.angular.z == 0.0 for t in robot.relayed[-(5 + RELAY_FINAL_ZEROS) :])
    assert _status(tmp_path / "host")["state"] == "done"


def test_lost_robot_ends_the_stream_with_the_stop_burst(tmp_path):
    plan = SHORT.model_copy(update={"laps": 3})
    request = _request(plan, cmd_type="twist_stamped")
    robot = Robot(request, tmp_path / "pi", relay=False)
    driver, thread, result = _drive(request, tmp_path / "host", relay=False, robot_lost_s=1.0)
    try:
        assert _wait_for(lambda: _status(tmp_path / "host").get("state") == "waiting-go", 15)
        (tmp_path / "host" / CONTROL_DIR / GO_FILE).touch()
        assert _wait_for(lambda: driver.streamer.commands_sent > 10, 10)
        robot.close()  # the Pi goes away mid-trial: no more clock probes
        thread.join(20)
    finally:
        status = driver.close()
    assert result["code"] == EXIT_ROBOT_LOST
    assert status["end"] == "robot-lost"
    assert 10 < status["plan_sent"] < plan.n_ticks() and status["stop_burst_sent"] == STOP_BURST_COUNT
    assert "robot lost" in _status(tmp_path / "host")["end_detail"]


def test_stop_file_aborts_before_the_go_and_sends_zeros(tmp_path):
    request = _request()
    robot = Robot(request, tmp_path / "pi", relay=False)
    driver, thread, result = _drive(request, tmp_path / "host", relay=False)
    try:
        assert _wait_for(lambda: _status(tmp_path / "host").get("state") == "waiting-go", 15)
        (tmp_path / "host" / CONTROL_DIR / STOP_FILE).touch()
        thread.join(10)
    finally:
        status = driver.close()
        _wait_for(lambda: robot.received() >= status["stop_burst_sent"], 10)
        robot_status = robot.close()
    assert result["code"] != 0 and status["plan_sent"] == 0 and status["stop_burst_sent"] == STOP_BURST_COUNT
    receipts = [m for _, m in read_bag(tmp_path / "pi" / "robot").messages(RECEIPTS_TOPIC)]
    assert robot_status["received"] == 5 and all(r.twist.linear.x == 0.0 for r in receipts)


def test_emergency_stop_reaches_the_robot(tmp_path):
    request = _request(cmd_type="twist_stamped")
    robot = Robot(request, tmp_path / "pi", relay=False)  # listening and subscribed once it returns
    try:
        zero_commands_over_transport(request)
        assert _wait_for(lambda: robot.received() >= 1, 5)
    finally:
        status = robot.close()
    receipts = [m for _, m in read_bag(tmp_path / "pi" / "robot").messages(RECEIPTS_TOPIC)]
    assert status["received"] >= 1 and {r.seq for r in receipts} == {ESTOP_SEQ}
    argv = ros2_zero_command_argv(request.model_copy(update={"cmd_type": "twist"}), relay=True)
    assert (
        argv[:3] == ["ros2", "topic", "pub"]
        and RELAY_CMD_VEL_TOPIC in argv
        and "geometry_msgs/msg/Twist" in argv
    )


def test_relay_watchdog_sends_one_zero_after_silence():
    sent: list = []
    watchdog = RelayWatchdog(sent.append, silence_s=0.3)
    assert not watchdog.check(now_mono=100.0)  # nothing relayed yet: nothing to stop
    watchdog.forward(rosmsg.twist(0.2, 0.0), now_mono=100.0)
    assert not watchdog.check(now_mono=100.29)
    assert watchdog.check(now_mono=100.31)
    assert not watchdog.check(now_mono=101.0)  # once per silence
    assert sent[-1].linear.x == 0.0 and watchdog.silence_stops == 1
    watchdog.forward(rosmsg.twist(0.0, 0.0), now_mono=102.0)
    assert not watchdog.check(now_mono=103.0)  # the host itself stopped the robot
    watchdog.final_stop()
    assert len(sent) == 2 + 1 + 3


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (0, "completed"),
        (EXIT_ROBOT_LOST, "error"),
        (3, "error"),
        (-signal.SIGKILL, "host-killed"),
        (130, "host-stopped"),
    ],
)
def test_host_end_reasons(code, reason):
    assert (
        host_end_reason(code, {"plan_sent": 1, "plan_ticks": 2, "stop_burst_sent": STOP_BURST_COUNT})[0]
        == reason
    )


FAKE_LAUNCH = """
import json, os, signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
out.write_text(json.dumps({"args": sys.argv[2:], "pid": os.getpid()}))
signal.signal(signal.SIGINT, lambda *_: (out.with_suffix(".sigint").write_text("1"), sys.exit(0)))
time.sleep(30)
"""


def _fake_robot_side(tmp_path: Path):
    """A robot side on this machine whose launch is FAKE_LAUNCH; it writes its arguments to ``out``."""
    script = tmp_path / "fake_launch.py"
    script.write_text(FAKE_LAUNCH)
    out = tmp_path / "args.json"
    return local_robot_side(tmp_path / "pi", (sys.executable, str(script), str(out))), out


def test_robot_side_scripts_pass_arguments_intact_and_stop_with_sigint(tmp_path):
    side, out = _fake_robot_side(tmp_path)
    args = {
        "plan": json.dumps({"laps": 1, "note": "it's a 'plan'"}),
        "namespace": "/tb4",
        "keystore": "~/k s",
    }
    with (tmp_path / "robot.log").open("w") as log:
        proc = side.start("t1", args, log)
    try:
        assert _wait_for(out.exists, 10)
        # a path under '~' arrives resolved by the robot's shell (the login's home), the rest as given
        given = {k: os.path.expanduser(v) if v.startswith("~/") else v for k, v in args.items()}
        assert json.loads(out.read_text())["args"] == [f"{k}:={v}" for k, v in given.items()]
        launch_pid = json.loads(out.read_text())["pid"]
        assert (tmp_path / "pi" / "t1" / "launch.pid").read_text().strip() == str(launch_pid)
        assert os.getpgid(launch_pid) == launch_pid  # a group of its own: the stop's SIGTERM takes it whole
        (tmp_path / "pi" / "t1" / "robot_status.json").write_text('{"probes_completed": 3}')
        assert side.read_json("t1", "robot_status.json") == {"probes_completed": 3}
        assert side.read_json("t1", "missing.json") is None
        side.stop("t1")
        assert proc.wait(10) == 0 and out.with_suffix(".sigint").exists()
        side.collect("t1", tmp_path / "trial")
        assert (tmp_path / "trial" / "robot_status.json").is_file()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# A node that records the first stop signal it gets ("ready" once its handlers are in).
SIGNAL_RECORDER = (
    "import signal, sys, time; from pathlib import Path; seen = Path(sys.argv[1])\n"
    "def got(n, _): seen.write_text(signal.Signals(n).name); sys.exit(0)\n"
    "signal.signal(signal.SIGINT, got); signal.signal(signal.SIGTERM, got); seen.write_text('ready')\n"
    "time.sleep(30)"
)
# ros2 launch as it stops (launch/actions/execute_local.py, __on_shutdown): after a SIGINT of its own
# it sends its nodes no SIGINT (a terminal's Ctrl-C reached them), only SIGTERM after sigterm_timeout.
LAUNCH_LIKE = """
import json, os, signal, subprocess, sys, time
from pathlib import Path
out = Path(sys.argv[1])
node = subprocess.Popen([sys.executable, "-c", NODE_CODE, str(out.with_suffix(".node"))])
stopping = []
signal.signal(signal.SIGINT, lambda *_: stopping.append(time.monotonic()))
out.write_text(json.dumps({"args": sys.argv[2:], "pid": os.getpid()}))
while node.poll() is None:
    if stopping and time.monotonic() - stopping[0] > 5.0:
        node.send_signal(signal.SIGTERM)
        node.wait()
    time.sleep(0.05)
""".replace("NODE_CODE", repr(SIGNAL_RECORDER))


def _recorders(tmp_path: Path, n: int) -> list[tuple[subprocess.Popen, Path]]:
    started = []
    for i in range(n):
        seen = tmp_path / f"node{i}.signal"
        started.append((subprocess.Popen([sys.executable, "-c", SIGNAL_RECORDER, str(seen)]), seen))
    assert _wait_for(lambda: all(s.exists() and s.read_text() == "ready" for _, s in started), 10)
    return started


@pytest.mark.parametrize(
    "after, first", [([signal.SIGINT], "SIGTERM"), ([signal.SIGTERM], "SIGINT"), ([], "SIGINT")]
)
def test_the_launch_stand_in_stops_its_processes_as_launch_does(tmp_path, after, first):
    """planrun after a SIGINT of its own sends none on (the group's reached the nodes), only SIGTERM
    after the wait; after a SIGTERM, or a node's exit, SIGINT first."""
    from fieldtest.labrun.orchestration.planrun import launch_sends_sigint, stop_processes

    started = _recorders(tmp_path, 2)
    stop_processes([p for p, _ in started], timeout_s=0.5, sigint=launch_sends_sigint(after))
    assert [(p.poll(), s.read_text()) for p, s in started] == [(0, first)] * 2


def test_the_stop_reaches_the_launchs_nodes_with_sigint_as_a_terminals_ctrl_c_does(tmp_path):
    """ros2 launch does not pass on a SIGINT it got itself: the stop sends it to the launch's whole
    group, so each node closes its bag and the relay sends its zeros now, not on a SIGTERM 5 s later."""
    script = tmp_path / "launch_like.py"
    script.write_text(LAUNCH_LIKE)
    out = tmp_path / "args.json"
    side = local_robot_side(tmp_path / "pi", (sys.executable, str(script), str(out)))
    node = out.with_suffix(".node")
    with (tmp_path / "robot.log").open("w") as log:
        proc = side.start("t1", {"namespace": ""}, log)
    try:
        assert _wait_for(lambda: out.exists() and node.exists() and node.read_text() == "ready", 10)
        side.stop("t1")
        assert proc.wait(10) == 0 and node.read_text() == "SIGINT"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_status_read_that_times_out_is_no_status_yet(tmp_path):
    """On a loaded robot an ssh read of a status file can outlast its timeout: the pre-flight polls
    again (before, the RemoteError ended the whole campaign, exit 2, in a two-machine run)."""
    side, _ = _fake_robot_side(tmp_path)
    folder = tmp_path / "pi" / "t1"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "robot_status.json")  # no writer: cat blocks, as a stalled session would
    assert side.read_json("t1", "robot_status.json", timeout_s=0.5) is None


def _unread_bytes(pipe) -> int:
    """Bytes written to a pipe that its reader has not taken yet (FIONREAD, either end)."""
    count = array.array("i", [0])
    fcntl.ioctl(pipe.fileno(), termios.FIONREAD, count)
    return count[0]


def test_the_robot_side_stops_itself_when_its_session_ends(tmp_path):
    """Its session's stdin closing (ssh gone: sshd sends a session without a tty no SIGHUP) stops
    the launch as the runner's stop does, SIGINT first, with nobody running the stop script."""
    side, out = _fake_robot_side(tmp_path)
    with (tmp_path / "robot.log").open("w") as log:
        proc = side.start("t1", {"namespace": ""}, log)
    try:
        assert _wait_for(out.exists, 10)
        # Two lines on the session's stdin, each taken by the watcher: it reads that stdin and a
        # line does not end it (it took the second after the first); only then does the session end.
        for line in ("one", "two"):
            proc.stdin.write(f"{line}\n".encode())
            proc.stdin.flush()
            assert _wait_for(lambda: _unread_bytes(proc.stdin) == 0, 10), f"the watcher never read {line!r}"
        assert proc.poll() is None and not out.with_suffix(".sigint").exists(), (
            "the robot side ended before its session did"
        )
        proc.stdin.close()  # the session's end, as the robot's shell sees it
        assert proc.wait(10) == 0 and out.with_suffix(".sigint").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_next_trial_first_stops_a_launch_an_earlier_session_left_running(tmp_path):
    """A launch whose shell died without stopping it (its pid file still there) is stopped, SIGINT
    first, before the next trial's launch starts; its pid file goes with it."""
    side, out = _fake_robot_side(tmp_path)
    with (tmp_path / "robot.log").open("w") as log:
        proc = side.start("t1", {"namespace": ""}, log)
    try:
        assert _wait_for(out.exists, 10)
        proc.kill()  # the session's shell gone; its launch (a group of its own) runs on
        proc.wait(10)
        launch_pid = json.loads(out.read_text())["pid"]
        os.kill(launch_pid, 0)
        assert side.clear_left_over() == [str(tmp_path / "pi" / "t1" / "launch.pid")]
        assert out.with_suffix(".sigint").exists()
        assert not (tmp_path / "pi" / "t1" / "launch.pid").exists()
        assert side.clear_left_over() == []  # nothing left: nothing to stop
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ssh_command_line_quotes_the_script_once():
    shell = RemoteShell("ubuntu@tb4")
    script = "source /opt/ros/humble/setup.bash && echo 'a b' \"$HOME\""
    argv = shell.argv(script)
    assert argv[0] == "ssh" and "BatchMode=yes" in argv and argv[-2] == "ubuntu@tb4"
    assert shlex.split(argv[-1]) == ["bash", "-c", script]
