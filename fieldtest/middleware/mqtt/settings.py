"""MQTT's link settings: the ``mqtt:`` block of ``TransportConfig`` (fieldtest.linkconfig).

Plain data like the catalog: every layer may read it, so it imports no middleware library.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

MQTT_PORT = 1883  # MQTT, IANA
MQTT_TLS_PORT = 8883  # MQTT over TLS, IANA


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    port: int = Field(MQTT_PORT, ge=1, le=65535)
    # Nagle's algorithm on the kit's MQTT client sockets, as under the lab's mqtt_client, whose Paho C
    # sets no TCP_NODELAY (paho.mqtt.c src/Socket.c, before 1.3.16); false sets TCP_NODELAY, the
    # variant without Nagle's delay
    nagle: bool = True


class LabSettings(BaseModel):
    """What a lab launch takes for MQTT beyond the link settings (launch arguments ``mqtt_<field>:=``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # mqtt_client's own latency measurement (both sides must agree)
    inject_timestamp: bool = False


# The fields a lab launch takes as arguments ``mqtt_<field>:=`` (fieldtest.labrun.configuration.launchsettings)
LAUNCH_FIELDS = ("port",)


def lab_defaults(security: str) -> dict[str, Any]:
    """What a lab trial or launch that leaves them open runs with: the standard port for its
    security, 1883 plain and 8883 TLS, so one broker machine serves a campaign with security off
    and on on two listeners (``fieldtest lab broker-config``)."""
    return {"port": MQTT_TLS_PORT if security != "none" else MQTT_PORT}
