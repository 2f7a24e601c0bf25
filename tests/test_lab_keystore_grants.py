"""The pre-flight's keystore check against the trial's namespace and ROS_DOMAIN_ID: keys made with
``--namespace /tb4`` grant rt/tb4/cmd_vel, so a trial with namespace "" is denied under Enforce;
keys made for one domain start no participant in another. The check's verdict is compared with what
real CycloneDDS security does with the same keystore: the host's participant and cmd_vel writer, the
robot's cmd_vel reader."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fieldtest.labrun.orchestration.preflight import check_keystore
from fieldtest.record import TrialRequest
from fieldtest.security.keystore import KeystoreOptions, create_keystore
from fieldtest.security.policy import kit_enclave
from fieldtest.transport.base import TransportConfig

KEYSTORES = (("/tb4", 0), ("", 7))  # (namespace, domain) the keys were made for
TRIALS = (("/tb4", 0), ("", 0), ("", 7), ("/tb4", 7))  # (namespace, domain) of the trial

# One side of the trial in real CycloneDDS with the keystore's security: prints ok or the refusal.
SIDE = r"""
import json, sys
from fieldtest import rosmsg
from fieldtest.middleware.dds.security import dds_security_xml
from fieldtest.transport import TransportConfig
from fieldtest.middleware.dds.transport import open_dds
keystore, role, namespace, domain = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
cfg = TransportConfig(middleware="dds", security="sros2", keystore=keystore, namespace=namespace, domain_id=domain)
try:
    side = open_dds(cfg, role, security_xml=dds_security_xml(keystore, role, "sros2"))
    if role == "host":
        side.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
    else:
        side.subscribe("/cmd_vel", rosmsg.TWIST_STAMPED, lambda msg: None)
    print(json.dumps({"ok": True}))
except Exception as exc:
    print(json.dumps({"ok": False, "error": str(exc).splitlines()[0]}))
"""


@pytest.fixture(scope="module")
def keystores(tmp_path_factory) -> dict[tuple[str, int], Path]:
    enclaves = (kit_enclave("host"), kit_enclave("robot"))
    return {
        (ns, domain): create_keystore(
            tmp_path_factory.mktemp("keys") / "keystore",
            KeystoreOptions(namespace=ns, domain_id=domain, enclaves=enclaves),
        )
        for ns, domain in KEYSTORES
    }


def _request(keystore: Path, namespace: str, domain: int) -> TrialRequest:
    transport = TransportConfig(
        middleware="dds", security="sros2", keystore=str(keystore), namespace=namespace, domain_id=domain
    )
    return TrialRequest(name="keys", transport=transport, network="lab", robot_model="turtlebot4-standard")


def _cyclonedds_allows(keystore: Path, namespace: str, domain: int) -> bool:
    verdicts = []
    for role in ("host", "robot"):
        out = subprocess.run(
            [sys.executable, "-c", SIDE, str(keystore), role, namespace, str(domain)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        assert lines, out.stderr[-500:]
        verdicts.append(json.loads(lines[-1])["ok"])
    return all(verdicts)


@pytest.mark.parametrize(("keys", "trial"), list(itertools.product(KEYSTORES, TRIALS)))
def test_the_keystore_check_says_what_real_cyclonedds_security_does(keystores, keys, trial):
    keystore = keystores[keys]
    result = check_keystore(_request(keystore, *trial))
    allowed = _cyclonedds_allows(keystore, *trial)
    assert allowed == (keys == trial)  # the sweep holds both outcomes
    assert (result.severity == "ok") == allowed, result.detail
    if not allowed:
        assert "\n" not in result.detail and "fieldtest keys create --namespace" in result.detail
        assert f"--domain-id {trial[1]}" in result.detail


def test_a_namespace_mismatch_names_both_namespaces(keystores):
    result = check_keystore(_request(keystores[("/tb4", 0)], "", 0))
    assert result.severity == "fail"
    assert "permissions.p7s: grants the host no publish of rt/cmd_vel in domain 0" in result.detail
    assert "made for namespace /tb4" in result.detail
    assert 'fieldtest keys create --namespace "" --domain-id 0' in result.detail
    assert "or run the trial with namespace /tb4" in result.detail


def test_a_domain_mismatch_names_the_governance(keystores):
    result = check_keystore(_request(keystores[("", 7)], "", 0))
    assert result.severity == "fail"
    assert "covers domain [7], not the trial's domain_id 0" in result.detail


def test_the_namespace_is_compared_as_ros_resolves_it(keystores):
    assert check_keystore(_request(keystores[("/tb4", 0)], "tb4/", 0)).severity == "ok"
    assert check_keystore(_request(keystores[("", 7)], "/", 7)).severity == "ok"


def test_the_keystore_preflight_passes_on_the_robots_own_share(keystores, tmp_path):
    """The robot's copy (`fieldtest keys export --for robot`: no CA key, no host key) passes the
    trial's keystore pre-flight for what the robot runs: its DDS enclave and grants, its TLS
    identity (which zenoh-peer's host dials); a namespace its grants do not cover still fails."""
    from fieldtest.security.machineshare import export_machine

    share = export_machine(keystores[("/tb4", 0)], "robot", tmp_path / "robot")
    assert not (share / "private").exists() and not (share / "enclaves/fieldtest/host").exists()
    result = check_keystore(_request(share, "/tb4", 0))
    assert result.severity == "ok", result.detail
    tls = TransportConfig(middleware="zenoh-peer", security="mtls-acl", keystore=str(share), namespace="/tb4")
    request = TrialRequest(name="keys", transport=tls, network="lab", robot_model="turtlebot4-standard")
    assert check_keystore(request).severity == "ok", check_keystore(request).detail
    denied = check_keystore(_request(share, "", 0))
    assert denied.severity == "fail" and "grants the robot no subscribe of rt/cmd_vel" in denied.detail
