"""The one CycloneDDS configuration writer (0.10, as in Humble and Jazzy): the kit's processes
(``fieldtest.middleware.dds.transport``), the lab's ROS 2 nodes (``fieldtest.middleware.dds.lab``) and ddsperf
all describe their DDS here. No cyclonedds import: the lab's nodes have no binding."""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import quoteattr

CYCLONEDDS_NS = "https://cdds.io/config"
# Unicast discovery probes ports of participant indices 0..N on each peer; a TurtleBot 4 runs a
# few dozen ROS processes (one participant each), so leave ample room.
MAX_PARTICIPANT_INDEX = 100


def cyclonedds_config_xml(
    *,
    interface_addresses: Sequence[str] = (),
    interface_names: Sequence[str] = (),
    allow_multicast: str = "false",
    peers: Sequence[str] = (),
    max_participant_index: int = MAX_PARTICIPANT_INDEX,
    security_xml: str = "",
) -> str:
    """``<CycloneDDS>`` for any domain: the interfaces to bind (by address or name), multicast
    (false, spdp = discovery only, true), unicast discovery ``peers`` (with automatic participant
    indices), and a ``<Security>`` element placed inside ``<Domain>``."""
    interfaces = [f"<NetworkInterface address={quoteattr(a)}/>" for a in interface_addresses]
    interfaces += [f"<NetworkInterface name={quoteattr(n)}/>" for n in interface_names]
    general = f"<Interfaces>{''.join(interfaces)}</Interfaces>" if interfaces else ""
    general += f"<AllowMulticast>{allow_multicast}</AllowMulticast>"
    discovery = ""
    if peers:
        discovery = (
            "<Discovery><ParticipantIndex>auto</ParticipantIndex>"
            f"<MaxAutoParticipantIndex>{max_participant_index}</MaxAutoParticipantIndex>"
            f"<Peers>{''.join(f'<Peer address={quoteattr(p)}/>' for p in peers)}</Peers></Discovery>"
        )
    return (
        f'<CycloneDDS xmlns="{CYCLONEDDS_NS}"><Domain id="any">'
        f"<General>{general}</General>{discovery}{security_xml}</Domain></CycloneDDS>"
    )
