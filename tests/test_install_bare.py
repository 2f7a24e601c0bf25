"""The install on a bare machine: every step runs with PATH=/usr/bin:/bin, an empty HOME and an
empty cache, so nothing this machine happens to have (rustup in ~/.cargo, a built bridge, a user's
PATH) can hide a step the install does not bring. The Zenoh bridge step stops once its Rust
toolchain is ready (FIELDTEST_BRIDGE_CHECK_TOOLCHAIN_ONLY=1): the build itself takes 25-60 min; the
minimum-versions venv step once it has read the pins (FIELDTEST_MINIMUMS_CHECK_ONLY=1: its build
downloads every pinned dependency again, about 8 min)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BRIDGE_SCRIPT = ROOT / "tools" / "install_zenoh_bridge.sh"
TOOLCHAIN_LINE = re.compile(r"^\[zenoh-bridge\] toolchain: cargo \S+ .*, rustc (\d+)\.(\d+)\.", re.M)


def bare_env(tmp_path: Path, path: str = "/usr/bin:/bin") -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": path,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "FIELDTEST_CACHE": str(tmp_path / "cache"),
        "FIELDTEST_BRIDGE_CHECK_TOOLCHAIN_ONLY": "1",
        "FIELDTEST_MINIMUMS_CHECK_ONLY": "1",
    }


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


def min_rust() -> tuple[int, int]:
    found = re.search(r"^MIN_RUST=(\d+)\.(\d+)$", BRIDGE_SCRIPT.read_text(), re.M)
    assert found, f"{BRIDGE_SCRIPT.name}: no MIN_RUST=<major>.<minor> line"
    return int(found[1]), int(found[2])


def toolchain_of(output: str) -> tuple[int, int]:
    found = TOOLCHAIN_LINE.search(output)
    assert found, f"the bridge step named no toolchain:\n{output[-3000:]}"
    return int(found[1]), int(found[2])


@pytest.mark.slow
def test_make_install_runs_every_step_with_a_bare_path_and_an_empty_home(tmp_path):
    done = run(["make", "install"], bare_env(tmp_path))
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"make install failed in a bare environment:\n{output[-3000:]}"
    assert toolchain_of(output) >= min_rust()
    assert "[install] ready" in output
    assert "[minimums] not building" in output
    # the C helpers were built into the empty cache, not found in this machine's
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "cache" / "fieldtest").iterdir()) == [
        "ddsstamp",
        "fastddsstamp",
        "linkfwd",
        "pollstamp",
        "wifi_link",
    ]


def test_an_old_rust_toolchain_on_path_is_not_taken_for_a_current_one(tmp_path):
    # Debian 12's own rustc/cargo packages (1.63 / 0.66) cannot build zenoh 1.10: the script must
    # judge the version, not the presence, and bring the distribution's current toolchain.
    old = tmp_path / "old-rust"
    old.mkdir()
    for tool, version in (("rustc", "rustc 1.63.0"), ("cargo", "cargo 1.65.0")):
        script = old / tool
        script.write_text(f'#!/bin/sh\n[ "$1" = --version ] && echo "{version}" && exit 0\nexit 1\n')
        script.chmod(0o755)
    done = run(["bash", str(BRIDGE_SCRIPT)], bare_env(tmp_path, f"{old}:/usr/bin:/bin"))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "no Rust >= " in output and "found: 1.63.0" in output
    assert toolchain_of(output) >= min_rust()
