"""Keystore creation and checking: SROS2 layout, signatures, validity, and SROS2-made keystores."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fieldtest.cli import keys_main, main
from fieldtest.middleware.dds.security import dds_security_files
from fieldtest.middleware.registry import keystore_material
from fieldtest.names import HOST_ENCLAVE, MOCAP_ENCLAVE, ROBOT_ENCLAVE
from fieldtest.security.governance import GOVERNANCE_PROFILES
from fieldtest.security.keystore import (
    KeystoreError,
    KeystoreOptions,
    Validity,
    activate_governance,
    check_keystore,
    create_enclave,
    create_keystore,
    governance_variant_path,
    list_enclaves,
    load_cert,
    verify_smime,
)
from fieldtest.security.machineshare import check_keystore as check_any_keystore
from fieldtest.security.machineshare import export_machine
from fieldtest.security.policy import KIT_ENCLAVES, kit_enclave
from fieldtest.testkit import needs


@pytest.fixture(autouse=True)
def _installed_tools():
    needs.tools("openssl")


@pytest.fixture(scope="module")
def keystore(tmp_path_factory) -> Path:
    """A kit keystore as ``fieldtest keys create`` makes it: with what the families add."""
    return create_keystore(tmp_path_factory.mktemp("ks") / "keystore", extra_material=keystore_material())


def fresh_copy(keystore: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(keystore, target, symlinks=True)
    return target


def signed_topics(keystore: Path, enclave: str, right: str) -> set[str]:
    folder = keystore / "enclaves" / enclave.strip("/")
    root = ET.fromstring(verify_smime(folder / "permissions.p7s", folder / "permissions_ca.cert.pem"))
    return {
        t.text for t in root.iter("topic") if t.text and any(t in r.iter("topic") for r in root.iter(right))
    }


def test_created_keystore_has_sros2_layout_and_passes_check(keystore):
    assert check_keystore(keystore) == []
    public, private = keystore / "public", keystore / "private"
    for name in ("identity_ca", "permissions_ca"):
        assert os.readlink(public / f"{name}.cert.pem") == "ca.cert.pem"
        assert os.readlink(private / f"{name}.key.pem") == "ca.key.pem"
    assert (keystore / "enclaves/governance.xml").is_file()
    from fieldtest.middleware.rmw_zenoh.keystorematerial import RMW_ZENOH_ENCLAVE, ROUTER_NODE, policy_names

    rmw_zenoh = [f"{RMW_ZENOH_ENCLAVE}/{node}" for node in [*policy_names(""), ROUTER_NODE]]
    assert list_enclaves(keystore) == sorted([spec.path for spec in KIT_ENCLAVES] + rmw_zenoh)
    host = keystore / "enclaves/fieldtest/host"
    assert os.readlink(host / "governance.p7s") == "../../governance.p7s"
    assert os.readlink(host / "identity_ca.cert.pem") == "../../../public/identity_ca.cert.pem"
    assert os.readlink(host / "permissions_ca.cert.pem") == "../../../public/permissions_ca.cert.pem"
    cert = load_cert(host / "cert.pem")
    assert cert.subject.rfc4514_string() == "CN=/fieldtest/host"
    assert cert.public_key().curve.name == "secp256r1"
    assert oct((host / "key.pem").stat().st_mode & 0o777) == "0o600"
    assert "BEGIN PRIVATE KEY" in (host / "key.pem").read_text()  # PKCS#8 like sros2


def test_permissions_limit_each_enclave_to_its_topics(keystore):
    host_pub = signed_topics(keystore, HOST_ENCLAVE, "publish")
    host_sub = signed_topics(keystore, HOST_ENCLAVE, "subscribe")
    robot_pub = signed_topics(keystore, ROBOT_ENCLAVE, "publish")
    robot_sub = signed_topics(keystore, ROBOT_ENCLAVE, "subscribe")
    assert "rt/cmd_vel" in host_pub and "rt/cmd_vel" not in host_sub
    assert "rt/cmd_vel" in robot_sub and "rt/cmd_vel" not in robot_pub
    assert "rt/fieldtest/clock_probe" in robot_pub and "rt/fieldtest/clock_probe" in host_sub
    assert "rt/fieldtest/clock_probe_reply" in host_pub and "rt/fieldtest/clock_probe_reply" in robot_sub
    assert {"rt/rosout", "rt/parameter_events", "ros_discovery_info"} <= host_pub
    assert "rq/square_driver/get_parametersRequest" in host_sub
    assert not any("*" in t for t in host_pub | host_sub | robot_pub | robot_sub)


def test_domain_id_and_namespace_reach_governance_and_permissions(tmp_path):
    ks = create_keystore(
        tmp_path / "ks", KeystoreOptions(domain_id=42, namespace="/tb4", enclaves=(kit_enclave("host"),))
    )
    assert check_keystore(ks) == []
    gov = ET.fromstring((ks / "enclaves/governance.xml").read_text())
    assert [e.text for e in gov.iter("id")] == ["42"]
    perms = ET.fromstring((ks / "enclaves/fieldtest/host/permissions.xml").read_text())
    assert {e.text for e in perms.iter("id")} == {"42"}
    topics = {t.text for t in perms.iter("topic")}
    assert "rt/tb4/cmd_vel" in topics and "rt/cmd_vel" not in topics
    assert "rt/rosout" in topics  # ROS globals stay global
    assert "rq/tb4/square_driver/get_parametersRequest" in topics
    policy = ET.parse(ks / "fieldtest/policy.xml").getroot()
    assert policy.find("enclaves/enclave").get("path") == HOST_ENCLAVE


def test_permissions_validity_follows_the_certificate(keystore):
    host = keystore / "enclaves/fieldtest/host"
    cert = load_cert(host / "cert.pem")
    perms = ET.fromstring((host / "permissions.xml").read_text())
    assert perms.findtext(".//not_before") == cert.not_valid_before_utc.strftime("%Y-%m-%dT%H:%M:%S")
    assert perms.findtext(".//not_after") == cert.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%S")


def test_tampered_permissions_signature_is_detected(keystore, tmp_path):
    ks = fresh_copy(keystore, tmp_path)
    signed = ks / "enclaves/fieldtest/robot/permissions.p7s"
    text = signed.read_bytes()
    # Grant the robot /cmd_vel publishing without re-signing.
    forged = text.replace(b"<topic>rt/fieldtest/clock_probe</topic>", b"<topic>rt/cmd_vel</topic>", 1)
    assert forged != text
    signed.write_bytes(forged)
    problems = check_keystore(ks)
    assert len(problems) == 1
    assert str(signed) in problems[0] and "does not verify" in problems[0]


def test_permissions_signed_by_another_ca_are_detected(keystore, tmp_path):
    ks = fresh_copy(keystore, tmp_path)
    other = create_keystore(tmp_path / "other", KeystoreOptions(enclaves=(kit_enclave("robot"),)))
    shutil.copyfile(
        other / "enclaves/fieldtest/robot/permissions.p7s", ks / "enclaves/fieldtest/robot/permissions.p7s"
    )
    problems = check_keystore(ks)
    assert any("robot/permissions.p7s" in p and "does not verify" in p for p in problems)


def test_enclave_certificate_from_another_ca_is_detected(keystore, tmp_path):
    ks = fresh_copy(keystore, tmp_path)
    other = create_keystore(tmp_path / "other", KeystoreOptions(enclaves=(kit_enclave("host"),)))
    for name in ("cert.pem", "key.pem"):
        shutil.copyfile(other / "enclaves/fieldtest/host" / name, ks / "enclaves/fieldtest/host" / name)
    problems = check_keystore(ks)
    assert problems == [
        f"{ks}/enclaves/fieldtest/host/cert.pem: not signed by {ks}/enclaves/fieldtest/host/identity_ca.cert.pem (InvalidSignature)"
    ]


def test_expired_enclave_is_reported_clearly(keystore, tmp_path):
    ks = fresh_copy(keystore, tmp_path)
    past = Validity.from_days(valid_days=5, start_days=-30)
    create_enclave(ks, kit_enclave("robot"), domain_id=0, validity=past)
    problems = check_keystore(ks)
    expiry = past.not_after.strftime("%Y-%m-%d %H:%M")
    assert f"{ks}/enclaves/fieldtest/robot/cert.pem: certificate expired on {expiry} UTC" in problems
    assert f"{ks}/enclaves/fieldtest/robot/permissions.p7s: permissions expired on {expiry} UTC" in problems
    assert not any("/host/" in p for p in problems)


def test_keystore_created_in_the_past_reports_expired_ca(tmp_path):
    ks = create_keystore(
        tmp_path / "ks",
        KeystoreOptions(
            validity=Validity.from_days(valid_days=1, start_days=-3), enclaves=(kit_enclave("host"),)
        ),
    )
    problems = check_keystore(ks)
    assert any("public/identity_ca.cert.pem: certificate expired" in p for p in problems)
    assert any("host/cert.pem: certificate expired" in p for p in problems)


def test_missing_files_and_foreign_governance_are_reported(keystore, tmp_path):
    ks = fresh_copy(keystore, tmp_path)
    (ks / "enclaves/fieldtest/mocap/key.pem").unlink()
    host_gov = ks / "enclaves/fieldtest/host/governance.p7s"
    host_gov.unlink()
    shutil.copyfile(governance_variant_path(ks, "rtps-sign"), host_gov)
    problems = check_keystore(ks)
    assert f"{host_gov}: differs from {ks}/enclaves/governance.p7s" in problems
    # the mocap folder without key.pem is no longer an enclave (sros2's rule), so nothing to check there
    assert MOCAP_ENCLAVE not in list_enclaves(ks)
    assert check_keystore(tmp_path / "nowhere") == [f"{tmp_path / 'nowhere'}: no such keystore directory"]


def test_every_governance_variant_is_signed_and_activatable(keystore, tmp_path):
    ks = fresh_copy(keystore, tmp_path)
    for name, profile in GOVERNANCE_PROFILES.items():
        content = verify_smime(governance_variant_path(ks, name), ks / "public/permissions_ca.cert.pem")
        rule = ET.fromstring(content).find("domain_access_rules/domain_rule")
        assert rule.findtext("rtps_protection_kind") == profile.rtps
        assert rule.findtext("topic_access_rules/topic_rule/data_protection_kind") == profile.data
        assert rule.findtext("topic_access_rules/topic_rule/metadata_protection_kind") == profile.metadata
    activate_governance(ks, "submessage-encrypt")
    assert check_keystore(ks) == []
    enclave_gov = verify_smime(ks / "enclaves/fieldtest/robot/governance.p7s", ks / "public/ca.cert.pem")
    assert (
        b"<metadata_protection_kind>ENCRYPT<" in enclave_gov and b"<rtps_protection_kind>NONE<" in enclave_gov
    )
    with pytest.raises(KeystoreError, match="no governance for setting 'nope'"):
        activate_governance(ks, "nope")


def test_cli_create_check_and_failures(tmp_path, capsys):
    ks = tmp_path / "ks"
    assert keys_main(["create", "--keystore", str(ks), "--domain-id", "7", "--valid-days", "30"]) == 0
    out = capsys.readouterr().out
    assert "domain 7" in out and "ok, enclaves /fieldtest/bridge_host" in out
    cert = load_cert(ks / "enclaves/fieldtest/host/cert.pem")
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == dt.timedelta(days=30)
    assert keys_main(["check", "--keystore", str(ks)]) == 0
    (ks / "enclaves/fieldtest/host/cert.pem").write_text("garbage")
    assert keys_main(["check", "--keystore", str(ks)]) == 1
    assert "host/cert.pem: cannot read certificate" in capsys.readouterr().err
    assert keys_main(["governance", "--keystore", str(ks), "--setting", "rtps-encrypt"]) == 0
    assert keys_main(["tls", "--keystore", str(ks), "--tls-name", "10.0.0.5"]) == 0
    assert main(["keys", "create", "--keystore", str(tmp_path / "bad"), "--domain-id", "999"]) == 2
    assert "domain id 999 out of range" in capsys.readouterr().err


# ----------------------------------------------------------------- one machine's share


def _private_key_files(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and b"PRIVATE KEY" in p.read_bytes()
    }


def test_the_robots_share_holds_its_own_keys_only_and_checks_out(keystore, tmp_path, capsys):
    """`fieldtest keys export --for robot`: the CA certificate, governance and the robot's own
    identities; never the CA's key nor the host's, the router's or the broker's."""
    robot = tmp_path / "robot"
    assert keys_main(["export", "--keystore", str(keystore), "--for", "robot", str(robot)]) == 0
    assert (
        f"{robot}: ok (robot's share: TLS robot), enclaves /fieldtest/bridge_robot" in capsys.readouterr().out
    )
    assert _private_key_files(robot) == {
        "enclaves/fieldtest/robot/key.pem",
        "enclaves/fieldtest/bridge_robot/key.pem",
        "enclaves/fieldtest/recorder/key.pem",  # ros2 bag record runs on both machines
        "enclaves/fieldtest/rmw_zenoh/link_monitor/key.pem",
        "enclaves/fieldtest/rmw_zenoh/rosbag2_recorder/key.pem",
        "enclaves/fieldtest/rmw_zenoh/zenohd/key.pem",
        "tls/robot.key",
    }
    assert not (robot / "private").exists()
    # what the robot's participants load is there, at the paths the whole keystore has them
    files = dds_security_files(robot, "robot", "rtps-encrypt")
    assert files.governance == (robot / "fieldtest/governance/rtps-encrypt.p7s").absolute()
    assert check_any_keystore(robot) == []
    # the broker's share: its TLS identity only
    broker = tmp_path / "broker"
    assert keys_main(["export", "--keystore", str(keystore), "--for", "broker", str(broker)]) == 0
    assert _private_key_files(broker) == {"tls/broker.key"}


def test_a_share_with_a_key_it_must_not_hold_or_missing_its_own_fails_the_check(keystore, tmp_path):
    robot = tmp_path / "robot"
    keys_main(["export", "--keystore", str(keystore), "--for", "robot", str(robot)])
    (robot / "private").mkdir()
    shutil.copyfile(keystore / "private/ca.key.pem", robot / "private/ca.key.pem")
    shutil.copyfile(keystore / "tls/host.key", robot / "tls/host.key")
    (robot / "tls/robot.key").unlink()
    problems = check_any_keystore(robot)
    assert f"{robot / 'private/ca.key.pem'}: a private key robot does not use" in problems[0], problems
    assert any(p.startswith(f"{robot / 'tls/host.key'}: a private key robot does not use") for p in problems)
    assert any(p.startswith(f"{robot / 'tls/robot.key'}: missing") for p in problems), problems
    # an export replaces an earlier share, but never a folder that is not one
    assert keys_main(["export", "--keystore", str(keystore), "--for", "robot", str(robot)]) == 0
    assert check_any_keystore(robot) == []
    with pytest.raises(KeystoreError, match="exists and is no machine's share"):
        export_machine(keystore, "robot", keystore)
    with pytest.raises(KeystoreError, match="is robot's share already"):
        export_machine(robot, "robot", tmp_path / "again")


# ----------------------------------------------------------------- a keystore made the SROS2 way

SROS2_GOVERNANCE = """\
<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
    xsi:noNamespaceSchemaLocation="http://www.omg.org/spec/DDS-SECURITY/20170901/omg_shared_ca_governance.xsd">
    <domain_access_rules>
        <domain_rule>
            <domains>
              <id>0</id>
            </domains>
            <allow_unauthenticated_participants>false</allow_unauthenticated_participants>
            <enable_join_access_control>true</enable_join_access_control>
            <discovery_protection_kind>ENCRYPT</discovery_protection_kind>
            <liveliness_protection_kind>ENCRYPT</liveliness_protection_kind>
            <rtps_protection_kind>SIGN</rtps_protection_kind>
            <topic_access_rules>
                <topic_rule>
                    <topic_expression>*</topic_expression>
                    <enable_discovery_protection>true</enable_discovery_protection>
                    <enable_liveliness_protection>true</enable_liveliness_protection>
                    <enable_read_access_control>true</enable_read_access_control>
                    <enable_write_access_control>true</enable_write_access_control>
                    <metadata_protection_kind>ENCRYPT</metadata_protection_kind>
                    <data_protection_kind>ENCRYPT</data_protection_kind>
                </topic_rule>
            </topic_access_rules>
        </domain_rule>
    </domain_access_rules>
</dds>
"""

# What `ros2 security create_enclave` writes from SROS2's default (wildcard) policy.
SROS2_PERMISSIONS = """\
<dds xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" \
xsi:noNamespaceSchemaLocation="http://www.omg.org/spec/DDS-SECURITY/20170901/omg_shared_ca_permissions.xsd">
  <permissions>
    <grant name="{enclave}">
      <subject_name>CN={enclave}</subject_name>
      <validity>
        <not_before>{not_before}</not_before>
        <not_after>{not_after}</not_after>
      </validity>
      <allow_rule>
        <domains>
          <id>0</id>
        </domains>
        <publish>
          <topics>
            <topic>rq/*/_action/cancel_goalRequest</topic>
            <topic>rq/*/_action/get_resultRequest</topic>
            <topic>rq/*/_action/send_goalRequest</topic>
            <topic>rq/*Request</topic>
            <topic>rr/*/_action/cancel_goalReply</topic>
            <topic>rr/*/_action/get_resultReply</topic>
            <topic>rr/*/_action/send_goalReply</topic>
            <topic>rr/*Reply</topic>
            <topic>rt/*</topic>
            <topic>rt/*/_action/feedback</topic>
            <topic>rt/*/_action/status</topic>
          </topics>
        </publish>
        <subscribe>
          <topics>
            <topic>rq/*/_action/cancel_goalRequest</topic>
            <topic>rq/*/_action/get_resultRequest</topic>
            <topic>rq/*/_action/send_goalRequest</topic>
            <topic>rq/*Request</topic>
            <topic>rr/*/_action/cancel_goalReply</topic>
            <topic>rr/*/_action/get_resultReply</topic>
            <topic>rr/*/_action/send_goalReply</topic>
            <topic>rr/*Reply</topic>
            <topic>rt/*</topic>
            <topic>rt/*/_action/feedback</topic>
            <topic>rt/*/_action/status</topic>
          </topics>
        </subscribe>
      </allow_rule>
      <allow_rule>
        <domains>
          <id>0</id>
        </domains>
        <publish>
          <topics>
            <topic>ros_discovery_info</topic>
          </topics>
        </publish>
        <subscribe>
          <topics>
            <topic>ros_discovery_info</topic>
          </topics>
        </subscribe>
      </allow_rule>
      <default>DENY</default>
    </grant>
  </permissions>
</dds>
"""

# The same steps as `ros2 security create_keystore` + `create_enclave`, done with the openssl tool.
SROS2_SCRIPT = r"""
set -eu
ks="$1"; enclave="$2"; rel="${enclave#/}"
mkdir -p "$ks/public" "$ks/private" "$ks/enclaves/$rel"
cat > "$ks/ca.cnf" <<'EOF'
[req]
distinguished_name = dn
x509_extensions = ca_ext
[dn]
[ca_ext]
basicConstraints = critical, CA:TRUE, pathlen:1
[leaf_ext]
basicConstraints = CA:FALSE
EOF
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$ks/private/ca.key.pem"
openssl req -x509 -new -config "$ks/ca.cnf" -key "$ks/private/ca.key.pem" -subj "/CN=sros2CA" \
  -days 3650 -sha256 -out "$ks/public/ca.cert.pem"
ln -s ca.cert.pem "$ks/public/identity_ca.cert.pem"
ln -s ca.cert.pem "$ks/public/permissions_ca.cert.pem"
ln -s ca.key.pem "$ks/private/identity_ca.key.pem"
ln -s ca.key.pem "$ks/private/permissions_ca.key.pem"
openssl smime -sign -text -in "$ks/enclaves/governance.xml" -out "$ks/enclaves/governance.p7s" \
  -signer "$ks/public/permissions_ca.cert.pem" -inkey "$ks/private/permissions_ca.key.pem"
dir="$ks/enclaves/$rel"; up=$(echo "$rel" | sed 's#[^/]*#..#g')
ln -s "$up/../public/identity_ca.cert.pem" "$dir/identity_ca.cert.pem"
ln -s "$up/../public/permissions_ca.cert.pem" "$dir/permissions_ca.cert.pem"
ln -s "$up/governance.p7s" "$dir/governance.p7s"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/key.pem"
openssl req -new -config "$ks/ca.cnf" -key "$dir/key.pem" -subj "/CN=$(echo "$enclave" | sed 's#/#\\/#g')" \
  -out "$dir/req.csr"
openssl x509 -req -in "$dir/req.csr" -CA "$ks/public/identity_ca.cert.pem" \
  -CAkey "$ks/private/identity_ca.key.pem" -set_serial "0x$(openssl rand -hex 8)" -days 3650 -sha256 \
  -extfile "$ks/ca.cnf" -extensions leaf_ext -out "$dir/cert.pem"
rm "$dir/req.csr" "$ks/ca.cnf"
"""

SIGN_PERMISSIONS = r"""
set -eu
dir="$1"; ks="$2"
openssl smime -sign -text -in "$dir/permissions.xml" -out "$dir/permissions.p7s" \
  -signer "$ks/public/permissions_ca.cert.pem" -inkey "$ks/private/permissions_ca.key.pem"
"""


def make_sros2_keystore(ks: Path, enclave: str) -> Path:
    """A keystore built step by step as SROS2 builds one, without any of the kit's code."""
    (ks / "enclaves").mkdir(parents=True)
    (ks / "enclaves/governance.xml").write_text(SROS2_GOVERNANCE)
    subprocess.run(["bash", "-c", SROS2_SCRIPT, "sros2", str(ks), enclave], check=True, capture_output=True)
    folder = ks / "enclaves" / enclave.strip("/")
    dates = subprocess.run(
        [
            "openssl",
            "x509",
            "-noout",
            "-startdate",
            "-enddate",
            "-dateopt",
            "iso_8601",
            "-in",
            str(folder / "cert.pem"),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    fields = dict(line.split("=", 1) for line in dates.strip().splitlines())
    iso = {k: v.strip().replace(" ", "T").rstrip("Z") for k, v in fields.items()}
    (folder / "permissions.xml").write_text(
        SROS2_PERMISSIONS.format(enclave=enclave, not_before=iso["notBefore"], not_after=iso["notAfter"])
    )
    subprocess.run(
        ["bash", "-c", SIGN_PERMISSIONS, "sign", str(folder), str(ks)], check=True, capture_output=True
    )
    return ks


def test_keystore_made_the_sros2_way_is_accepted(tmp_path):
    ks = make_sros2_keystore(tmp_path / "sros2_ks", "/talker_listener/talker")
    assert check_keystore(ks) == []
    assert list_enclaves(ks) == ["/talker_listener/talker"]
    files = dds_security_files(ks, "/talker_listener/talker", "sros2")
    assert files.governance == (ks / "enclaves/talker_listener/talker/governance.p7s").absolute()
    # the kit can add its own enclaves to it, keeping the SROS2 CA
    ca_before = (ks / "public/ca.cert.pem").read_bytes()
    create_keystore(ks, KeystoreOptions(enclaves=(kit_enclave("host"),)))
    assert (ks / "public/ca.cert.pem").read_bytes() == ca_before
    assert check_keystore(ks) == []
    assert list_enclaves(ks) == [HOST_ENCLAVE, "/talker_listener/talker"]


def test_sros2_way_keystore_with_tampered_permissions_is_rejected(tmp_path):
    ks = make_sros2_keystore(tmp_path / "sros2_ks", "/talker")
    signed = ks / "enclaves/talker/permissions.p7s"
    signed.write_text(signed.read_text().replace("<default>DENY</default>", "<default>ALLOW</default>"))
    problems = check_keystore(ks)
    assert len(problems) == 1
    assert problems[0].startswith(f"{signed}: signature does not verify")
