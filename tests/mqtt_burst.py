"""Bursts of small MQTT messages, for the Nagle test; each side runs in its own network namespace.

    python mqtt_burst.py pub CONFIG_JSON --bursts N --size K   # the kit's MQTT transport publishes
    python mqtt_burst.py sub ADDRESS PORT --count M            # a plain paho subscriber

A burst is ``size`` messages of 76 bytes (a TwistStamped command's size) written back to back, at
QoS 0 (nothing but TCP acknowledges them), then a pause long enough for every segment to be
acknowledged. The subscriber prints READY once subscribed, then one JSON line per message:
burst, index, send and arrival time (CLOCK_MONOTONIC, one clock for every namespace).
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import threading
import time

TOPIC = "fieldtest/nagle_burst"
MESSAGE = struct.Struct("<IIq")  # burst, index, send time (monotonic ns)
MESSAGE_BYTES = 76
PAUSE_S = 0.6  # every segment of a burst acknowledged before the next one (link RTT well below)


def publish(config_json: str, bursts: int, size: int) -> None:
    from fieldtest.middleware.mqtt.transport import open_mqtt
    from fieldtest.transport import TransportConfig

    transport = open_mqtt(TransportConfig.model_validate_json(config_json), "host")
    try:
        time.sleep(PAUSE_S)
        for burst in range(bursts):
            for index in range(size):
                head = MESSAGE.pack(burst, index, time.monotonic_ns())
                transport.loop.publish(TOPIC, head.ljust(MESSAGE_BYTES, b"\0"), 0)
            time.sleep(PAUSE_S)
    finally:
        transport.close()


def subscribe(address: str, port: int, count: int, timeout_s: float) -> None:
    import paho.mqtt.client as paho

    got: list[tuple[int, int, int, int]] = []
    done, subscribed = threading.Event(), threading.Event()

    def on_message(client, userdata, message) -> None:
        arrival = time.monotonic_ns()
        got.append((*MESSAGE.unpack_from(message.payload), arrival))
        if len(got) >= count:
            done.set()

    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="nagle-burst-sub")
    client.on_message = on_message
    client.on_subscribe = lambda *args: subscribed.set()
    client.connect(address, port)
    client.loop_start()
    client.subscribe(TOPIC, qos=0)
    if not subscribed.wait(10):
        sys.exit("no SUBACK")
    print("READY", flush=True)
    done.wait(timeout_s)
    client.disconnect()
    client.loop_stop()
    for burst, index, sent_ns, arrival_ns in got:
        print(json.dumps({"burst": burst, "index": index, "sent_ns": sent_ns, "arrival_ns": arrival_ns}))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    pub = sub.add_parser("pub")
    pub.add_argument("config_json")
    pub.add_argument("--bursts", type=int, default=6)
    pub.add_argument("--size", type=int, default=5)
    rx = sub.add_parser("sub")
    rx.add_argument("address")
    rx.add_argument("port", type=int)
    rx.add_argument("--count", type=int, required=True)
    rx.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    if args.mode == "pub":
        publish(args.config_json, args.bursts, args.size)
    else:
        subscribe(args.address, args.port, args.count, args.timeout)


if __name__ == "__main__":
    main()
