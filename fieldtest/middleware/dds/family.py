"""DDS: the kit's processes and the robot on one DDS domain (CycloneDDS; rmw_cyclonedds in the lab).
Fast DDS, the same family, has its own package (``fieldtest.middleware.fastdds``).

Security: DDS Security governance profiles (SROS2 enclaves). No infrastructure process.
"""

from __future__ import annotations

from fieldtest.linkconfig import Role, TransportConfig
from fieldtest.middleware.base import Middleware
from fieldtest.middleware.dds import security


class Dds(Middleware):
    name = "dds"
    summary = "CycloneDDS alone: the RMW crosses the network"
    secure_default = "sros2"
    security_settings = security.SETTINGS
    transport_library = "cyclonedds"

    def open_transport(self, config: TransportConfig, role: Role):
        from fieldtest.middleware.dds.transport import open_dds

        return open_dds(config, role, security_xml=security.security_xml(config, role))

    def lab_launch_problem(self, cfg) -> str:
        from fieldtest.middleware.dds.lab import robot_dds_off_the_network

        return robot_dds_off_the_network(cfg)


MIDDLEWARES = (Dds(),)
