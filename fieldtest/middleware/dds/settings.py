"""DDS's link settings: the ``dds:`` block of ``TransportConfig`` (fieldtest.linkconfig).

Plain data like the catalog: every layer may read it, so it imports no middleware library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from fieldtest.linkconfig import Role, TransportConfig

# How CycloneDDS participants find each other (AllowMulticast): "spdp" multicasts only the SPDP
# participant announcements, as the lab's configuration does (fieldtest.middleware.dds.lab); "all"
# multicasts discovery and data; "none" announces by unicast to the host and robot addresses;
# "cyclonedds-default" leaves it to CycloneDDS's own default, which depends on the interface's type
# (see cyclonedds_default_discovery); "server" (Fast DDS; CycloneDDS refuses it): every participant a
# client of the discovery server on the robot
DdsDiscovery = Literal["spdp", "all", "none", "cyclonedds-default", "server"]
DDS_ALLOW_MULTICAST = {"spdp": "spdp", "all": "true", "none": "false"}
# The DDS library the robot (and its base) runs: "same" as the host (the trial's middleware), or
# CycloneDDS or Fast DDS whatever the host runs, as a lab meets a stock TurtleBot 4 (Fast DDS) beside
# a laptop on CycloneDDS. Measured (tests/test_mixed_vendors.py): plain topics cross the two vendors
# both ways; a parameter service does not (fieldtest.middleware.dds.parameters).
DdsVendor = Literal["same", "cyclonedds", "fastdds"]
MIDDLEWARE_OF_VENDOR = {"cyclonedds": "dds", "fastdds": "fastdds"}
DDS_VENDORS = {middleware: vendor for vendor, middleware in MIDDLEWARE_OF_VENDOR.items()}
MIXED_VENDORS_WARNING = (
    "host on {host}, robot on {robot}: the trial's topics cross the two vendors; a ROS service does "
    "not (a Create 3's parameter read gets no answer across vendors, measured: docs/networks.md, "
    "Mixed DDS vendors)"
)


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # the discovery mode; loopback has no multicast, so a process bound to a loopback address
    # discovers by unicast whatever is asked (discovery_used)
    discovery: DdsDiscovery = "spdp"
    robot_vendor: DdsVendor = "same"


class LabSettings(BaseModel):
    """What a lab launch takes for DDS beyond the link settings (launch arguments ``dds_<field>:=``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    peers: list[str] = Field(default_factory=list)  # static unicast discovery peers


# a launch of another family's middleware refuses these (the reason, for the message)
LAB_OWN_FAMILY_ONLY = {"peers": "bridged cases keep DDS on each machine"}


def side_middleware(config: TransportConfig, role: Role) -> str:
    """The DDS middleware ``role`` runs: the trial's, or for the robot the ``robot_vendor`` asked."""
    vendor = config.settings(Settings).robot_vendor
    return MIDDLEWARE_OF_VENDOR[vendor] if role == "robot" and vendor != "same" else config.middleware


def mixed_vendor_problem(config: TransportConfig) -> str:
    """Why a trial cannot run its sides on two DDS vendors as asked (one line), or ''."""
    robot = side_middleware(config, "robot")
    if robot == config.middleware or config.security == "none":
        return ""
    return (
        f"dds robot_vendor {config.settings(Settings).robot_vendor}: the host runs {config.middleware}, "
        "and security across two DDS vendors is not measured by the kit (security: none)"
    )


def discovery_used(config: TransportConfig, role: Role) -> DdsDiscovery:
    """The discovery ``role``'s DDS really runs: the one asked (CycloneDDS's own default resolved
    for the role's interface), or "none" (unicast peers) where the role sits on loopback, which
    carries no multicast (a discovery server is reached by unicast, so it stays)."""
    own = config.host_address if role == "host" else config.robot_address
    asked = config.settings(Settings).discovery
    if _is_loopback(own) and asked != "server":
        return "none"
    if asked == "cyclonedds-default":
        return cyclonedds_default_discovery(role in config.wifi_roles)
    return asked


def cyclonedds_default_discovery(wifi_interface: bool) -> DdsDiscovery:
    """CycloneDDS 0.10's AllowMulticast default: on an interface it takes for Wi-Fi, multicast for
    SPDP only ("presumed flaky multicast"), on any other for everything (eclipse-cyclonedds/cyclonedds
    src/core/ddsi/src/q_init.c, 0.10.5; master: ddsi_nwinterfaces.c, set_and_check_allow_multicast).
    It takes an interface for Wi-Fi when /proc/net/wireless lists it (src/ddsrt/src/ifaddrs/posix/
    ifaddrs.c, guess_iftype). The twin's veth and TAP devices are not listed, so CycloneDDS left to
    itself would treat the robot's emulated Wi-Fi as wired: the twin decides by the link instead."""
    return "spdp" if wifi_interface else "all"


def _is_loopback(address: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a host name
        return address == "localhost"
