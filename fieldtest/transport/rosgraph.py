"""How a DDS participant shows up in the ROS 2 graph: ParticipantEntitiesInfo on ``ros_discovery_info``.

rmw_cyclonedds publishes, per participant, which ROS nodes it holds and the GIDs of their readers
and writers (rmw_dds_common/msg/ParticipantEntitiesInfo). ``ros2 node list`` reads it, and so does
zenoh-bridge-ros2dds: it routes only DDS endpoints some node lists there (zenoh-plugin-ros2dds
src/ros_discovery.rs). A GID is the entity's 16-byte DDS GUID, zero-padded to 24 bytes before
Iron (rmw_dds_common Gid.msg: ``char[24]`` in Humble, ``uint8[16]`` from Iron on); a reader of the
other size fails with "failed to fill whole buffer".
"""

# No "from __future__ import annotations": the IDL classes need evaluated field types.

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import array, bounded_str, sequence, uint8

ROS_DISCOVERY_TOPIC = "ros_discovery_info"
# Type hash of ParticipantEntitiesInfo in Iron and Jazzy, put in USER_DATA from Iron on
# (value from zenoh-plugin-ros2dds src/ros_discovery.rs, ROS_DISCOVERY_INFO_TYPE_HASH).
DISCOVERY_TYPE_HASH = "RIHS01_91a0593bacdcc50ea9bdcf849a938b128412cc1ea821245c663bcd26f83c295e"
# What the plugin assumes when ROS_DISTRO is unset (zenoh-plugin-ros2dds src/ros2_utils.rs).
ASSUMED_ROS_DISTRO = "iron"
NAME_BOUND = 256  # rmw_dds_common NodeEntitiesInfo: string<256> node_namespace, node_name
# The field types below are spelt as the Annotated forms that cyclonedds' array[uint8, 16], bounded_str[256]
# and sequence[T] return: the same types at run time, in a form a type checker can read.
BoundedName = Annotated[str, bounded_str(NAME_BOUND)]


def ros_distro(distro: str | None = None) -> str:
    """The distro the GID size follows: the argument, else $ROS_DISTRO, else what the plugin assumes."""
    return (distro or os.environ.get("ROS_DISTRO") or ASSUMED_ROS_DISTRO).strip().lower()


def before_iron(distro: str) -> bool:
    """ROS 2 distros are named in alphabetical order (foxy, galactic, humble < iron < jazzy ...)."""
    return distro < "iron"


def gid_size(distro: str | None = None) -> int:
    return 24 if before_iron(ros_distro(distro)) else 16


def gid_bytes(guid: bytes, distro: str | None = None) -> bytes:
    """A GID of the distro's size from a 16-byte DDS GUID."""
    if len(guid) != 16:
        raise ValueError(f"a DDS GUID has 16 bytes, not {len(guid)}")
    return guid.ljust(gid_size(distro), b"\0")


@dataclass
class Gid16(IdlStruct, typename="rmw_dds_common::msg::dds_::Gid_"):
    data: Annotated[Sequence[uint8], array(uint8, 16)]


@dataclass
class Gid24(IdlStruct, typename="rmw_dds_common::msg::dds_::Gid_"):
    data: Annotated[Sequence[uint8], array(uint8, 24)]


@dataclass
class NodeEntitiesInfo16(IdlStruct, typename="rmw_dds_common::msg::dds_::NodeEntitiesInfo_"):
    node_namespace: BoundedName
    node_name: BoundedName
    reader_gid_seq: Annotated[Sequence[Gid16], sequence(Gid16)]
    writer_gid_seq: Annotated[Sequence[Gid16], sequence(Gid16)]


@dataclass
class NodeEntitiesInfo24(IdlStruct, typename="rmw_dds_common::msg::dds_::NodeEntitiesInfo_"):
    node_namespace: BoundedName
    node_name: BoundedName
    reader_gid_seq: Annotated[Sequence[Gid24], sequence(Gid24)]
    writer_gid_seq: Annotated[Sequence[Gid24], sequence(Gid24)]


@dataclass
class ParticipantEntitiesInfo16(IdlStruct, typename="rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_"):
    gid: Gid16
    node_entities_info_seq: Annotated[Sequence[NodeEntitiesInfo16], sequence(NodeEntitiesInfo16)]


@dataclass
class ParticipantEntitiesInfo24(IdlStruct, typename="rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_"):
    gid: Gid24
    node_entities_info_seq: Annotated[Sequence[NodeEntitiesInfo24], sequence(NodeEntitiesInfo24)]


def participant_info_class(distro: str | None = None) -> type[IdlStruct]:
    return ParticipantEntitiesInfo24 if gid_size(distro) == 24 else ParticipantEntitiesInfo16


@dataclass
class RosNode:
    """One ROS node of a participant: its name and the GUIDs of its DDS readers and writers."""

    namespace: str
    name: str
    reader_guids: list[bytes] = field(default_factory=list)
    writer_guids: list[bytes] = field(default_factory=list)


def participant_entities_info(
    participant_guid: bytes, nodes: list[RosNode], distro: str | None = None
) -> IdlStruct:
    """The ParticipantEntitiesInfo sample announcing ``nodes`` for the participant."""
    # one set of classes or the other, by the distro's GID size: a choice made at run time
    classes: tuple[type[Any], type[Any]] = (
        (Gid24, NodeEntitiesInfo24) if gid_size(distro) == 24 else (Gid16, NodeEntitiesInfo16)
    )
    gid, node_info = classes

    def to_gid(guid: bytes) -> IdlStruct:
        return gid(data=list(gid_bytes(guid, distro)))

    info_class: type[Any] = participant_info_class(distro)
    return info_class(
        gid=to_gid(participant_guid),
        node_entities_info_seq=[
            node_info(
                node_namespace=node.namespace or "/",
                node_name=node.name,
                reader_gid_seq=[to_gid(g) for g in node.reader_guids],
                writer_gid_seq=[to_gid(g) for g in node.writer_guids],
            )
            for node in nodes
        ],
    )


def discovery_user_data(distro: str | None = None) -> bytes:
    """USER_DATA of the ros_discovery_info endpoints: the type hash from Iron on, nothing before."""
    return b"" if before_iron(ros_distro(distro)) else f"typehash={DISCOVERY_TYPE_HASH};".encode()
