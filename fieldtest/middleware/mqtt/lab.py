"""MQTT's lab side: mqtt_client parameter files and the Mosquitto broker config of a lab side.

mqtt_client (ika-rwth-aachen, ROS 2 2.3+ layout): ``bridge.ros2mqtt.ros_topics`` lists the ROS
topics, each with its own ``mqtt_topic``/``primitive``/``ros_type``/``inject_timestamp``/``advanced``
block; ``bridge.mqtt2ros.mqtt_topics`` likewise with ``ros_topic``. Receivers get a fixed
``ros_type`` so they need not wait for the retained type announcement, except with
``inject_timestamp``: a receiver with a fixed type never reads the announcement, and only the
announcement tells it that the payload starts with a timestamp (mqtt_client
src/MqttClient.cpp, ``message_arrived``/``mqtt2ros``; mqtt2ros has no inject_timestamp parameter).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from fieldtest.catalog import catalog_entry
from fieldtest.middleware import registry
from fieldtest.middleware.labshared import (
    BridgeConfigError,
    link_topics,
    received_by,
    ros_topic,
    sent_by,
    topic_qos,
    wire_name,
)
from fieldtest.middleware.launch import LabLaunch, SideProcess
from fieldtest.middleware.mqtt.infra import mosquitto_conf as broker_conf
from fieldtest.middleware.mqtt.infra import plain_listener_lines
from fieldtest.middleware.mqtt.security import mosquitto_acl as acl_for_flows
from fieldtest.middleware.mqtt.security import mosquitto_tls_lines
from fieldtest.middleware.mqtt.settings import LabSettings
from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
from fieldtest.qos import get_qos, mqtt_qos

MOSQUITTO = "mosquitto"
# The rehearsal's mqtt_client (python -m; the ROS environment runs it, so no import from here)
MQTT_STANDIN = "fieldtest.labrun.rehearsal.mqtt_standin"
MQTT_BRIDGE = "mqtt_client"


# ------------------------------------------------------------------------------------------ MQTT


def _mqtt_bridged(cfg: LabLaunch) -> bool:
    return registry.get(cfg.middleware).lab_bridge == MQTT_BRIDGE


def mqtt_broker_host(cfg: LabLaunch) -> str:
    """The broker's address: the host's (mqtt-local-broker) or its own (mqtt-broker)."""
    listener = catalog_entry(cfg.middleware).listener
    if not _mqtt_bridged(cfg) or listener is None:
        raise BridgeConfigError(f"middleware {cfg.middleware!r} has no MQTT broker")
    return getattr(cfg, listener[1])


def _ros_qos_params(qos_name: str) -> dict[str, Any]:
    qos = get_qos(qos_name)
    return {"queue_size": qos.depth, "qos": {"reliability": qos.reliability, "durability": qos.durability}}


def mqtt_client_params(cfg: LabLaunch) -> dict[str, Any]:
    """mqtt_client's parameter file content for this side."""
    if not _mqtt_bridged(cfg):
        raise BridgeConfigError(f"middleware {cfg.middleware!r} has no MQTT bridge")
    broker: dict[str, Any] = {"host": mqtt_broker_host(cfg), "port": cfg.settings(MqttSettings).port}
    client: dict[str, Any] = {"id": f"fieldtest_{cfg.role}"}
    if cfg.security != "none":
        from fieldtest.security.keystore import tls_files

        files = tls_files(cfg.keystore, cfg.role)
        broker["tls"] = {"enabled": True, "ca_certificate": str(Path(files.ca).absolute())}
        client["tls"] = {
            "certificate": str(Path(files.cert).absolute()),
            "key": str(Path(files.key).absolute()),
        }
    inject_timestamp = cfg.lab_settings(LabSettings).inject_timestamp
    ros2mqtt: dict[str, Any] = {"ros_topics": [ros_topic(cfg, t.topic) for t in sent_by(cfg)]}
    for t in sent_by(cfg):
        # as the node's publisher: a reliable subscription never matches a best-effort publisher
        qos = topic_qos(t.topic, cfg.qos)
        ros2mqtt[ros_topic(cfg, t.topic)] = {
            "mqtt_topic": wire_name(cfg, t.topic),
            "primitive": False,
            "inject_timestamp": inject_timestamp,
            "advanced": {"ros": _ros_qos_params(qos), "mqtt": {"qos": mqtt_qos(qos), "retained": False}},
        }
    mqtt2ros: dict[str, Any] = {"mqtt_topics": [wire_name(cfg, t.topic) for t in received_by(cfg)]}
    for t in received_by(cfg):
        block: dict[str, Any] = {"ros_topic": ros_topic(cfg, t.topic), "primitive": False}
        if not inject_timestamp:  # else the type (and the stamp flag) come from the sender
            block["ros_type"] = t.typename
        qos = topic_qos(t.topic, cfg.qos)
        block["advanced"] = {
            "mqtt": {"qos": mqtt_qos(qos)},
            "ros": {**_ros_qos_params(qos), "latched": False},
        }
        mqtt2ros[wire_name(cfg, t.topic)] = block
    return {
        "/**": {
            "ros__parameters": {
                "broker": broker,
                "client": client,
                "bridge": {"ros2mqtt": ros2mqtt, "mqtt2ros": mqtt2ros},
            }
        }
    }


def check_mqtt_client_pair(sender: dict[str, Any], receiver: dict[str, Any]) -> list[str]:
    """Problems of two mqtt_client parameter files (``mqtt_client_params`` output) that would garble
    or drop messages: every sent MQTT topic needs a receiver, and a timestamp-injecting sender needs
    a receiver without a fixed ``ros_type`` (mqtt_client learns "stamped" only from the type
    announcement, which a fixed-type receiver ignores: it would publish stamp + message as the
    message; mqtt_client src/MqttClient.cpp)."""
    out = next(iter(sender.values()))["ros__parameters"]["bridge"]["ros2mqtt"]
    into = next(iter(receiver.values()))["ros__parameters"]["bridge"]["mqtt2ros"]
    problems = []
    for ros_name in out["ros_topics"]:
        block = out[ros_name]
        mqtt_topic = block["mqtt_topic"]
        if mqtt_topic not in into.get("mqtt_topics", []):
            problems.append(f"{mqtt_topic}: sent, but no mqtt2ros entry receives it")
        elif block.get("inject_timestamp") and not block.get("primitive") and "ros_type" in into[mqtt_topic]:
            problems.append(
                f"{mqtt_topic}: inject_timestamp with a fixed ros_type on the receiver: the stamp "
                "would be published as part of the message"
            )
    return problems


def to_yaml(data: dict[str, Any], comment: str = "") -> str:
    header = f"# {comment}\n" if comment else ""
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def mqtt_client_command(params_path: str | Path) -> list[str]:
    return ["ros2", "run", "mqtt_client", "mqtt_client", "--ros-args", "--params-file", str(params_path)]


def mosquitto_acl(cfg: LabLaunch) -> str:
    """ACL by certificate CN (security's one ACL writer, for this trial's link topics): each side
    writes what it sends, reads what it receives, with mqtt_client's type announcements."""
    flows = [(wire_name(cfg, t.topic), t.sender) for t in link_topics(cfg)]
    return acl_for_flows(flows, "fieldtest lab ACL (generated)")


def mosquitto_conf(
    cfg: LabLaunch,
    acl_path: str | Path | None = None,
    *,
    bind_address: str = "0.0.0.0",
    run_as: str | None = None,
) -> str:
    """mosquitto.conf (2.x) for the broker of an MQTT trial, plain or TLS with client certificates:
    the twin's broker config (``fieldtest.middleware.mqtt.infra.mosquitto_conf``) around this listener.

    Started as root, Mosquitto drops to the ``mosquitto`` user before reading the ACL: ``run_as``
    sets the ``user`` option when the files are readable only by another user.
    """
    if cfg.security == "none":
        listener = plain_listener_lines(bind_address, cfg.settings(MqttSettings).port)
    elif acl_path is None:
        raise BridgeConfigError("a TLS broker needs its ACL file path")
    else:
        listener = mosquitto_tls_lines(
            cfg.keystore, acl_path, port=cfg.settings(MqttSettings).port, bind_address=bind_address
        )
    return broker_conf(
        listener, run_as=run_as, comment="fieldtest lab broker (generated by fieldtest.middleware.zenoh.lab)"
    )


# Mosquitto options that per_listener_settings ties to the listener defined before them.
PER_LISTENER_OPTIONS = ("allow_anonymous", "acl_file")


def two_listener_mosquitto_conf(
    cfg: LabLaunch,
    acl_path: str | Path,
    *,
    plain_port: int,
    bind_address: str = "0.0.0.0",
    run_as: str | None = None,
) -> str:
    """mosquitto.conf for a separate broker machine serving a campaign with security off and on:
    a plain anonymous listener on ``plain_port`` and the TLS listener of ``cfg`` (client
    certificates, the trial's ACL) on ``cfg.settings(MqttSettings).port``, each with its own settings."""
    if cfg.security == "none" or not _mqtt_bridged(cfg):
        raise BridgeConfigError("broker-config: needs an MQTT middleware with security on (the TLS listener)")
    if plain_port == cfg.settings(MqttSettings).port:
        raise BridgeConfigError(f"broker-config: plain and TLS listeners both on port {plain_port}")
    tls = mosquitto_tls_lines(
        cfg.keystore, acl_path, port=cfg.settings(MqttSettings).port, bind_address=bind_address
    )
    own = [line for line in tls if line.startswith(PER_LISTENER_OPTIONS)]
    listeners = [*plain_listener_lines(bind_address, plain_port), *[x for x in tls if x not in own], *own]
    comment = "fieldtest lab broker, plain and TLS listeners (generated by fieldtest.middleware.zenoh.lab)"
    return broker_conf(listeners, run_as=run_as, comment=comment, per_listener_settings=True)


def broker_user() -> str | None:
    """Started as root, Mosquitto drops to the ``mosquitto`` user before it reads the ACL and the
    keystore's files, which the launching user owns (a private folder: "Error opening acl file"):
    as root it keeps root's identity. None for anyone else (Mosquitto then runs as that user)."""
    if os.geteuid() != 0:
        return None
    import pwd

    return pwd.getpwuid(0).pw_name


def lab_side_processes(cfg: LabLaunch, folder: Path) -> list[SideProcess]:
    """This side's mqtt_client, and on the host Mosquitto where it runs the broker."""
    out: list[SideProcess] = []
    if cfg.start_broker and cfg.role == "host":
        files = {}
        acl = folder / "mosquitto.acl"
        if cfg.security != "none":
            files[acl.name] = mosquitto_acl(cfg)
        conf = folder / "mosquitto.conf"
        files[conf.name] = mosquitto_conf(cfg, acl, run_as=broker_user())
        out.append(SideProcess("mosquitto", [MOSQUITTO, "-c", str(conf)], {}, files))
    params = folder / f"mqtt_client_{cfg.role}.yaml"
    text = to_yaml(mqtt_client_params(cfg), f"fieldtest lab mqtt_client, {cfg.role} side (generated)")
    out.append(SideProcess("mqtt_client", mqtt_client_command(params), {}, {params.name: text}))
    return out


def broker_machine_process(cfg: LabLaunch, folder: Path) -> SideProcess | None:
    """Mosquitto of the separate broker machine (the host starts none: mqtt-broker), with the kit's
    broker config and ACL written to ``folder``; None where the host runs the broker."""
    if cfg.start_broker:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    acl = folder / "mosquitto.acl"
    if cfg.security != "none":
        acl.write_text(mosquitto_acl(cfg))
    conf = folder / "mosquitto.conf"
    conf.write_text(mosquitto_conf(cfg, acl, bind_address=cfg.broker_address, run_as=broker_user()))
    return SideProcess("broker", [MOSQUITTO, "-c", str(conf)], {}, {})


def rehearsal_side_process(proc: SideProcess, config_dir: Path, python: str) -> SideProcess | str:
    """mqtt_client as the kit's stand-in (same parameter file); Mosquitto as it is, if installed."""
    if proc.name == "mqtt_client":
        argv = [python, "-m", MQTT_STANDIN, str(config_dir / next(iter(proc.config_files)))]
        return SideProcess(proc.name, argv, dict(proc.env), proc.config_files)
    if proc.name == "mosquitto" and not shutil.which(MOSQUITTO):
        return "mosquitto is not installed (apt install mosquitto; tools/install.sh does)"
    return proc
