"""``fieldtest lab bundle``: everything the robot's Pi needs, built on the host, installed offline.

The Pi has no package registry on a lab day, and the kit cannot be built there (pyproject.toml needs
setuptools >= 77; Ubuntu 24.04 ships 68). So the host builds the kit's wheel and downloads binary
wheels of what the robot side imports, for the Pi's platform and Python:

  DIR/wheels/              the kit's wheel, its robot-side dependencies, pip itself
  DIR/robot_ws/src/        fieldtest_robot and fieldtest_msgs (a copy, not the clone's symbolic link)
  DIR/fieldtest/msg/       the .msg files fieldtest_msgs builds from (where its CMakeLists looks)
  DIR/robot-requirements.txt, DIR/install.sh, DIR/MANIFEST.json (every file's sha256 and the target)

Only what the robot side imports is bundled (``ROBOT_DISTRIBUTIONS``): the analysis stack (evo,
matplotlib) stays on the laptop. The CycloneDDS binding is not bundled: it is built against the
robot's own libddsc (docs/perf.md, "In the lab").
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from fieldtest.errors import FieldtestError

# What fieldtest_robot's nodes and launch file import from the kit, and what that pulls in
# (tests/test_lab_bundle.py imports each of those modules from an install of the bundle alone).
# eclipse-zenoh and paho-mqtt: the relay of `fieldtest lab perf` runs the kit's Zenoh and MQTT transports
ROBOT_DISTRIBUTIONS = (
    "numpy",
    "pyyaml",
    "pydantic",
    "rosbags",
    "mcap",  # the link monitor's bag (fieldtest.record.bag imports it when it opens one)
    "cryptography",
    "psutil",
    "eclipse-zenoh",
    "paho-mqtt",
)
# Ubuntu 24.04's python3-numpy (1.26) is what ROS 2 Jazzy's compiled Python packages are built
# against; a numpy 2 in the robot user's site would shadow it for every ROS node of that user.
ROBOT_CONSTRAINTS = ("numpy<2",)
# The Pi's apt packages, which no bundle carries: installed with an internet route before the lab day
# (docs/lab-guide.md 3.1 lists exactly these; install.sh refuses to build robot_ws without them).
# zenoh-bridge-ros2dds from Eclipse Zenoh's Debian repository; the compilers, ament_cmake and the
# rosidl generators are what `colcon build` of fieldtest_msgs needs.
ROBOT_APT_PACKAGES = (
    "ros-{distro}-rmw-cyclonedds-cpp",
    "ros-{distro}-mqtt-client",
    "ros-{distro}-rosbag2-storage-mcap",
    "zenoh-bridge-ros2dds",
    "python3-colcon-common-extensions",
    "build-essential",
    "cmake",
    "ros-{distro}-ament-cmake",
    "ros-{distro}-rosidl-default-generators",
)
UBUNTU_2404_GLIBC = (2, 39)  # Ubuntu 24.04 (noble) libc6 2.39
OLDEST_MANYLINUX_GLIBC = 17  # manylinux2014 = manylinux_2_17
PLATFORMS = ("aarch64", "x86_64")
ROBOT_PACKAGES = ("fieldtest_robot",)
MSGS_PACKAGE = "fieldtest_msgs"


class BundleError(FieldtestError):
    """The bundle cannot be made for this target (names the package and the platform)."""


@dataclass(frozen=True)
class Target:
    """The robot's machine: CPU architectures, CPython version, glibc (manylinux tags it runs)."""

    platforms: tuple[str, ...] = ("aarch64",)
    python: str = "3.12"
    glibc: tuple[int, int] = UBUNTU_2404_GLIBC

    def platform_tags(self, arch: str) -> list[str]:
        """Every manylinux tag a wheel for this machine may carry, newest first (pip does not
        widen an explicit ``--platform manylinux_2_x`` to older glibc versions itself)."""
        major, minor = self.glibc
        tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, OLDEST_MANYLINUX_GLIBC - 1, -1)]
        return [*tags, f"manylinux2014_{arch}"]

    def describe(self) -> str:
        return f"{'+'.join(self.platforms)} CPython {self.python} (glibc {self.glibc[0]}.{self.glibc[1]})"


def target_from_args(platforms: list[str], python: str, glibc: str) -> Target:
    """The command line's target, each value checked (one line naming the option)."""
    if not re.fullmatch(r"3\.\d+", python):
        raise BundleError(f"--python {python!r}: expected a CPython version such as 3.12")
    if not re.fullmatch(r"2\.\d+", glibc) or int(glibc.split(".")[1]) < OLDEST_MANYLINUX_GLIBC:
        raise BundleError(
            f"--glibc {glibc!r}: expected the robot's glibc version, 2.17 or later (2.39: Ubuntu 24.04)"
        )
    unknown = [p for p in platforms if p not in PLATFORMS]
    if unknown:
        raise BundleError(f"--platform {unknown[0]!r}: one of {', '.join(PLATFORMS)}")
    major, minor = (int(part) for part in glibc.split("."))
    return Target(platforms=tuple(dict.fromkeys(platforms)), python=python, glibc=(major, minor))


def robot_apt_packages(distro: str) -> list[str]:
    """The Pi's apt packages for a ROS 2 distro (``$ROS_DISTRO`` gives the guide's spelling)."""
    return [name.format(distro=distro) for name in ROBOT_APT_PACKAGES]


def kit_source() -> Path:
    """The clone the running kit comes from (its wheel is built from there)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file() or not (root / "robot_ws" / "src").is_dir():
        raise BundleError(
            f"{root}: not a clone of the kit (no pyproject.toml and robot_ws/src); run from one"
        )
    return root


def _pip(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
    )


# How pip names the requirement it could not get (its resolver's messages).
_PIP_MISSING = (
    r"satisfies the requirement (\S+)",
    r"distribution found for (\S+)",
    r"no matching distributions available for your environment:\s*\n\s*(\S+)",
    r"Cannot install (.+?) because",
)


def _missing_requirement(stderr: str) -> str:
    for pattern in _PIP_MISSING:
        match = re.search(pattern, stderr)
        if match:
            return match.group(1)
    lines = [line for line in stderr.splitlines() if line.startswith("ERROR")] or stderr.splitlines() or ["?"]
    return lines[-1].strip()


def build_kit_wheel(source: Path, wheels: Path) -> Path:
    """``pip wheel --no-deps``: the kit as a built wheel (its build backend never runs on the Pi)."""
    before = set(wheels.glob("fieldtest-*.whl"))
    result = _pip(["wheel", "--no-deps", "--wheel-dir", str(wheels), str(source)])
    built = sorted(set(wheels.glob("fieldtest-*.whl")) - before) or sorted(wheels.glob("fieldtest-*.whl"))
    if result.returncode != 0 or not built:
        raise BundleError(
            f"building the kit's wheel from {source} failed: {_missing_requirement(result.stderr)}"
        )
    return built[-1]


def robot_requirements(kit_wheel: Path) -> list[str]:
    """The kit's own requirement lines (its wheel's Requires-Dist) for ``ROBOT_DISTRIBUTIONS``."""
    with zipfile.ZipFile(kit_wheel) as wheel:
        metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        lines = wheel.read(metadata).decode().splitlines()
    wanted = {}
    for line in lines:
        if not line.startswith("Requires-Dist:") or ";" in line:  # extras (dev) are not the robot's
            continue
        requirement = line.partition(":")[2].strip()
        name = re.split(r"[<>=!~ \[]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        if name in ROBOT_DISTRIBUTIONS:
            wanted[name] = requirement
    missing = [name for name in ROBOT_DISTRIBUTIONS if name not in wanted]
    if missing:
        raise BundleError(f"{kit_wheel.name}: no Requires-Dist for {', '.join(missing)} (pyproject.toml)")
    return [wanted[name] for name in ROBOT_DISTRIBUTIONS]


def download_wheels(requirements: list[str], constraints: Path, wheels: Path, target: Target) -> None:
    """Binary wheels only (nothing is built on the Pi), for each of the target's platforms."""
    for arch in target.platforms:
        platform_args = [arg for tag in target.platform_tags(arch) for arg in ("--platform", tag)]
        result = _pip(
            [
                "download",
                "--only-binary=:all:",
                *platform_args,
                "--python-version",
                target.python,
                "--implementation",
                "cp",
                "--dest",
                str(wheels),
                "--constraint",
                str(constraints),
                *requirements,
            ]
        )
        if result.returncode != 0:
            raise BundleError(
                f"no wheel of {_missing_requirement(result.stderr)} for {arch} CPython {target.python} "
                f"(glibc {target.glibc[0]}.{target.glibc[1]}): the robot cannot install it offline"
            )


def download_pip(wheels: Path) -> None:
    """pip itself (a pure wheel): install.sh runs it from the wheel, so the Pi needs no python3-pip."""
    result = _pip(["download", "--only-binary=:all:", "--no-deps", "--dest", str(wheels), "pip"])
    if result.returncode != 0:
        raise BundleError(f"no wheel of pip: {_missing_requirement(result.stderr)}")


def copy_robot_ws(source: Path, out: Path) -> None:
    """robot_ws/src with fieldtest_msgs copied (the clone's is a symbolic link into host_ws), and the
    .msg files at DIR/fieldtest/msg, where fieldtest_msgs' CMakeLists looks by default."""
    src = out / "robot_ws" / "src"
    if src.parent.exists():
        shutil.rmtree(src.parent)
    src.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "install", "log")
    for package in ROBOT_PACKAGES:
        shutil.copytree(source / "robot_ws" / "src" / package, src / package, ignore=ignore)
    shutil.copytree(source / "robot_ws" / "src" / MSGS_PACKAGE, src / MSGS_PACKAGE, ignore=ignore)
    msg = out / "fieldtest" / "msg"
    if msg.exists():
        shutil.rmtree(msg)
    shutil.copytree(source / "fieldtest" / "msg", msg)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(out: Path, target: Target, kit_wheel: Path) -> Path:
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != "MANIFEST.json")
    manifest = {
        "kit_wheel": kit_wheel.name,
        "target": {
            "platforms": list(target.platforms),
            "python": target.python,
            "implementation": "cp",
            "glibc": f"{target.glibc[0]}.{target.glibc[1]}",
            "platform_tags": {arch: target.platform_tags(arch) for arch in target.platforms},
        },
        "robot_distributions": list(ROBOT_DISTRIBUTIONS),
        "constraints": list(ROBOT_CONSTRAINTS),
        "files": [
            {"path": str(p.relative_to(out)), "sha256": _sha256(p), "size": p.stat().st_size} for p in files
        ],
    }
    path = out / "MANIFEST.json"
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return path


def build_bundle(out: Path, target: Target, source: Path | None = None) -> Path:
    """Write the bundle under ``out``; returns its MANIFEST.json."""
    source = source or kit_source()
    wheels = out / "wheels"
    if wheels.exists():
        shutil.rmtree(wheels)  # a bundle holds one target's wheels, never a previous one's
    wheels.mkdir(parents=True)
    kit_wheel = build_kit_wheel(source, wheels)
    requirements = robot_requirements(kit_wheel)
    (out / "robot-requirements.txt").write_text("\n".join(requirements) + "\n")
    constraints = out / "robot-constraints.txt"
    constraints.write_text("\n".join(ROBOT_CONSTRAINTS) + "\n")
    download_wheels(requirements, constraints, wheels, target)
    download_pip(wheels)
    copy_robot_ws(source, out)
    shutil.copyfile(source / "fieldtest" / "labrun" / "bundle_install.sh", out / "install.sh")
    (out / "install.sh").chmod(0o755)
    (out / "README.txt").write_text(
        f"fieldtest robot bundle for {target.describe()}: copy this folder to the Pi as ~/fieldtest "
        "and run `bash ~/fieldtest/install.sh` (no network needed; docs/lab-guide.md section 3.1).\n"
    )
    return write_manifest(out, target, kit_wheel)
