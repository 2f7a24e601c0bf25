"""MQTT's infrastructure process: a Mosquitto broker, a separate OS process started and always
stopped by a context manager:

    with MosquittoBroker(config, workdir):  # broker at mqtt_broker_address(config):<mqtt.port>
        ...

Secured, it takes the listener lines security makes (``listener_lines``): build it through
``fieldtest.middleware.registry.infrastructure``, which does.

``prefix`` (e.g. ``["ip", "netns", "exec", "ns1"]``) runs the process inside a network namespace;
readiness is then read from the process' own log, since the port may be unreachable from here.

Command line (a broker on its own machine or namespace):
    python -m fieldtest.middleware.mqtt.infra --address 10.0.0.1 --port 1883 --workdir /tmp/mq
"""

from __future__ import annotations

import argparse
import getpass
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from fieldtest.catalog import catalog_entry
from fieldtest.middleware.mqtt.settings import MQTT_PORT, Settings
from fieldtest.procs import DEFAULT_START_TIMEOUT_S, ManagedProcess, ProcessStartError
from fieldtest.transport.base import TransportConfig, require_fragment

MOSQUITTO = "/usr/sbin/mosquitto"
MOSQUITTO_READY = " running"  # "mosquitto version 2.0.11 running", logged once the listeners are open


class BrokerError(ProcessStartError):
    """The broker process could not be started."""


# ----------------------------------------------------------------------------------------------- Mosquitto


def mqtt_broker_address(config: TransportConfig) -> str:
    """Where the broker runs: beside the host ("mqtt-local-broker") or on its own ("mqtt-broker")."""
    entry = catalog_entry(config.middleware)
    if entry.family == "mqtt" and entry.listener:
        return getattr(config, entry.listener[1])
    raise BrokerError(f"middleware {config.middleware!r} is not an MQTT middleware")


def plain_listener_lines(address: str, port: int) -> list[str]:
    """An anonymous listener (security "none"); security writes the TLS one."""
    return [f"listener {port} {address}", "allow_anonymous true"]


def mosquitto_conf(
    listener_lines: Sequence[str],
    *,
    run_as: str | None = None,
    comment: str = "",
    per_listener_settings: bool = False,
) -> str:
    """A complete mosquitto.conf (2.x) around ``listener_lines``, for the twin and the lab alike: no
    persistence, log to stderr (unbuffered, so readiness is visible), no Nagle, no QoS 1 throttling.

    ``run_as`` is the account Mosquitto keeps when started as root (its default, ``mosquitto``,
    cannot read a 0600 broker key); ignored when started by another user. With
    ``per_listener_settings`` each listener's own ``allow_anonymous``/``acl_file`` follow its
    ``listener`` line (a plain and a TLS listener in one broker).
    """
    lines = [
        f"# {comment or 'written by fieldtest.middleware.mqtt.infra'}",
        *([f"user {run_as}"] if run_as else []),
        f"per_listener_settings {'true' if per_listener_settings else 'false'}",
        "persistence false",
        "log_dest stderr",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "log_type information",
        "connection_messages true",
        # Nagle's algorithm holds small messages back up to ~40 ms: it would dominate every latency.
        "set_tcp_nodelay true",
        "max_inflight_messages 0",  # no throttling of QoS 1 flows (mqtt_client's max_inflight is 65535)
        *listener_lines,
    ]
    return "\n".join(lines) + "\n"


def find_mosquitto(binary: str = MOSQUITTO) -> str:
    path = binary if os.path.isabs(binary) else shutil.which(binary)
    if not path or not os.access(path, os.X_OK):
        raise BrokerError(
            f"{binary}: Mosquitto is not installed (apt install mosquitto, or run tools/install.sh)"
        )
    return path


class MosquittoBroker(ManagedProcess):
    """Debian's Mosquitto as a subprocess, configured by ``<workdir>/mosquitto.conf``.

    ``listener_lines`` default to a plain listener; a secured ``config`` needs them (the TLS
    listener and ACL security writes). ``run_as`` (see ``mosquitto_conf``) defaults to the current
    user for a TLS listener, whose key and ACL only this user may read.
    """

    start_error = BrokerError

    def __init__(
        self,
        config: TransportConfig,
        workdir: str | Path,
        *,
        prefix: Sequence[str] = (),
        binary: str = MOSQUITTO,
        listener_lines: Sequence[str] | None = None,
        run_as: str | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        realtime: bool = False,
    ):
        require_fragment(config, listener_lines, "Mosquitto TLS listener")
        address = mqtt_broker_address(config)
        self.conf_path = Path(workdir) / "mosquitto.conf"
        lines = (
            listener_lines
            if listener_lines is not None
            else plain_listener_lines(address, config.settings(Settings).port)
        )
        if run_as is None and listener_lines is not None:
            run_as = getpass.getuser()
        self.conf_text = mosquitto_conf(lines, run_as=run_as)
        self.binary = binary
        self.prefix = list(prefix)
        super().__init__(
            "mosquitto",
            [*prefix, binary, "-c", str(self.conf_path)],
            address=address,
            port=config.settings(Settings).port,
            ready_text=MOSQUITTO_READY,
            check_port=not prefix,
            start_timeout_s=start_timeout_s,
            realtime=realtime,
        )

    def start(self) -> None:
        self.argv = [*self.prefix, find_mosquitto(self.binary), "-c", str(self.conf_path)]
        self.conf_path.parent.mkdir(parents=True, exist_ok=True)
        self.conf_path.write_text(self.conf_text)
        super().start()


# ----------------------------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fieldtest.middleware.mqtt.infra",
        description="write mosquitto.conf and run Mosquitto in the foreground",
    )
    parser.add_argument("--address", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=MQTT_PORT)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args(argv)
    conf_path = Path(args.workdir) / "mosquitto.conf"
    conf_path.parent.mkdir(parents=True, exist_ok=True)
    conf_path.write_text(mosquitto_conf(plain_listener_lines(args.address, args.port)))
    binary = find_mosquitto()
    os.execv(binary, [binary, "-c", str(conf_path)])
    return 1  # not reached


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
