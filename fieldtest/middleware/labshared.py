"""The lab side every family shares, from a ``LabLaunch`` (no ROS needed): the link's topics, the
recorder, and ``side_processes``, which asks the middleware for its bridges, routers and brokers.

Which topics cross the host-robot link, per direction (ROS names under the robot namespace):

    host -> robot   cmd_vel (fieldtest/cmd_vel when the robot relays), fieldtest/cmd_stamp (Humble
                    Twist commands only), fieldtest/clock_probe_reply
    robot -> host   fieldtest/clock_probe

Everything else (odometry, receipts, clock offsets) stays on its machine and is recorded there.
The clock probes travel best effort whatever the trial's QoS (``topic_qos``); the commands keep it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fieldtest import rosmsg
from fieldtest.errors import FieldtestError
from fieldtest.middleware import registry
from fieldtest.middleware.dds.lab import dds_security_enabled
from fieldtest.middleware.launch import LabLaunch, SideProcess
from fieldtest.qos import CLOCK_PROBE_QOS
from fieldtest.record import (
    CLOCK_OFFSET_TOPIC,
    CLOCK_PROBE_REPLY_TOPIC,
    CLOCK_PROBE_TOPIC,
    CMD_STAMP_TOPIC,
    RECEIPTS_TOPIC,
)
from fieldtest.security.policy import BASE_TOPICS, kit_enclave
from fieldtest.transport.base import full_topic


class BridgeConfigError(FieldtestError, ValueError):
    """A bridge/broker configuration that the real program would refuse."""


@dataclass(frozen=True)
class LinkTopic:
    topic: str  # ROS name under the namespace, e.g. "/cmd_vel"
    typename: str
    sender: str  # "host" or "robot"


# Link topics whose QoS profile is their own, not the trial's (fieldtest.qos.CLOCK_PROBE_QOS says why).
OWN_QOS = {CLOCK_PROBE_TOPIC: CLOCK_PROBE_QOS, CLOCK_PROBE_REPLY_TOPIC: CLOCK_PROBE_QOS}


def topic_qos(topic: str, trial_qos: str) -> str:
    """The QoS profile name of ``topic`` (a name under the namespace, e.g. "/fieldtest/clock_probe")
    on a trial whose QoS is ``trial_qos``: the lab nodes and the bridges' ROS sides use it alike."""
    return OWN_QOS.get("/" + topic.strip("/"), trial_qos)


def link_topics(cfg: LabLaunch) -> list[LinkTopic]:
    """The topics the bridges carry for this trial, in a fixed order."""
    cmd_type = rosmsg.TWIST if cfg.cmd_type == "twist" else rosmsg.TWIST_STAMPED
    topics = [LinkTopic("/" + cfg.cmd_topic, cmd_type, "host")]
    if cfg.cmd_type == "twist":
        topics.append(LinkTopic(CMD_STAMP_TOPIC, rosmsg.HEADER, "host"))
    topics += [
        LinkTopic(CLOCK_PROBE_REPLY_TOPIC, rosmsg.CLOCK_PROBE, "host"),
        LinkTopic(CLOCK_PROBE_TOPIC, rosmsg.CLOCK_PROBE, "robot"),
    ]
    if cfg.robot_traffic != "none":  # the robot's own topics, for the operator's tool on the host
        from fieldtest.robottraffic import preset_topics

        topics += [LinkTopic(t.topic, t.typename, "robot") for t in preset_topics(cfg.robot_traffic)]
    return topics


def ros_topic(cfg: LabLaunch, topic: str) -> str:
    return full_topic(cfg.namespace, topic)


def wire_name(cfg: LabLaunch, topic: str) -> str:
    """Zenoh key / MQTT topic, as zenoh-bridge-ros2dds maps ROS names (and the kit's transports do)."""
    return ros_topic(cfg, topic).lstrip("/")


def sent_by(cfg: LabLaunch) -> list[LinkTopic]:
    return [t for t in link_topics(cfg) if t.sender == cfg.role]


def received_by(cfg: LabLaunch) -> list[LinkTopic]:
    return [t for t in link_topics(cfg) if t.sender != cfg.role]


# --------------------------------------------------------------------------------------- recording


def recorded_topics(cfg: LabLaunch) -> list[str]:
    """What ``ros2 bag record`` takes on this side (the kit's own bags are written by the nodes)."""
    topics = [t.topic for t in link_topics(cfg)]
    if cfg.role == "robot":
        topics += [RECEIPTS_TOPIC, CLOCK_OFFSET_TOPIC, *BASE_TOPICS]
        if cfg.relay:
            topics.append("/cmd_vel")
    return [ros_topic(cfg, t) for t in dict.fromkeys(topics)]


def ros2bag_dir(cfg: LabLaunch) -> Path:
    return Path(cfg.trial_dir) / "ros2bag" / cfg.role


def ros2bag_record_command(cfg: LabLaunch) -> list[str]:
    """``ros2 bag record`` in MCAP into ``<trial>/ros2bag/<role>`` (Humble needs
    ros-humble-rosbag2-storage-mcap; Jazzy's default storage is MCAP already)."""
    if not cfg.trial_dir:
        raise BridgeConfigError("trial_dir is empty: nowhere to record")
    return ["ros2", "bag", "record", "-s", "mcap", "-o", str(ros2bag_dir(cfg)), *recorded_topics(cfg)]


def ros2bag_record_env(cfg: LabLaunch) -> dict[str, str]:
    """Its enclave under SROS2: ``ros2 bag record`` takes no --ros-args, rcl reads this variable;
    on secured rmw_zenoh its session config (``Middleware.lab_node_env``)."""
    own = registry.get(cfg.middleware).lab_node_env(cfg, kit_enclave("recorder").nodes[0])
    if own:
        return own
    return (
        {"ROS_SECURITY_ENCLAVE_OVERRIDE": kit_enclave("recorder").path} if dds_security_enabled(cfg) else {}
    )


# --------------------------------------------------------------------------------------- overview


def side_processes(cfg: LabLaunch, config_dir: str | Path, *, zenohd: str | None = None) -> list[SideProcess]:
    """Bridges, routers, brokers (the middleware's own, ``Middleware.lab_side_processes``) and the
    recorder for this side, with the files they read."""
    out = registry.get(cfg.middleware).lab_side_processes(cfg, Path(config_dir), zenohd=zenohd)
    if cfg.record_ros2bag and cfg.trial_dir:
        out.append(SideProcess("ros2bag", ros2bag_record_command(cfg), ros2bag_record_env(cfg), {}))
    return out
