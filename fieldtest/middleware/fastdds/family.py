"""Fast DDS: the kit's processes and the robot on one DDS domain over Fast DDS (rmw_fastrtps in
the lab), as a stock TurtleBot 4 and its Create 3 run it.

Twin: a real Fast DDS participant per process (``transport``); discovery by multicast SPDP as the
robot ships, or through the discovery server on the robot (``dds_discovery: server``). Security:
DDS Security on the SROS2 enclaves, as for CycloneDDS (``security``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fieldtest.linkconfig import Role, TransportConfig
from fieldtest.middleware.dds.family import open_side
from fieldtest.middleware.dds.settings import Settings as DdsSettings
from fieldtest.middleware.declaration import Middleware
from fieldtest.middleware.fastdds import security

if TYPE_CHECKING:
    from fieldtest.middleware.launch import SideProcess
    from fieldtest.transport.base import Transport


class FastDds(Middleware):
    name = "fastdds"
    summary = "Fast DDS alone: the TurtleBot 4's own DDS crosses the network (rmw_fastrtps_cpp in the lab)"
    secure_default = "sros2"
    security_settings = security.SETTINGS
    lab_rmw = "fastrtps"
    transport_helper = "fieldtest.middleware.fastdds.stamp"  # fastddsstamp.cpp, against libfastrtps

    def open_transport(self, config: TransportConfig, role: Role) -> Transport:
        return open_side(self, config, role)

    def open_own_transport(self, config: TransportConfig, role: Role) -> Transport:
        from fieldtest.middleware.fastdds.transport import open_fastdds

        return open_fastdds(config, role, security_properties=security.security_properties(config, role))

    def twin_side_processes(
        self, config: TransportConfig, cmd_type: str, config_dir: Path, robot_traffic: str = "none"
    ) -> tuple[list[tuple[str, SideProcess]], dict[str, str]]:
        """The discovery server on the robot, where the trial asks for it."""
        if config.settings(DdsSettings).discovery != "server":
            return [], {}
        from fieldtest.middleware.fastdds import discovery

        return [(discovery.SERVER_NODE, discovery.server_process(config))], discovery.client_environment(
            config
        )


MIDDLEWARES = (FastDds(),)
