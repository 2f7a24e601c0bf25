"""``TransportConfig``: everything a process needs to join the trial's link (a schema, no behaviour).

It lives below the transports so that the trial record (``fieldtest.record``) and security
(``fieldtest.security``) can hold and read it without importing any middleware library.
"""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict

from fieldtest.catalog import TWIN_MIDDLEWARES
from fieldtest.names import MQTT_PORT, ZENOH_PORT

Role = Literal["host", "robot"]
# How DDS participants find each other (CycloneDDS: AllowMulticast): "spdp" multicasts only the SPDP
# participant announcements, as the lab's configuration does (fieldtest.middleware.dds.lab); "all"
# multicasts discovery and data; "none" announces by unicast to the host and robot addresses;
# "server" (Fast DDS; CycloneDDS refuses it): every participant a client of the discovery server on the robot
DdsDiscovery = Literal["spdp", "all", "none", "server"]
DDS_ALLOW_MULTICAST = {"spdp": "spdp", "all": "true", "none": "false"}
TwinMiddleware = Literal[TWIN_MIDDLEWARES]  # type: ignore[valid-type]  # the names the twin runs


class TransportConfig(BaseModel):
    """Everything a process needs to join the trial's link."""

    model_config = ConfigDict(extra="forbid")

    middleware: TwinMiddleware = "dds"
    qos: str = "default"  # a profile name from fieldtest.qos
    namespace: str = ""  # ROBOT_NAMESPACE, prepended to every topic
    domain_id: int = 0
    # Addresses of the peers (host/robot/router/broker). Loopback by default; the network
    # emulation sets these to namespace addresses.
    host_address: str = "127.0.0.1"
    robot_address: str = "127.0.0.1"
    router_address: str = "127.0.0.1"
    broker_address: str = "127.0.0.1"
    zenoh_port: int = ZENOH_PORT
    # Zenoh cases: "direct" puts the kit's processes on Zenoh themselves (what the bridge would
    # carry); "bridge" runs the lab's path, each side's DDS -> zenoh-bridge-ros2dds -> Zenoh ->
    # bridge -> DDS (fieldtest.middleware.zenoh.bridge). Twin trials use "bridge" unless set.
    zenoh_path: Literal["direct", "bridge"] = "direct"
    # The bridged path: the bridges route cmd_vel at Zenoh priority 1 (real time) and express
    # (zenoh-plugin-ros2dds pub_priorities "<topic>=1:express"); other topics keep the default
    # priority 5 (data). Off by default, as in the seed study.
    zenoh_express: bool = False
    mqtt_port: int = MQTT_PORT
    # MQTT cases: Nagle's algorithm on the kit's MQTT client sockets, as under the lab's mqtt_client,
    # whose Paho C sets no TCP_NODELAY (paho.mqtt.c src/Socket.c, before 1.3.16); false sets
    # TCP_NODELAY, the variant without Nagle's delay
    mqtt_nagle: bool = True
    # DDS cases: the discovery mode (DdsDiscovery); loopback has no multicast, so a process bound to
    # a loopback address discovers by unicast whatever is asked (see dds_discovery_used)
    dds_discovery: DdsDiscovery = "spdp"
    security: str = "none"  # a security setting name (fieldtest.security); "none" = plain
    keystore: str = ""  # path of the keystore when security is on

    def dds_discovery_used(self, role: Role) -> DdsDiscovery:
        """The discovery ``role``'s DDS really runs: the one asked, or "none" (unicast peers) where
        the role sits on loopback, which carries no multicast (a discovery server is reached by unicast)."""
        own = self.host_address if role == "host" else self.robot_address
        return "none" if _is_loopback(own) and self.dds_discovery != "server" else self.dds_discovery


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a host name
        return address == "localhost"
