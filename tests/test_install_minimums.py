"""The kit run on exactly the minimum versions pyproject.toml declares, as a user whose Ubuntu ships
them has it: pip keeps a system package that satisfies a minimum (Ubuntu 24.04's python3-cryptography
41.0.7, python3-numpy 1.26.4, python3-yaml 6.0.1, python3-psutil 5.9.8), so the kit must run on the
minimum itself. The install builds the venv of every dependency pinned to its minimum once, outside
the clone (tools/install_minimums.sh, fieldtest/testkit/minimums.py); here the clone's code runs in
it (PYTHONPATH) through the paths that broke on an old cryptography: ``fieldtest keys create`` and
its expiry check, and the trial pre-flight's keystore check, with valid and expiring certificates.

The venv's Python is this machine's (3.11), not Ubuntu's (22.04: 3.10, 24.04: 3.12)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fieldtest.testkit import needs
from fieldtest.testkit.minimums import declared_minimums

ROOT = Path(__file__).resolve().parents[1]

# The trial pre-flight's keystore check (fieldtest.labrun.orchestration.preflight), for a DDS Security
# trial and a Zenoh mTLS one: prints each verdict as "<severity> <detail>".
PREFLIGHT = r"""
import sys
from fieldtest.labrun.orchestration.preflight import check_keystore
from fieldtest.record import TrialRequest
from fieldtest.transport.base import TransportConfig

keystore, trial_length_s = sys.argv[1], float(sys.argv[2])
for middleware, security in (("dds", "sros2"), ("zenoh-peer", "mtls-acl")):
    transport = TransportConfig(middleware=middleware, security=security, keystore=keystore)
    request = TrialRequest(name="minimums", transport=transport, network="lab", robot_model="turtlebot4-standard")
    result = check_keystore(request, trial_length_s=trial_length_s)
    print(middleware, result.severity, result.detail)
"""


@pytest.fixture(scope="module")
def minimum_venv() -> Path:
    """The install's venv with every dependency at its declared minimum."""
    return needs.minimums_venv()


def run_kit(venv: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The clone's code on the venv's Python and packages (not the clone's own .venv)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        [str(venv / "bin" / "python"), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def test_the_venv_holds_exactly_the_declared_minimums(minimum_venv):
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(minimum_venv / "bin" / "python"),
            "list",
            "--format=freeze",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    installed = dict(line.lower().split("==", 1) for line in listed.splitlines() if "==" in line)
    for name, version in declared_minimums().items():
        # "6" pins 6.0, "1.24" pins 1.24.0: compare release numbers padded with zeros
        have = installed.get(name) or installed.get(name.replace("-", "_"))
        assert have is not None, f"{name} not installed"
        wanted = [int(p) for p in version.split(".")]
        got = [int(p) for p in have.split(".")[: len(wanted)]]
        assert got == wanted and all(p == "0" for p in have.split(".")[len(wanted) :]), (name, have)


def test_the_kit_runs_from_the_clone_on_the_venvs_packages(minimum_venv, tmp_path):
    done = run_kit(
        minimum_venv,
        ["-c", "import cryptography, fieldtest; print(fieldtest.__file__); print(cryptography.__version__)"],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    kit, cryptography = done.stdout.split()
    assert Path(kit).is_relative_to(ROOT / "fieldtest"), kit
    assert cryptography == declared_minimums()["cryptography"]


def test_keys_create_and_check_run_on_the_minimums(minimum_venv, tmp_path):
    keystore = tmp_path / "keystore"
    done = run_kit(
        minimum_venv, ["-m", "fieldtest.cli", "keys", "create", "--keystore", str(keystore)], tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{keystore}: ok, enclaves" in done.stdout
    # certificates that ended yesterday: the expiry check names the date
    expired = tmp_path / "expired"
    done = run_kit(
        minimum_venv,
        [
            "-m",
            "fieldtest.cli",
            "keys",
            "create",
            "--keystore",
            str(expired),
            "--start-days",
            "-3",
            "--valid-days",
            "2",
        ],
        tmp_path,
    )
    assert done.returncode == 1, (done.stdout, done.stderr[-3000:])
    assert re.search(r"certificate expired on \d{4}-\d\d-\d\d \d\d:\d\d UTC", done.stderr), done.stderr[
        -3000:
    ]
    assert "Traceback" not in done.stderr


def test_the_trial_keystore_preflight_runs_on_the_minimums(minimum_venv, tmp_path):
    keystore = tmp_path / "keystore"
    # made by the clone's .venv (a keystore from elsewhere): valid from a day back for two days
    subprocess.run(
        [
            sys.executable,
            "-m",
            "fieldtest.cli",
            "keys",
            "create",
            "--keystore",
            str(keystore),
            "--valid-days",
            "2",
        ],
        capture_output=True,
        check=True,
        timeout=300,
    )

    def verdicts(trial_length_s: float) -> list[str]:
        done = run_kit(minimum_venv, ["-c", PREFLIGHT, str(keystore), str(trial_length_s)], tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.splitlines()

    short, long = verdicts(60.0), verdicts(3 * 86400.0)
    assert [line.split()[:2] for line in short] == [["dds", "ok"], ["zenoh-peer", "ok"]], short
    assert [line.split()[:2] for line in long] == [["dds", "fail"], ["zenoh-peer", "fail"]], long
    assert all(line.endswith("expires before the trial ends") for line in long), long
