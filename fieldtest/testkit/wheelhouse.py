"""The wheels the bundle tests build their bundles from, fetched once outside the tests.

``fieldtest lab bundle`` downloads the robot's wheels from the package registry: that is its job on
the host. The tests build the same bundles with pip reading only this folder (``PIP_NO_INDEX``,
``PIP_FIND_LINKS``), so the suite never reaches a registry and its time is not the network's.
``make test`` fills it (``python -m fieldtest.testkit.wheelhouse``): the wheels of every target the
tests bundle for, and the kit's build requirements (its wheel is built in the bundle). It lives in
the cache outside the clone (``$FIELDTEST_CACHE/wheelhouse``, default ``~/.cache/fieldtest``)."""

from __future__ import annotations

import ast
import contextlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from fieldtest.errors import FieldtestError
from fieldtest.labrun.orchestration.bundle import Target, build_bundle, kit_source

FILL_COMMAND = "make test-wheels"
SYSTEM_PYTHON = "/usr/bin/python3"  # the two-machine rehearsal's robot installs with it
PI = Target()  # the TurtleBot 4's Raspberry Pi: aarch64, CPython 3.12, Ubuntu 24.04's glibc


class EmptyWheelhouse(FieldtestError):
    """The wheelhouse holds no wheels: the message says how to fill it."""


def wheelhouse() -> Path:
    cache = os.environ.get("FIELDTEST_CACHE") or str(Path.home() / ".cache" / "fieldtest")
    return Path(cache) / "wheelhouse"


def python_version(python: str) -> str:
    """ "3.11" for that interpreter."""
    return subprocess.run(
        [python, "-c", "import sys; print(*sys.version_info[:2], sep='.')"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def this_machine(python: str = sys.executable) -> Target:
    """This machine as a bundle's target: its CPU, ``python``'s version, its glibc."""
    libc, version = platform.libc_ver()
    if libc != "glibc":
        raise RuntimeError(f"the bundle targets glibc systems; this Python reports {libc or 'no libc'}")
    major, minor = (int(part) for part in version.split(".")[:2])
    return Target(platforms=(platform.machine(),), python=python_version(python), glibc=(major, minor))


def tested_targets() -> list[Target]:
    """Every target the tests bundle for: the Pi, and this machine with each Python they use."""
    pythons = [sys.executable, *([SYSTEM_PYTHON] if Path(SYSTEM_PYTHON).exists() else [])]
    return list(dict.fromkeys([PI, *(this_machine(p) for p in pythons)]))


def build_requirements(pyproject: Path) -> list[str]:
    """[build-system] requires (no tomllib before Python 3.11)."""
    section = pyproject.read_text().split("[build-system]", 1)[1].split("\n[", 1)[0]
    match = re.search(r"^requires\s*=\s*(\[.*?\])", section, re.MULTILINE | re.DOTALL)
    if match is None:
        raise RuntimeError(f"{pyproject}: no [build-system] requires")
    return list(ast.literal_eval(match.group(1)))


def fill(folder: Path | None = None) -> Path:
    """Download the wheels of every test target and the kit's build requirements into ``folder``."""
    folder = folder or wheelhouse()
    folder.mkdir(parents=True, exist_ok=True)
    build_requires = build_requirements(kit_source() / "pyproject.toml")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--dest", str(folder),
         *build_requires],
        check=True,
    )  # fmt: skip
    for target in tested_targets():
        with tempfile.TemporaryDirectory() as scratch:
            build_bundle(Path(scratch), target)
            for wheel in (Path(scratch) / "wheels").glob("*.whl"):
                if not wheel.name.startswith("fieldtest-"):  # the kit's own is built in each bundle
                    shutil.copy2(wheel, folder / wheel.name)
        print(f"[wheelhouse] {target.describe()}: {folder}")
    return folder


@contextlib.contextmanager
def registry_free_pip() -> Iterator[Path]:
    """pip (and pip in its build environments) reads only the wheelhouse while in this block;
    EmptyWheelhouse, saying how to fill it, if it holds no wheels."""
    folder = wheelhouse()
    if not any(folder.glob("*.whl")):
        raise EmptyWheelhouse(f"no wheels in {folder}: run `{FILL_COMMAND}` once (it downloads them)")
    saved = {name: os.environ.get(name) for name in ("PIP_NO_INDEX", "PIP_FIND_LINKS")}
    os.environ.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(folder))
    try:
        yield folder
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


if __name__ == "__main__":
    fill()
