"""The kit installed against exactly the minimum versions pyproject.toml declares, as a user whose
Ubuntu ships them has it: pip keeps a system package that satisfies a minimum (Ubuntu 24.04's
python3-cryptography 41.0.7, python3-numpy 1.26.4, python3-yaml 6.0.1, python3-psutil 5.9.8), so the
kit must run on the minimum itself. The fresh venv gets every dependency pinned to its minimum
(``pip --constraint`` with ``==``) from the package index; then the code paths that broke on an old
cryptography run in it: ``fieldtest keys create`` and ``keys check``, and the trial pre-flight's
keystore check, with valid and expiring certificates.

The venv's Python is this machine's (3.11), not Ubuntu's (22.04: 3.10, 24.04: 3.12): every pin below
has a wheel for it on the index except psutil 5.9.0, which pip builds from its source here. Needs
network access to the package index (pip's cache keeps the wheels for the next run)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
MINIMUM = re.compile(r"^([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)$")

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


def declared_minimums() -> dict[str, str]:
    """Each runtime dependency's ``>=`` minimum from pyproject.toml (every one must have one)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = {dep: MINIMUM.match(dep.replace(" ", "")) for dep in deps}
    assert all(found.values()), (
        f"dependencies without a plain >= minimum: {[d for d, m in found.items() if not m]}"
    )
    return {m[1].lower(): m[2] for m in found.values() if m}


@pytest.fixture(scope="module")
def minimum_venv(tmp_path_factory) -> Path:
    """A venv with the kit and every dependency at its declared minimum."""
    base = tmp_path_factory.mktemp("minimums")
    constraints = base / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in declared_minimums().items()))
    venv = base / "venv"
    # this pip installs into the venv (--python): no second pip to bootstrap there
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "-q",
            "--constraint",
            str(constraints),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, f"the kit does not install at its minimums:\n{done.stderr[-3000:]}"
    return venv


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


def test_keys_create_and_check_run_on_the_minimums(minimum_venv, tmp_path):
    fieldtest = str(minimum_venv / "bin" / "fieldtest")
    keystore = tmp_path / "keystore"
    done = subprocess.run(
        [fieldtest, "keys", "create", "--keystore", str(keystore)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{keystore}: ok, enclaves" in done.stdout
    # certificates that ended yesterday: the expiry check names the date
    expired = tmp_path / "expired"
    done = subprocess.run(
        [fieldtest, "keys", "create", "--keystore", str(expired), "--start-days", "-3", "--valid-days", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, (done.stdout, done.stderr[-3000:])
    assert re.search(r"certificate expired on \d{4}-\d\d-\d\d \d\d:\d\d UTC", done.stderr), done.stderr[
        -3000:
    ]
    assert "Traceback" not in done.stderr


def test_the_trial_keystore_preflight_runs_on_the_minimums(minimum_venv, tmp_path):
    python = str(minimum_venv / "bin" / "python")
    keystore = tmp_path / "keystore"
    # made by the test's own install (a keystore from elsewhere): valid from a day back for two days
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
        done = subprocess.run(
            [python, "-c", PREFLIGHT, str(keystore), str(trial_length_s)],
            capture_output=True,
            text=True,
            cwd=tmp_path,  # not the clone: the installed kit runs
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.splitlines()

    short, long = verdicts(60.0), verdicts(3 * 86400.0)
    assert [line.split()[:2] for line in short] == [["dds", "ok"], ["zenoh-peer", "ok"]], short
    assert [line.split()[:2] for line in long] == [["dds", "fail"], ["zenoh-peer", "fail"]], long
    assert all(line.endswith("expires before the trial ends") for line in long), long
