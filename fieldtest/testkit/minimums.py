"""The venv holding every runtime dependency pinned to its pyproject minimum, as a user whose Ubuntu
ships those versions has them (pip keeps a system package that satisfies a minimum). The install
(tools/install_minimums.sh) builds it once from the package index into the cache outside the clone,
named by a hash of the pins and the Python version, so tests never download; the kit itself is not
installed there: tests run the clone's code in it through PYTHONPATH, so the clone stays unwritten.

``python -m fieldtest.testkit.minimums path|pins`` prints the venv's directory or the pins (the
install script's single source for both)."""

from __future__ import annotations

import hashlib
import os
import re
import sys
from importlib.metadata import requires
from pathlib import Path

MINIMUM = re.compile(r"^([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)$")
BUILT_STAMP = "BUILT"


def declared_minimums() -> dict[str, str]:
    """Each runtime dependency's ``>=`` minimum (every one must have a plain one), as the installed
    kit declares them (pyproject.toml's, written by the install's ``pip install -e``)."""
    deps = [dep for dep in requires("fieldtest") or [] if ";" not in dep]  # extras carry a marker
    found = {dep: MINIMUM.match(dep.replace(" ", "")) for dep in deps}
    unpinnable = [dep for dep, match in found.items() if not match]
    if unpinnable:
        raise ValueError(f"dependencies without a plain >= minimum in pyproject.toml: {unpinnable}")
    return {match[1].lower(): match[2] for match in found.values() if match}


def pins_text() -> str:
    """The pip requirements pinning each dependency to its minimum, one ``name==version`` a line."""
    return "".join(f"{name}=={version}\n" for name, version in declared_minimums().items())


def venv_dir() -> Path:
    """Where the install puts the venv: the pins and the Python version name it (a change of either
    is a new venv)."""
    cache = os.environ.get("FIELDTEST_CACHE") or str(Path.home() / ".cache" / "fieldtest")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    digest = hashlib.sha256(f"python {python}\n{pins_text()}".encode()).hexdigest()[:12]
    return Path(cache) / f"minimums-{digest}"


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "path":
        print(venv_dir())
    elif what == "pins":
        print(pins_text(), end="")
    else:
        sys.exit("usage: python -m fieldtest.testkit.minimums path|pins")
