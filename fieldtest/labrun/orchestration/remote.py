"""Running things on the robot's Raspberry Pi from the host: ssh command lines, start/stop/collect.

The lab runner starts the robot side once per trial (``ros2 launch fieldtest_robot robot.launch.py``
with the trial's arguments, recording into ``<remote_root>/<trial_id>``), stops it with SIGINT to its process group
(so the link monitor relays its final zeros and closes its bag), reads its status files for
pre-flight and copies the recording back into the trial directory. ``RemoteShell(target=None)``
runs the same scripts locally with bash: that is how the runner is tested here, and how it runs
when the runner itself sits on the Pi or the robot folder is a shared mount.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fieldtest.errors import FieldtestError
from fieldtest.labrun.configuration.stockrobot import TURTLEBOT4_SETUP

SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=2")
PID_FILE = "launch.pid"
STOP_WAIT_S = 8.0
# The e-stop program's start before base_stop runs: the robot's setup, its imports, the launch plan's
# files (base_stop's own limit is estop.ESTOP_TIMEOUT_S)
ESTOP_START_S = 30.0


class RemoteError(FieldtestError, RuntimeError):
    """A remote command failed; the message has its stderr's last line."""


@dataclass(frozen=True)
class RemoteShell:
    """``target`` is ssh's destination (user@host); None runs the scripts locally."""

    target: str | None = None
    ssh_options: tuple[str, ...] = SSH_OPTIONS

    def argv(self, script: str) -> list[str]:
        if self.target is None:
            return ["bash", "-c", script]
        # ssh joins its arguments into one remote command line, run by the login shell.
        return ["ssh", *self.ssh_options, self.target, f"bash -c {shlex.quote(script)}"]

    def run(self, script: str, timeout_s: float = 20.0, check: bool = True) -> subprocess.CompletedProcess:
        try:
            done = subprocess.run(
                self.argv(script), capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            raise RemoteError(f"{self.where()}: timed out after {timeout_s:g} s: {script[:80]}") from None
        if check and done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RemoteError(f"{self.where()}: exit {done.returncode}: {last}")
        return done

    def popen(self, script: str, log: IO[str]) -> subprocess.Popen:
        """``script`` running until it ends; its stdin is a pipe nobody writes, which closes when
        this process or the ssh session ends (the robot side's watcher, RobotSide.start_script)."""
        return subprocess.Popen(
            self.argv(script),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE,
            start_new_session=True,
        )

    def copy_argv(self, remote_path: str, local_dir: Path) -> list[str]:
        """Copy a remote folder's contents into ``local_dir`` (created by the caller)."""
        if self.target is None:
            return ["cp", "-a", f"{remote_path}/.", str(local_dir)]
        if shutil.which("rsync"):
            return [
                "rsync",
                "-a",
                "-e",
                shlex.join(["ssh", *self.ssh_options]),
                f"{self.target}:{remote_path}/",
                f"{local_dir}/",
            ]
        return ["scp", "-r", "-q", *self.ssh_options, f"{self.target}:{remote_path}/.", str(local_dir)]

    def where(self) -> str:
        return self.target or "local shell"


def shell_word(value: str, prefix: str = "") -> str:
    """``prefix + value`` as one shell word. A value starting with '~/' becomes "$HOME"/...: bash
    expands '~' only at the start of a word, so in ``trial_dir:=~/x`` nothing would, and the
    launch would record under a folder literally named '~' in its working directory."""
    if value == "~" or value.startswith("~/"):
        rest = value[2:]
        return f'{shlex.quote(prefix) if prefix else ""}"$HOME"{"/" + shlex.quote(rest) if rest else ""}'
    return shlex.quote(prefix + value)


def robot_setup_script(
    distro: str, workspace: str = "~/fieldtest/robot_ws", ros_root: str = "/opt/ros"
) -> str:
    """What the ssh session sources before ``ros2 launch``. A non-interactive ssh shell reads no
    ~/.bashrc, so nothing has set ROS_DISTRO: the campaign's distro is named here. The TurtleBot
    4's own setup file comes first when present (ROBOT_NAMESPACE, ROS_DISCOVERY_SERVER), then
    /opt/ros/<distro>, which wins should that file name another workspace."""
    if distro not in ("humble", "jazzy"):
        raise ValueError(f"ROS distro {distro!r}: the robot side runs humble or jazzy")
    return (
        f"{{ [ -f {TURTLEBOT4_SETUP} ] && source {TURTLEBOT4_SETUP} || true; }} && "
        f"source {ros_root}/{distro}/setup.bash && source {workspace}/install/setup.bash"
    )


@dataclass
class RobotSide:
    """The robot's end of a trial: where it records and how its launch is started and stopped."""

    shell: RemoteShell = field(default_factory=RemoteShell)
    setup: str = field(default_factory=lambda: robot_setup_script("jazzy"))  # see robot_setup_script
    remote_root: str = "~/fieldtest/trials"
    launch: tuple[str, ...] = ("ros2", "launch", "fieldtest_robot", "robot.launch.py")
    # the robot's own emergency stop (fieldtest.labrun.nodelogic.estop); () when the robot side has no base
    estop: tuple[str, ...] = ("python3", "-m", "fieldtest.labrun.nodelogic.estop")

    def trial_dir(self, trial_id: str) -> str:
        return f"{self.remote_root.rstrip('/')}/{trial_id}"

    def _dir(self, trial_id: str) -> str:
        return shell_word(self.trial_dir(trial_id))

    def start_script(self, trial_id: str, launch_args: dict[str, str]) -> str:
        """Start the launch in a process group of its own and record its pid, then wait for it.
        A launch argument naming a path under '~' (trial_dir with the default remote root) gets
        the robot's home from the robot's shell, as the other scripts' paths do.

        The session's stdin is the runner's pipe, which it never writes: it closes only when the
        ssh session ends. sshd sends no SIGHUP to a session without a tty, so a watcher reading
        that stdin stops the launch itself then (the stop script's SIGINT, then SIGTERM to the
        group), as ``ros2 launch`` stops when its terminal goes away."""
        d = self._dir(trial_id)
        args = " ".join(shell_word(v, prefix=f"{k}:=") for k, v in launch_args.items())
        launch = " ".join(shlex.quote(part) for part in self.launch)
        setup = f"{self.setup} && " if self.setup else ""
        # set -m: the launch leads its own group, and an asynchronous command keeps SIGINT
        # (without job control bash starts it with SIGINT ignored)
        return (
            f"{{ {setup}mkdir -p {d}; }} || exit; exec 3<&0; set -m; {launch} {args} </dev/null 3<&- & "
            f"launch=$!; set +m; echo $launch > {d}/{PID_FILE}; "
            f"{{ while IFS= read -r -u 3 _; do :; done; {self.stop_script(trial_id)}; }} "
            f"</dev/null >/dev/null 2>&1 & watcher=$!; "
            f"wait $launch; code=$?; kill $watcher 2>/dev/null; rm -f {d}/{PID_FILE}; exit $code"
        )

    def stop_script(self, trial_id: str, wait_s: float = STOP_WAIT_S) -> str:
        """SIGINT to the launch's process group (nodes close their bags, the relay sends zeros);
        SIGTERM to it if any of it lingers (a node the launch left behind included)."""
        return f"{_stop_launch(f'{self._dir(trial_id)}/{PID_FILE}', wait_s)}; exit 0"

    def clear_script(self, wait_s: float = STOP_WAIT_S) -> str:
        """Stop every launch of an earlier trial whose pid file is still there (a launch removes
        it when it ends): one a lost ssh session left running; one line per launch stopped."""
        pid_file = '"$pid_file"'
        return (
            f"for pid_file in {shell_word(self.remote_root.rstrip('/'))}/*/{PID_FILE}; do "
            f'[ -f "$pid_file" ] || continue; echo "$pid_file"; {_stop_launch(pid_file, wait_s)}; done; exit 0'
        )

    def start(self, trial_id: str, launch_args: dict[str, str], log: IO[str]) -> subprocess.Popen:
        return self.shell.popen(self.start_script(trial_id, launch_args), log)

    def stop(self, trial_id: str) -> None:
        """The stop script over a new session; a RemoteError when ssh itself fails (the robot
        unreachable: the launch stops itself once its own session is seen gone)."""
        done = self.shell.run(self.stop_script(trial_id), timeout_s=STOP_WAIT_S + 10.0, check=False)
        if self.shell.target is not None and done.returncode == 255:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RemoteError(f"{self.shell.where()}: the stop did not reach the robot: {last}")

    def clear_left_over(self) -> list[str]:
        """Stop what an earlier trial left running on the robot (clear_script); the pid files
        of the launches stopped. Unreachable robot: [] (the trial's start then fails on its own)."""
        done = self.shell.run(self.clear_script(), timeout_s=STOP_WAIT_S + 10.0, check=False)
        return done.stdout.split() if done.returncode == 0 else []

    def emergency_stop(self, trial_id: str, launch_args: dict[str, str]) -> str:
        """Zero commands to the base from the robot's own graph (``fieldtest.labrun.nodelogic.estop``, with the
        trial's robot launch arguments); its report line, or a RemoteError."""
        from fieldtest.labrun.nodelogic.estop import ESTOP_TIMEOUT_S

        args = " ".join(shlex.quote(f"{k}:={v}") for k, v in launch_args.items())
        estop = " ".join(shlex.quote(part) for part in self.estop)
        setup = f"{self.setup} && " if self.setup else ""
        # base_stop's own limit and the e-stop program's start before it: cut at base_stop's limit
        # alone, an e-stop whose zeros had reached the base was reported failed on a loaded machine
        done = self.shell.run(f"{setup}exec {estop} {args}", timeout_s=ESTOP_TIMEOUT_S + ESTOP_START_S)
        return (done.stdout.strip().splitlines() or ["(no output)"])[-1]

    def read_json(self, trial_id: str, relative: str, timeout_s: float = 10.0) -> dict[str, Any] | None:
        """A JSON status file of the robot side, None if absent, half-written or not read within
        ``timeout_s`` (an ssh session that slow is a pre-flight poll to retry, not the end of the
        campaign)."""
        try:
            done = self.shell.run(
                f"cat {self._dir(trial_id)}/{shlex.quote(relative)}", timeout_s=timeout_s, check=False
            )
        except RemoteError:
            return None
        if done.returncode != 0:
            return None
        try:
            data = json.loads(done.stdout)
        except json.JSONDecodeError:
            return None
        return data if isinstance(data, dict) else None

    def collect(self, trial_id: str, local_dir: Path, timeout_s: float = 120.0) -> None:
        """Copy the robot's recording into ``local_dir`` (robot bag, status, pre-flight, ros2 bag)."""
        local_dir.mkdir(parents=True, exist_ok=True)
        remote = self.trial_dir(trial_id)
        if self.shell.target is None:
            remote = str(Path(remote).expanduser())
        elif remote.startswith("~/"):  # scp and rsync read a relative remote path from the login's home
            remote = remote[2:]
        argv = self.shell.copy_argv(remote, local_dir)
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            raise RemoteError(f"{self.shell.where()}: copying {remote} timed out") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RemoteError(f"{self.shell.where()}: copying {remote} failed: {last}")


def _stop_launch(pid_file: str, wait_s: float) -> str:
    """Shell: the group of the launch whose pid ``pid_file`` holds gets SIGINT, as a terminal's
    Ctrl-C (ros2 launch passes no SIGINT of its own on: its nodes would get SIGTERM 5 s later),
    then SIGTERM if any of it is left after ``wait_s``; the pid file goes."""
    polls = max(1, round(wait_s / 0.1))
    # "alive" = a process of the launch's group exists and is not a zombie
    alive = "ps -e -o pgid=,stat= | awk -v g=$pid '$1 == g && $2 !~ /^Z/ {f = 1} END {exit !f}'"
    return (
        f"if pid=$(cat {pid_file} 2>/dev/null); then kill -INT -- -$pid 2>/dev/null; "
        f"for i in $(seq {polls}); do {alive} || break; sleep 0.1; done; "
        f"if {alive}; then kill -TERM -- -$pid 2>/dev/null; fi; rm -f {pid_file}; fi"
    )


def local_robot_side(
    root: Path, launch: tuple[str, ...], setup: str = "", estop: tuple[str, ...] = ()
) -> RobotSide:
    """A robot side on this machine (tests, or a runner on the Pi itself)."""
    return RobotSide(shell=RemoteShell(None), setup=setup, remote_root=str(root), launch=launch, estop=estop)


def json_file(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
