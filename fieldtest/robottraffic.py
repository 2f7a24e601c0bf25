"""The robot's own traffic in a trial: what a TurtleBot 4 publishes and an operator's tool pulls.

While the host streams /cmd_vel, the lab's robot is not silent: RViz or Foxglove on the operator's
laptop subscribes to its scan, camera preview, odometry and tf over the same Wi-Fi and middleware.
A preset names the topics a tool pulls; each topic's rate and message size come from the
TurtleBot 4 Standard as upstream's Jazzy bringup starts it (sources beside each value). Sizes are
those of the messages built here, serialized (``RobotTopic.size_bytes``), so they are what
crosses the link.

Plain data (rosbags messages only): the twin's publishing and pulling is ``fieldtest.twin.trafficpubsub``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from fieldtest import rosmsg
from fieldtest.names import ROBOT_TRAFFIC_PRESETS

LASER_SCAN = "sensor_msgs/msg/LaserScan"
IMAGE = "sensor_msgs/msg/Image"
TF_MESSAGE = "tf2_msgs/msg/TFMessage"
IMU = "sensor_msgs/msg/Imu"
BATTERY_STATE = "sensor_msgs/msg/BatteryState"
JOINT_STATE = "sensor_msgs/msg/JointState"
DIAGNOSTIC_ARRAY = "diagnostic_msgs/msg/DiagnosticArray"

# RPLIDAR A1 on the TB4 Standard: turtlebot4_bringup/launch/rplidar.launch.py (jazzy) runs
# rplidar_composition with angle_compensate true and no scan_mode, so the A1's typical mode (Boost,
# 8K samples/s) is used; rplidar_ros (ros2) src/rplidar_node.cpp then publishes
# 360 * int(8000 / scan_frequency 10 / 360 + 1) = 1080 ranges and as many intensities per scan.
SCAN_POINTS = 1080
# The A1M8's typical scan frequency (RPLIDAR A1 datasheet: 5.5 Hz); turtlebot4_diagnostics
# (diagnostics_updater.py, lidar_freq_bounds) accepts 5 to 10 Hz.
SCAN_HZ = 5.5
# OAK-D Pro preview: turtlebot4_bringup/config/oakd_pro.yaml (jazzy): rgb.i_preview_size 250,
# i_fps 30.0, i_enable_preview true; depthai_ros_driver publishes it as bgr8 on
# oakd/rgb/preview/image_raw (the topic turtlebot4_diagnostics subscribes to).
PREVIEW_SIZE = 250
PREVIEW_HZ = 30.0
# Create 3: odom and tf at 20 Hz, imu at 100 Hz (create3_docs docs/api/odometry.md: "They all
# publish at 20 Hz", "As of G.4 / H.1, this topic publishes at 100 Hz"); battery_state "on change
# (< 1 Hz)" (iRobotEducation/create3_sim issue 35): taken as 1 Hz, the upper bound. The TB4's
# create3_republisher relays them (turtlebot4_bringup/config/republisher.yaml, robot_publishers).
ODOM_HZ = 20.0
TF_HZ = 20.0
IMU_HZ = 100.0
BATTERY_HZ = 1.0
# joint_state_publisher's default rate (10 Hz) for the two wheel joints of turtlebot4_description.
JOINT_STATES_HZ = 10.0
# diagnostic_updater's default period (1 s; turtlebot4_diagnostics' Updater) and
# diagnostic_aggregator's default pub_rate (1 Hz).
DIAGNOSTICS_HZ = 1.0


def _header(frame_id: str) -> Any:
    return rosmsg.header(0, frame_id)


def _scan() -> Any:
    cls = rosmsg.msg_class(LASER_SCAN)
    return cls(
        header=_header("rplidar_link"),
        angle_min=-np.pi,
        angle_max=np.pi,
        angle_increment=2 * np.pi / SCAN_POINTS,
        time_increment=1.0 / (SCAN_HZ * SCAN_POINTS),
        scan_time=1.0 / SCAN_HZ,
        range_min=0.15,
        range_max=12.0,
        ranges=np.full(SCAN_POINTS, 2.0, dtype=np.float32),
        intensities=np.full(SCAN_POINTS, 47.0, dtype=np.float32),
    )


def _preview() -> Any:
    step = PREVIEW_SIZE * 3
    return rosmsg.msg_class(IMAGE)(
        header=_header("oakd_rgb_camera_optical_frame"),
        height=PREVIEW_SIZE,
        width=PREVIEW_SIZE,
        encoding="bgr8",
        is_bigendian=0,
        step=step,
        data=np.full(step * PREVIEW_SIZE, 128, dtype=np.uint8),
    )


def _odom() -> Any:
    types = rosmsg.typestore().types
    vector = types["geometry_msgs/msg/Vector3"]
    pose = types["geometry_msgs/msg/Pose"](
        position=types["geometry_msgs/msg/Point"](x=0.0, y=0.0, z=0.0),
        orientation=types["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
    )
    twist = types["geometry_msgs/msg/Twist"](
        linear=vector(x=0.0, y=0.0, z=0.0), angular=vector(x=0.0, y=0.0, z=0.0)
    )
    return rosmsg.msg_class(rosmsg.ODOMETRY)(
        header=_header("odom"),
        child_frame_id="base_link",
        pose=types["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
        twist=types["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=np.zeros(36)),
    )


def _transform(parent: str, child: str) -> Any:
    geo = rosmsg.typestore().types
    return geo["geometry_msgs/msg/TransformStamped"](
        header=_header(parent),
        child_frame_id=child,
        transform=geo["geometry_msgs/msg/Transform"](
            translation=geo["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0),
            rotation=geo["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
        ),
    )


def _tf() -> Any:
    return rosmsg.msg_class(TF_MESSAGE)(transforms=[_transform("odom", "base_link")])


def _imu() -> Any:
    types = rosmsg.typestore().types
    vector = types["geometry_msgs/msg/Vector3"]
    return rosmsg.msg_class(IMU)(
        header=_header("imu_link"),
        orientation=types["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
        orientation_covariance=np.zeros(9),
        angular_velocity=vector(x=0.0, y=0.0, z=0.0),
        angular_velocity_covariance=np.zeros(9),
        linear_acceleration=vector(x=0.0, y=0.0, z=9.81),
        linear_acceleration_covariance=np.zeros(9),
    )


def _battery() -> Any:
    cls = rosmsg.msg_class(BATTERY_STATE)
    return cls(
        header=_header(""),
        voltage=14.4,
        temperature=30.0,
        current=-0.5,
        charge=2.0,
        capacity=2.6,
        design_capacity=2.6,
        percentage=0.8,
        power_supply_status=2,
        power_supply_health=1,
        power_supply_technology=2,
        present=True,
        cell_voltage=np.zeros(0, dtype=np.float32),
        cell_temperature=np.zeros(0, dtype=np.float32),
        location="",
        serial_number="",
    )


def _joint_states() -> Any:
    return rosmsg.msg_class(JOINT_STATE)(
        header=_header(""),
        name=["left_wheel_joint", "right_wheel_joint"],
        position=np.zeros(2),
        velocity=np.zeros(2),
        effort=np.zeros(2),
    )


def _diagnostics(names: tuple[str, ...]) -> Callable[[], Any]:
    def build() -> Any:
        types = rosmsg.typestore().types
        status = types["diagnostic_msgs/msg/DiagnosticStatus"]
        key_value = types["diagnostic_msgs/msg/KeyValue"]
        return rosmsg.msg_class(DIAGNOSTIC_ARRAY)(
            header=_header(""),
            status=[
                status(
                    level=0,
                    name=name,
                    message="OK",
                    hardware_id="Turtlebot4",
                    values=[key_value(key="value", value="0.0")],
                )
                for name in names
            ],
        )

    return build


# turtlebot4_diagnostics' Updater entries (diagnostics_updater.py) and the aggregator's groups
# (turtlebot4_diagnostics/config/diagnostics.yaml)
_UPDATER_ENTRIES = (
    "Battery Percentage", "Battery Voltage", "Wheel Status", "Dock Status", "Hazard Detections",
    "/scan topic status", "/color/preview/image topic status", "/imu topic status", "/mouse topic status",
)  # fmt: skip
_AGGREGATED = ("/Turtlebot4", "/Turtlebot4/Create3", "/Turtlebot4/Create3/Battery", "/Turtlebot4/Sensors")


@dataclass(frozen=True)
class RobotTopic:
    """One topic the robot publishes: ROS name (under the robot namespace), type, rate, publisher."""

    topic: str
    typename: str
    rate_hz: float
    node: str  # the upstream node that publishes it (fieldtest.twin.trafficpubsub's graph)
    build: Callable[[], Any]
    stamp: tuple[str, ...]  # path of the header stamp the robot sets to the send time

    @cached_property
    def message(self) -> Any:
        return self.build()

    @property
    def size_bytes(self) -> int:
        """The serialized message (CDR with its 4-byte header), as it crosses the link."""
        return len(rosmsg.serialize(self.message, self.typename))

    def stamped(self, sent_ns: int) -> Any:
        """The message with its header stamp set to ``sent_ns`` (the same object, re-stamped)."""
        target = self.message
        for name in self.stamp[:-1]:
            target = target[0] if name == "[0]" else getattr(target, name)
        setattr(target, self.stamp[-1], rosmsg.time_msg(sent_ns))
        return self.message

    def sent_ns_of(self, msg: Any) -> int:
        target = msg
        for name in self.stamp:
            target = target[0] if name == "[0]" else getattr(target, name)
        return rosmsg.ns_of(target)


_HEADER_STAMP = ("header", "stamp")
TOPICS: dict[str, RobotTopic] = {
    t.topic: t
    for t in (
        RobotTopic("/scan", LASER_SCAN, SCAN_HZ, "rplidar_composition", _scan, _HEADER_STAMP),
        RobotTopic("/oakd/rgb/preview/image_raw", IMAGE, PREVIEW_HZ, "oakd", _preview, _HEADER_STAMP),
        RobotTopic("/odom", rosmsg.ODOMETRY, ODOM_HZ, "create3_repub", _odom, _HEADER_STAMP),
        RobotTopic("/tf", TF_MESSAGE, TF_HZ, "create3_repub", _tf, ("transforms", "[0]", "header", "stamp")),
        RobotTopic("/imu", IMU, IMU_HZ, "create3_repub", _imu, _HEADER_STAMP),
        RobotTopic("/battery_state", BATTERY_STATE, BATTERY_HZ, "create3_repub", _battery, _HEADER_STAMP),
        RobotTopic(
            "/joint_states",
            JOINT_STATE,
            JOINT_STATES_HZ,
            "joint_state_publisher",
            _joint_states,
            _HEADER_STAMP,
        ),  # fmt: skip
        RobotTopic(
            "/diagnostics",
            DIAGNOSTIC_ARRAY,
            DIAGNOSTICS_HZ,
            "turtlebot4_diagnostics",
            _diagnostics(_UPDATER_ENTRIES),
            _HEADER_STAMP,
        ),  # fmt: skip
        RobotTopic(
            "/diagnostics_agg",
            DIAGNOSTIC_ARRAY,
            DIAGNOSTICS_HZ,
            "analyzers",
            _diagnostics(_AGGREGATED),
            _HEADER_STAMP,
        ),  # fmt: skip
    )
}

# What each operator tool pulls. "rviz-view-robot": RViz as turtlebot4_viz's view_robot opens it
# (turtlebot/turtlebot4_desktop, turtlebot4_viz/rviz/robot.rviz): of the robot's own topics its
# enabled displays take the scan (LaserScan) and tf (TF, RobotModel); its camera group is disabled,
# and its map, costmap and plan displays are Nav2's, silent without navigation. "rviz": that view
# with an odometry display and an Image display of the OAK-D preview added, as an operator watching
# the robot's camera. Foxglove's usual TB4 panels add the IMU and battery plots and the diagnostics
# list. "all": every topic above.
PRESETS: dict[str, tuple[str, ...]] = {
    "none": (),
    "rviz": ("/scan", "/tf", "/odom", "/oakd/rgb/preview/image_raw"),
    "rviz-view-robot": ("/scan", "/tf"),
    "foxglove": (
        "/scan",
        "/tf",
        "/odom",
        "/oakd/rgb/preview/image_raw",
        "/imu",
        "/battery_state",
        "/diagnostics_agg",
    ),  # fmt: skip
    "all": tuple(TOPICS),
}
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)
assert PRESET_NAMES == ROBOT_TRAFFIC_PRESETS, "the record's preset names (fieldtest.names) must match"


def preset_topics(preset: str) -> list[RobotTopic]:
    """The topics of a preset, in a fixed order; ValueError naming the choices for an unknown one."""
    if preset not in PRESETS:
        raise ValueError(f"robot_traffic: unknown preset {preset!r} (choose from {', '.join(PRESET_NAMES)})")
    return [TOPICS[name] for name in PRESETS[preset]]


def preset_rate_bytes(preset: str) -> float:
    """Bytes per second the preset puts on the link (payloads only, before middleware headers)."""
    return sum(t.rate_hz * t.size_bytes for t in preset_topics(preset))
