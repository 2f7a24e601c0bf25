"""Compile the kit's small C and C++ helpers once per source version, into a per-user cache.

The name of each built file carries a hash of its source, so an edited source is rebuilt and
concurrent processes never see half a file (it is compiled under a temporary name, then renamed).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from fieldtest.errors import FieldtestError


class BuildError(FieldtestError, RuntimeError):
    """A C helper could not be compiled; the message names the source and the reason."""


def cache_dir() -> Path:
    base = os.environ.get("FIELDTEST_CACHE") or os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "fieldtest"


_LOCAL_INCLUDE = re.compile(rb'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def built_path(source: Path, suffix: str = "") -> Path:
    """Where the build of this exact source lives: the hash covers the files it includes with
    ``#include "..."`` too, so editing one of those rebuilds it."""
    digest = hashlib.sha256()
    for path in _sources(source, set()):
        digest.update(path.read_bytes())
    return cache_dir() / f"{source.stem}-{digest.hexdigest()[:12]}{suffix}"


def _sources(source: Path, seen: set[Path]) -> list[Path]:
    """``source`` and the local files it includes, depth first, each once."""
    source = source.resolve()
    seen.add(source)
    out = [source]
    for name in _LOCAL_INCLUDE.findall(source.read_bytes()):
        included = (source.parent / name.decode()).resolve()
        if included not in seen and included.exists():  # else found on the compiler's include path
            out += _sources(included, seen)
    return out


def build_c(source: Path, *, shared: bool = False, libs: tuple[str, ...] = ()) -> Path:
    """Compile ``source`` (an executable, or a shared library with ``shared``) unless built already."""
    flags = ["-O2", "-Wall", *(["-shared", "-fPIC"] if shared else [])]
    return _compile(source, ("gcc", "cc"), flags, [f"-l{lib}" for lib in libs], ".so" if shared else "")


def build_cxx(
    source: Path, *, pkg_config: tuple[str, ...] = (), shared: bool = False, libs: tuple[str, ...] = ()
) -> Path:
    """Compile a C++17 program (or a shared library with ``shared``) against the libraries
    pkg-config names (e.g. ns-3's modules) and ``libs``."""
    flags = ["-O2", "-Wall", "-std=c++17", "-pthread", *(["-shared", "-fPIC"] if shared else [])]
    link = [*pkg_config_libs(source, pkg_config), *(f"-l{lib}" for lib in libs)]
    return _compile(source, ("g++", "c++"), flags, link, ".so" if shared else "")


def pkg_config_libs(source: Path, packages: tuple[str, ...]) -> list[str]:
    """The ``-l`` flags of ``packages``. Only those: Debian's ns-3 .pc files also name absolute
    library paths of -dev packages it does not depend on (libgsl.so), which the linker would
    demand although the ns-3 libraries already carry them as their own dependencies."""
    if not packages:
        return []
    if shutil.which("pkg-config") is None:
        raise BuildError(f"{source.name}: pkg-config is missing (apt install pkg-config)")
    result = subprocess.run(["pkg-config", "--libs", *packages], capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise BuildError(f"{source.name}: {last}")
    return list(dict.fromkeys(flag for flag in result.stdout.split() if flag.startswith("-l")))


def _compile(
    source: Path, compilers: tuple[str, ...], flags: list[str], link: list[str], suffix: str
) -> Path:
    target = built_path(source, suffix)
    if target.exists():
        return target
    compiler = next((found for name in compilers if (found := shutil.which(name))), None)
    if compiler is None:
        raise BuildError(f"{source.name}: no compiler ({' or '.join(compilers)}; apt install {compilers[0]})")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    cmd = [compiler, *flags, "-o", str(tmp), str(source), *link]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if "error" in line]
        last = (errors or result.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise BuildError(f"{source}: {Path(compiler).name} failed: {last}")
    os.replace(tmp, target)
    return target
