"""The one interface every middleware implements: publish and subscribe ROS 2 messages by topic.

Messages are rosbags message objects (see ``fieldtest.rosmsg``); topics are ROS names such as
``/cmd_vel``. Each middleware maps them to its own wire form (DDS ``rt/cmd_vel``, Zenoh key
``cmd_vel``, MQTT topic ``cmd_vel``) and carries ROS 2 CDR bytes, as the ROS 2 bridges do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

Role = Literal["host", "robot"]
MIDDLEWARES = ("dds", "zenoh-peer", "zenoh-router", "mqtt-local-broker", "mqtt-broker")


class TransportConfig(BaseModel):
    """Everything a process needs to join the trial's link."""

    model_config = ConfigDict(extra="forbid")

    middleware: Literal["dds", "zenoh-peer", "zenoh-router", "mqtt-local-broker", "mqtt-broker"] = "dds"
    qos: str = "default"  # a profile name from fieldtest.qos
    namespace: str = ""  # ROBOT_NAMESPACE, prepended to every topic
    domain_id: int = 0
    # Addresses of the peers (host/robot/router/broker). Loopback by default; the network
    # emulation sets these to namespace addresses.
    host_address: str = "127.0.0.1"
    robot_address: str = "127.0.0.1"
    router_address: str = "127.0.0.1"
    broker_address: str = "127.0.0.1"
    zenoh_port: int = 7447
    mqtt_port: int = 1883
    security: str = "none"  # a security setting name (fieldtest.security); "none" = plain
    keystore: str = ""  # path of the keystore when security is on


class Transport(Protocol):
    def publisher(self, topic: str, typename: str) -> Callable[[Any], None]:
        """A function that publishes one message object on ``topic``."""

    def subscribe(self, topic: str, typename: str, callback: Callable[[Any], None]) -> None:
        """Call ``callback(msg)`` for each message arriving on ``topic`` (from a library thread)."""

    def close(self) -> None:
        """Leave the link; safe to call twice."""


def full_topic(namespace: str, topic: str) -> str:
    """ROS topic name with the robot namespace prepended: ('/tb4', '/cmd_vel') -> '/tb4/cmd_vel'."""
    ns = namespace.strip("/")
    name = topic.strip("/")
    return f"/{ns}/{name}" if ns else f"/{name}"
