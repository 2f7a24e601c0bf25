"""A rogue party on a trial's link (run by tests/test_security_proof.py, not collected by pytest).

usage: security_rogue.py SPEC_JSON

SPEC_JSON: {"transport": TransportConfig fields of the trial, "seq_base": first seq of own commands,
"rogues": [{"variant": ..., "keystore": ..., "enclave": ..., "tls": {"ca", "cert", "key"}}, ...]}.
Variants: "no-credentials" (security off), "foreign-ca" (an identity from another CA),
"no-permission" (trusted CA, permissions without /cmd_vel), "expired" (trusted CA, expired).
A DDS process holds one identity, so DDS rogues run one per process; Zenoh and MQTT rogues may share
one (each has its own session or client, hence its own TLS connection).

Each rogue joins the link with its own credentials, bypassing the kit's credential checks (a rogue
does not cooperate), subscribes to /cmd_vel and publishes commands there until a "STOP" line
arrives on stdin. The process prints "ROGUE READY" once every rogue has tried to join, subscribe
and create a publisher, and at the end one JSON line per rogue: how far it got, the errors met, the
commands it sent, and those it received from others (seq below its seq base) and from itself.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fieldtest import rosmsg
from fieldtest.middleware.registry import open_transport
from fieldtest.transport import TransportConfig

CMD_VEL = "/cmd_vel"
ROGUE_SPEED = 0.05
SEND_PERIOD_S = 0.02
CONNECT_TIMEOUT_S = 3.0
MAX_RUN_S = 90.0
SEQ_STRIDE = 100_000  # rogue i of a process numbers its commands from seq_base + i * SEQ_STRIDE


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def open_dds_rogue(config: TransportConfig, rogue: dict[str, Any]):
    from fieldtest.middleware.dds import transport as dds
    from fieldtest.middleware.dds.security import dds_security_xml

    xml = dds_security_xml(rogue["keystore"], rogue["enclave"], config.security)
    return dds.open_dds(config, "host", security_xml=xml)  # its own <Security> block, no kit checks


def open_fastdds_rogue(config: TransportConfig, rogue: dict[str, Any]):
    from fieldtest.middleware.fastdds.security import fastdds_security_properties
    from fieldtest.middleware.fastdds.transport import open_fastdds

    properties = fastdds_security_properties(rogue["keystore"], rogue["enclave"], config.security)
    return open_fastdds(config, "host", security_properties=properties)  # its own identity, no kit checks


def open_zenoh_rogue(config: TransportConfig, rogue: dict[str, Any]):
    from fieldtest.middleware.zenoh.transport import open_zenoh, zenoh_config

    base = zenoh_config(config, "host", connect_timeout_s=CONNECT_TIMEOUT_S)
    tls = rogue["tls"]
    link_tls = {
        "root_ca_certificate": tls["ca"],
        "listen_certificate": tls["cert"],
        "listen_private_key": tls["key"],
        "connect_certificate": tls["cert"],
        "connect_private_key": tls["key"],
        "enable_mtls": True,
        "verify_name_on_connect": True,
    }
    overrides = {
        "transport": {"link": {"protocols": ["tls"], "tls": link_tls}},
        "connect": {"endpoints": ["tls/" + e[4:] for e in base["connect"]["endpoints"]]},
    }
    return open_zenoh(config, "host", config_overrides=overrides, connect_timeout_s=CONNECT_TIMEOUT_S)


def open_mqtt_rogue(config: TransportConfig, rogue: dict[str, Any]):
    from fieldtest.middleware.mqtt.transport import open_mqtt

    tls = rogue["tls"]

    def configure(client) -> None:
        client.tls_set(ca_certs=tls["ca"], certfile=tls["cert"], keyfile=tls["key"])

    return open_mqtt(config, "host", configure_client=configure, connect_timeout_s=CONNECT_TIMEOUT_S)


def open_rogue(config: TransportConfig, rogue: dict[str, Any]):
    if rogue["variant"] == "no-credentials":
        plain = config.model_copy(update={"security": "none", "keystore": ""})
        if plain.middleware.startswith("zenoh"):
            from fieldtest.middleware.zenoh.transport import open_zenoh

            return open_zenoh(plain, "host", connect_timeout_s=CONNECT_TIMEOUT_S)
        if plain.middleware.startswith("mqtt"):
            from fieldtest.middleware.mqtt.transport import open_mqtt

            return open_mqtt(plain, "host", connect_timeout_s=CONNECT_TIMEOUT_S)
        return open_transport(plain, "host")
    if config.middleware == "dds":
        return open_dds_rogue(config, rogue)
    if config.middleware == "fastdds":
        return open_fastdds_rogue(config, rogue)
    if config.middleware.startswith("zenoh"):
        return open_zenoh_rogue(config, rogue)
    return open_mqtt_rogue(config, rogue)


class Rogue:
    def __init__(self, config: TransportConfig, spec: dict[str, Any], seq_base: int):
        self.seq_base = seq_base
        self.report: dict[str, Any] = {
            "variant": spec["variant"],
            "seq_base": seq_base,
            "joined": False,
            "subscribed": False,
            "publisher": False,
            "sent": 0,
            "received_others": 0,
            "received_own": 0,
            "errors": [],
        }
        self._lock = threading.Lock()
        self.transport = None
        self.publish = None
        try:
            self.transport = open_rogue(config, spec)
            self.report["joined"] = True
        except Exception as exc:
            self.report["errors"].append(f"join: {_one_line(exc)}")
            return
        try:
            self.transport.subscribe(CMD_VEL, rosmsg.TWIST_STAMPED, self._on_command)
            self.report["subscribed"] = True
        except Exception as exc:
            self.report["errors"].append(f"subscribe: {_one_line(exc)}")
        try:
            self.publish = self.transport.publisher(CMD_VEL, rosmsg.TWIST_STAMPED)
            self.report["publisher"] = True
        except Exception as exc:
            self.report["errors"].append(f"publisher: {_one_line(exc)}")

    def _on_command(self, msg: Any) -> None:
        seq = rosmsg.seq_of(msg.header.frame_id)
        own = seq is not None and self.seq_base <= seq < self.seq_base + SEQ_STRIDE
        with self._lock:
            self.report["received_own" if own else "received_others"] += 1

    def send_one(self) -> None:
        if self.publish is None:
            return
        seq = self.seq_base + self.report["sent"]
        try:
            self.publish(rosmsg.command(seq, time.time_ns(), ROGUE_SPEED, 0.0))
            self.report["sent"] += 1
        except Exception as exc:
            self.report["errors"].append(f"publish: {_one_line(exc)}")
            self.publish = None

    def close(self) -> dict[str, Any]:
        if self.transport is not None:
            try:
                self.transport.close()
            except Exception as exc:
                self.report["errors"].append(f"close: {_one_line(exc)}")
        with self._lock:
            return dict(self.report)


def main() -> None:
    spec = json.loads(sys.argv[1])
    config = TransportConfig(**spec["transport"])

    def join(indexed: tuple[int, dict[str, Any]]) -> Rogue:
        i, rogue = indexed
        return Rogue(config, rogue, spec["seq_base"] + SEQ_STRIDE * i)

    # side by side: a refused Zenoh join waits out its CONNECT_TIMEOUT_S, three in a row took 9 s
    with ThreadPoolExecutor(max_workers=max(1, len(spec["rogues"]))) as pool:
        rogues = list(pool.map(join, enumerate(spec["rogues"])))
    stop = threading.Event()

    def wait_for_stop() -> None:
        for line in sys.stdin:
            if line.strip() == "STOP":
                break
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    print("ROGUE READY", flush=True)
    deadline = time.monotonic() + MAX_RUN_S
    while not stop.is_set() and time.monotonic() < deadline:
        for rogue in rogues:
            rogue.send_one()
        stop.wait(SEND_PERIOD_S)
    for rogue in rogues:
        print(json.dumps(rogue.close()), flush=True)


if __name__ == "__main__":
    main()
