"""The kit's CycloneDDS XML, apart from the binding: the lab's ROS 2 environment (rclpy on Fast DDS,
no CycloneDDS Python binding) writes it too, for the bridges it starts in a rehearsal."""

from __future__ import annotations

from .base import Role, TransportConfig

# Unicast discovery probes ports of participant indices 0..N on each peer; a TurtleBot 4 runs a
# few dozen ROS processes (one participant each), so leave ample room.
MAX_PARTICIPANT_INDEX = 100
CYCLONEDDS_NS = "https://cdds.io/config"


def _own_and_peer_addresses(config: TransportConfig, role: Role) -> tuple[str, list[str]]:
    own = config.host_address if role == "host" else config.robot_address
    # Both ends are peers: other kit processes on the same machine (e.g. a simulated mocap next
    # to the host) must find each other too.
    peers = list(dict.fromkeys([config.host_address, config.robot_address]))
    return own, peers


def cyclonedds_xml(config: TransportConfig, role: Role, *, security_xml: str = "") -> str:
    """The CycloneDDS configuration of one kit process.

    Binds to the role's own address and discovers by unicast to the host and robot addresses
    (loopback has no multicast flag; unicast also works on every emulated or real link).
    ``security_xml`` is a ``<Security>...</Security>`` element placed inside ``<Domain>``.
    """
    own, peers = _own_and_peer_addresses(config, role)
    peer_xml = "".join(f'<Peer address="{p}"/>' for p in peers)
    return (
        f'<CycloneDDS xmlns="{CYCLONEDDS_NS}"><Domain id="any">'
        f'<General><Interfaces><NetworkInterface address="{own}"/></Interfaces>'
        "<AllowMulticast>false</AllowMulticast></General>"
        "<Discovery><ParticipantIndex>auto</ParticipantIndex>"
        f"<MaxAutoParticipantIndex>{MAX_PARTICIPANT_INDEX}</MaxAutoParticipantIndex>"
        f"<Peers>{peer_xml}</Peers></Discovery>"
        f"{security_xml}"
        "</Domain></CycloneDDS>"
    )
