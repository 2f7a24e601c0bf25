"""Two machines on one: the lab's host laptop and the TurtleBot 4's Pi as separate machines here.

``two_machines()`` builds, and always tears down:

- three network namespaces on the kit's emulated lab network (``fieldtest.netem.Topology``): the
  host, the robot (its link emulated with a Wi-Fi or Ethernet profile by the userspace forwarder)
  and the mocap PC, each with its own address;
- two users with their own homes: the lab user on the host (its own ssh key and known_hosts, as
  after ``ssh-keygen`` and a first ``ssh``) and the robot's login, an ``ubuntu``-like account that
  is reached only through a real OpenSSH server in the robot's namespace (its own host key and
  config, key authentication only, no PAM);
- the robot's own filesystem view: sshd runs in a private mount namespace in which ``/opt`` holds
  ``/opt/ros/jazzy/setup.bash``, as on the Pi, and ``/etc/turtlebot4`` the TurtleBot 4's own
  setup files as turtlebot4_setup installs them (``fieldtest.labrun.configuration.stockrobot``:
  Fast DDS, domain 0, the empty namespace, unless ``namespace`` says otherwise). Nothing else of the host's clone is named to the
  robot: that setup file is the robot's ROS 2 installation (the ROS 2 wheels' environment, which
  has the kit and robot_ws installed), and ``ros2 launch`` there runs the launch plan with the
  kit's planrun (launch_ros is not among the wheels). The robot reads the kit, its ROS
  environment and the Python they were made with read-only at their own paths: where a folder on
  the way is closed to other users (e.g. a pyenv Python under /root), the robot's and the lab
  user's mount namespaces cover that folder with an empty one holding only those paths. With
  ``robot_install="bundle"`` the robot has ROS 2 only, read by the system python3 as apt's
  setup.bash is, and the kit comes from ``fieldtest lab bundle`` installed as the guide says
  (tests/test_lab_two_machines.py runs the guide's own commands for that);
- the simulated hardware: the Create 3 base, on the RMW turtlebot4-setup gives it, (``fieldtest.labrun.rehearsal.simbase``) under
  ``<ns>/_do_not_use`` behind the create3_republisher stand-in (``fieldtest.labrun.rehearsal.republisher``)
  on the robot, and the NatNet emulator as Motive on the mocap PC, fed the base's true pose over
  a Unix socket (the optical path, which must not ride the emulated Wi-Fi). The base and the
  republisher each record every command they took (``Lab.base_commands``,
  ``Lab.republisher_takes``), so a test can judge what their depth-1 hops lost.

``Lab.host(argv)`` runs a command as the lab user on the host, with the environment a lab user
has after sourcing ROS 2 (``ros2`` on PATH, the kit's ``fieldtest`` command); ``Lab.campaign`` puts
a shipped campaign file in the lab user's home with only its addresses changed, and ``Lab.run``
runs ``fieldtest lab run`` on it against the robot and the mocap PC. From a shell (root):

    python -m fieldtest.testkit.twomachines trials/rehearsal.yaml [--profile ethernet] [--out DIR]

Needs root (namespaces, users, mounts), OpenSSH (``openssh-server``, tools/install.sh installs
it) and the ROS 2 environment (.venv-ros, tools/install_ros.sh).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fieldtest.errors import FieldtestError
from fieldtest.labrun.configuration.stockrobot import STOCK_ROBOTS
from fieldtest.names import NATNET_COMMAND_PORT, NATNET_DATA_PORT
from fieldtest.netem.topology import Topology
from fieldtest.testkit.hangup import as_from_a_terminal

if TYPE_CHECKING:
    from fieldtest.labrun.rehearsal.republisher import Take
    from fieldtest.record.basecommands import BaseCommands

SSHD = "/usr/sbin/sshd"
# The rehearsal's nodes run on the ROS 2 wheels' Fast DDS (the lab guide's section 3.4, "Keep Fast
# DDS everywhere", as a stock TurtleBot 4 runs), and rosbag2 is not among the wheels.
NODE_ARGS = ("dds=fastrtps", "record_ros2bag=false")
KIT_ROOT = Path(__file__).resolve().parents[2]
ROS_VENV = KIT_ROOT / ".venv-ros"
# Machines share no memory, but /dev/shm is common to every namespace here; with Fast DDS's
# shared-memory transport on, the robot login's nodes never heard the base run by another user in
# the same namespace. So every ROS process here speaks UDPv4 only (Fast DDS >= 2.13 reads this).
FASTDDS_UDP_ONLY = {"FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"}
SYSTEM_PYTHON = "/usr/bin/python3"  # what `ros2 launch` and colcon's console scripts run on the Pi
ROBOT_IMAGE_PASSWORD = "turtlebot4"  # the TurtleBot 4 image's ubuntu login (turtlebot4 user manual)
# What the simulated base and the republisher stand-in took, one line per command, in the root folder
BASE_RECORD, REPUBLISHER_RECORD = "base_commands.csv", "republisher_takes.csv"
TOOLS = (
    "ssh",
    "ssh-keygen",
    "ssh-copy-id",
    "scp",
    "openssl",
    "useradd",
    "userdel",
    "usermod",
    "runuser",
    "unshare",
    "mount",
    "rsync",
    "ping",
)


class TwoMachinesError(FieldtestError, RuntimeError):
    """The two machines cannot be built here (one line: what is missing)."""


def missing_tools() -> list[str]:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    return missing + ([SSHD] if not Path(SSHD).exists() else [])


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise TwoMachinesError(f"{' '.join(map(str, argv))}: {done.stderr.strip() or done.stdout.strip()}")
    return done


@dataclass
class Account:
    name: str
    home: Path
    uid: int
    gid: int

    @classmethod
    def create(cls, name: str) -> Account:
        _run(["useradd", "--create-home", "--shell", "/bin/bash", name])
        _run(["usermod", "-p", "*", name])  # useradd locks it; sshd without PAM refuses a locked account
        entry = pwd.getpwnam(name)
        return cls(name, Path(entry.pw_dir), entry.pw_uid, entry.pw_gid)

    def write(self, relative: str, text: str, mode: int = 0o644) -> Path:
        """A file in this account's home, owned by it (and the folders on the way)."""
        path = self.home / relative
        for parent in reversed([p for p in path.parents if p != self.home and self.home in p.parents]):
            if not parent.exists():
                parent.mkdir(mode=0o700 if parent.name == ".ssh" else 0o755)
                os.chown(parent, self.uid, self.gid)
        path.write_text(text)
        path.chmod(mode)
        os.chown(path, self.uid, self.gid)
        return path

    def copy_in(self, source: Path, relative: str) -> Path:
        """A folder copied into this account's home, owned by it."""
        target = self.home / relative
        shutil.copytree(source, target, symlinks=True)
        for path in [target, *target.rglob("*")]:
            os.chown(path, self.uid, self.gid, follow_symlinks=False)
        return target

    def delete(self) -> None:
        subprocess.run(["userdel", "--remove", self.name], capture_output=True)


def _closed_ancestor(path: Path) -> Path | None:
    """The outermost folder on the way to ``path`` that other users cannot enter, if any."""
    for parent in [*reversed(path.parents), path][1:]:
        if not parent.stat().st_mode & 0o001:
            return parent
    return None


def expose_script(paths: list[Path], stage: Path) -> str:
    """Shell commands (run in a private mount namespace) that make ``paths`` reachable by any user
    at their own paths: each is staged, its closed ancestor covered by an empty tmpfs, then bound
    back. Nothing else under that ancestor is visible any more (root's home stays private)."""
    blocked = {p: a for p in paths if (a := _closed_ancestor(p)) is not None}
    steps = []
    for i, path in enumerate(blocked):
        steps.append(f"mkdir -p {stage}/{i} && mount --bind {path} {stage}/{i}")
    for ancestor in dict.fromkeys(blocked.values()):
        steps.append(f"mount -t tmpfs -o mode=755 fieldtest-2m {ancestor}")
    for i, path in enumerate(blocked):
        steps.append(f"mkdir -p {path} && mount --bind {stage}/{i} {path}")
    return " && ".join(steps) or "true"


def kit_paths() -> list[Path]:
    """What the two users run: the kit, the Python its virtual environments were made with, and
    the Zenoh bridge (zenohd + ros2dds plugin, tools/install_zenoh_bridge.sh) where it is built."""
    bridge = bridge_prefix()
    return [KIT_ROOT, Path(sys.base_prefix), *([bridge] if bridge.is_dir() else [])]


def bridge_prefix() -> Path:
    from fieldtest.middleware.zenoh.bridge import bridge_prefix as prefix

    return prefix()


def bridge_env() -> dict[str, str]:
    """Where both machines find the Zenoh bridge: the builder's cache (the lab's apt package)."""
    return {"FIELDTEST_CACHE": str(bridge_prefix().parent)}


def robot_ros_setup(ros_python: str, distro: str) -> str:
    return f"""# ROS 2 {distro} on this rehearsal's robot (fieldtest.testkit.twomachines): the ROS 2 wheels'
# environment stands in for the apt packages; it has the kit and robot_ws installed.
export ROS_DISTRO={distro}
export {" ".join(f"{k}={v}" for k, v in FASTDDS_UDP_ONLY.items())}
export FIELDTEST_ROS_PYTHON={ros_python}
export {" ".join(f"{k}={v}" for k, v in bridge_env().items())}
export AMENT_PREFIX_PATH={ROS_VENV}:/opt/ros/{distro}${{AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}}
export PATH=/opt/ros/{distro}/bin:$PATH
"""


def ros_site_packages() -> Path:
    return next((ROS_VENV / "lib").glob("python3.*/site-packages"))


def _distribution(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _installed_by(site: Path, wanted: set[str]) -> dict[str, Path]:
    """The top-level entries of ``site`` that the distributions ``wanted`` installed (their
    RECORD's first path parts and their .dist-info folders), by name."""
    found: dict[str, Path] = {}
    for info in site.glob("*.dist-info"):
        if _distribution(info.name.split("-")[0]) not in wanted:
            continue
        found[info.name] = info
        for line in (info / "RECORD").read_text().splitlines():
            top = line.split(",")[0].split("/")[0]
            if top and top != ".." and (site / top).exists():
                found[top] = site / top
    return found


def _linked(entries: dict[str, Path], folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name, path in entries.items():
        (folder / name).symlink_to(path.absolute())
    return folder


def robot_python_packages(root: Path, distro: str) -> tuple[Path, Path]:
    """What the robot's system python3 finds besides its standard library, as on a stock image:
    ``ros``, the ROS 2 wheels' site-packages without the kit and the kit's dependencies (they are
    not among /opt/ros's packages); ``system``, the kit's dependencies the stock image already has
    (``StockRobot.preinstalled`` and what they need) at the minimum versions the kit declares,
    from the minimums venv (fieldtest.testkit.minimums): no newer than Ubuntu's own."""
    from fieldtest.testkit.minimums import BUILT_STAMP, venv_dir

    minimums = venv_dir() / "venv"
    if not (venv_dir() / BUILT_STAMP).is_file():
        raise TwoMachinesError(
            f"the minimum-versions venv {venv_dir()} is not built: bash tools/install_minimums.sh"
        )
    system_site = next(minimums.glob("lib/python3.*/site-packages"))
    if system_site.parent.name != f"python{_system_python_version()}":
        raise TwoMachinesError(
            f"{system_site} is for {system_site.parent.name}, the robot's {SYSTEM_PYTHON} is "
            f"python{_system_python_version()}"
        )
    kit_deps = {_distribution(i.name.split("-")[0]) for i in system_site.glob("*.dist-info")}
    ros_site = ros_site_packages()
    dropped = _installed_by(ros_site, kit_deps | {"fieldtest", "fieldtest_host", "fieldtest_robot"})
    ros = {
        entry.name: entry
        for entry in ros_site.iterdir()
        if entry.name not in dropped and entry.suffix != ".pth" and not entry.name.startswith("__editable__")
    }
    preinstalled = {_distribution(n) for n in STOCK_ROBOTS[distro].preinstalled}
    needed = {"cffi", "pycparser"}  # cryptography's own (python3-cffi-backend on Ubuntu)
    system = _installed_by(system_site, preinstalled | needed)
    return _linked(ros, root / "robot-ros-site"), _linked(system, root / "robot-dist-packages")


def _system_python_version() -> str:
    done = _run([SYSTEM_PYTHON, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"])
    return done.stdout.strip()


def system_dist_packages() -> str:
    """Where the system python3 reads site packages after the user site (Debian's local one)."""
    folder = f"/usr/local/lib/python{_system_python_version()}/dist-packages"
    if not Path(folder).is_dir():
        raise TwoMachinesError(f"{SYSTEM_PYTHON} has no {folder} to hold the robot's system packages")
    return folder


def robot_ros_setup_system_python(distro: str, site: Path | None = None) -> str:
    """/opt/ros/<distro>/setup.bash as apt's: the system python3 finds rclpy and the message
    packages through PYTHONPATH, their libraries through LD_LIBRARY_PATH, the RMW through
    AMENT_PREFIX_PATH. ``site`` (robot_python_packages) stands in for /opt/ros's Python packages:
    the ROS 2 wheels' without the kit and its dependencies, so the robot's kit is the one the
    bundle installed into the login's user site, beside the packages the stock image has."""
    libraries_site = ros_site_packages()
    site = site or libraries_site
    # what the wheels' ros_wheels_bootstrapper.pth puts on LD_LIBRARY_PATH for the venv's python
    libraries = ":".join([str(ROS_VENV / "lib"), *map(str, sorted(libraries_site.glob("ros_*.libs")))])
    return f"""# ROS 2 {distro} on this rehearsal's robot (fieldtest.testkit.twomachines), read by the system
# python3 as apt's /opt/ros/{distro}/setup.bash is: the ROS 2 wheels stand in for the apt packages.
export ROS_DISTRO={distro}
export {" ".join(f"{k}={v}" for k, v in FASTDDS_UDP_ONLY.items())}
export PYTHONPATH={site}${{PYTHONPATH:+:$PYTHONPATH}}
export LD_LIBRARY_PATH={libraries}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}
export AMENT_PREFIX_PATH={ROS_VENV}:/opt/ros/{distro}${{AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}}
export FIELDTEST_ROS_PYTHON={SYSTEM_PYTHON}
export {" ".join(f"{k}={v}" for k, v in bridge_env().items())}
export PATH=/opt/ros/{distro}/bin:$PATH
"""


def colcon_standin_setup(distro: str, workspace: str = "$HOME/fieldtest/robot_ws") -> str:
    """robot_ws/install/setup.bash as ``colcon build --symlink-install`` leaves it (no colcon or
    ament here): the underlay, then the workspace's ament_python package from its source folder.
    fieldtest_msgs comes with the ROS 2 wheels' environment (built there by tools/install_ros.sh)."""
    return f"""# robot_ws as colcon build --symlink-install installs it (fieldtest.testkit.twomachines)
source /opt/ros/{distro}/setup.bash
export PYTHONPATH={workspace}/src/fieldtest_robot:$PYTHONPATH
"""


def ros2_launch_shim(ros_python_expr: str) -> str:
    """``ros2 launch fieldtest_<side> <side>.launch.py ARGS`` as the kit's planrun (--rehearsal:
    mqtt_client as the kit's stand-in, the Zenoh bridge as zenohd + plugin)."""
    return f"""#!/bin/bash
# ros2 for this rehearsal (fieldtest.testkit.twomachines): launch_ros is not among the ROS 2 wheels,
# so the lab's two launch files run as their launch plans with fieldtest.labrun.orchestration.planrun.
case "$1 $2 $3" in
  "launch fieldtest_robot robot.launch.py") shift 3; side=robot ;;
  "launch fieldtest_host host.launch.py") shift 3; side=host ;;
  *) echo "ros2 $*: not available in this rehearsal (only the fieldtest launch files)" >&2; exit 1 ;;
esac
exec {ros_python_expr} -m fieldtest.labrun.orchestration.planrun --rehearsal "$side" "$@"
"""


def bridge_program() -> str:
    """``zenoh-bridge-ros2dds <mode> -c <file> [--ros-* flags]`` as zenohd + the ros2dds plugin
    (``bridge_argv``; the discovery scope is in the file): what the robot's apt package would
    install, where the pre-flight looks for it. '' where the bridge is not built."""
    from fieldtest.middleware.zenoh.bridge import BridgeMissingError, bridge_argv, find_bridge

    try:
        argv = bridge_argv(find_bridge(), "@ config @", "@ mode @")
    except BridgeMissingError:
        return ""
    # the placeholders hold a space, so each is inside single quotes: leave them for the variable
    command = " ".join(shlex.quote(part) for part in argv)
    command = command.replace("@ config @", "'\"$config\"'").replace("@ mode @", "'\"$mode\"'")
    return f"""#!/bin/bash
# zenoh-bridge-ros2dds on this rehearsal's robot (fieldtest.testkit.twomachines): zenohd + the ros2dds plugin
mode=$1; shift; config=
while [ $# -gt 0 ]; do
  case "$1" in
    -c) config=$2; shift 2 ;;
    --ros-localhost-only) shift ;;
    --ros-automatic-discovery-range) shift 2 ;;
    *) echo "zenoh-bridge-ros2dds: $1: not taken here" >&2; exit 2 ;;
  esac
done
exec {command}
"""


def mqtt_client_program() -> str:
    """``ros2 run mqtt_client mqtt_client --ros-args --params-file <file>`` as the kit's stand-in
    (fieldtest.labrun.rehearsal.mqtt_standin, NOT the real mqtt_client) where ros2 run looks for it."""
    from fieldtest.middleware.mqtt.lab import MQTT_STANDIN

    return f"""#!/bin/bash
# mqtt_client on this rehearsal's robot (fieldtest.testkit.twomachines): the kit's stand-in
while [ $# -gt 0 ]; do [ "$1" = --params-file ] && params=$2; shift; done
exec "$FIELDTEST_ROS_PYTHON" -m {MQTT_STANDIN} "$params"
"""


def sshd_config(root: Path, address: str, user: str, passwords: bool = False) -> str:
    return f"""# sshd of the rehearsal's robot (fieldtest.testkit.twomachines)
ListenAddress {address}
Port 22
HostKey {root}/ssh_host_ed25519_key
PidFile {root}/sshd.pid
UsePAM no
PasswordAuthentication {"yes" if passwords else "no"}
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin no
AllowUsers {user}
AuthorizedKeysFile .ssh/authorized_keys
StrictModes yes
Subsystem sftp internal-sftp
"""


@dataclass
class Lab:
    topology: Topology
    root: Path
    host_user: Account
    robot_user: Account
    ros_python: str
    namespace: str
    distro: str
    robot_install: str = "ros-environment"  # or "bundle": see two_machines
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def host_address(self) -> str:
        return self.topology.address("host")

    @property
    def robot_address(self) -> str:
        return self.topology.address("robot")

    @property
    def mocap_address(self) -> str:
        return self.topology.address("mocap")

    @property
    def robot_login(self) -> str:
        return f"{self.robot_user.name}@{self.robot_address}"

    def host_env(self) -> dict[str, str]:
        """What a lab user's shell has after sourcing ROS 2 and activating the kit."""
        path = [
            str(self.root / "host-ros" / "bin"),
            str(Path(sys.executable).parent),
            "/usr/sbin",
            "/usr/bin",
            "/bin",
        ]
        return {
            "HOME": str(self.host_user.home),
            "USER": self.host_user.name,
            "LOGNAME": self.host_user.name,
            "PATH": ":".join(path),
            "LANG": "C.UTF-8",
            "ROS_DISTRO": self.distro,
            **bridge_env(),
            **FASTDDS_UDP_ONLY,
        }

    def host(
        self,
        argv: list[str] | str,
        timeout_s: float = 600.0,
        env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` (or a bash script, stopping at the first failing command) as the lab user on
        the host machine; ``env`` adds to the lab user's environment."""
        command = ["bash", "-e", "-c", argv] if isinstance(argv, str) else argv
        environment = _env_args({**self.host_env(), **(env or {})})
        as_user = ["runuser", "-u", self.host_user.name, "--", "env", "-i", *environment, *command]
        script = f'{expose_script(kit_paths(), self.root / "stage")} && exec "$@"'
        wrapped = self.topology.command(
            "host", ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *as_user]
        )
        # the lab user's commands start as from a terminal, Ctrl-C included, whatever this run inherited
        kwargs.setdefault("preexec_fn", as_from_a_terminal)
        return subprocess.run(
            wrapped, capture_output=True, text=True, timeout=timeout_s, cwd=self.host_user.home, **kwargs
        )

    def robot(self, script: str, timeout_s: float = 600.0) -> subprocess.CompletedProcess:
        """A bash script run on the robot as the lab user runs one there: ssh (BatchMode) to the
        robot's login, the script on stdin, stopping at its first failing command."""
        ssh = ["ssh", "-o", "BatchMode=yes", self.robot_login, "bash -e -s"]
        return self.host(ssh, timeout_s=timeout_s, input=script)

    def campaign(self, source: str | Path, folder: str = "campaigns", **settings: str) -> str:
        """A shipped campaign copied to the lab user's ``folder`` with its addresses changed (those
        of the four it sets) and its namespace the robot's ROBOT_NAMESPACE, as the guide's
        checklist says, comments kept, and ``settings`` (e.g. ros_distro, keystore: the
        checklist's other edits) set where the file sets them; returns its path in that home."""
        addresses = {
            "host_address": self.host_address,
            "robot_address": self.robot_address,
            "router_address": self.host_address,
            "broker_address": self.host_address,
            "namespace": self.namespace or '""',
        }
        path = Path(source) if Path(source).is_absolute() else KIT_ROOT / source
        text = path.read_text()
        for key, value in {**addresses, **settings}.items():
            text, n = re.subn(rf"^(\s*{key}:\s*)\S+", rf"\g<1>{value}", text, flags=re.MULTILINE)
            if n > 1 or (n == 0 and key not in ("router_address", "broker_address")):
                raise TwoMachinesError(f"{source}: {key} is set {n} times, expected once")
        self.host_user.write(f"{folder}/{path.name}", text)
        return f"{folder}/{path.name}"

    def run(self, campaign: str, *extra: str, runs_dir: str = "runs") -> subprocess.CompletedProcess:
        """``fieldtest lab run`` as the lab user: the robot by ssh, Motive unicast on the mocap PC."""
        argv = [
            "fieldtest", "lab", "run", campaign, "--yes", "--robot", self.robot_login,
            "--natnet-server", self.mocap_address, "--natnet-local", self.host_address,
            "--natnet-mode", "unicast", "--runs-dir", runs_dir,
            *(f"--host-arg={a}" for a in NODE_ARGS), *(f"--robot-arg={a}" for a in NODE_ARGS),
            *extra,
        ]  # fmt: skip
        return self.host(argv)

    def robot_setup(self, **changes: str) -> str:
        """Write the robot's /etc/turtlebot4/setup.bash: the stock one for the distro with
        ROBOT_NAMESPACE the rehearsal's and ``changes`` (e.g. ROS_DOMAIN_ID="3", as turtlebot4-setup
        would save them); returns its text. Read by every later session."""
        stock = STOCK_ROBOTS[self.distro]
        setup = {**stock.setup, "ROBOT_NAMESPACE": self.namespace, **changes}
        text = replace(stock, setup=setup).setup_bash()
        (self.root / "robot-etc" / "turtlebot4" / "setup.bash").write_text(text)
        return text

    def robot_home_path(self, relative: str) -> Path:
        return self.robot_user.home / relative

    def base_status(self) -> dict:
        import json

        try:
            return json.loads((self.root / "base_status.json").read_text())
        except (OSError, ValueError):
            return {}

    def base_commands(self) -> BaseCommands:
        """Every command the simulated base took since the machines were built (its record)."""
        from fieldtest.record.basecommands import read_base_commands

        return read_base_commands(self.root / BASE_RECORD)

    def republisher_takes(self) -> list[Take]:
        """Every command the republisher stand-in took and relayed since the machines were built."""
        from fieldtest.labrun.rehearsal.republisher import read_takes

        return read_takes(self.root / REPUBLISHER_RECORD)

    def robot_login_processes(self, settle_s: float = 5.0) -> list[str]:
        """The robot login's live processes, once sshd has had ``settle_s`` to reap its own.

        Exited ones (zombies, state Z) are left out: sshd reaps its session child on its own time.
        """
        deadline = time.monotonic() + settle_s
        while True:
            listed = subprocess.run(
                ["ps", "-o", "pid=,stat=,args=", "-u", self.robot_user.name], capture_output=True, text=True
            ).stdout.splitlines()
            live = [line.strip() for line in listed if not line.split()[1].startswith("Z")]
            if not live or time.monotonic() > deadline:
                return live
            time.sleep(0.2)

    def sshd_log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.root / "sshd.log").read_text()
        return ""


def _env_args(env: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in env.items()]


# What the two files turtlebot4_setup's setup.bash names say (etc/turtlebot4/fastdds_rpi.xml: a default
# participant profile that changes nothing; cyclonedds_rpi.xml: the Pi's wlan0 only).
STOCK_PROFILES = {
    "fastdds_rpi.xml": """<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns="http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles">
  <profiles xmlns="http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles">
    <participant profile_name="turtlebot4_default_profile" is_default_profile="true"><rtps/></participant>
  </profiles>
</dds>
""",
    "cyclonedds_rpi.xml": """<?xml version="1.0" encoding="utf-8"?>
<CycloneDDS xmlns="https://cdds.io/config">
  <Domain><General>
    <Interfaces><NetworkInterface name="wlan0" priority="default" multicast="default"/></Interfaces>
    <DontRoute>true</DontRoute>
  </General></Domain>
</CycloneDDS>
""",
}


def _wait_for(marker: str, log: Path, proc: subprocess.Popen, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if marker in log.read_text():
                return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    tail = log.read_text()[-400:] if log.exists() else ""
    raise TwoMachinesError(f"{what} did not start (exit {proc.poll()}): {tail.strip()}")


def _start(lab: Lab, name: str, node: str, argv: list[str], marker: str, timeout_s: float = 30.0) -> None:
    log = lab.root / f"{name}.log"
    with log.open("w") as out:
        proc = lab.topology.run(node, argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    lab.procs[name] = proc
    _wait_for(marker, log, proc, name, timeout_s)


def _keys(lab: Lab) -> None:
    """The lab user's key pair and known_hosts, the robot's authorized_keys (what ssh-keygen,
    ssh-copy-id and a first interactive ssh leave behind)."""
    root, host, robot = lab.root, lab.host_user, lab.robot_user
    key = root / "lab_user_key"
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{host.name}@host", "-f", str(key)])
    host.write(".ssh/id_ed25519", key.read_text(), 0o600)
    host.write(".ssh/id_ed25519.pub", key.with_suffix(".pub").read_text())
    host_key = (root / "ssh_host_ed25519_key.pub").read_text().split()
    host.write(".ssh/known_hosts", f"{lab.robot_address} {host_key[0]} {host_key[1]}\n")
    robot.write(".ssh/authorized_keys", key.with_suffix(".pub").read_text(), 0o600)


def _robot_filesystem(lab: Lab) -> Path:
    """The robot's /opt (ROS 2) and its ~/fieldtest/robot_ws, as on a Pi set up per the guide."""
    opt = lab.root / "robot-opt"
    bin_dir = opt / "ros" / lab.distro / "bin"
    bin_dir.mkdir(parents=True)
    if lab.robot_install == "bundle":  # the kit and robot_ws come from the bundle the guide installs
        ros_site, _ = robot_python_packages(lab.root, lab.distro)
        setup = robot_ros_setup_system_python(lab.distro, ros_site)
    else:
        setup = robot_ros_setup(lab.ros_python, lab.distro)
        lab.robot_user.write(
            "fieldtest/robot_ws/install/setup.bash",
            "# robot_ws: fieldtest_robot and fieldtest_msgs are installed in the ROS 2 environment\n",
        )
    (opt / "ros" / lab.distro / "setup.bash").write_text(setup)
    shim = bin_dir / "ros2"
    shim.write_text(ros2_launch_shim('"$FIELDTEST_ROS_PYTHON"'))
    shim.chmod(0o755)
    # what the guide's apt step puts on the Pi, where the pre-flight looks for it (the launch's
    # planrun --rehearsal runs the same programs in their place)
    from fieldtest.middleware.zenoh.lab import ZENOH_BRIDGE

    programs = {bin_dir / ZENOH_BRIDGE: bridge_program()}
    programs[opt / "ros" / lab.distro / "lib" / "mqtt_client" / "mqtt_client"] = mqtt_client_program()
    for path, text in programs.items():
        if text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            path.chmod(0o755)
    host_bin = lab.root / "host-ros" / "bin"
    host_bin.mkdir(parents=True)
    (host_bin / "ros2").write_text(ros2_launch_shim(lab.ros_python))
    (host_bin / "ros2").chmod(0o755)
    return opt


def _turtlebot4_etc(lab: Lab) -> Path:
    """The robot's /etc/turtlebot4 (overlaid on /etc for its sessions): the stock setup.bash and
    the two DDS profile files it names. ``ROBOT_NAMESPACE`` is the rehearsal's namespace, as
    turtlebot4-setup writes it; ``Lab.robot_setup`` changes the file for a case."""
    etc = lab.root / "robot-etc"
    (etc / "turtlebot4").mkdir(parents=True)
    lab.robot_setup()
    for name, text in STOCK_PROFILES.items():
        (etc / "turtlebot4" / name).write_text(text)
    return etc


def _start_sshd(lab: Lab, opt: Path, robot_etc: Path, passwords: bool = False) -> None:
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    config = lab.root / "sshd_config"
    config.write_text(sshd_config(lab.root, lab.robot_address, lab.robot_user.name, passwords))
    _run([SSHD, "-t", "-f", str(config)])
    exposed = kit_paths()
    system = ""
    if lab.robot_install == "bundle":  # the stock image's Python packages, where apt's would be
        from fieldtest.testkit.minimums import venv_dir

        exposed.append(venv_dir())
        system = f" && mount --bind {lab.root / 'robot-dist-packages'} {system_dist_packages()}"
    expose = expose_script(exposed, lab.root / "stage")
    # /etc/turtlebot4 is added by an overlay (the host has none, and nothing is written to its /etc)
    etc = f"mount -t overlay fieldtest-2m-etc -o lowerdir={robot_etc}:/etc /etc"
    script = f"{expose} && mount --bind {opt} /opt && {etc}{system} && exec {SSHD} -D -e -f {config}"
    # A mount namespace of its own: the robot's sessions see its /opt, the host's stays untouched.
    _start(lab, "sshd", "robot", ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
           marker="Server listening")  # fmt: skip


def _start_hardware(lab: Lab, rigid_body_id: int) -> None:
    feed = lab.root / "pose-feed.sock"
    natnet = [
        sys.executable, "-m", "fieldtest.natnet", "serve", "--mode", "unicast",
        "--bind", lab.mocap_address, "--command-port", str(NATNET_COMMAND_PORT),
        "--data-port", str(NATNET_DATA_PORT), "--rate", "120", "--rigid-body-id", str(rigid_body_id),
        "--up-axis", "y", "--source", "feed", "--feed-bind", str(feed), "--realtime",
    ]  # fmt: skip
    _start(lab, "natnet", "mocap", natnet, marker="NatNet emulator:")
    ros_env = [
        "env",
        f"ROS_DISTRO={lab.distro}",
        f"RMW_IMPLEMENTATION={STOCK_ROBOTS[lab.distro].create3_rmw}",
        *_env_args(FASTDDS_UDP_ONLY),
    ]
    base = [
        *ros_env, lab.ros_python, "-m", "fieldtest.labrun.rehearsal.simbase", "--namespace", lab.namespace,
        "--distro", lab.distro, "--vendor", "fastdds", "--behind-republisher", "--safety-override", "full",
        "--feed-address", str(feed), "--feed-port", "1", "--status", str(lab.root / "base_status.json"),
        "--record", str(lab.root / BASE_RECORD),
    ]  # fmt: skip
    _start(lab, "base", "robot", base, marker="READY simulated base")
    republisher = [*ros_env, lab.ros_python, "-m", "fieldtest.labrun.rehearsal.republisher", "--namespace", lab.namespace,
                   "--distro", lab.distro, "--record", str(lab.root / REPUBLISHER_RECORD)]  # fmt: skip
    _start(lab, "republisher", "robot", republisher, marker="READY republisher")


def wait_for_ssh(lab: Lab, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        done = lab.host(
            ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=3", lab.robot_login, "true"], timeout_s=15
        )
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise TwoMachinesError(
                f"ssh {lab.robot_login} fails: {done.stderr.strip()}; sshd: {lab.sshd_log()[-300:]}"
            )
        time.sleep(0.5)


@contextlib.contextmanager
def two_machines(
    profile: str | dict = "wifi",
    namespace: str = STOCK_ROBOTS["jazzy"].namespace,
    distro: str = "jazzy",
    rigid_body_id: int = 1,
    *,
    fresh_login: bool = False,
    hardware: bool = True,
    robot_install: str = "ros-environment",
) -> Iterator[Lab]:
    """The host, the robot and the mocap PC as separate machines; everything removed on exit.
    ``fresh_login``: the robot's login has the image's password and the lab user no key yet (the
    guide's ssh set-up does the rest); ``hardware``: the simulated base and Motive;
    ``robot_install``: ``ros-environment``, the kit and robot_ws come with the robot's ROS 2
    environment (the wheels' venv), or ``bundle``, the robot has ROS 2 only (read by the system
    python3, as apt's) and the kit is installed from ``fieldtest lab bundle`` as the guide says."""
    if robot_install not in ("ros-environment", "bundle"):
        raise TwoMachinesError(f"robot_install {robot_install!r}: ros-environment or bundle")
    missing = missing_tools()
    if missing:
        raise TwoMachinesError(
            f"needs {', '.join(missing)} (apt install openssh-server rsync iputils-ping; tools/install.sh does)"
        )
    ros_python = ROS_VENV / "bin" / "python"
    if not ros_python.exists():
        raise TwoMachinesError(f"no ROS 2 environment at {ROS_VENV}: run tools/install_ros.sh")
    tag = secrets.token_hex(2)
    root = Path(tempfile.mkdtemp(prefix=f"fieldtest-2m-{tag}-", dir="/var/tmp"))
    root.chmod(0o755)  # the robot's login reads its /opt from here
    accounts: list[Account] = []
    topology = None
    try:
        topology = Topology(profile, nodes=("host", "robot", "mocap"), wireless=("robot",))
        accounts.append(Account.create(f"ftlab{tag}"))
        accounts.append(Account.create(f"ftpi{tag}"))
        lab = Lab(topology, root, accounts[0], accounts[1], str(ros_python), namespace, distro, robot_install)
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / "ssh_host_ed25519_key")])
        if fresh_login:  # as a fresh TurtleBot 4 image: a password, no key of the lab user's yet
            hashed = _run(["openssl", "passwd", "-6", ROBOT_IMAGE_PASSWORD]).stdout.strip()
            _run(["usermod", "-p", hashed, lab.robot_user.name])
        else:
            _keys(lab)
        opt = _robot_filesystem(lab)
        _start_sshd(lab, opt, _turtlebot4_etc(lab), passwords=fresh_login)
        if not fresh_login:
            wait_for_ssh(lab)
        if hardware:
            _start_hardware(lab, rigid_body_id)
        yield lab
    finally:
        if topology is not None:
            topology.close()  # ends every process in the namespaces: sshd, the robot's sessions, hardware
        for account in accounts:
            account.delete()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m fieldtest.testkit.twomachines", description=__doc__.splitlines()[0]
    )
    p.add_argument("campaign", help="a campaign file; only its addresses are changed")
    p.add_argument("--profile", default="wifi", help="the robot link's profile (wifi, ethernet, ...)")
    p.add_argument("--namespace", default="", help="the robot's ROBOT_NAMESPACE (the campaign's)")
    p.add_argument("--out", default="trials/runs/two-machines", help="where the runs are copied to")
    p.epilog = "Arguments after -- go to `fieldtest lab run` (e.g. -- --only dds --ros-distro jazzy)."
    args, extra = p.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    try:
        with two_machines(args.profile, namespace=args.namespace) as lab:
            done = lab.run(lab.campaign(args.campaign), *extra)
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
            runs = lab.host_user.home / "runs"
            if runs.is_dir():
                shutil.copytree(runs, args.out, dirs_exist_ok=True)
                print(f"runs copied to {args.out}")
            return done.returncode
    except TwoMachinesError as exc:
        print(f"two machines: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
