"""Secure CycloneDDS participants built from the kit's keystore: real plugins, real handshakes on loopback.

Each participant runs in its own process: CYCLONEDDS_URI is read once per process, and a process
holds one identity. The robot side takes its security from the <Security> XML block, the host
side from dds.sec.* participant properties, so both forms the kit produces are exercised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from fieldtest.middleware.dds.security import (
    dds_security_files,
    dds_security_properties,
    dds_security_xml,
)
from fieldtest.security.governance import GOVERNANCE_PROFILES
from fieldtest.security.keystore import KeystoreError, KeystoreOptions, create_keystore
from fieldtest.security.policy import kit_enclave
from fieldtest.security.securitysettings import SecuritySettingError
from fieldtest.testkit import needs
from fieldtest.testkit.loopns import loopback_namespace

WHOLE_FRAMES = 65535  # tcpdump's snap length: every byte of every frame

LOOPBACK = (
    "<General><AllowMulticast>false</AllowMulticast>"
    '<Interfaces><NetworkInterface address="127.0.0.1"/></Interfaces></General>'
    "<Discovery><ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>50</MaxAutoParticipantIndex>"
    '<Peers><Peer address="127.0.0.1"/></Peers></Discovery>'
)

# One participant: argv = mode (pub|sub|write-only), topic, JSON config {xml, properties}.
PEER = r"""
import json, os, sys, threading, time
from dataclasses import dataclass
mode, topic_name, cfg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
os.environ["CYCLONEDDS_URI"] = cfg["uri"]
from cyclonedds.core import DDSException, Listener, Policy, Qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import IdlStruct
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

@dataclass
class Probe(IdlStruct, typename="fieldtest::Probe"):
    seq: int
    text: str

def report(**kw):
    print(json.dumps(kw), flush=True)

props = [Policy.Property(k, v) for k, v in cfg.get("properties", {}).items()]
try:
    dp = DomainParticipant(0, qos=Qos(*props) if props else None)
except DDSException as exc:
    report(event="participant_failed", error=str(exc)); sys.exit(3)
qos = Qos(Policy.Reliability.Reliable(duration(seconds=1)), Policy.History.KeepLast(20))
topic = Topic(dp, topic_name, Probe, qos=qos)
matched = threading.Event()

class OnMatch(Listener):
    def on_publication_matched(self, writer, status):
        if status.current_count > 0:
            matched.set()

try:
    if mode == "sub":
        reader = DataReader(dp, topic, qos=qos)
        got, deadline = [], time.monotonic() + cfg.get("wait_s", 15)
        while len(got) < 3 and time.monotonic() < deadline:
            got += [s.text for s in reader.take(N=20)]
            time.sleep(0.01)
        report(event="received", count=len(got), texts=sorted(set(got)))
        del reader
    else:
        writer = DataWriter(dp, topic, qos=qos, listener=OnMatch())
        if mode == "pub":
            ok = matched.wait(cfg.get("wait_s", 15))
            for i in range(10):
                writer.write(Probe(i, "fieldtest-marker"))
                time.sleep(0.02)
            writer.wait_for_acks(duration(seconds=3))
            report(event="published", matched=ok)
        else:
            report(event="writer_created")
        del writer
except DDSException as exc:
    report(event="entity_failed", error=str(exc)); sys.exit(4)
del topic, dp
"""

# Its participants join DDS domain 0, the keystore's: leased for each test (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("dds_domain_zero")


def uri(security_xml: str = "") -> str:
    return f'<CycloneDDS><Domain id="any">{LOOPBACK}{security_xml}</Domain></CycloneDDS>'


def start(mode: str, topic: str, config: dict, prefix: list[str] | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "CYCLONEDDS_URI"}
    return subprocess.Popen(
        [*(prefix or []), sys.executable, "-c", PEER, mode, topic, json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def result(proc: subprocess.Popen, timeout: float = 30) -> tuple[int, dict, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else {}), err


def robot_config(keystore: Path, setting: str) -> dict:
    return {"uri": uri(dds_security_xml(keystore, "robot", setting))}


def host_config(keystore: Path, setting: str) -> dict:
    return {"uri": uri(), "properties": dds_security_properties(keystore, "host", setting)}


@pytest.mark.parametrize("setting", list(GOVERNANCE_PROFILES))
def test_secure_host_to_robot_delivery(keystore, setting):
    sub = start("sub", "rt/cmd_vel", robot_config(keystore, setting))
    pub = start("pub", "rt/cmd_vel", host_config(keystore, setting))
    pub_rc, pub_out, pub_err = result(pub)
    sub_rc, sub_out, sub_err = result(sub)
    assert pub_rc == 0 and pub_out == {"event": "published", "matched": True}, pub_err
    assert sub_rc == 0, sub_err
    assert sub_out["event"] == "received" and sub_out["count"] >= 3
    assert sub_out["texts"] == ["fieldtest-marker"]


def _no_talk(pub_config: dict, sub_config: dict) -> None:
    sub = start("sub", "rt/cmd_vel", {**sub_config, "wait_s": 3})
    pub = start("pub", "rt/cmd_vel", {**pub_config, "wait_s": 3})
    _, pub_out, _ = result(pub)
    _, sub_out, _ = result(sub)
    assert pub_out.get("matched") is False
    assert sub_out == {"event": "received", "count": 0, "texts": []}


@pytest.mark.parametrize("setting", ["sros2", "plugins-only"])
def test_secure_and_plain_participants_do_not_talk(keystore, setting):
    _no_talk(host_config(keystore, setting), {"uri": uri()})


@pytest.fixture(scope="module")
def foreign_keystore(tmp_path_factory) -> Path:
    """The same enclave names under another CA."""
    return create_keystore(
        tmp_path_factory.mktemp("foreign") / "keystore",
        KeystoreOptions(enclaves=(kit_enclave("host"), kit_enclave("robot"))),
    )


def test_without_protection_only_join_access_control_keeps_a_foreign_identity_out(keystore, foreign_keystore):
    """A host whose identity another CA signed: with join access control on (plugins-only-ac) it
    never matches the robot; with every protection NONE and access control off (plugins-only),
    CycloneDDS 0.10.2 lets it exchange the unprotected topic all the same, so plugins-only prices
    the plugins and keeps no one out (docs/security.md)."""
    _no_talk(host_config(foreign_keystore, "plugins-only-ac"), robot_config(keystore, "plugins-only-ac"))
    sub = start("sub", "rt/cmd_vel", robot_config(keystore, "plugins-only"))
    pub = start("pub", "rt/cmd_vel", host_config(foreign_keystore, "plugins-only"))
    _, pub_out, _ = result(pub)
    _, sub_out, _ = result(sub)
    assert pub_out == {"event": "published", "matched": True} and sub_out["count"] >= 3


@pytest.mark.parametrize(("setting", "allowed"), [("plugins-only", True), ("plugins-only-ac", False)])
def test_access_control_off_lets_the_robot_write_cmd_vel(keystore, setting, allowed):
    """The robot's permissions do not grant writing /cmd_vel: with access control off the writer
    is created all the same, with it on Cyclone refuses it."""
    rc, out, _ = result(start("write-only", "rt/cmd_vel", robot_config(keystore, setting)))
    if allowed:
        assert (rc, out) == (0, {"event": "writer_created"})
    else:
        assert rc == 4 and "NOT_ALLOWED_BY_SECURITY" in out["error"]


def test_permissions_forbid_robot_writing_cmd_vel(keystore):
    rc, out, _ = result(start("write-only", "rt/cmd_vel", robot_config(keystore, "sros2")))
    assert rc == 4 and out["event"] == "entity_failed"
    assert "NOT_ALLOWED_BY_SECURITY" in out["error"]
    # the same enclave may write what its permissions grant
    rc, out, _ = result(start("write-only", "rt/fieldtest/clock_probe", robot_config(keystore, "sros2")))
    assert (rc, out) == (0, {"event": "writer_created"})


def test_missing_key_file_stops_before_and_inside_cyclone(keystore, tmp_path):
    config = robot_config(keystore, "sros2")
    key = keystore / "enclaves/fieldtest/robot/key.pem"
    moved = tmp_path / "key.pem"
    key.rename(moved)
    try:
        with pytest.raises(KeystoreError, match=r"enclaves/fieldtest/robot/key.pem: missing"):
            dds_security_files(keystore, "robot")
        rc, out, err = result(start("sub", "rt/cmd_vel", config))
    finally:
        moved.rename(key)
    assert rc == 3 and out["event"] == "participant_failed"
    assert "robot/key.pem" in err  # Cyclone logs the reason; the exception only says DDS_RETCODE_ERROR


def test_participant_from_a_keystore_made_the_sros2_way(tmp_path):
    from test_security_keystore import make_sros2_keystore

    ks = make_sros2_keystore(tmp_path / "sros2_ks", "/talker")
    config = {"uri": uri(dds_security_xml(ks, "/talker", "sros2"))}
    rc, out, err = result(start("write-only", "rt/chatter", config))
    assert (rc, out) == (0, {"event": "writer_created"}), err


def test_security_xml_and_properties_name_the_same_files(keystore):
    xml = dds_security_xml(keystore, "host", "rtps-sign")
    props = dds_security_properties(keystore, "host", "rtps-sign")
    for key in ("identity_ca", "identity_certificate", "private_key"):
        assert props[f"dds.sec.auth.{key}"] in xml
    assert props["dds.sec.access.governance"].endswith("fieldtest/governance/rtps-sign.p7s")
    assert props["dds.sec.access.governance"] in xml
    assert 'initFunction="init_crypto"' in xml
    with pytest.raises(SecuritySettingError, match="does not apply to middleware 'dds'"):
        dds_security_xml(keystore, "host", "mtls-acl")


# What each DDS setting leaves readable on the wire: the marker string of every sample, the
# application's DATA submessages, the RTPS protection (DDS Security 1.1, 7.3.6: SRTPS_PREFIX
# before a signed or encrypted message) and origin authentication (a MAC per receiver in the
# CryptoFooter of each protected submessage, SEC_POSTFIX, or message, SRTPS_POSTFIX), from a
# capture of whole frames in a network namespace of the test's own.
class Wire(NamedTuple):
    cleartext: bool  # the marker string readable
    signed: bool  # RTPS messages signed or encrypted
    encrypted: bool  # application submessages encrypted
    submessage_origin_auth: bool = False  # receiver-specific MACs after the protected submessages
    message_origin_auth: bool = False  # receiver-specific MACs after the protected messages


WIRE_EXPECTED = {
    "plugins-only": Wire(True, False, False),
    "plugins-only-ac": Wire(True, False, False),
    "rtps-sign": Wire(True, True, False),
    "submessage-encrypt": Wire(False, False, True),
    "sign-submessage-encrypt": Wire(False, True, True),
    "sign-submessage-origin-encrypt-data": Wire(False, True, True, submessage_origin_auth=True),
    "rtps-encrypt": Wire(False, True, True),
    # the payload encrypted, the DATA around it not
    "origin-auth-encrypt": Wire(False, True, False, message_origin_auth=True),
    "sros2": Wire(False, True, True),
}


@pytest.mark.parametrize("setting", list(WIRE_EXPECTED))
def test_the_capture_shows_what_each_setting_protects(keystore, tmp_path, setting):
    from fieldtest.netem.linktraffic import LinkCapture
    from fieldtest.netem.wire import account, receiver_specific_macs

    needs.netns()
    needs.tools("tcpdump")
    pcap = tmp_path / "lo.pcap"
    with loopback_namespace(f"ftsec{os.getpid()}-{setting}") as prefix:
        capture = LinkCapture(prefix, "lo", pcap, snap_bytes=WHOLE_FRAMES)  # the footers end a message
        capture.start()
        sub = start("sub", "rt/cmd_vel", robot_config(keystore, setting), prefix)
        pub = start("pub", "rt/cmd_vel", host_config(keystore, setting), prefix)
        pub_rc, pub_out, pub_err = result(pub)
        sub_rc, sub_out, sub_err = result(sub)
        capture.stop()
    assert pub_out.get("matched") and sub_out.get("count", 0) >= 3, (pub_err, sub_err)
    expected = WIRE_EXPECTED[setting]
    assert (b"fieldtest-marker" in pcap.read_bytes()) == expected.cleartext
    sent = account(pcap, ["127.0.0.1"], 1.0)["directions"]["from_local"]
    submessages = sent["rtps_submessages"]
    assert ("SRTPS_PREFIX" in submessages) == expected.signed, submessages
    kinds = {kind: row["packets"] for kind, row in sent["kinds"].items()}
    if expected.encrypted:  # not one application DATA visible; SEC_BODY hides them (and the key exchange)
        assert kinds["user_data"] == 0 and kinds["rtps_protected"] > 0, kinds
    else:  # the key exchange is always encrypted (DDS Security 1.1, 7.4.5), the samples are not
        assert kinds["user_data"] > 0, kinds
    macs = receiver_specific_macs(pcap)
    for postfix, origin_auth in (
        ("SEC_POSTFIX", expected.submessage_origin_auth),
        ("SRTPS_POSTFIX", expected.message_origin_auth),
    ):
        authenticated = sum(count for n_macs, count in macs[postfix].items() if n_macs > 0)
        if origin_auth:  # one receiver each way: one MAC, at least one per sample received
            assert set(macs[postfix]) <= {0, 1} and authenticated >= sub_out["count"], macs
        else:  # the key exchange's own protection carries no receiver MAC either
            assert authenticated == 0, macs


def test_the_plugin_check_looks_beside_the_library_the_binding_loaded(monkeypatch):
    """A binding built by another user against a prefix this user cannot read (a lab robot's login
    running the kit from the lab user's clone) loads the system's libddsc instead: the DDS Security
    plugins are judged beside that library, not beside the unreadable path."""
    from cyclonedds import __library__ as binding

    from fieldtest.middleware.dds.security import missing_security_plugins

    assert missing_security_plugins() == []
    monkeypatch.setattr(binding, "library_path", "/nonexistent/prefix/lib/libddsc.so")
    assert missing_security_plugins() == []
