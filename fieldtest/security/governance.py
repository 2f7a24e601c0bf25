"""DDS Security governance documents: SROS2's default and the protection levels RTI perftest measures.

Every profile fills the same OMG DDS Security governance elements (``domain_rule``:
allow_unauthenticated_participants, enable_join_access_control, discovery_protection_kind,
liveliness_protection_kind, rtps_protection_kind, one ``topic_rule`` for ``*`` with
enable_discovery_protection, enable_liveliness_protection, enable_read/write_access_control,
metadata_protection_kind, data_protection_kind), in the schema's element order.

The RTI-mirroring variants copy the protection kinds of RTI perftest's
``PerftestGovernance_{RTPSSign,RTPSEncrypt,SignWithOrigAuthEncryptData,SubmessageEncrypt,
SignEncryptSubmessage,RTPSSignEncryptSubmessageWithOrigAuthEncryptData}.xml``
(rticommunity/rtiperftest resource/secure/input/governances/) but keep
SROS2's authentication and access control (join, read and write access control on), so that from
one setting to the next only the cryptographic protection changes. ``plugins-only`` and
``plugins-only-ac`` load the plugins and protect nothing (perftest's ``PerftestGovernance_.xml``),
with access control off and on: the pair prices the plugins and access control alone.

RTI's "Submessage Encrypt" (``-secureEncryptSM``: PerftestGovernance_SubmessageEncrypt.xml and
EncryptSubmessage.xml) leaves ``rtps_protection_kind`` NONE; its "Sign, Submessage Encrypt"
(``-secureSign -secureEncryptSM``: PerftestGovernance_SignEncryptSubmessage.xml) is a different
profile, RTPS SIGN plus metadata ENCRYPT: the kit has both, ``submessage-encrypt`` and
``sign-submessage-encrypt``. RTI's most expensive row, "Sign, Submessage Encrypt with origin
authentication, Encrypt Data", is ``sign-submessage-origin-encrypt-data``: metadata
ENCRYPT_WITH_ORIGIN_AUTHENTICATION, which CycloneDDS 0.10.2 implements rather than downgrading
(src/security/builtin_plugins/cryptographic/src/crypto_transform.c: encode_submmessage_encrypt
appends a MAC per matched reader, or per writer for an ACKNACK, after the submessage's common MAC,
and decode_submessage rejects one without its receiver's MAC; crypto_key_factory.c gives each
reader a receiver-specific key only for the *_WITH_ORIGIN_AUTHENTICATION kinds).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

GOVERNANCE_SCHEMA = "http://www.omg.org/spec/DDS-SECURITY/20170901/omg_shared_ca_governance.xsd"

# ProtectionKind (rtps, discovery, liveliness, metadata) and BasicProtectionKind (data) values.
PROTECTION_KINDS = (
    "NONE",
    "SIGN",
    "ENCRYPT",
    "SIGN_WITH_ORIGIN_AUTHENTICATION",
    "ENCRYPT_WITH_ORIGIN_AUTHENTICATION",
)
BASIC_PROTECTION_KINDS = ("NONE", "SIGN", "ENCRYPT")


@dataclass(frozen=True)
class GovernanceProfile:
    name: str
    summary: str
    rtps: str
    discovery: str
    liveliness: str
    metadata: str
    data: str
    topic_discovery_protection: bool
    topic_liveliness_protection: bool
    allow_unauthenticated: bool = False
    join_access_control: bool = True
    read_access_control: bool = True
    write_access_control: bool = True
    source: str = ""

    def __post_init__(self) -> None:
        for kind in (self.rtps, self.discovery, self.liveliness, self.metadata):
            if kind not in PROTECTION_KINDS:
                raise ValueError(f"governance profile {self.name}: unknown protection kind {kind}")
        if self.data not in BASIC_PROTECTION_KINDS:
            raise ValueError(f"governance profile {self.name}: data protection {self.data} is not basic")


GOVERNANCE_PROFILES: dict[str, GovernanceProfile] = {
    p.name: p
    for p in (
        GovernanceProfile(
            "sros2",
            "SROS2 default: RTPS signed, discovery/liveliness and topic data+metadata encrypted",
            rtps="SIGN",
            discovery="ENCRYPT",
            liveliness="ENCRYPT",
            metadata="ENCRYPT",
            data="ENCRYPT",
            topic_discovery_protection=True,
            topic_liveliness_protection=True,
            source="ros2/sros2 sros2/policy/defaults/dds/governance.xml",
        ),
        GovernanceProfile(
            "rtps-sign",
            "every RTPS message signed (HMAC), nothing encrypted",
            rtps="SIGN",
            discovery="NONE",
            liveliness="NONE",
            metadata="NONE",
            data="NONE",
            topic_discovery_protection=False,
            topic_liveliness_protection=False,
            source="RTI perftest PerftestGovernance_RTPSSign.xml",
        ),
        GovernanceProfile(
            "rtps-encrypt",
            "every RTPS message encrypted (AES-GCM) as a whole",
            rtps="ENCRYPT",
            discovery="NONE",
            liveliness="NONE",
            metadata="NONE",
            data="NONE",
            topic_discovery_protection=False,
            topic_liveliness_protection=False,
            source="RTI perftest PerftestGovernance_RTPSEncrypt.xml",
        ),
        GovernanceProfile(
            "origin-auth-encrypt",
            "RTPS signed with per-receiver origin authentication, topic payload encrypted",
            rtps="SIGN_WITH_ORIGIN_AUTHENTICATION",
            discovery="NONE",
            liveliness="NONE",
            metadata="NONE",
            data="ENCRYPT",
            topic_discovery_protection=False,
            topic_liveliness_protection=False,
            source="RTI perftest PerftestGovernance_SignWithOrigAuthEncryptData.xml",
        ),
        GovernanceProfile(
            "submessage-encrypt",
            "each DATA/HEARTBEAT/ACKNACK submessage encrypted (metadata protection)",
            rtps="NONE",
            discovery="NONE",
            liveliness="NONE",
            metadata="ENCRYPT",
            data="NONE",
            topic_discovery_protection=False,
            topic_liveliness_protection=False,
            source="RTI perftest PerftestGovernance_SubmessageEncrypt.xml",
        ),
        GovernanceProfile(
            "sign-submessage-encrypt",
            "every RTPS message signed and each DATA/HEARTBEAT/ACKNACK submessage encrypted",
            rtps="SIGN",
            discovery="NONE",
            liveliness="NONE",
            metadata="ENCRYPT",
            data="NONE",
            topic_discovery_protection=False,
            topic_liveliness_protection=False,
            source="RTI perftest PerftestGovernance_SignEncryptSubmessage.xml (-secureSign -secureEncryptSM)",
        ),
        GovernanceProfile(
            "sign-submessage-origin-encrypt-data",
            "every RTPS message signed, each DATA/HEARTBEAT/ACKNACK submessage encrypted with a MAC per "
            "receiver (origin authentication), topic payload encrypted",
            rtps="SIGN",
            discovery="NONE",
            liveliness="NONE",
            metadata="ENCRYPT_WITH_ORIGIN_AUTHENTICATION",
            data="ENCRYPT",
            topic_discovery_protection=False,
            topic_liveliness_protection=False,
            # perftest -secureGovernanceFile resource/secure/signed_PerftestGovernance_<this>.xml
            source="RTI perftest PerftestGovernance_RTPSSignEncryptSubmessageWithOrigAuthEncryptData.xml",
        ),
        *(
            GovernanceProfile(
                name,
                f"security plugins loaded (participants authenticate), nothing protected, access control {state}",
                rtps="NONE",
                discovery="NONE",
                liveliness="NONE",
                metadata="NONE",
                data="NONE",
                topic_discovery_protection=False,
                topic_liveliness_protection=False,
                join_access_control=access_control,
                read_access_control=access_control,
                write_access_control=access_control,
                # perftest also allows unauthenticated participants; the kit does not, so that
                # authentication still decides who joins the link
                source="RTI perftest PerftestGovernance_.xml",
            )
            for name, state, access_control in (
                ("plugins-only", "off", False),
                ("plugins-only-ac", "on", True),
            )
        ),
    )
}
DEFAULT_GOVERNANCE = "sros2"


def _flag(value: bool) -> str:
    return "true" if value else "false"


def governance_xml(profile: GovernanceProfile, domain_id: int) -> str:
    """The governance document of ``profile`` for one domain."""
    root = ET.Element("dds")
    root.set("xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance")
    root.set("xsi:noNamespaceSchemaLocation", GOVERNANCE_SCHEMA)
    rule = ET.SubElement(ET.SubElement(root, "domain_access_rules"), "domain_rule")
    ET.SubElement(ET.SubElement(rule, "domains"), "id").text = str(domain_id)
    for tag, text in (
        ("allow_unauthenticated_participants", _flag(profile.allow_unauthenticated)),
        ("enable_join_access_control", _flag(profile.join_access_control)),
        ("discovery_protection_kind", profile.discovery),
        ("liveliness_protection_kind", profile.liveliness),
        ("rtps_protection_kind", profile.rtps),
    ):
        ET.SubElement(rule, tag).text = text
    topic_rule = ET.SubElement(ET.SubElement(rule, "topic_access_rules"), "topic_rule")
    for tag, text in (
        ("topic_expression", "*"),
        ("enable_discovery_protection", _flag(profile.topic_discovery_protection)),
        ("enable_liveliness_protection", _flag(profile.topic_liveliness_protection)),
        ("enable_read_access_control", _flag(profile.read_access_control)),
        ("enable_write_access_control", _flag(profile.write_access_control)),
        ("metadata_protection_kind", profile.metadata),
        ("data_protection_kind", profile.data),
    ):
        ET.SubElement(topic_rule, tag).text = text
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def governance_domains(xml_text: str) -> list[int]:
    """Domain ids a governance document covers (id elements; id_range min/max expanded if small)."""
    root = ET.fromstring(xml_text)
    ids: list[int] = []
    for domains in root.iter("domains"):
        ids += [int(e.text or "0") for e in domains.iter("id")]
        for rng in domains.iter("id_range"):
            lo = int(rng.findtext("min") or 0)
            hi = int(rng.findtext("max") or 232)
            ids += list(range(lo, hi + 1))
    return ids
