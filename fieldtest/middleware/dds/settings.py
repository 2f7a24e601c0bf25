"""DDS's link settings: the ``dds:`` block of ``TransportConfig`` (fieldtest.linkconfig).

Plain data like the catalog: every layer may read it, so it imports no middleware library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from fieldtest.linkconfig import Role, TransportConfig

# How CycloneDDS participants find each other (AllowMulticast): "spdp" multicasts only the SPDP
# participant announcements, as the lab's configuration does (fieldtest.middleware.dds.lab); "all"
# multicasts discovery and data; "none" announces by unicast to the host and robot addresses
DdsDiscovery = Literal["spdp", "all", "none"]
DDS_ALLOW_MULTICAST = {"spdp": "spdp", "all": "true", "none": "false"}


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # the discovery mode; loopback has no multicast, so a process bound to a loopback address
    # discovers by unicast whatever is asked (discovery_used)
    discovery: DdsDiscovery = "spdp"


def discovery_used(config: TransportConfig, role: Role) -> DdsDiscovery:
    """The discovery ``role``'s DDS really runs: the one asked, or "none" (unicast peers) where the
    role sits on loopback, which carries no multicast."""
    own = config.host_address if role == "host" else config.robot_address
    return "none" if _is_loopback(own) else config.settings(Settings).discovery


def _is_loopback(address: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a host name
        return address == "localhost"
