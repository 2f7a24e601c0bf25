"""Security settings a trial can select, and the per-middleware configuration each one implies.

``SECURITY_SETTINGS`` maps a setting name to what it protects. The functions below turn a setting,
a keystore (``fieldtest.security.keystore``) and a role into the fragments each transport needs:

- DDS (CycloneDDS): the ``<Security>`` element for CYCLONEDDS_URI (``dds_security_xml``) or the
  equivalent ``dds.sec.*`` participant properties (``dds_security_properties``), with the
  governance of the chosen protection level.
- Zenoh: ``transport.link.tls`` (mutual TLS) and ``access_control`` (``zenoh_security_overrides``).
- MQTT: the mosquitto.conf TLS listener lines and the ACL (``mosquitto_tls_lines``,
  ``mosquitto_acl``; ``fieldtest.middleware.mqtt.infra.mosquitto_conf`` writes the file around them) and
  the paho client's TLS arguments (``paho_tls_args``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from fieldtest.catalog import in_family
from fieldtest.errors import FieldtestError
from fieldtest.names import MQTT_TLS_PORT

from .governance import DEFAULT_GOVERNANCE, GOVERNANCE_PROFILES
from .keystore import (
    TLS_IDENTITIES,
    KeystoreError,
    enclave_dir,
    governance_variant_path,
    require_enclave_files,
    tls_files,
)
from .policy import LINK_FLOWS, kit_enclave, wire_key

# Which middlewares a setting kind applies to follows their family (fieldtest.catalog).
DDS_MIDDLEWARES = in_family("dds")
ZENOH_MIDDLEWARES = in_family("zenoh")
MQTT_MIDDLEWARES = in_family("mqtt")

# CycloneDDS security plugins: bare names as rmw_cyclonedds passes them (the loader finds
# Debian's libdds_security_*.so), with their entry points.
DDS_PLUGINS = {
    "auth": ("dds_security_auth", "init_authentication", "finalize_authentication"),
    "access": ("dds_security_ac", "init_access_control", "finalize_access_control"),
    "crypto": ("dds_security_crypto", "init_crypto", "finalize_crypto"),
}


class SecuritySettingError(FieldtestError, ValueError):
    """An unknown setting, or one that does not apply to the chosen middleware."""


@dataclass(frozen=True)
class SecuritySetting:
    name: str
    kind: str  # "none", "dds" (DDS Security governance) or "tls" (Zenoh mTLS+ACL / MQTT TLS+ACL)
    summary: str
    governance: str | None = None

    @property
    def middlewares(self) -> tuple[str, ...]:
        if self.governance is not None:  # DDS Security
            return DDS_MIDDLEWARES
        if self.kind == "tls":
            return ZENOH_MIDDLEWARES + MQTT_MIDDLEWARES
        return DDS_MIDDLEWARES + ZENOH_MIDDLEWARES + MQTT_MIDDLEWARES


SECURITY_SETTINGS: dict[str, SecuritySetting] = {
    "none": SecuritySetting("none", "none", "no authentication, no encryption, no access control"),
    **{
        name: SecuritySetting(name, "dds", f"DDS Security: {profile.summary}", governance=name)
        for name, profile in GOVERNANCE_PROFILES.items()
    },
    "mtls-acl": SecuritySetting(
        "mtls-acl",
        "tls",
        "Zenoh: mutual TLS + access control; MQTT: TLS with client certificates, no anonymous, per-identity ACL",
    ),
}


def get_setting(name: str, middleware: str | None = None) -> SecuritySetting:
    """The setting called ``name``; with ``middleware``, also check that it applies to it."""
    try:
        setting = SECURITY_SETTINGS[name]
    except KeyError:
        raise SecuritySettingError(
            f"unknown security setting {name!r} (known: {', '.join(SECURITY_SETTINGS)})"
        ) from None
    if middleware is not None and middleware not in setting.middlewares:
        raise SecuritySettingError(
            f"security setting {name!r} does not apply to middleware {middleware!r} "
            f"(it applies to: {', '.join(setting.middlewares)})"
        )
    return setting


def settings_for(middleware: str) -> list[str]:
    return [name for name, s in SECURITY_SETTINGS.items() if middleware in s.middlewares]


def _enclave_path(role: str) -> str:
    return role if role.startswith("/") else kit_enclave(role).path


# ---------------------------------------------------------------- DDS


@dataclass(frozen=True)
class DdsSecurityFiles:
    identity_ca: Path
    certificate: Path
    private_key: Path
    permissions_ca: Path
    governance: Path
    permissions: Path


def dds_security_files(
    keystore: Path | str, role: str, setting: str = DEFAULT_GOVERNANCE
) -> DdsSecurityFiles:
    """Absolute paths of the six files a secure participant of ``role`` (or enclave path) loads.

    Raises KeystoreError naming the first missing file, so a trial fails before the participant
    does (Cyclone only says that the security plugins failed to initialise).
    """
    governance = get_setting(setting, "dds").governance or DEFAULT_GOVERNANCE
    enclave = _enclave_path(role)
    folder = require_enclave_files(keystore, enclave).absolute()
    gov_path = governance_variant_path(keystore, governance).absolute()
    if governance == DEFAULT_GOVERNANCE and not gov_path.is_file():
        gov_path = folder / "governance.p7s"  # a keystore made by `ros2 security` alone
    if not gov_path.is_file():
        raise KeystoreError(f"{gov_path}: missing governance for setting {setting!r}")
    return DdsSecurityFiles(
        identity_ca=folder / "identity_ca.cert.pem",
        certificate=folder / "cert.pem",
        private_key=folder / "key.pem",
        permissions_ca=folder / "permissions_ca.cert.pem",
        governance=gov_path,
        permissions=folder / "permissions.p7s",
    )


def _uri(path: Path) -> str:
    return "file:" + str(path)


def dds_security_properties(
    keystore: Path | str, role: str, setting: str = DEFAULT_GOVERNANCE
) -> dict[str, str]:
    """The ``dds.sec.*`` participant properties (the keys rmw_cyclonedds sets)."""
    files = dds_security_files(keystore, role, setting)
    props = {
        "dds.sec.auth.identity_ca": _uri(files.identity_ca),
        "dds.sec.auth.identity_certificate": _uri(files.certificate),
        "dds.sec.auth.private_key": _uri(files.private_key),
        "dds.sec.access.permissions_ca": _uri(files.permissions_ca),
        "dds.sec.access.governance": _uri(files.governance),
        "dds.sec.access.permissions": _uri(files.permissions),
    }
    for short, (library, init, finalize) in DDS_PLUGINS.items():
        props[f"dds.sec.{short}.library.path"] = library
        props[f"dds.sec.{short}.library.init"] = init
        props[f"dds.sec.{short}.library.finalize"] = finalize
    return props


def _library(kind: str) -> str:
    path, init, finalize = DDS_PLUGINS[kind]
    return f"<Library path={quoteattr(path)} initFunction={quoteattr(init)} finalizeFunction={quoteattr(finalize)}/>"


def dds_security_xml(keystore: Path | str, role: str, setting: str = DEFAULT_GOVERNANCE) -> str:
    """The ``<Security>`` element to place inside CYCLONEDDS_URI's ``<Domain>``."""
    f = dds_security_files(keystore, role, setting)
    return (
        "<Security>"
        f"<Authentication>{_library('auth')}"
        f"<IdentityCA>{_uri(f.identity_ca)}</IdentityCA>"
        f"<IdentityCertificate>{_uri(f.certificate)}</IdentityCertificate>"
        f"<PrivateKey>{_uri(f.private_key)}</PrivateKey>"
        "</Authentication>"
        f"<AccessControl>{_library('access')}"
        f"<PermissionsCA>{_uri(f.permissions_ca)}</PermissionsCA>"
        f"<Governance>{_uri(f.governance)}</Governance>"
        f"<Permissions>{_uri(f.permissions)}</Permissions>"
        "</AccessControl>"
        f"<Cryptographic>{_library('crypto')}</Cryptographic>"
        "</Security>"
    )


def ros_security_env(keystore: Path | str, role: str) -> dict[str, str]:
    """Environment for a ROS 2 node of the lab (run it with ``--ros-args --enclave <path>``)."""
    enclave = _enclave_path(role)
    require_enclave_files(keystore, enclave)
    return {
        "ROS_SECURITY_KEYSTORE": str(Path(keystore).absolute()),
        "ROS_SECURITY_ENABLE": "true",
        "ROS_SECURITY_STRATEGY": "Enforce",
        "ROS_SECURITY_ENCLAVE_OVERRIDE": enclave,
    }


# ---------------------------------------------------------------- Zenoh


def _zenoh_subject(role: str) -> dict[str, Any]:
    return {"id": role, "cert_common_names": [tls_common_name(role)]}


def tls_common_name(role: str) -> str:
    return TLS_IDENTITIES[role]


def zenoh_access_control(namespace: str = "") -> dict[str, Any]:
    """ACL letting each role publish only what it sends and subscribe only what it receives.

    The same block works on every node (peer, client or router): rules are checked per remote
    subject, so a publisher P of key K needs ``put`` ingress and ``declare_subscriber`` egress, and
    a subscriber S needs ``declare_subscriber`` ingress and ``put`` egress. The router may relay
    everything on the trial's keys. Every node may also exchange zenoh-bridge-ros2dds' route
    announcements of the trial's keys (``bridge_liveliness_rules``): without them a bridge learns
    routes only from its own DDS discovery. Everything else is denied.
    """
    sends: dict[str, list[str]] = {"host": [], "robot": []}
    receives: dict[str, list[str]] = {"host": [], "robot": []}
    for topic, publisher, subscriber in LINK_FLOWS:
        sends[publisher].append(wire_key(namespace, topic))
        receives[subscriber].append(wire_key(namespace, topic))
    all_keys = sorted({k for keys in sends.values() for k in keys})
    rules: list[dict[str, Any]] = []
    policies: list[dict[str, Any]] = []
    for role in ("host", "robot"):
        role_rules = [
            _rule(f"{role}-puts", ["put"], ["ingress"], sends[role]),
            _rule(f"{role}-hears-interest", ["declare_subscriber"], ["egress"], sends[role]),
            _rule(f"{role}-subscribes", ["declare_subscriber"], ["ingress"], receives[role]),
            _rule(f"{role}-receives", ["put"], ["egress"], receives[role]),
        ]
        role_rules = [r for r in role_rules if r["key_exprs"]]
        rules += role_rules
        rule_ids = [r["id"] for r in role_rules] + list(BRIDGE_LIVELINESS_RULES)
        policies.append({"id": f"{role}-policy", "rules": rule_ids, "subjects": [role]})
    rules.append(_rule("router-relays", ["put", "declare_subscriber"], ["ingress", "egress"], all_keys))
    rules += bridge_liveliness_rules(all_keys)
    policies.append(
        {"id": "router-policy", "rules": ["router-relays", *BRIDGE_LIVELINESS_RULES], "subjects": ["router"]}
    )
    return {
        "enabled": True,
        "default_permission": "deny",
        "rules": rules,
        "subjects": [_zenoh_subject(r) for r in ("host", "robot", "router")],
        "policies": policies,
    }


BRIDGE_LIVELINESS_RULES = ("bridges-announce-routes", "bridges-watch-routes")
# zenoh-plugin-ros2dds src/liveliness_mgt.rs: a bridge declares the token "@/<zid>/@ros2_lv" and one
# per route, "@/<zid>/@ros2_lv/<MP|MS>/<key with '/' as '§'>/<type>/<qos>", and watches them all
# with a querying liveliness subscriber on "@/*/@ros2_lv/**".
BRIDGE_LIVELINESS_ROOT = "@/*/@ros2_lv"
BRIDGE_SLASH = "§"


def bridge_route_tokens(key: str) -> list[str]:
    """Key expressions of the bridges' publisher and subscriber route tokens of one Zenoh key."""
    escaped = key.replace("/", BRIDGE_SLASH)
    return [f"{BRIDGE_LIVELINESS_ROOT}/{kind}/{escaped}/**" for kind in ("MP", "MS")]


def bridge_liveliness_rules(keys: list[str]) -> list[dict[str, Any]]:
    """The bridges' tokens and those of their routes for ``keys`` (no other topic), both ways,
    and their watching of all bridge tokens (the watch reveals only what the tokens rule lets in)."""
    tokens = [BRIDGE_LIVELINESS_ROOT] + [t for k in keys for t in bridge_route_tokens(k)]
    return [
        _rule(BRIDGE_LIVELINESS_RULES[0], ["liveliness_token"], ["ingress", "egress"], tokens),
        _rule(
            BRIDGE_LIVELINESS_RULES[1],
            ["declare_liveliness_subscriber", "liveliness_query"],
            ["ingress", "egress"],
            [f"{BRIDGE_LIVELINESS_ROOT}/**"],
        ),
    ]


def _rule(rule_id: str, messages: list[str], flows: list[str], keys: list[str]) -> dict[str, Any]:
    return {
        "id": rule_id,
        "messages": messages,
        "flows": flows,
        "permission": "allow",
        "key_exprs": sorted(keys),
    }


def tls_endpoint(endpoint: str) -> str:
    """``tcp/<addr>:<port>`` -> ``tls/<addr>:<port>`` (other locators unchanged)."""
    return "tls/" + endpoint[4:] if endpoint.startswith("tcp/") else endpoint


def zenoh_tls_config(keystore: Path | str, role: str) -> dict[str, Any]:
    """``transport.link.tls`` for ``role`` (host, robot or router): mutual TLS on the kit's CA."""
    files = tls_files(keystore, role)
    for path in (files.ca, files.cert, files.key):
        if not path.is_file():
            raise KeystoreError(f"{path}: missing (run `fieldtest keys tls`)")
    cert, key = str(files.cert.absolute()), str(files.key.absolute())
    return {
        "root_ca_certificate": str(files.ca.absolute()),
        "listen_certificate": cert,
        "listen_private_key": key,
        "connect_certificate": cert,
        "connect_private_key": key,
        "enable_mtls": True,
        "verify_name_on_connect": True,
    }


def zenoh_security_overrides(
    keystore: Path | str,
    role: str,
    setting: str = "mtls-acl",
    *,
    namespace: str = "",
    session_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Config overrides for a Zenoh session of ``role``: TLS-only links, mTLS and the ACL.

    With ``session_config`` (the plain session config), its tcp/ endpoints come back as tls/.
    """
    get_setting(setting, "zenoh-peer")
    if setting == "none":
        return {}
    overrides: dict[str, Any] = {
        "transport": {"link": {"protocols": ["tls"], "tls": zenoh_tls_config(keystore, role)}},
        "access_control": zenoh_access_control(namespace),
    }
    for section in ("listen", "connect"):
        endpoints = (session_config or {}).get(section, {}).get("endpoints")
        if endpoints:
            overrides[section] = {"endpoints": [tls_endpoint(e) for e in endpoints]}
    return overrides


# ---------------------------------------------------------------- MQTT


# mqtt_client (and the kit's MQTT transport, which speaks its protocol) announces each topic's type,
# retained, on this topic + the data topic; a receiver without a fixed type waits for it
# (mqtt_client src/MqttClient.cpp). Denied, the publish is dropped without an error.
MQTT_TYPE_ANNOUNCEMENT_PREFIX = "mqtt_client/ros_msg_type/"


def twin_link_flows(namespace: str = "") -> list[tuple[str, str]]:
    """(MQTT topic, sending role) of every topic the kit's host and robot exchange."""
    return [(wire_key(namespace, topic), publisher) for topic, publisher, _ in LINK_FLOWS]


def mosquitto_acl(flows: Iterable[tuple[str, str]], comment: str = "fieldtest") -> str:
    """Mosquitto ACL for (MQTT topic, sending role) flows between host and robot: each identity
    (certificate CN as user name) writes what it sends and its type announcement, reads what it
    receives and the sender's announcement; everything else is denied. The twin and the lab both
    write theirs here."""
    flows = list(flows)
    lines = [f"# {comment}: one block per certificate CN (use_identity_as_username); all else denied", ""]
    for role in ("host", "robot"):
        lines.append(f"user {tls_common_name(role)}")
        for topic, sender in flows:
            access = "write" if sender == role else "read"
            lines.append(f"topic {access} {topic}")
            lines.append(f"topic {access} {MQTT_TYPE_ANNOUNCEMENT_PREFIX}{topic}")
        lines.append("")
    return "\n".join(lines)


def mosquitto_tls_lines(
    keystore: Path | str, acl_path: Path | str, *, port: int = MQTT_TLS_PORT, bind_address: str = "127.0.0.1"
) -> list[str]:
    """mosquitto.conf (2.x) lines for one TLS listener: client certificates required, CN = user name
    (the twin's broker and the lab's)."""
    files = tls_files(keystore, "broker")
    for path in (files.ca, files.cert, files.key):
        if not path.is_file():
            raise KeystoreError(f"{path}: missing (run `fieldtest keys tls`)")
    return [
        "allow_anonymous false",
        f"acl_file {Path(acl_path).absolute()}",
        f"listener {port} {bind_address}",
        f"cafile {files.ca.absolute()}",
        f"certfile {files.cert.absolute()}",
        f"keyfile {files.key.absolute()}",
        "require_certificate true",
        "use_identity_as_username true",
        "tls_version tlsv1.2",
    ]


def paho_tls_args(keystore: Path | str, role: str) -> dict[str, str]:
    """Keyword arguments for ``paho.mqtt.client.Client.tls_set`` for ``role`` (host or robot)."""
    files = tls_files(keystore, role)
    for path in (files.ca, files.cert, files.key):
        if not path.is_file():
            raise KeystoreError(f"{path}: missing (run `fieldtest keys tls`)")
    return {"ca_certs": str(files.ca), "certfile": str(files.cert), "keyfile": str(files.key)}


__all__ = [
    "SECURITY_SETTINGS",
    "DdsSecurityFiles",
    "SecuritySetting",
    "SecuritySettingError",
    "dds_security_files",
    "dds_security_properties",
    "dds_security_xml",
    "enclave_dir",
    "get_setting",
    "mosquitto_acl",
    "mosquitto_tls_lines",
    "paho_tls_args",
    "ros_security_env",
    "settings_for",
    "twin_link_flows",
    "zenoh_access_control",
    "zenoh_security_overrides",
    "zenoh_tls_config",
]
