"""MQTT's security: the settings it takes (TLS with client certificates, no anonymous, per-identity
ACL) and its fragments: the mosquitto.conf TLS listener lines and the ACL (``mosquitto_tls_lines``,
``mosquitto_acl``; ``fieldtest.middleware.mqtt.infra.mosquitto_conf`` writes the file around them)
and the Paho client's TLS arguments (``paho_tls_args``). ``configure_client`` and ``listener_lines``
hand them out after checking the process' own TLS identity."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware.mqtt.settings import MQTT_TLS_PORT
from fieldtest.security.enforce import require_credentials
from fieldtest.security.glue import keystore_of, require_tls_name
from fieldtest.security.policy import LINK_FLOWS, wire_key
from fieldtest.security.securitysettings import (
    TLS_SETTINGS,
    SecuritySettingError,
    present_tls_files,
    require_setting,
    tls_common_name,
)

SETTINGS = ("none", *TLS_SETTINGS)


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
    files = present_tls_files(keystore, "broker")
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
    files = present_tls_files(keystore, role)
    return {"ca_certs": str(files.ca), "certfile": str(files.cert), "keyfile": str(files.key)}


def configure_client(config: TransportConfig, role: str) -> Callable[[Any], None]:
    """What ``role``'s Paho client needs before it connects (its TLS files)."""
    require_setting(config.security, config.middleware, SETTINGS)
    require_credentials(config, role)
    args = paho_tls_args(keystore_of(config), role)

    def configure(client: Any) -> None:
        client.tls_set(**args)

    return configure


def listener_lines(
    config: TransportConfig, address: str, port: int, acl_path: Path | str | None = None
) -> list[str]:
    """The broker's TLS listener lines of mosquitto.conf for ``config.security`` (its ACL written to
    ``acl_path``, default ``<keystore>/tls/mosquitto.acl``)."""
    if require_setting(config.security, config.middleware, SETTINGS).kind == "none":
        raise SecuritySettingError("security 'none' has no TLS listener (the broker's plain one serves it)")
    require_credentials(config, "broker")
    keystore = keystore_of(config)
    require_tls_name(keystore, "broker", address)
    acl = Path(acl_path) if acl_path else keystore / "tls" / "mosquitto.acl"
    acl.write_text(mosquitto_acl(twin_link_flows(config.namespace)))
    return mosquitto_tls_lines(keystore, acl, port=port or MQTT_TLS_PORT, bind_address=address)
