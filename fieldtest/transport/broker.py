"""Infrastructure processes of the middlewares: a Zenoh router and a Mosquitto MQTT broker.

Both run as separate OS processes, started and always stopped by a context manager:

    with ZenohRouter(config):              # router at tcp/<router_address>:<zenoh_port>
        ...
    with MosquittoBroker(config, workdir):  # broker at mqtt_broker_address(config):<mqtt_port>
        ...

``prefix`` (e.g. ``["ip", "netns", "exec", "ns1"]``) runs the process inside a network namespace;
readiness is then read from the process' own log, since the port may be unreachable from here.

Command line (a router on its own machine or namespace):
    python -m fieldtest.transport.broker zenoh-router --address 10.0.0.1 --port 7447
    python -m fieldtest.transport.broker mosquitto --address 10.0.0.1 --port 1883 --workdir /tmp/mq
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..names import MQTT_PORT, ZENOH_PORT
from ..procs import DEFAULT_START_TIMEOUT_S, ManagedProcess, ProcessStartError
from .base import TransportConfig

MOSQUITTO = "/usr/sbin/mosquitto"
ZENOH_ROUTER_READY = "zenoh-router ready"
MOSQUITTO_READY = " running"  # "mosquitto version 2.0.11 running", logged once the listeners are open


class BrokerError(ProcessStartError):
    """A router/broker process could not be started."""


# ----------------------------------------------------------------------------------------------- Zenoh router


def router_session_config(config: TransportConfig, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Session config of a Zenoh router listening on tcp/<router_address>:<zenoh_port>, no scouting."""
    from .zenoh_ import deep_merge, tcp_endpoint

    session_config = {
        "mode": "router",
        "listen": {"endpoints": [tcp_endpoint(config.router_address, config.zenoh_port)]},
        "connect": {"endpoints": []},
        "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}},
    }
    return deep_merge(session_config, overrides) if overrides else session_config


def run_zenoh_router(
    config: TransportConfig, stop: threading.Event | None = None, overrides: dict[str, Any] | None = None
) -> None:
    """Run a Zenoh router until ``stop`` is set (or SIGTERM/SIGINT when run as a main program)."""
    from .zenoh_ import open_session

    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    session_config = router_session_config(config, overrides)
    session = open_session(session_config)
    try:
        print(
            f"{ZENOH_ROUTER_READY} {session_config['listen']['endpoints'][0]} zid={session.zid()}", flush=True
        )
        while not stop.wait(0.2):  # short waits so signal handlers run promptly
            pass
    finally:
        session.close()


def zenoh_router_command(config: TransportConfig, overrides: dict[str, Any] | None = None) -> list[str]:
    argv = [sys.executable, "-m", "fieldtest.transport.broker", "zenoh-router"]
    argv += ["--address", config.router_address, "--port", str(config.zenoh_port)]
    if overrides:
        argv += ["--overrides-json", json.dumps(overrides)]
    return argv


class ZenohRouter(ManagedProcess):
    """A Zenoh router as a subprocess at tcp/<router_address>:<zenoh_port>.

    With ``config.security`` set and no ``overrides``, it listens with the router's TLS identity
    and the access control from ``config.keystore`` (tls/<router_address>:<zenoh_port>).
    """

    start_error = BrokerError

    def __init__(
        self,
        config: TransportConfig,
        *,
        prefix: Sequence[str] = (),
        overrides: dict[str, Any] | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        realtime: bool = False,
    ):
        if overrides is None and config.security != "none":
            from fieldtest.security import zenoh_config_overrides

            overrides = zenoh_config_overrides(config, "router", router_session_config(config))
        super().__init__(
            "zenoh router",
            [*prefix, *zenoh_router_command(config, overrides)],
            address=config.router_address,
            port=config.zenoh_port,
            ready_text=ZENOH_ROUTER_READY,
            check_port=not prefix,
            start_timeout_s=start_timeout_s,
            realtime=realtime,
        )


# ----------------------------------------------------------------------------------------------- Mosquitto


def mqtt_broker_address(config: TransportConfig) -> str:
    """Where the broker runs: beside the host ("mqtt-local-broker") or on its own ("mqtt-broker")."""
    if config.middleware == "mqtt-local-broker":
        return config.host_address
    if config.middleware == "mqtt-broker":
        return config.broker_address
    raise BrokerError(f"middleware {config.middleware!r} is not an MQTT middleware")


def mosquitto_listener_lines(
    config: TransportConfig, address: str, port: int, acl_path: str | Path | None = None
) -> list[str]:
    """The listener block of mosquitto.conf for ``config.security``.

    "none": a plain anonymous listener. Otherwise the TLS listener from ``config.keystore``
    (``fieldtest.security.mosquitto_listener_lines``: cafile/certfile/keyfile, require_certificate,
    use_identity_as_username, allow_anonymous false, the ACL written to ``acl_path``); a missing or
    invalid broker identity raises KeystoreError / SecuritySettingError.
    """
    if config.security != "none":
        from fieldtest.security import mosquitto_listener_lines as secure_listener_lines

        return secure_listener_lines(config, address, port, acl_path)
    return [f"listener {port} {address}", "allow_anonymous true"]


def mosquitto_conf(
    config: TransportConfig,
    address: str,
    port: int,
    listener_lines: Sequence[str] | None = None,
    acl_path: str | Path | None = None,
) -> str:
    """A complete mosquitto.conf: no persistence, log to stderr (unbuffered, so readiness is visible)."""
    lines = [
        "# written by fieldtest.transport.broker",
        "per_listener_settings false",
        "persistence false",
        "log_dest stderr",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "log_type information",
        "connection_messages true",
        # Nagle's algorithm holds small messages back up to ~40 ms: it would dominate every latency.
        "set_tcp_nodelay true",
    ]
    lines += (
        list(listener_lines)
        if listener_lines is not None
        else mosquitto_listener_lines(config, address, port, acl_path)
    )
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

    With ``config.security`` set and no ``listener_lines``, the listener is the TLS one from
    ``config.keystore`` with its ACL in ``<workdir>/acl``.
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
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        realtime: bool = False,
    ):
        address = mqtt_broker_address(config)
        self.conf_path = Path(workdir) / "mosquitto.conf"
        acl_path = None
        if listener_lines is None and config.security != "none":
            acl_path = Path(workdir) / "acl"  # per broker: trials sharing a keystore keep their own ACL
            acl_path.parent.mkdir(parents=True, exist_ok=True)
        self.conf_text = mosquitto_conf(config, address, config.mqtt_port, listener_lines, acl_path)
        self.binary = binary
        self.prefix = list(prefix)
        super().__init__(
            "mosquitto",
            [*prefix, binary, "-c", str(self.conf_path)],
            address=address,
            port=config.mqtt_port,
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


def middleware_process(
    config: TransportConfig, workdir: str | Path, *, prefix: Sequence[str] = (), realtime: bool = False
) -> ManagedProcess | None:
    """The router or broker ``config.middleware`` needs (not started), or None if it needs none."""
    if config.middleware == "zenoh-router":
        return ZenohRouter(config, prefix=prefix, realtime=realtime)
    if config.middleware.startswith("mqtt"):
        return MosquittoBroker(config, Path(workdir) / "broker", prefix=prefix, realtime=realtime)
    return None


# ----------------------------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fieldtest.transport.broker", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="kind", required=True)
    router = sub.add_parser("zenoh-router", help="run a Zenoh router until SIGTERM/SIGINT")
    router.add_argument("--address", default="0.0.0.0")
    router.add_argument("--port", type=int, default=ZENOH_PORT)
    router.add_argument("--overrides-json", default="", help="JSON object deep-merged into the router config")
    mosq = sub.add_parser("mosquitto", help="write mosquitto.conf and run Mosquitto in the foreground")
    mosq.add_argument("--address", default="0.0.0.0")
    mosq.add_argument("--port", type=int, default=MQTT_PORT)
    mosq.add_argument("--workdir", required=True)
    args = parser.parse_args(argv)

    if args.kind == "zenoh-router":
        config = TransportConfig(middleware="zenoh-router", router_address=args.address, zenoh_port=args.port)
        overrides = json.loads(args.overrides_json) if args.overrides_json else None
        run_zenoh_router(config, overrides=overrides)
        return 0
    config = TransportConfig(middleware="mqtt-broker", broker_address=args.address, mqtt_port=args.port)
    conf_path = Path(args.workdir) / "mosquitto.conf"
    conf_path.parent.mkdir(parents=True, exist_ok=True)
    conf_path.write_text(mosquitto_conf(config, args.address, args.port))
    binary = find_mosquitto()
    os.execv(binary, [binary, "-c", str(conf_path)])
    return 1  # not reached


if __name__ == "__main__":
    from .zenoh_ import ZenohTransportError

    try:
        sys.exit(main())
    except (BrokerError, ZenohTransportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
