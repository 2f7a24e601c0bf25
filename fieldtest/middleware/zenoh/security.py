"""Zenoh's security: the settings it takes (mutual TLS + access control) and its fragment, the
``transport.link.tls`` and ``access_control`` overrides of a session or router config
(``zenoh_security_overrides``); ``config_overrides`` hands a role its overrides after checking the
role's own TLS identity and the names its listeners' certificates carry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fieldtest.linkconfig import TransportConfig
from fieldtest.security.enforce import require_credentials
from fieldtest.security.glue import keystore_of, require_tls_name
from fieldtest.security.policy import LINK_FLOWS, wire_key
from fieldtest.security.securitysettings import (
    TLS_SETTINGS,
    present_tls_files,
    require_setting,
    tls_common_name,
)

SETTINGS = ("none", *TLS_SETTINGS)


def _zenoh_subject(role: str) -> dict[str, Any]:
    return {"id": role, "cert_common_names": [tls_common_name(role)]}


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
    files = present_tls_files(keystore, role)
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
    require_setting(setting, "zenoh-peer", SETTINGS)
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


def _listen_address(endpoint: str) -> str:
    host_port = endpoint.split("/", 1)[1]
    return host_port.rsplit(":", 1)[0]


def config_overrides(config: TransportConfig, role: str, session_config: dict[str, Any]) -> dict[str, Any]:
    """What ``role``'s session (or the router's) needs deep-merged into ``session_config``: mTLS,
    tls/ endpoints and the access control, after checking its credentials and its listen names."""
    require_setting(config.security, config.middleware, SETTINGS)
    if config.security == "none":
        return {}
    require_credentials(config, role)
    keystore = keystore_of(config)
    for endpoint in session_config.get("listen", {}).get("endpoints", []):
        require_tls_name(keystore, role, _listen_address(endpoint))
    return zenoh_security_overrides(
        keystore, role, config.security, namespace=config.namespace, session_config=session_config
    )
