"""`fieldtest lab bundle`: the robot's install, built here, installs with no package registry.

The bundle for this machine is installed by its own install.sh into a fresh venv inside a network
namespace that has only loopback (no registry reachable), then every kit module the robot's nodes
and launch file import is imported from that venv. The TurtleBot 4's bundle (aarch64, CPython 3.12)
is resolved offline from its own wheels for that platform. Both are built as the host builds them,
with pip reading the wheelhouse `make test` fetched (fieldtest.testkit.wheelhouse), not a registry."""

from __future__ import annotations

import ast
import hashlib
import os
import re
import secrets
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from fieldtest.cli import main as fieldtest_main
from fieldtest.labrun.orchestration.bundle import (
    MSGS_PACKAGE,
    ROBOT_DISTRIBUTIONS,
    kit_source,
)
from fieldtest.testkit import needs
from fieldtest.testkit.wheelhouse import PI, registry_free_pip, this_machine


@pytest.fixture(scope="module")
def local_bundle(bundle_for) -> Path:
    return bundle_for(this_machine())[0]


@pytest.fixture(scope="module")
def pi_bundle(bundle_for) -> tuple[Path, dict]:
    return bundle_for(PI)


@contextmanager
def offline_namespace():
    """A network namespace with loopback only: no route to any registry."""
    needs.netns()
    # the kit's namespace naming (netem/topology.py NAME_RE), so cleanup_stale removes a leftover
    name = f"ftn-{os.getpid()}-{secrets.token_hex(3)}-offline"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield ["ip", "netns", "exec", name]
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH (the clone's fieldtest must not be what imports), no pip settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, **extra}


def _run(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=_clean_env(**env), capture_output=True, text=True, timeout=600)


def robot_side_kit_modules(robot_ws: Path) -> list[str]:
    """Every ``fieldtest.*`` module the robot's nodes and launch files import (at any depth)."""
    modules = set()
    for source in robot_ws.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "fieldtest":
                modules.add(node.module)
            elif isinstance(node, ast.Import):
                modules.update(a.name for a in node.names if a.name.split(".")[0] == "fieldtest")
    return sorted(modules)


def test_registry_is_unreachable_in_the_offline_namespace(tmp_path):
    with offline_namespace() as inside:
        probe = _run(
            [
                *inside,
                sys.executable,
                "-c",
                "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/pip/', timeout=10)",
            ],
            tmp_path,
        )
    assert probe.returncode != 0 and ("URLError" in probe.stderr or "OSError" in probe.stderr), probe.stderr


def _robot_python(mode: str, tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """The Python install.sh installs into, where the kit must then come from, and its environment."""
    if mode == "venv":
        venv = tmp_path / "robot-venv"
        # --without-pip: the bundle brings its own pip, as on a Pi without python3-pip
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        return venv / "bin" / "python", venv, {}
    # the Pi's way: the system python3 (externally managed, as Ubuntu 24.04's), the user's site
    home = tmp_path / "home"
    home.mkdir()
    return _system_python(), home / ".local", {"HOME": str(home)}


def _system_python() -> Path:
    """/usr/bin/python3 when it is this Python's version (the bundle's target), else the base
    interpreter of this venv."""
    system = Path("/usr/bin/python3")
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if system.exists():
        probe = subprocess.run(
            [system, "-c", "import sys; print(*sys.version_info[:2], sep='.')"],
            capture_output=True,
            text=True,
        )
        if probe.stdout.strip() == version:
            return system
    return Path(sys._base_executable)


@pytest.mark.parametrize("mode", ["user-site", "venv"])
def test_bundle_for_this_machine_installs_offline_and_the_robot_side_imports(local_bundle, tmp_path, mode):
    python, expected_root, env = _robot_python(mode, tmp_path)
    with offline_namespace() as inside:
        install = _run(
            [*inside, "bash", str(local_bundle / "install.sh"), "--no-colcon"],
            tmp_path,
            PYTHON=str(python),
            **env,
        )
        assert install.returncode == 0, (
            f"install.sh failed offline:\n{install.stdout[-3000:]}\n{install.stderr[-3000:]}"
        )
        assert "Looking in links: " + str(local_bundle / "wheels") in install.stdout

        modules = robot_side_kit_modules(local_bundle / "robot_ws" / "src")
        assert (
            "fieldtest.labrun.orchestration.launch_actions" in modules
            and "fieldtest.labrun.nodelogic.monitor" in modules
        ), modules
        nodes = ["fieldtest_robot.link_monitor", "fieldtest_robot.create3_preflight"]
        nodes += ["fieldtest.perf.node", "zenoh", "paho.mqtt.client"]  # lab perf's relay (docs/perf.md)
        check = (
            "import importlib, sys, fieldtest\n"
            f"for name in {[*modules, *nodes]!r}: importlib.import_module(name)\n"
            "print(fieldtest.__file__)\n"
        )
        imported = _run(
            [*inside, str(python), "-c", check],
            tmp_path,
            PYTHONPATH=str(local_bundle / "robot_ws" / "src" / "fieldtest_robot"),
            **env,
        )
    assert imported.returncode == 0, (
        f"the robot side does not import from the bundle's install:\n{imported.stderr}"
    )
    assert Path(imported.stdout.strip()).is_relative_to(expected_root), (
        f"fieldtest came from {imported.stdout}"
    )
    # robot_ws needs ROS: without the distro install.sh says so in one line (the Python part stays)
    no_ros = _run(
        ["bash", str(local_bundle / "install.sh")], tmp_path, PYTHON=str(python), ROS_DISTRO="none", **env
    )
    assert no_ros.returncode == 1 and no_ros.stderr.strip().splitlines()[-1].startswith(
        "install.sh: robot_ws needs /opt/ros/none and colcon"
    ), no_ros.stderr
    # the guide's commands on the Pi (section 5): the installed console script
    params = _run(
        [str(expected_root / "bin" / "fieldtest"), "lab", "create3-params", "--namespace", "/tb4"],
        tmp_path,
        **env,
    )
    assert params.returncode == 0 and "motion_control" in params.stdout, params.stderr


def test_turtlebot4_bundle_has_only_aarch64_or_pure_wheels_and_resolves_offline(pi_bundle, tmp_path):
    out, manifest = pi_bundle
    assert manifest["target"]["platforms"] == ["aarch64"] and manifest["target"]["python"] == "3.12"
    wheels = [f["path"] for f in manifest["files"] if f["path"].endswith(".whl")]
    names = {Path(w).name.split("-")[0].lower().replace("_", "-") for w in wheels}
    assert {"fieldtest", "pip", "pydantic-core", *ROBOT_DISTRIBUTIONS} <= names, names
    for wheel in wheels:
        tags = Path(wheel).stem.split("-")[-3:]  # python, abi, platform
        assert tags[2] == "any" or tags[2].endswith("aarch64"), wheel
        assert tags[1] in ("none", "abi3", "cp312") or tags[0] == "py3", wheel
    numpy = next(Path(w).name for w in wheels if Path(w).name.startswith("numpy-"))
    assert numpy.split("-")[1].startswith("1."), f"{numpy}: Ubuntu 24.04's python3-numpy is 1.26"
    for entry in manifest["files"]:
        digest = hashlib.sha256((out / entry["path"]).read_bytes()).hexdigest()
        assert digest == entry["sha256"], entry["path"]

    # resolved for the Pi from the bundle's wheels alone, with no registry reachable
    tags = [arg for tag in PI.platform_tags("aarch64") for arg in ("--platform", tag)]
    with offline_namespace() as inside:
        resolve = _run(
            [*inside, sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index",
             "--find-links", str(out / "wheels"), "--only-binary=:all:", *tags, "--python-version", "3.12",
             "--implementation", "cp", "--target", str(tmp_path / "t"),
             "-r", str(out / "robot-requirements.txt"), "-c", str(out / "robot-constraints.txt")],
            tmp_path,
        )  # fmt: skip
    assert resolve.returncode == 0, f"the Pi's bundle does not resolve offline:\n{resolve.stderr[-3000:]}"
    would_install = resolve.stdout.lower().replace("_", "-")
    assert all(f" {name}-" in would_install for name in ROBOT_DISTRIBUTIONS), resolve.stdout
    assert manifest["kit_wheel"].endswith("-py3-none-any.whl"), (
        "install.sh adds the kit itself with --no-deps"
    )


def test_bundle_holds_the_robot_workspace_with_its_messages(pi_bundle):
    out, manifest = pi_bundle
    source = kit_source()
    msgs = out / "robot_ws" / "src" / MSGS_PACKAGE
    assert msgs.is_dir() and not msgs.is_symlink(), "fieldtest_msgs must be a copy: the Pi has no host_ws"
    # fieldtest_msgs' CMakeLists reads <package>/../../../fieldtest/msg by default
    msg_root = (msgs / ".." / ".." / ".." / "fieldtest" / "msg").resolve()
    kit_msgs = sorted(p.name for p in (source / "fieldtest" / "msg").glob("*.msg"))
    assert kit_msgs and sorted(p.name for p in msg_root.glob("*.msg")) == kit_msgs
    for name in ("setup.py", "package.xml", "launch/robot.launch.py", "fieldtest_robot/link_monitor.py"):
        assert (out / "robot_ws" / "src" / "fieldtest_robot" / name).is_file(), name
    listed = {f["path"] for f in manifest["files"]}
    leftovers = [p for p in listed if ".egg-info" in p or "__pycache__" in p or p.endswith(".pyc")]
    assert not leftovers, f"build leftovers of the clone in the bundle: {leftovers}"
    assert {"install.sh", "robot-requirements.txt", "robot_ws/src/fieldtest_robot/setup.py"} <= listed


def test_a_target_without_wheels_is_refused_in_one_line_naming_package_and_platform(tmp_path, capsys):
    with registry_free_pip():
        code = fieldtest_main(
            ["lab", "bundle", "--out", str(tmp_path / "b"), "--platform", "aarch64", "--python", "3.99"]
        )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "no wheel of numpy" in err and "aarch64" in err and "3.99" in err, err


@pytest.mark.parametrize(
    "argv, field",
    [(["--glibc", "2"], "--glibc"), (["--python", "python3"], "--python"), (["--glibc", "2.12"], "--glibc")],
)
def test_bad_target_options_are_refused_in_one_line(tmp_path, capsys, argv, field):
    code = fieldtest_main(["lab", "bundle", "--out", str(tmp_path / "b"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and field in err, err


def test_the_guide_puts_the_bundle_where_the_runner_sources_the_robot_workspace():
    """Section 3.1 copies the bundle to the Pi's ~/fieldtest; the runner's ssh session sources
    <workspace>/install/setup.bash with the default workspace ~/fieldtest/robot_ws."""
    import inspect

    from fieldtest.labrun.orchestration.remote import robot_setup_script

    guide = (kit_source() / "docs" / "lab-guide.md").read_text()
    section = guide[guide.index("### 3.1 ") : guide.index("### 3.2 ")]
    copy = re.search(r"rsync -a ~/tb4-bundle/ ubuntu@192.168.1.20:(\S+)/", section)
    assert copy and "fieldtest lab bundle --out ~/tb4-bundle" in section, (
        "section 3.1: the bundle's build and copy"
    )
    workspace = inspect.signature(robot_setup_script).parameters["workspace"].default
    assert workspace == f"~/{copy.group(1)}/robot_ws", (workspace, copy.group(1))
    assert "bash ~/fieldtest/install.sh" in section and "pip install" not in section.split("**Pi**")[1]


def _shell_words(script: str) -> list[str]:
    return script.replace("\\\n", " ").split()


def test_the_guide_installs_and_checks_every_apt_package_the_pi_needs_offline():
    """Section 3.1's apt install and its lab-day dpkg check name exactly the packages install.sh
    requires before colcon build: the Zenoh bridge and what colcon build of fieldtest_msgs needs."""
    from fieldtest.labrun.orchestration.bundle import robot_apt_packages
    from fieldtest.testkit.guide import guide_steps

    wanted = robot_apt_packages("$ROS_DISTRO")
    assert {"zenoh-bridge-ros2dds", "build-essential", "cmake"} <= set(wanted)
    assert "ros-$ROS_DISTRO-rosidl-default-generators" in wanted
    steps = guide_steps(kit_source() / "docs" / "lab-guide.md")
    install = steps["robot-apt"]
    assert "download.eclipse.org/zenoh/debian-repo" in install  # where zenoh-bridge-ros2dds comes from
    apt_line = next(line for line in install.replace("\\\n", " ").splitlines() if "apt install" in line)
    assert _shell_words(apt_line)[3:] == wanted, apt_line
    assert _shell_words(steps["robot-apt-check"]) == ["dpkg", "-l", *wanted]
    # install.sh asks the kit for the same list before it builds robot_ws
    script = (kit_source() / "fieldtest" / "labrun" / "bundle_install.sh").read_text()
    assert "robot_apt_packages(sys.argv[1])" in script
    assert script.index("robot_apt_packages") < script.index("colcon build --symlink-install")
