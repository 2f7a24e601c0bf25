"""MQTT's link settings: the ``mqtt:`` block of ``TransportConfig`` (fieldtest.linkconfig).

Plain data like the catalog: every layer may read it, so it imports no middleware library.
"""

from __future__ import annotations

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
