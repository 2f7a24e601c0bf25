"""MQTT's security fragments: a client's TLS set-up and the broker's TLS listener (client
certificates, no anonymous, per-identity ACL), after checking the process' own TLS identity."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fieldtest.linkconfig import TransportConfig
from fieldtest.security import glue
from fieldtest.security.enforce import require_credentials


def configure_client(config: TransportConfig, role: str) -> Callable[[Any], None]:
    """What ``role``'s Paho client needs before it connects (its TLS files)."""
    require_credentials(config, role)
    return glue.mqtt_configure_client(config, role)


def listener_lines(
    config: TransportConfig, address: str, port: int, acl_path: Path | str | None = None
) -> list[str]:
    """The broker's TLS listener lines of mosquitto.conf (and its ACL at ``acl_path``)."""
    require_credentials(config, "broker")
    return glue.mosquitto_listener_lines(config, address, port, acl_path)
