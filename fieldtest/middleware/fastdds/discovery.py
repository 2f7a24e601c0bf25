"""The discovery-server setting (``dds_discovery: server``): the TurtleBot 4's Fast DDS
discovery-server mode. Its server, ``fast-discovery-server`` from fastdds-tools (what
``fastdds discovery`` runs), listens on the robot as turtlebot4_setup places it, as server 0 on
Fast DDS's port 11811; every participant is its client (``ROS_DISCOVERY_SERVER``), and announces
itself to the server alone instead of by multicast."""

from __future__ import annotations

import shutil

from fieldtest.errors import FieldtestError
from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware.launch import SideProcess

SERVER_PORT = 11811  # Fast DDS's default discovery-server port
SERVER_ID = 0  # its GUID prefix is the one ROS_DISCOVERY_SERVER's first entry names
SERVER_PROGRAM = "fast-discovery-server"
SERVER_PROCESS = "discovery-server"
SERVER_NODE = "robot"  # the emulated node it runs on: the robot, as the TurtleBot 4 runs it


class DiscoveryServerMissing(FieldtestError, RuntimeError):
    """fastdds-tools is not installed."""


def server_locator(config: TransportConfig) -> str:
    """address:port of the trial's discovery server (the robot's address)."""
    return f"{config.robot_address}:{SERVER_PORT}"


def server_process(config: TransportConfig) -> SideProcess:
    """The discovery server as the twin starts it (not started)."""
    program = shutil.which(SERVER_PROGRAM)
    if program is None:
        raise DiscoveryServerMissing(
            f"dds_discovery server: {SERVER_PROGRAM} is missing (apt install fastdds-tools, as tools/install.sh does)"
        )
    argv = [program, "-i", str(SERVER_ID), "-l", config.robot_address, "-p", str(SERVER_PORT)]
    return SideProcess(SERVER_PROCESS, argv, {}, {})


def client_environment(config: TransportConfig) -> dict[str, str]:
    """What a ROS 2 node on rmw_fastrtps would be given to be the server's client."""
    return {"ROS_DISCOVERY_SERVER": server_locator(config)}
