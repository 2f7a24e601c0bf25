"""MQTT on the wire: how ``fieldtest.netem.wire`` sorts an MQTT flow's segments into kinds.

Plain like the family's settings (no middleware library), so any capture can be accounted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fieldtest.middleware.mqtt.settings import Settings

if TYPE_CHECKING:
    from fieldtest.linkconfig import TransportConfig

# kind -> its group in the accounting (fieldtest.netem.wire.GROUPS): PUBLISH; every other packet
# (CONNECT, PUBACK, PINGREQ, ...)
KINDS = {"mqtt_publish": "user_data", "mqtt_control": "protocol"}

PUBLISH = 3  # MQTT 3.1.1 / 5 fixed header packet type (the high nibble of the first byte)


def tcp_ports(config: TransportConfig) -> tuple[int, ...]:
    """The TCP port a trial's MQTT clients reach the broker on."""
    return (config.settings(Settings).port,)


def classify(payload: bytes) -> str:
    """An MQTT segment's kind, by its first packet's type (MQTT 3.1.1 section 2.2.1)."""
    return "mqtt_publish" if payload[0] >> 4 == PUBLISH else "mqtt_control"
