"""Test dependencies the kit installs itself (`make install`): a missing one fails the test with the
reason instead of skipping it, so a broken install cannot pass as a green run."""

from __future__ import annotations

import importlib
import shutil
from types import ModuleType

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


def netns() -> None:
    """Fail the calling test unless network namespaces can be made here (root, iproute2)."""
    from fieldtest.netem import netns_available

    available, reason = netns_available()
    if not available:
        pytest.fail(f"network namespaces are needed (run as root): {reason}", pytrace=False)
