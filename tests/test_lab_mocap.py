"""Ground truth through a ROS 2 mocap driver: MocapRelay writes the kit's mocap bag from driver
messages (here built with rosbags from the drivers' message definitions), and the shipped
driver configs are well-formed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from fieldtest import rosmsg
from fieldtest.labrun.nodelogic.mocap import MocapRelay
from fieldtest.names import NATNET_COMMAND_PORT, NATNET_DATA_PORT
from fieldtest.record import MOCAP_FRAMES_TOPIC, MOCAP_POSE_TOPIC, read_bag

ROOT = Path(__file__).resolve().parents[1]
# mocap4r2_msgs (MOCAP4ROS2-Project/mocap4r2_msgs, msg/): the fields the relay reads.
MOCAP4R2 = {
    "mocap4r2_msgs/msg/Marker": "geometry_msgs/Point translation\n",
    "mocap4r2_msgs/msg/RigidBody": "string rigid_body_name\nmocap4r2_msgs/Marker[] markers\ngeometry_msgs/Pose pose\n",
    "mocap4r2_msgs/msg/RigidBodies": "std_msgs/Header header\nuint32 frame_number\nmocap4r2_msgs/RigidBody[] rigidbodies\n",
}


@pytest.fixture(scope="module")
def store():
    typestore = get_typestore(Stores.ROS2_HUMBLE)
    types = {}
    for name, text in MOCAP4R2.items():
        types.update(get_types_from_msg(text, name))
    typestore.register(types)
    return typestore


def _pose(store, xyz, quat):
    point = store.types["geometry_msgs/msg/Point"](x=xyz[0], y=xyz[1], z=xyz[2])
    q = store.types["geometry_msgs/msg/Quaternion"](x=quat[0], y=quat[1], z=quat[2], w=quat[3])
    return store.types["geometry_msgs/msg/Pose"](position=point, orientation=q)


def _bodies(store, stamp_ns, frame, bodies):
    body_type = store.types["mocap4r2_msgs/msg/RigidBody"]
    items = [
        body_type(rigid_body_name=name, markers=[], pose=_pose(store, xyz, quat))
        for name, xyz, quat in bodies
    ]
    header = store.types["std_msgs/msg/Header"](stamp=rosmsg.time_msg(stamp_ns), frame_id="world")
    return store.types["mocap4r2_msgs/msg/RigidBodies"](header=header, frame_number=frame, rigidbodies=items)


def test_mocap4r2_rigid_bodies_become_z_up_poses_and_frames(tmp_path, store):
    relay = MocapRelay(tmp_path, "y", rigid_body_id=1)
    yaw = math.radians(30)
    # Motive Y-up: robot at world (x=1, y=2) on the floor -> stream (1, 0.1, -2); yaw about +y_stream
    y_up = (0.0, math.sin(yaw / 2), 0.0, math.cos(yaw / 2))
    assert relay.on_rigid_bodies(
        _bodies(store, 1_000, 7, [("2", (9, 9, 9), (0, 0, 0, 1)), ("1", (1, 0.1, -2), y_up)]), "1"
    )
    assert not relay.on_rigid_bodies(
        _bodies(store, 2_000, 8, [("2", (9, 9, 9), (0, 0, 0, 1))]), "1"
    )  # body absent
    assert not relay.on_rigid_bodies(
        _bodies(store, 3_000, 9, [("1", (math.nan, 0, 0), y_up)]), "1"
    )  # not tracked
    relay.close()
    bag = read_bag(tmp_path / "mocap")
    poses = bag.messages(MOCAP_POSE_TOPIC)
    frames = [m for _, m in bag.messages(MOCAP_FRAMES_TOPIC)]
    assert [f.frame_number for f in frames] == [7, 8, 9] and [f.tracking_valid for f in frames] == [
        True,
        False,
        False,
    ]
    ((t, pose),) = poses
    assert t == 1_000 and pose.header.frame_id == "mocap"
    assert (pose.pose.position.x, pose.pose.position.y, pose.pose.position.z) == pytest.approx(
        (1.0, 2.0, 0.1)
    )
    q = pose.pose.orientation
    assert rosmsg.quaternion_yaw(q.x, q.y, q.z, q.w) == pytest.approx(yaw)


def test_pose_stamped_drivers(tmp_path):
    relay = MocapRelay(tmp_path, "z")
    for i in range(3):
        relay.on_pose(rosmsg.pose_stamped(1_000 + i, "world", (0.1 * i, 0.0, 0.0), (0, 0, 0, 1)))
    relay.close()
    relay.close()  # idempotent
    bag = read_bag(tmp_path / "mocap")
    assert [m.pose.position.x for _, m in bag.messages(MOCAP_POSE_TOPIC)] == pytest.approx([0.0, 0.1, 0.2])
    assert [m.frame_number for _, m in bag.messages(MOCAP_FRAMES_TOPIC)] == [0, 1, 2]


def test_shipped_driver_configs_are_ros2_parameter_files():
    files = sorted((ROOT / "mocap").glob("*.yaml"))
    assert {p.name for p in files} >= {
        "mocap4r2_optitrack_driver.yaml",
        "vrpn_mocap.yaml",
        "mocap_optitrack.yaml",
    }
    for path in files:
        data = yaml.safe_load(path.read_text())
        for node, body in data.items():
            assert set(body) == {"ros__parameters"}, f"{path}: {node}"
    m4 = yaml.safe_load((ROOT / "mocap/mocap4r2_optitrack_driver.yaml").read_text())
    params = m4["mocap4r2_optitrack_driver_node"]["ros__parameters"]
    assert params["connection_type"] in ("Unicast", "Multicast")
    assert (params["server_command_port"], params["server_data_port"]) == (
        NATNET_COMMAND_PORT,
        NATNET_DATA_PORT,
    )
    assert params["multicast_address"] == "239.255.42.99"
    opt = yaml.safe_load((ROOT / "mocap/mocap_optitrack.yaml").read_text())["mocap_node"]["ros__parameters"]
    assert set(opt) == {"rigid_bodies", "optitrack_config"} and "1" in {str(k) for k in opt["rigid_bodies"]}


# Each driver's node as its documented command starts it, and the parameters it declares.
DRIVER_NODES = {
    # vrpn_mocap launch/client.launch.yaml (namespace vrpn_mocap, name vrpn_mocap_client_node);
    # src/client.cpp declares these.
    "vrpn_mocap.yaml": (
        "/vrpn_mocap/vrpn_mocap_client_node",
        {"server", "port", "frame_id", "update_freq", "refresh_freq", "multi_sensor"}
        | {"sensor_data_qos", "use_vrpn_timestamps"},
    ),
    # mocap4ros2_optitrack launch/optitrack2.launch.py (name mocap4r2_optitrack_driver_node, no
    # namespace); src/.../mocap4r2_optitrack_driver.cpp declares these six.
    "mocap4r2_optitrack_driver.yaml": (
        "/mocap4r2_optitrack_driver_node",
        {"connection_type", "server_address", "local_address", "multicast_address"}
        | {"server_command_port", "server_data_port"},
    ),
    # mocap_optitrack (foxy-devel) src/mocap_node.cpp: node "mocap_node", parameters taken from the
    # file as given (automatically_declare_parameters_from_overrides).
    "mocap_optitrack.yaml": ("/mocap_node", None),
}


def _key_matches(key: str, fqn: str) -> bool:
    """rcl's parameter-file node keys: a missing leading '/' is added, '*' is one token, '/**'
    any number of namespace tokens (rcl_yaml_param_parser)."""
    import re

    key = key if key.startswith("/") else "/" + key
    pattern = re.escape(key).replace(r"/\*\*", "(/[^/]+)*").replace(r"\*", "[^/]+")
    return re.fullmatch(pattern, fqn) is not None


def test_key_matching_follows_rcl():
    assert (
        _key_matches("/**", "/a/b") and _key_matches("/**/node", "/ns/node") and _key_matches("node", "/node")
    )
    assert not _key_matches("node", "/ns/node") and not _key_matches("/ns/*", "/ns/a/node")


@pytest.mark.parametrize("name", sorted(DRIVER_NODES))
def test_driver_configs_reach_their_node_and_set_only_what_it_reads(name):
    fqn, declared = DRIVER_NODES[name]
    data = yaml.safe_load((ROOT / "mocap" / name).read_text())
    ((key, body),) = data.items()
    assert _key_matches(key, fqn), f"{name}: key {key!r} does not apply to {fqn}"
    params = body["ros__parameters"]
    if declared is not None:
        assert set(params) <= declared, f"{name}: not read by the driver: {sorted(set(params) - declared)}"


def test_mocap_optitrack_leaves_the_bases_odom_alone():
    opt = yaml.safe_load((ROOT / "mocap/mocap_optitrack.yaml").read_text())["mocap_node"]["ros__parameters"]
    # src/mocap_config.cpp: the odom topic defaults to "odom"; an empty name disables it
    assert all(body.get("odom") == "" for body in opt["rigid_bodies"].values())


def test_the_docs_natnet_commands_join_multicast_on_the_mocap_interface():
    """Without --local the NatNet client joins the multicast group on the default-route
    interface (often the Wi-Fi) and sees no frames from the wired mocap network."""
    import re

    commands = []
    for doc in ("docs/lab-guide.md", "mocap/README.md"):
        text = (ROOT / doc).read_text()
        # inline code spans, joined across line breaks and the guide's list indentation
        for span in re.findall(r"`([^`]*fieldtest\.natnet (?:probe|record)[^`]*)`", text):
            commands.append((doc, " ".join(span.split())))
    assert len(commands) >= 2
    for doc, command in commands:
        assert "--local " in command, (doc, command)
