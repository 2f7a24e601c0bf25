"""An overlay network tunnelled over UDP between the nodes, as the seed's 4G set-up had it.

Zhang et al. joined the two cellular dongles (and the MQTT broker's own 4G router) with a ZeroTier
overlay (Zhang et al., section 3.1): every machine's traffic to the others leaves as UDP datagrams over
its cellular leg, and multicast is replicated to each member by the sender, since the cellular
network carries none. The twin builds the same with the kernel's VXLAN (RFC 7348): one ``ovl0``
device per node, encapsulating Ethernet frames in UDP over the node's leg (``net0``), with static
forwarding entries for every other member and head-end replication for broadcast and multicast.

What differs from ZeroTier, kept on purpose: VXLAN adds 50 bytes per frame (outer Ethernet 14, IP
20, UDP 8, VXLAN 8) and has no fragmentation of its own, so the overlay's MTU is the leg's minus 50;
ZeroTier's header is about the same size but its virtual interface has a 2800-byte MTU that it
fragments over UDP itself (zerotierone node/Constants.hpp ZT_DEFAULT_MTU). Neither encrypts here:
ZeroTier's encryption adds no bytes beyond its header's MAC.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

OVERLAY_IFACE = "ovl0"
VXLAN_ID = 7  # one overlay per trial; the namespaces keep trials apart
VXLAN_PORT = 4789  # IANA's VXLAN port (RFC 7348 section 5)
OVERHEAD_BYTES = 50  # outer Ethernet + IPv4 + UDP + VXLAN headers (RFC 7348 section 5)
UNDERLAY_MTU = 1500
ALL_ZEROS_MAC = "00:00:00:00:00:00"  # the VXLAN FDB entry for broadcast, multicast and unknown


@dataclass(frozen=True)
class Member:
    """One node on the overlay: its namespace, its address on the leg and on the overlay."""

    namespace: str
    underlay: str
    address: str


def overlay_addresses(nodes: list[str], subnet: str) -> dict[str, str]:
    """The overlay address of each node, in order, from ``subnet``."""
    hosts = ipaddress.ip_network(subnet).hosts()
    return {node: str(next(hosts)) for node in nodes}


def build_overlay(
    members: Mapping[str, Member],
    subnet: str,
    ip: Callable[..., subprocess.CompletedProcess],
    bridge: Callable[..., subprocess.CompletedProcess],
    underlay_iface: str,
    multicast_net: str | None,
) -> None:
    """Create every member's ``ovl0`` and join them: ``ip``/``bridge`` run the iproute2 tools.

    ``multicast_net`` None: the overlay carries no multicast (a ZeroTier network with multicast
    off), so no member gets a multicast route and nothing is replicated."""
    prefix = ipaddress.ip_network(subnet).prefixlen
    for member in members.values():
        ns = member.namespace
        ip("-n", ns, "link", "add", OVERLAY_IFACE, "type", "vxlan", "id", str(VXLAN_ID),
           "dstport", str(VXLAN_PORT), "local", member.underlay, "dev", underlay_iface,
           "nolearning")  # fmt: skip
        ip("-n", ns, "link", "set", OVERLAY_IFACE, "mtu", str(UNDERLAY_MTU - OVERHEAD_BYTES))
        # no IPv6 link-local chatter of the emulator's own in the tunnel (as on the legs)
        ip("netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{OVERLAY_IFACE}.disable_ipv6=1")
        ip("-n", ns, "addr", "add", f"{member.address}/{prefix}", "dev", OVERLAY_IFACE)
        ip("-n", ns, "link", "set", OVERLAY_IFACE, "up")
        if multicast_net is not None:  # the trial's multicast goes into the tunnel, not onto the leg
            ip("-n", ns, "route", "replace", multicast_net, "dev", OVERLAY_IFACE)
    macs = {
        node: json.loads(ip("-n", m.namespace, "-j", "link", "show", OVERLAY_IFACE).stdout)[0]["address"]
        for node, m in members.items()
    }
    for node, member in members.items():
        for other, peer in members.items():
            if other == node:
                continue
            if multicast_net is not None:  # head-end replication: a copy of each multicast per member
                bridge("-n", member.namespace, "fdb", "append", ALL_ZEROS_MAC, "dev", OVERLAY_IFACE,
                       "dst", peer.underlay)  # fmt: skip
            bridge("-n", member.namespace, "fdb", "replace", macs[other], "dev", OVERLAY_IFACE,
                   "dst", peer.underlay)  # fmt: skip
            ip("-n", member.namespace, "neigh", "replace", peer.address, "lladdr", macs[other],
               "dev", OVERLAY_IFACE, "nud", "permanent")  # fmt: skip


def describe_overlay(members: Mapping[str, Member], multicast: bool) -> dict:
    """What the trial record stores about the overlay."""
    return {
        "kind": "vxlan over udp (ZeroTier-like)",
        "udp_port": VXLAN_PORT,
        "overhead_bytes_per_frame": OVERHEAD_BYTES,
        "mtu": UNDERLAY_MTU - OVERHEAD_BYTES,
        "multicast": "replicated by the sender to every member" if multicast else "none",
        "members": {node: {"underlay": m.underlay, "address": m.address} for node, m in members.items()},
    }
