"""STAND-IN for mqtt_client (ika-rwth-aachen) in lab rehearsals. It is NOT the real mqtt_client.

    python -m fieldtest.labrun.rehearsal.mqtt_standin mqtt_client_<role>.yaml

The lab runs ``ros2 run mqtt_client mqtt_client --ros-args --params-file <file>`` on each machine;
mqtt_client cannot be installed from the ROS 2 wheels, so a rehearsal (``planrun --rehearsal``)
runs this in its place, with the same parameter file (``bridges.mqtt_client_params``) and what
mqtt_client 2.x does with it (upstream mqtt_client/src/MqttClient.cpp, v2.5.0; the file is named
where behaviour is copied):

- Parameters: rcl flattens the file's nested keys with "." (``bridge.ros2mqtt.<ros topic>.mqtt_topic``),
  read here the same way (``loadParameters``). Only what the kit generates is supported: primitive
  and json bridges are refused.
- ROS -> MQTT (``setupSubscriptions``, ``ros2mqtt``): every second, for a ROS topic not yet
  subscribed, take the first publisher in the graph, its type and its QoS with the configured
  reliability/durability and depth ``queue_size``; subscribe to the serialized message. For each
  message: publish a serialized ``mqtt_client_interfaces/msg/RosMsgType`` (name, stamped) retained
  on ``mqtt_client/ros_msg_type/<mqtt topic>``, then the serialized message (CDR with its 4-byte
  encapsulation header) on the MQTT topic, prefixed with a serialized builtin_interfaces/Time of
  the send if ``inject_timestamp``.
- MQTT -> ROS (``setupPublishers``, ``connected``, ``message_arrived``, ``mqtt2ros``): with a fixed
  ``ros_type`` the publisher exists from the start and both the data topic and the type topic are
  subscribed; without one only the type topic, and the announcement brings type and "stamped".
  Payloads are published as serialized messages; a stamped one is stripped of its stamp and the
  latency goes to ``~/latencies/<ros topic>`` (std_msgs/Float64).
- MQTT client (``setupClient``, ``connect``): client id ``client.id``, clean session, keep-alive
  60 s, TLS with the CA and client certificate when ``broker.tls.enabled`` (the chain is checked,
  not the host name: mqtt_client's ``client.tls.verify`` defaults to false), automatic reconnect.
  Unlike mqtt_client (Paho C), its sockets send without Nagle's delay (see ``start``), unless
  FIELDTEST_STANDIN_NAGLE=1 (then as Paho C: what the lab's UDP clock source is tested against).
"""

from __future__ import annotations

import argparse
import importlib
import os
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fieldtest.errors import FieldtestError
from fieldtest.middleware.mqtt.settings import MQTT_PORT
from fieldtest.middleware.mqtt.transport import (
    KEEPALIVE_S,
    MAX_INFLIGHT,
    ROS_MSG_TYPE_TOPIC_PREFIX,
    parse_ros_msg_type,
    ros_msg_type_payload,
    split_stamped_payload,
    stamped_payload,
)

if TYPE_CHECKING:
    import paho.mqtt.client as paho

STANDIN_BANNER = (
    "STAND-IN for mqtt_client (fieldtest.labrun.rehearsal.mqtt_standin): not the real mqtt_client"
)
NODE_NAME = "mqtt_client"
CHECK_SUBSCRIPTIONS_S = 1.0  # mqtt_client's check_subscriptions_timer_
KEEP_NAGLE_ENV = "FIELDTEST_STANDIN_NAGLE"  # "1": leave Nagle on, as mqtt_client (Paho C) does
LATENCY_PREFIX = "~/latencies/"  # kLatencyRosTopicPrefix


class StandinConfigError(FieldtestError, ValueError):
    """A parameter file the stand-in (or mqtt_client) cannot use; one line naming file and key."""


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested parameter keys joined with "." as rcl reads a parameter file."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


@dataclass(frozen=True)
class Ros2Mqtt:
    ros_topic: str
    mqtt_topic: str
    inject_timestamp: bool
    queue_size: int
    reliability: str | None  # None: the publisher's (mqtt_client's "auto")
    durability: str | None
    mqtt_qos: int
    retained: bool


@dataclass(frozen=True)
class Mqtt2Ros:
    mqtt_topic: str
    ros_topic: str
    ros_type: str | None  # None: learnt from the type announcement
    queue_size: int
    reliability: str
    durability: str
    mqtt_qos: int


@dataclass(frozen=True)
class StandinConfig:
    host: str
    port: int
    client_id: str
    tls: dict[str, str]  # ca_certificate, certificate, key ({} = plain TCP)
    ros2mqtt: list[Ros2Mqtt]
    mqtt2ros: list[Mqtt2Ros]


def load_config(path: Path) -> StandinConfig:
    """The bridge settings of an mqtt_client parameter file, as mqtt_client's loadParameters reads them."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise StandinConfigError(f"{path}: cannot read the parameter file ({exc})") from None
    nodes = [v for k, v in (doc or {}).items() if k in ("/**", NODE_NAME, f"/{NODE_NAME}")]
    if not nodes or not isinstance(nodes[0], dict) or "ros__parameters" not in nodes[0]:
        raise StandinConfigError(f"{path}: no ros__parameters for /** or {NODE_NAME}")
    params = flatten(nodes[0]["ros__parameters"])

    def get(key: str, default: Any = None, required: bool = False) -> Any:
        if required and key not in params:
            raise StandinConfigError(f"{path}: parameter {key} is missing")
        return params.get(key, default)

    for key in params:
        if key.endswith((".primitive", ".json")) and params[key]:
            raise StandinConfigError(f"{path}: {key}: primitive/json bridges are not in the stand-in")
    tls: dict[str, str] = {}
    if get("broker.tls.enabled", False):
        tls = {
            "ca_certificate": get("broker.tls.ca_certificate", required=True),
            "certificate": get("client.tls.certificate", ""),
            "key": get("client.tls.key", ""),
        }
    out = []
    for ros_topic in get("bridge.ros2mqtt.ros_topics", []):
        pre = f"bridge.ros2mqtt.{ros_topic}."
        out.append(
            Ros2Mqtt(
                ros_topic=ros_topic,
                mqtt_topic=get(pre + "mqtt_topic", required=True),
                inject_timestamp=bool(get(pre + "inject_timestamp", False)),
                queue_size=int(get(pre + "advanced.ros.queue_size", 1)),
                reliability=_policy(get(pre + "advanced.ros.qos.reliability", "auto")),
                durability=_policy(get(pre + "advanced.ros.qos.durability", "auto")),
                mqtt_qos=int(get(pre + "advanced.mqtt.qos", 0)),
                retained=bool(get(pre + "advanced.mqtt.retained", False)),
            )
        )
    into = []
    for mqtt_topic in get("bridge.mqtt2ros.mqtt_topics", []):
        pre = f"bridge.mqtt2ros.{mqtt_topic}."
        into.append(
            Mqtt2Ros(
                mqtt_topic=mqtt_topic,
                ros_topic=get(pre + "ros_topic", required=True),
                ros_type=get(pre + "ros_type"),
                queue_size=int(get(pre + "advanced.ros.queue_size", 1)),
                reliability=get(pre + "advanced.ros.qos.reliability", "system_default"),
                durability=get(pre + "advanced.ros.qos.durability", "system_default"),
                mqtt_qos=int(get(pre + "advanced.mqtt.qos", 0)),
            )
        )
    if not out and not into:
        raise StandinConfigError(f"{path}: no valid ROS-MQTT bridge in parameter 'bridge'")
    return StandinConfig(
        host=get("broker.host", "localhost"),
        port=int(get("broker.port", MQTT_PORT)),  # mqtt_client's default
        client_id=get("client.id", ""),
        tls=tls,
        ros2mqtt=out,
        mqtt2ros=into,
    )


def _policy(value: str) -> str | None:
    return None if value == "auto" else value


def message_class(typename: str) -> Any:
    """The rclpy message class of "pkg/msg/Name" (rosidl_runtime_py's get_message, without it)."""
    package, _, name = typename.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


class MqttClientStandin:
    """The bridge of one machine: an rclpy node and a paho client."""

    def __init__(self, node: Any, config: StandinConfig):
        import paho.mqtt.client as paho

        self.node = node
        self.config = config
        self.log = node.get_logger()
        self.subscriptions: dict[str, Any] = {}  # ROS topic -> subscription
        self.publishers: dict[str, Any] = {}  # MQTT topic -> (publisher, stamped)
        self.latency_publishers: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2,
            client_id=config.client_id,
            clean_session=True,
            protocol=paho.MQTTv311,
        )
        self.client.max_inflight_messages_set(MAX_INFLIGHT)
        self.client.reconnect_delay_set(1, 4)
        if config.tls:
            self.client.tls_set(
                ca_certs=config.tls["ca_certificate"],
                certfile=config.tls["certificate"] or None,
                keyfile=config.tls["key"] or None,
                cert_reqs=ssl.CERT_REQUIRED,
            )
            self.client.tls_insecure_set(True)  # chain checked, host name not (client.tls.verify false)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        for bridge in config.mqtt2ros:  # setupPublishers: fixed types before connecting
            if bridge.ros_type:
                self._ros_publisher(bridge, bridge.ros_type, stamped=False)
        node.create_timer(CHECK_SUBSCRIPTIONS_S, self.setup_subscriptions)

    # ---- MQTT
    def start(self) -> None:
        # One difference from mqtt_client, on purpose: Nagle off unless KEEP_NAGLE_ENV is "1".
        # Paho C, under mqtt_client, sets no TCP_NODELAY (paho.mqtt.c src/Socket.c); with Nagle on
        # here, the clock probes' round trip had a median of 55-79 ms and over TLS the clock
        # pre-flight failed (offset error 14-19 ms). docs/lab-guide.md says what that means in the lab.
        from fieldtest.middleware.mqtt.transport import disable_nagle

        if os.environ.get(KEEP_NAGLE_ENV) != "1":  # "1": send as Paho C does (rehearsals of clock_source)
            self.client.on_socket_open = disable_nagle
        self.log.info(f"Connecting to broker at '{self.config.host}:{self.config.port}'")
        self.client.connect_async(self.config.host, self.config.port, keepalive=KEEPALIVE_S)
        self.client.loop_start()  # retries the first connection and reconnects, as automatic_reconnect

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def _on_connect(
        self,
        client: paho.Client,
        userdata: object,
        flags: paho.ConnectFlags,
        reason_code: paho.ReasonCode,
        properties: paho.Properties | None,
    ) -> None:
        if reason_code.is_failure:
            self.log.error(f"Connection to broker failed ({reason_code}), will automatically retry...")
            return
        self.log.info(f"Connected to broker as '{self.config.client_id}'")
        for bridge in self.config.mqtt2ros:
            client.subscribe(ROS_MSG_TYPE_TOPIC_PREFIX + bridge.mqtt_topic, bridge.mqtt_qos)
            if bridge.ros_type:
                client.subscribe(bridge.mqtt_topic, bridge.mqtt_qos)

    def _on_message(self, client: paho.Client, userdata: object, message: paho.MQTTMessage) -> None:
        arrival_ns = time.time_ns()
        topic = message.topic
        if topic.startswith(ROS_MSG_TYPE_TOPIC_PREFIX):
            self._on_type(topic.removeprefix(ROS_MSG_TYPE_TOPIC_PREFIX), message.payload)
            return
        with self.lock:
            target = self.publishers.get(topic)
        if target is None:
            self.log.warning(f"ROS publisher for data from MQTT topic '{topic}' is not yet initialized")
            return
        publisher, stamped = target
        payload = message.payload
        if stamped:
            stamp_ns, payload = split_stamped_payload(payload)
            self._latency(topic, (arrival_ns - stamp_ns) / 1e9)
        publisher.publish(bytes(payload))

    def _on_type(self, data_topic: str, payload: bytes | bytearray) -> None:
        bridge = next((b for b in self.config.mqtt2ros if b.mqtt_topic == data_topic), None)
        if bridge is None:
            return
        name, stamped = parse_ros_msg_type(payload)
        if bridge.ros_type:  # fixed: the announcement is only checked
            if name != bridge.ros_type:
                self.log.error(f"Unexpected type name received for topic {bridge.ros_topic} ({name})")
            return
        with self.lock:
            known = self.publishers.get(data_topic)
        if known is not None and known[0].msg_type is message_class(name) and known[1] == stamped:
            return
        self._ros_publisher(bridge, name, stamped)
        self.client.subscribe(data_topic, bridge.mqtt_qos)

    def _ros_publisher(self, bridge: Mqtt2Ros, typename: str, stamped: bool) -> None:
        publisher = self.node.create_publisher(
            message_class(typename),
            bridge.ros_topic,
            _qos(bridge.queue_size, bridge.reliability, bridge.durability),
        )
        with self.lock:
            self.publishers[bridge.mqtt_topic] = (publisher, stamped)
        self.log.info(f"ROS publisher message type on topic '{bridge.ros_topic}' set to '{typename}'")

    def _latency(self, mqtt_topic: str, seconds: float) -> None:
        from std_msgs.msg import Float64

        bridge = next(b for b in self.config.mqtt2ros if b.mqtt_topic == mqtt_topic)
        if mqtt_topic not in self.latency_publishers:
            name = (LATENCY_PREFIX + bridge.ros_topic).replace("//", "/", 1)
            self.latency_publishers[mqtt_topic] = self.node.create_publisher(Float64, name, 1)
        self.latency_publishers[mqtt_topic].publish(Float64(data=seconds))

    # ---- ROS
    def setup_subscriptions(self) -> None:
        for bridge in self.config.ros2mqtt:
            if bridge.ros_topic in self.subscriptions:
                continue
            for info in self.node.get_publishers_info_by_topic(bridge.ros_topic):
                qos = _qos(
                    bridge.queue_size,
                    bridge.reliability or _name(info.qos_profile.reliability),
                    bridge.durability or _name(info.qos_profile.durability),
                )
                self.subscriptions[bridge.ros_topic] = self.node.create_subscription(
                    message_class(info.topic_type),
                    bridge.ros_topic,
                    self._sender(bridge, info.topic_type),
                    qos,
                    raw=True,
                )
                self.log.info(f"Subscribed ROS topic '{bridge.ros_topic}' of type '{info.topic_type}'")
                break

    def _sender(self, bridge: Ros2Mqtt, typename: str) -> Callable[[bytes], None]:
        announcement = ros_msg_type_payload(typename, bridge.inject_timestamp)
        type_topic = ROS_MSG_TYPE_TOPIC_PREFIX + bridge.mqtt_topic

        def send(serialized: bytes) -> None:
            self.client.publish(type_topic, announcement, bridge.mqtt_qos, retain=True)
            payload = stamped_payload(serialized, time.time_ns()) if bridge.inject_timestamp else serialized
            self.client.publish(bridge.mqtt_topic, payload, bridge.mqtt_qos, retain=bridge.retained)

        return send


def _name(policy: Any) -> str:
    return policy.name.lower()


def _qos(depth: int, reliability: str, durability: str) -> Any:
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(
        depth=depth,
        reliability=getattr(ReliabilityPolicy, reliability.upper()),
        durability=getattr(DurabilityPolicy, durability.upper()),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fieldtest.labrun.rehearsal.mqtt_standin", description=__doc__
    )
    parser.add_argument(
        "params_file", type=Path, help="mqtt_client parameter file (bridges.mqtt_client_params)"
    )
    args = parser.parse_args(argv)
    try:
        config = load_config(args.params_file)
    except StandinConfigError as exc:
        print(f"fieldtest.labrun.rehearsal.mqtt_standin: {exc}", file=sys.stderr)
        return 2
    import rclpy
    from rclpy.executors import ExternalShutdownException

    print(STANDIN_BANNER, flush=True)
    rclpy.init()
    node = rclpy.create_node(NODE_NAME)
    bridge = MqttClientStandin(node, config)
    bridge.start()
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        bridge.stop()
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
