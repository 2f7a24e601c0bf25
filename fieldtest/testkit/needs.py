"""Test dependencies the kit installs itself (`make install`): a missing one fails the test with the
reason instead of skipping it, so a broken install cannot pass as a green run."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

INSTALL_HINT = "run `make install` (tools/install.sh)"


def tools(*names: str) -> None:
    """Fail the calling test unless every named program is on PATH."""
    missing = [name for name in names if shutil.which(name) is None]
    if missing:
        pytest.fail(f"needs {', '.join(missing)} on PATH: {INSTALL_HINT}", pytrace=False)


def module(name: str) -> ModuleType:
    """Import a Python package the test needs, or fail the test saying which."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        pytest.fail(f"needs the Python package {name} ({exc}): {INSTALL_HINT}", pytrace=False)


def cores(count: int) -> None:
    """Fail the calling test unless the machine has at least ``count`` CPU cores."""
    if (os.cpu_count() or 1) < count:
        pytest.fail(f"needs {count} CPU cores, this machine has {os.cpu_count() or 1}", pytrace=False)


def netns() -> None:
    """Fail the calling test unless network namespaces can be made here (root, iproute2)."""
    from fieldtest.netem import netns_available

    available, reason = netns_available()
    if not available:
        pytest.fail(f"network namespaces are needed (run as root): {reason}", pytrace=False)


@contextlib.contextmanager
def two_machines(*args: Any, **kwargs: Any) -> Iterator[Any]:
    """The two-machine rehearsal (``fieldtest.testkit.twomachines.two_machines``, same arguments) for
    a test: fails it with the reason when namespaces, a program or the machines' set-up are missing."""
    from fieldtest.testkit.twomachines import TwoMachinesError, missing_tools
    from fieldtest.testkit.twomachines import two_machines as build

    netns()
    missing = missing_tools()
    if missing:
        pytest.fail(f"needs {', '.join(missing)}: {INSTALL_HINT}", pytrace=False)
    try:
        with build(*args, **kwargs) as machines:
            yield machines
    except TwoMachinesError as exc:
        pytest.fail(str(exc), pytrace=False)


def minimums_venv() -> Path:
    """The venv of the kit's dependencies at their pyproject minimums (fieldtest.testkit.minimums),
    built by the install; fails the calling test saying how to build it when it is missing or holds
    other pins."""
    from fieldtest.testkit.minimums import BUILT_STAMP, pins_text, venv_dir

    built = venv_dir()
    stamp = built / BUILT_STAMP
    if not (built / "venv" / "bin" / "python").is_file() or not stamp.is_file():
        pytest.fail(
            f"the minimum-versions venv {built} is not built: run `bash tools/install_minimums.sh` "
            f"(part of {INSTALL_HINT})",
            pytrace=False,
        )
    if stamp.read_text().strip() != pins_text().strip():
        pytest.fail(f"{built} holds other pins than pyproject.toml's: {INSTALL_HINT}", pytrace=False)
    return built / "venv"
