"""The real Zenoh bridge: zenohd loading the zenoh-plugin-ros2dds dynamic plugin (both 1.10.2).

That pair is upstream's supported equivalent of the zenoh-bridge-ros2dds binary, which is not on
crates.io. ``tools/install_zenoh_bridge.sh`` builds both (pinned, matching, ``--locked``) into
``$FIELDTEST_CACHE/zenoh-1.10.2`` (default ``~/.cache/fieldtest``), outside the clone, so later
installs and CI on the same machine reuse the build.

In the lab, and in the twin's bridged Zenoh cases, the path of a command is
host DDS -> bridge -> Zenoh (peer, or through the router) -> bridge -> robot DDS. Each side's DDS
stays on its own machine: here on 127.0.0.1 with unicast discovery, and in a separate DDS domain
per side (``side_domain``) so that on one machine the two sides cannot meet except through the
bridges. The bridge's CycloneDDS is given the same unicast peer (``bridge_env``): the plugin's own
discovery settings (ROS_LOCALHOST_ONLY / ROS_AUTOMATIC_DISCOVERY_RANGE) use multicast or bind the
machine's other interface, and never meet DDS endpoints pinned to 127.0.0.1 with multicast off.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fieldtest.errors import FieldtestError
from fieldtest.procs import DDS_DOMAIN_MAX
from fieldtest.transport.base import Role, TransportConfig

ZENOH_BRIDGE_VERSION = "1.10.2"
INSTALL_COMMAND = "bash tools/install_zenoh_bridge.sh"
FIRST_BUILD_COST = "once per machine: 25-60 min on 2 cores depending on load"
PLUGIN_NAME = "ros2dds"
LOOPBACK = "127.0.0.1"
# The robot side's DDS domain is the host side's plus this (mod 233), so the sides stay apart.
ROBOT_DOMAIN_OFFSET = 100
DDS_DOMAINS = DDS_DOMAIN_MAX + 1  # ROS 2 domain ids 0..232


class BridgeMissingError(FieldtestError, RuntimeError):
    """zenohd or the ros2dds plugin has not been built on this machine."""


@dataclass(frozen=True)
class BridgeBinaries:
    zenohd: Path
    plugin: Path


def bridge_prefix() -> Path:
    """Where the install script puts the build (``bin/zenohd``, ``lib/libzenoh_plugin_ros2dds.so``)."""
    cache = os.environ.get("FIELDTEST_CACHE") or str(Path.home() / ".cache" / "fieldtest")
    return Path(cache) / f"zenoh-{ZENOH_BRIDGE_VERSION}"


def find_bridge(prefix: Path | None = None) -> BridgeBinaries:
    """The built zenohd and plugin; BridgeMissingError saying how to build them otherwise."""
    prefix = prefix or bridge_prefix()
    binaries = BridgeBinaries(prefix / "bin" / "zenohd", prefix / "lib" / "libzenoh_plugin_ros2dds.so")
    missing = [str(p) for p in (binaries.zenohd, binaries.plugin) if not p.is_file()]
    if missing:
        raise BridgeMissingError(
            f"the Zenoh bridge (zenohd + ros2dds plugin {ZENOH_BRIDGE_VERSION}) is not built: "
            f"{', '.join(missing)} missing; run `{INSTALL_COMMAND}` ({FIRST_BUILD_COST})"
        )
    return binaries


def bridge_argv(binaries: BridgeBinaries, config_path: str | Path, mode: str) -> list[str]:
    """zenohd as zenoh-bridge-ros2dds ``<mode> -c <file>``. As the binary does (zenoh-bridge-ros2dds
    src/main.rs): the mode from the command line (zenohd would run a config without ``mode`` as a
    router), timestamping and the admin space on, and the plugin required, so that a plugin that
    refuses its config stops the process instead of leaving a Zenoh node that bridges nothing."""
    overrides = {
        "mode": f'"{mode}"',
        "timestamping/enabled": "true",
        "adminspace/enabled": "true",
        f"plugins/{PLUGIN_NAME}/__required__": "true",
    }
    argv = [str(binaries.zenohd), "-c", str(config_path), "-P", f"{PLUGIN_NAME}:{binaries.plugin}"]
    for key, value in overrides.items():
        argv += ["--cfg", f"{key}:{value}"]
    return argv


def router_argv(binaries: BridgeBinaries, config_path: str | Path) -> list[str]:
    return [str(binaries.zenohd), "-c", str(config_path)]


def unicast_dds_uri(address: str = LOOPBACK, *, pin_interface: bool = True) -> str:
    """CYCLONEDDS_URI meeting the kit's DDS endpoints pinned to ``address`` (unicast, no multicast).
    ``pin_interface=False`` leaves the interface out, for a plugin that pins 127.0.0.1 itself: a
    second identical NetworkInterface makes its ros_discovery_info reader fail ("Precondition Not Met")."""
    # the kit's own writer (fieldtest.middleware.dds.transport uses it too), without the binding: planrun runs
    # the bridge from the ROS 2 environment, which has none
    from fieldtest.middleware.dds.cyclonedds_config import cyclonedds_config_xml

    return cyclonedds_config_xml(interface_addresses=[address] if pin_interface else [], peers=[address])


def bridge_env(
    ros_distro: str, dds_address: str | None = LOOPBACK, *, plugin_pins_loopback: bool = False
) -> dict[str, str]:
    """Environment of a bridge: ROS_DISTRO (the plugin picks the GID size and its discovery
    settings by it and assumes iron when unset), and with ``dds_address`` a CycloneDDS unicast peer
    for kit DDS endpoints on that address (None: real ROS nodes, the plugin's own discovery).
    ``plugin_pins_loopback``: the plugin binds 127.0.0.1 itself (``ros_localhost_only`` before Iron)."""
    env = {"ROS_DISTRO": ros_distro}
    if dds_address:
        env["CYCLONEDDS_URI"] = unicast_dds_uri(dds_address, pin_interface=not plugin_pins_loopback)
    return env


def side_domain(config: TransportConfig, role: Role) -> int:
    """The DDS domain of one side of a bridged trial."""
    if role == "host":
        return config.domain_id
    return (config.domain_id + ROBOT_DOMAIN_OFFSET) % DDS_DOMAINS


def side_dds_config(config: TransportConfig, role: Role) -> TransportConfig:
    """The DDS a side's processes use to reach their bridge: plain DDS on 127.0.0.1, own domain.
    (Security is on the Zenoh link, between the bridges, as in the lab.)"""
    return config.model_copy(
        update={
            "middleware": "dds",
            "domain_id": side_domain(config, role),
            "host_address": LOOPBACK,
            "robot_address": LOOPBACK,
            "security": "none",
            "keystore": "",
        }
    )
