"""MQTT through Mosquitto: the broker beside the host (``mqtt-local-broker``, the seed study's "no
broker") or on its own machine (``mqtt-broker``). In the lab ika-rwth-aachen ``mqtt_client`` bridges
each side's ROS topics. Security: TLS with client certificates, no anonymous, per-identity ACL.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fieldtest.linkconfig import Role, TransportConfig
from fieldtest.middleware.declaration import Middleware
from fieldtest.middleware.mqtt.security import SETTINGS
from fieldtest.middleware.mqtt.settings import LabSettings, Settings

if TYPE_CHECKING:
    from fieldtest.middleware.launch import LabLaunch, SideProcess
    from fieldtest.middleware.mqtt.infra import MosquittoBroker
    from fieldtest.transport.base import Transport


def broker_address(config: TransportConfig) -> str:
    from fieldtest.middleware.mqtt.infra import mqtt_broker_address

    return mqtt_broker_address(config)


class _Mqtt(Middleware):
    security_settings = SETTINGS
    infra_process = "broker"
    transport_library = "paho.mqtt"
    # MQTT 3.1.1's Remaining Length tops out at 268,435,455 bytes (OASIS MQTT 3.1.1, 2.2.3), less
    # topic and CDR header
    max_payload = 268_435_455 - 64 * 1024
    lab_bridge = "mqtt_client"
    lab_clock_source = (
        "udp"  # Paho C sets no TCP_NODELAY (paho.mqtt.c src/Socket.c): probes wait for delayed ACKs
    )
    rehearsal_note = "mqtt_client runs as the kit's stand-in (fieldtest.labrun.rehearsal.mqtt_standin), not the real mqtt_client"

    def lab_side_processes(
        self, cfg: LabLaunch, config_dir: Path, *, zenohd: str | None = None
    ) -> list[SideProcess]:
        from fieldtest.middleware.mqtt.lab import lab_side_processes

        return lab_side_processes(cfg, config_dir)

    def rehearsal_side_process(
        self, proc: SideProcess, cfg: LabLaunch, config_dir: Path, python: str
    ) -> SideProcess | str:
        from fieldtest.middleware.mqtt.lab import rehearsal_side_process

        return rehearsal_side_process(proc, config_dir, python)

    def rehearsal_machine_process(self, cfg: LabLaunch, log_dir: Path) -> tuple[SideProcess, str] | None:
        from fieldtest.middleware.mqtt.infra import MOSQUITTO_READY
        from fieldtest.middleware.mqtt.lab import broker_machine_process

        proc = broker_machine_process(cfg, log_dir)
        return None if proc is None else (proc, MOSQUITTO_READY)

    def rehearsal_problem(self, distro: str, nodes_distro: str, python: str) -> str:
        import shutil

        from fieldtest.middleware.mqtt.lab import MOSQUITTO

        return (
            ""
            if shutil.which(MOSQUITTO)
            else "mosquitto is not installed: apt install mosquitto (tools/install.sh does)"
        )

    def lab_command_publisher_before_commands(self, cfg: LabLaunch) -> bool:
        # with the sender's timestamp the robot's mqtt_client has no fixed ros_type: it creates its
        # ROS publisher on the type announcement, which comes with the first command (mqtt/lab.py)
        return not cfg.lab_settings(LabSettings).inject_timestamp

    def open_transport(self, config: TransportConfig, role: Role) -> Transport:
        from fieldtest.middleware.mqtt.security import configure_client
        from fieldtest.middleware.mqtt.transport import open_mqtt

        configure = configure_client(config, role) if config.security != "none" else None
        return open_mqtt(config, role, configure_client=configure)

    def infrastructure(
        self,
        config: TransportConfig,
        workdir: str | Path,
        *,
        prefix: list[str] | None = None,
        realtime: bool = False,
    ) -> MosquittoBroker:
        from fieldtest.middleware.mqtt import infra as broker
        from fieldtest.middleware.mqtt.security import listener_lines

        folder = Path(workdir) / "broker"
        address = broker.mqtt_broker_address(config)
        lines = None
        if config.security != "none":
            acl = folder / "acl"  # per broker: trials sharing a keystore keep their own ACL
            acl.parent.mkdir(parents=True, exist_ok=True)
            lines = listener_lines(config, address, config.settings(Settings).port, acl)
        return broker.MosquittoBroker(
            config,
            folder,
            prefix=prefix or (),
            listener_lines=lines,
            realtime=realtime,
        )


class MqttLocalBroker(_Mqtt):
    name = "mqtt-local-broker"
    summary = "MQTT with Mosquitto beside the host (the seed study's 'no broker')"

    def lab_host_starts(self, router_on_host: bool) -> str | None:
        return "broker"


class MqttBroker(_Mqtt):
    name = "mqtt-broker"
    summary = "MQTT with Mosquitto on a machine of its own"
    infra_node = "broker"


MIDDLEWARES = (MqttLocalBroker(), MqttBroker())
