"""QoS profiles by name: the single place every middleware and the bags take their QoS from.

Names: the ROS 2 presets ("default", "sensor", "parameters") and Fernandez et al. 2020's cases
"fernandez-a" .. "fernandez-e". DDS applies all four policies; middlewares without DDS QoS map what
they can (reliability, depth) and say so.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fieldtest.errors import FieldtestError

History = Literal["keep_last", "keep_all"]
Reliability = Literal["reliable", "best_effort"]
Durability = Literal["volatile", "transient_local"]


class QosError(FieldtestError, ValueError):
    """An unknown profile name or an inconsistent profile."""


class QosProfile(BaseModel):
    """History, depth, reliability and durability, as in rclpy's QoSProfile.

    ``depth`` only bounds the history under KEEP_LAST; under KEEP_ALL it is recorded but, as in
    ROS 2, not applied (DDS keeps every sample until resource limits are reached).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    history: History
    depth: int = Field(ge=1)
    reliability: Reliability
    durability: Durability = "volatile"
    description: str = ""


_PROFILES: dict[str, QosProfile] = {
    p.name: p
    for p in (
        QosProfile(
            name="default",
            history="keep_last",
            depth=10,
            reliability="reliable",
            durability="volatile",
            description="ROS 2 default (rmw_qos_profile_default)",
        ),
        QosProfile(
            name="sensor",
            history="keep_last",
            depth=5,
            reliability="best_effort",
            durability="volatile",
            description="ROS 2 sensor data (rmw_qos_profile_sensor_data)",
        ),
        QosProfile(
            name="parameters",
            history="keep_all",
            depth=1000,
            reliability="reliable",
            durability="volatile",
            description="Parameters as Chen 2019 used it (KEEP_ALL, depth 1000, RELIABLE)",
        ),
        QosProfile(
            name="fernandez-a",
            history="keep_last",
            depth=5,
            reliability="best_effort",
            durability="volatile",
            description="Fernandez et al. 2020 case a",
        ),
        QosProfile(
            name="fernandez-b",
            history="keep_all",
            depth=1000,
            reliability="best_effort",
            durability="transient_local",
            description="Fernandez et al. 2020 case b",
        ),
        QosProfile(
            name="fernandez-c",
            history="keep_last",
            depth=5,
            reliability="reliable",
            durability="volatile",
            description="Fernandez et al. 2020 case c",
        ),
        QosProfile(
            name="fernandez-d",
            history="keep_last",
            depth=1000,
            reliability="reliable",
            durability="volatile",
            description="Fernandez et al. 2020 case d",
        ),
        QosProfile(
            name="fernandez-e",
            history="keep_all",
            depth=1000,
            reliability="reliable",
            durability="transient_local",
            description="Fernandez et al. 2020 case e",
        ),
    )
}

QOS_NAMES: tuple[str, ...] = tuple(_PROFILES)

# The clock probes (robot -> host -> robot) wherever ROS 2 carries them in the lab (the nodes,
# mqtt_client's ROS side): best effort whatever the trial's QoS. A lost probe is simply lost (the
# offset estimate takes many). On a RELIABLE writer a lost probe is repaired only at the writer's
# next heartbeat (Fast DDS: every 3 s, WriterTimes.heartbeatPeriod in
# include/fastdds/rtps/attributes/WriterAttributes.h) and the later probes wait behind it, longer
# than the host's 2 s lost-robot watchdog (fieldtest.labrun.nodelogic.driver.ROBOT_LOST_S).
CLOCK_PROBE_QOS = "sensor"


def get_qos(name: str) -> QosProfile:
    """The profile called ``name``; QosError naming the valid names otherwise."""
    try:
        return _PROFILES[name]
    except KeyError:
        raise QosError(f"unknown QoS profile {name!r}; valid names: {', '.join(QOS_NAMES)}") from None


# rmw enum values as rosbag2 writes them into metadata.yaml (rmw/types.h).
_RMW_HISTORY = {"keep_last": 1, "keep_all": 2}
_RMW_RELIABILITY = {"reliable": 1, "best_effort": 2}
_RMW_DURABILITY = {"transient_local": 1, "volatile": 2}
_RMW_LIVELINESS_AUTOMATIC = 1


def rosbag2_qos_yaml(name: str) -> str:
    """The ``offered_qos_profiles`` string rosbag2 (Humble) stores for a publisher with this profile.

    Durations are left unspecified (0 s), which rosbag2 and rclpy read as "use the default".
    """
    qos = get_qos(name)
    zero = "\n    sec: 0\n    nsec: 0"
    return (
        f"- history: {_RMW_HISTORY[qos.history]}\n"
        f"  depth: {qos.depth}\n"
        f"  reliability: {_RMW_RELIABILITY[qos.reliability]}\n"
        f"  durability: {_RMW_DURABILITY[qos.durability]}\n"
        f"  deadline:{zero}\n"
        f"  lifespan:{zero}\n"
        f"  liveliness: {_RMW_LIVELINESS_AUTOMATIC}\n"
        f"  liveliness_lease_duration:{zero}\n"
        "  avoid_ros_namespace_conventions: false\n"
    )


def mqtt_qos(name: str) -> int:
    """MQTT QoS level for a profile: RELIABLE -> 1 (at least once), BEST_EFFORT -> 0 (at most once).
    The kit's MQTT transport and the lab's mqtt_client parameters both use it."""
    return 1 if get_qos(name).reliability == "reliable" else 0
