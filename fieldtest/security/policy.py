"""Who may publish and subscribe what: the kit's enclaves and their DDS permissions documents.

One table (``KIT_ENCLAVES``) drives every middleware: the DDS permissions of each enclave, the SROS2
policy file written next to the keystore (so ``ros2 security create_permission`` and
``zenoh_security_tools`` can consume the same intent), and the Zenoh/MQTT access-control lists.

The permissions XML follows SROS2's ``policy/templates/dds/permissions.xsl``: one grant per enclave,
``subject_name`` ``CN=<enclave path>``, the certificate's validity, one ``allow_rule`` with the
sorted, de-duplicated publish/subscribe topic lists, a second ``allow_rule`` for rmw_cyclonedds'
``ros_discovery_info`` and ``<default>DENY</default>``. ROS names map to DDS names as in ROS 2:
topic ``/cmd_vel`` -> ``rt/cmd_vel``, service ``/n/get_parameters`` -> ``rq/n/get_parametersRequest``
(request) and ``rr/n/get_parametersReply`` (reply).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime

from fieldtest.names import (
    BRIDGE_HOST_ENCLAVE,
    BRIDGE_ROBOT_ENCLAVE,
    HOST_ENCLAVE,
    MOCAP_DRIVER_ENCLAVE,
    MOCAP_ENCLAVE,
    RECORDER_ENCLAVE,
    ROBOT_ENCLAVE,
)
from fieldtest.record.recordnames import CLOCK_OFFSET_TOPIC as CLOCK_OFFSET
from fieldtest.record.recordnames import CLOCK_PROBE_REPLY_TOPIC as CLOCK_PROBE_REPLY
from fieldtest.record.recordnames import CLOCK_PROBE_TOPIC as CLOCK_PROBE
from fieldtest.record.recordnames import CMD_STAMP_TOPIC as CMD_STAMP
from fieldtest.record.recordnames import CMD_VEL_TOPIC as CMD_VEL
from fieldtest.record.recordnames import MOCAP_FRAMES_TOPIC as MOCAP_FRAMES
from fieldtest.record.recordnames import MOCAP_POSE_TOPIC as MOCAP_POSE
from fieldtest.record.recordnames import RECEIPTS_TOPIC as CMD_RECEIPTS
from fieldtest.record.recordnames import RELAY_CMD_VEL_TOPIC as RELAY_CMD_VEL

# Topics of a trial (ROS names, before the robot namespace is applied): the record's, plus these.
# The Create 3's own topics that the robot-side recorder takes (the base itself stays outside a
# secure domain; these are granted for a bridge or a base that joins it).
BASE_ODOM = "/odom"
BASE_BATTERY = "/battery_state"
BASE_TOPICS = (BASE_ODOM, BASE_BATTERY)
# What the ROS mocap drivers publish (mocap/ configs): mocap4r2's rigid_bodies, vrpn_mocap's and
# mocap_optitrack's per-body poses. DDS permissions match topic names as fnmatch patterns.
MOCAP_DRIVER_TOPICS = ("/rigid_bodies", "/vrpn_mocap/*/pose", "/*/pose", "/*/ground_pose")

# The topics that cross the host-robot link, as (topic, publishing role, subscribing role).
# The robot initiates clock probes (it logs the offset samples), the host answers them.
LINK_FLOWS: tuple[tuple[str, str, str], ...] = (
    (CMD_VEL, "host", "robot"),
    (RELAY_CMD_VEL, "host", "robot"),
    (CMD_STAMP, "host", "robot"),
    (CLOCK_PROBE, "robot", "host"),
    (CLOCK_PROBE_REPLY, "host", "robot"),
)
LINK_TOPICS = tuple(topic for topic, _, _ in LINK_FLOWS)

# What every rclcpp/rclpy node touches, as SROS2's example "common node" profiles grant it.
ROS_GLOBAL_PUBLISH = ("/rosout", "/parameter_events")
ROS_GLOBAL_SUBSCRIBE = ("/parameter_events", "/clock")
# Private names: sros2 expands "~" to <ns>/<node> with nothing in between (sros2
# sros2/policy/templates/dds/permissions.xsl), so the slash belongs to the name: "~/x".
ROS_NODE_SERVICES = (
    "~/describe_parameters",
    "~/get_parameter_types",
    "~/get_parameters",
    "~/list_parameters",
    "~/set_parameters",
    "~/set_parameters_atomically",
    "~/get_type_description",  # Jazzy and later
)
ROS_DISCOVERY_TOPIC = "ros_discovery_info"  # rmw_cyclonedds / rmw_fastrtps graph topic, no prefix

PERMISSIONS_SCHEMA = "http://www.omg.org/spec/DDS-SECURITY/20170901/omg_shared_ca_permissions.xsd"


@dataclass(frozen=True)
class EnclaveSpec:
    """One security identity: its enclave path (certificate CN), ROS nodes and topic rights.

    Topic names are ROS names; relative ones (no leading '/') and the trial topics are placed
    under the robot namespace, the ROS globals (/rosout, /parameter_events, /clock) are not.
    """

    path: str
    role: str
    description: str
    nodes: tuple[str, ...] = ()
    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    ros_node_defaults: bool = True  # add rosout, parameter events, clock and parameter services
    namespaced: bool = True  # False: the mocap side, whose topics are not under the robot namespace
    nodes_at_root: bool = False  # nodes started without the namespace (ros2 bag record)

    def node_namespace(self, namespace: str) -> str:
        return namespace if self.namespaced and not self.nodes_at_root else ""


KIT_ENCLAVES: tuple[EnclaveSpec, ...] = (
    EnclaveSpec(
        HOST_ENCLAVE,
        "host",
        "square driver: publishes /cmd_vel (or /fieldtest/cmd_vel to a relay), answers clock probes",
        nodes=("square_driver",),
        publish=(CMD_VEL, RELAY_CMD_VEL, CMD_STAMP, CLOCK_PROBE_REPLY),
        subscribe=(CLOCK_PROBE,),
    ),
    EnclaveSpec(
        ROBOT_ENCLAVE,
        "robot",
        "link monitor: receives /cmd_vel, sends clock probes, reports receipts",
        nodes=("link_monitor",),
        publish=(CLOCK_PROBE, CMD_RECEIPTS, CLOCK_OFFSET),
        subscribe=(CMD_VEL, RELAY_CMD_VEL, CMD_STAMP, CLOCK_PROBE_REPLY),
    ),
    # The bridges relay the link topics between a local DDS graph and Zenoh/MQTT in both
    # directions, so each needs both rights on every link topic.
    EnclaveSpec(
        BRIDGE_HOST_ENCLAVE,
        "bridge_host",
        "host-side Zenoh/MQTT bridge (zenoh-bridge-ros2dds or mqtt_client)",
        nodes=("zenoh_bridge_ros2dds", "mqtt_client"),
        publish=LINK_TOPICS,
        subscribe=LINK_TOPICS,
    ),
    EnclaveSpec(
        BRIDGE_ROBOT_ENCLAVE,
        "bridge_robot",
        "robot-side Zenoh/MQTT bridge (zenoh-bridge-ros2dds or mqtt_client)",
        nodes=("zenoh_bridge_ros2dds", "mqtt_client"),
        publish=LINK_TOPICS,
        subscribe=LINK_TOPICS,
    ),
    EnclaveSpec(
        MOCAP_ENCLAVE,
        "mocap",
        "mocap relay: records a ROS mocap driver's poses (and may republish them)",
        nodes=("mocap_relay",),
        publish=(MOCAP_POSE, MOCAP_FRAMES),
        subscribe=MOCAP_DRIVER_TOPICS,
        namespaced=False,
    ),
    EnclaveSpec(
        MOCAP_DRIVER_ENCLAVE,
        "mocap_driver",
        "ROS mocap driver (mocap4r2_optitrack_driver, vrpn_mocap, mocap_optitrack) in a secure domain",
        # vrpn_mocap's launch file starts its node in the vrpn_mocap namespace (client.launch.yaml)
        nodes=("mocap4r2_optitrack_driver_node", "vrpn_mocap/vrpn_mocap_client_node", "mocap_node"),
        publish=MOCAP_DRIVER_TOPICS,
        namespaced=False,
    ),
    # ros2 bag record on either side (ROS_SECURITY_ENCLAVE_OVERRIDE: its CLI has no --enclave).
    EnclaveSpec(
        RECORDER_ENCLAVE,
        "recorder",
        "ros2 bag record of the trial topics on host or robot",
        nodes=("rosbag2_recorder",),
        nodes_at_root=True,
        subscribe=(*LINK_TOPICS, CMD_RECEIPTS, CLOCK_OFFSET, MOCAP_POSE, MOCAP_FRAMES, *BASE_TOPICS),
    ),
)


def kit_enclave(role: str) -> EnclaveSpec:
    for spec in KIT_ENCLAVES:
        if spec.role == role or spec.path == role:
            return spec
    known = ", ".join(s.role for s in KIT_ENCLAVES)
    raise KeyError(f"unknown enclave {role!r} (known: {known})")


def sros2_name(ns: str, node: str, name: str) -> str:
    """A policy name as sros2 resolves it in a <profile ns= node=> (sros2
    sros2/policy/templates/dds/permissions.xsl, template "topic | service | action"): absolute
    names stay; "~x" becomes ns + "/" + node + "x" (so "~/x" is the node's private "x"); others
    go under ns. The namespace gets a trailing "/" unless it has one."""
    delimited = ns if ns.endswith("/") else ns + "/"
    if name.startswith("/"):
        return name
    if name.startswith("~"):
        return delimited + node + name[1:]
    return delimited + name


def sros2_grants(policy_text: str) -> dict[str, Grants]:
    """Enclave path -> the DDS topic names sros2 derives from a policy file's ALLOW rules (topics:
    rt<name>; services: rq<name>Request / rr<name>Reply by request/reply right), following
    sros2/policy/templates/dds/permissions.xsl. DENY rules and actions are not used by the kit."""
    out: dict[str, Grants] = {}
    for enclave in ET.fromstring(policy_text).iter("enclave"):
        grants = out.setdefault(enclave.get("path", ""), Grants())
        for profile in enclave.iter("profile"):
            ns, node = profile.get("ns", "/"), profile.get("node", "")
            for topics in profile.findall("topics"):
                names = {"rt" + sros2_name(ns, node, t.text or "") for t in topics.findall("topic")}
                if topics.get("publish") == "ALLOW":
                    grants.publish |= names
                if topics.get("subscribe") == "ALLOW":
                    grants.subscribe |= names
            for services in profile.findall("services"):
                full = [sros2_name(ns, node, t.text or "") for t in services.findall("service")]
                request, reply = {f"rq{n}Request" for n in full}, {f"rr{n}Reply" for n in full}
                if services.get("request") == "ALLOW":
                    grants.publish |= request
                    grants.subscribe |= reply
                if services.get("reply") == "ALLOW":
                    grants.publish |= reply
                    grants.subscribe |= request
    return out


def trial_topic(namespace: str, topic: str) -> str:
    """A trial topic under the robot namespace: ('/tb4', '/cmd_vel') -> '/tb4/cmd_vel'."""
    ns = namespace.strip("/")
    name = topic.strip("/")
    return f"/{ns}/{name}" if ns else f"/{name}"


def wire_key(namespace: str, topic: str) -> str:
    """Zenoh key / MQTT topic of a ROS topic, as zenoh-bridge-ros2dds and the kit name it."""
    return trial_topic(namespace, topic).lstrip("/")


@dataclass
class Grants:
    """The DDS topic names an enclave may publish and subscribe."""

    publish: set[str] = field(default_factory=set)
    subscribe: set[str] = field(default_factory=set)


def _policy_name(spec: EnclaveSpec, topic: str, namespace: str) -> str:
    """SROS2 policy names: relative ones resolve under the profile's namespace, absolute ones stay."""
    if spec.namespaced and not spec.nodes_at_root:
        return topic.lstrip("/")
    return trial_topic(namespace if spec.namespaced else "", topic)


def dds_grants(spec: EnclaveSpec, namespace: str = "") -> Grants:
    grants = Grants()
    namespace = namespace if spec.namespaced else ""
    grants.publish |= {"rt" + trial_topic(namespace, t) for t in spec.publish}
    grants.subscribe |= {"rt" + trial_topic(namespace, t) for t in spec.subscribe}
    if spec.ros_node_defaults:
        grants.publish |= {"rt" + t for t in ROS_GLOBAL_PUBLISH}
        grants.subscribe |= {"rt" + t for t in ROS_GLOBAL_SUBSCRIBE}
        for node in spec.nodes:
            for service in ROS_NODE_SERVICES:
                name = sros2_name(spec.node_namespace(namespace) or "/", node, service)
                # request and reply both allowed, as in SROS2's common parameters profile
                pair = {f"rq{name}Request", f"rr{name}Reply"}
                grants.publish |= pair
                grants.subscribe |= pair
    return grants


def _sub(parent: ET.Element, tag: str, text: str | None = None) -> ET.Element:
    child = ET.SubElement(parent, tag)
    if text is not None:
        child.text = text
    return child


def _dds_time(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def _domains(parent: ET.Element, domain_id: int) -> None:
    _sub(_sub(parent, "domains"), "id", str(domain_id))


def _topic_list(parent: ET.Element, tag: str, topics: set[str]) -> None:
    topics_el = _sub(_sub(parent, tag), "topics")
    for topic in sorted(topics):
        _sub(topics_el, "topic", topic)


def permissions_xml(
    spec: EnclaveSpec,
    *,
    domain_id: int,
    not_before: datetime,
    not_after: datetime,
    namespace: str = "",
    allow_ros_discovery_topic: bool = True,
) -> str:
    """The permissions document of one enclave (UTC validity taken from its certificate)."""
    root = ET.Element("dds")
    root.set("xmlns:xsi", "http://www.w3.org/2001/XMLSchema-instance")
    root.set("xsi:noNamespaceSchemaLocation", PERMISSIONS_SCHEMA)
    grant = _sub(_sub(root, "permissions"), "grant")
    grant.set("name", spec.path)
    _sub(grant, "subject_name", f"CN={spec.path}")
    validity = _sub(grant, "validity")
    _sub(validity, "not_before", _dds_time(not_before))
    _sub(validity, "not_after", _dds_time(not_after))
    grants = dds_grants(spec, namespace)
    if grants.publish or grants.subscribe:
        rule = _sub(grant, "allow_rule")
        _domains(rule, domain_id)
        if grants.publish:
            _topic_list(rule, "publish", grants.publish)
        if grants.subscribe:
            _topic_list(rule, "subscribe", grants.subscribe)
    if allow_ros_discovery_topic:
        rule = _sub(grant, "allow_rule")
        _domains(rule, domain_id)
        _topic_list(rule, "publish", {ROS_DISCOVERY_TOPIC})
        _topic_list(rule, "subscribe", {ROS_DISCOVERY_TOPIC})
    _sub(grant, "default", "DENY")
    return _to_text(root)


def policy_xml(specs: tuple[EnclaveSpec, ...], namespace: str = "") -> str:
    """An SROS2 policy file (format 0.2.0) with the same rights, for ``ros2 security`` tools."""
    root = ET.Element("policy", version="0.2.0")
    enclaves = _sub(root, "enclaves")
    for spec in specs:
        enclave = _sub(enclaves, "enclave")
        enclave.set("path", spec.path)
        profiles = _sub(enclave, "profiles")
        for node in spec.nodes or ("fieldtest",):
            # a node given with its own namespace ("vrpn_mocap/vrpn_mocap_client_node") keeps it
            own_ns, _, name = node.rpartition("/")
            node_ns = "/".join(p for p in (spec.node_namespace(namespace).strip("/"), own_ns) if p)
            profile = _sub(profiles, "profile")
            profile.set("ns", "/" + node_ns if node_ns else "/")
            profile.set("node", name)
            _policy_topics(profile, "publish", [_policy_name(spec, t, namespace) for t in spec.publish])
            _policy_topics(profile, "subscribe", [_policy_name(spec, t, namespace) for t in spec.subscribe])
            if spec.ros_node_defaults:
                _policy_topics(profile, "publish", list(ROS_GLOBAL_PUBLISH))
                _policy_topics(profile, "subscribe", list(ROS_GLOBAL_SUBSCRIBE))
                services = _sub(profile, "services")
                services.set("reply", "ALLOW")
                services.set("request", "ALLOW")
                for service in ROS_NODE_SERVICES:
                    _sub(services, "service", service)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + _to_text(root)


def _policy_topics(profile: ET.Element, right: str, topics: list[str]) -> None:
    if not topics:
        return
    el = _sub(profile, "topics")
    el.set(right, "ALLOW")
    for topic in topics:
        _sub(el, "topic", topic)


def _to_text(root: ET.Element) -> str:
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="unicode") + "\n"
