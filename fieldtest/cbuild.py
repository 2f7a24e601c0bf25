"""Compile the kit's small C helpers once per source version, into a per-user cache.

The name of each built file carries a hash of its source, so an edited source is rebuilt and
concurrent processes never see half a file (it is compiled under a temporary name, then renamed).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from fieldtest.errors import FieldtestError


class BuildError(FieldtestError, RuntimeError):
    """A C helper could not be compiled; the message names the source and the reason."""


def cache_dir() -> Path:
    base = os.environ.get("FIELDTEST_CACHE") or os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "fieldtest"


def built_path(source: Path, suffix: str = "") -> Path:
    """Where the build of this exact source lives."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    return cache_dir() / f"{source.stem}-{digest}{suffix}"


def build_c(source: Path, *, shared: bool = False, libs: tuple[str, ...] = ()) -> Path:
    """Compile ``source`` (an executable, or a shared library with ``shared``) unless built already."""
    target = built_path(source, ".so" if shared else "")
    if target.exists():
        return target
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise BuildError(f"{source.name}: no C compiler (apt install gcc)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    flags = ["-shared", "-fPIC"] if shared else []
    cmd = [gcc, "-O2", "-Wall", *flags, "-o", str(tmp), str(source), *(f"-l{lib}" for lib in libs)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise BuildError(f"{source}: gcc failed: {last}")
    os.replace(tmp, target)
    return target
