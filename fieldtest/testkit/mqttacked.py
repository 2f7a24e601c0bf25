"""An MQTT 5 client for tests that waits on the broker's answers instead of on time.

Mosquitto acknowledges a subscription (SUBACK) once it is in place, and a QoS 1 publish (PUBACK) once
it has queued the message for its subscribers, with the reason code of its decision: "Not
authorized" for a publish its ACL denies. A subscriber gets one publisher's messages in the order
the broker accepted them, so a permitted message published after a denied one closes the window in
which the denied one would have arrived."""

from __future__ import annotations

import threading
from collections.abc import Callable

import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

ANSWER_TIMEOUT_S = 5.0


class AckedClient:
    """A paho MQTT 5 client on 127.0.0.1:``port`` that records its CONNACK, the payloads it
    receives (topic, payload) and the reason codes of the broker's SUBACKs and PUBACKs."""

    def __init__(
        self,
        name: str,
        port: int,
        ca_certs: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
    ) -> None:
        self.port = port
        self.connected = threading.Event()
        self.connack: ReasonCode | None = None
        self.received: list[tuple[str, bytes]] = []
        self._changed = threading.Condition()
        self._answers: dict[int, list[ReasonCode]] = {}
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name, protocol=mqtt.MQTTv5)
        if ca_certs is not None:  # TLS, with the client's certificate if given
            self.client.tls_set(ca_certs=ca_certs, certfile=certfile, keyfile=keyfile)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.client.on_subscribe = self._on_subscribe
        self.client.on_publish = self._on_publish

    def _on_connect(
        self,
        client: mqtt.Client,
        userdata: object,
        flags: mqtt.ConnectFlags,
        reason: ReasonCode,
        properties: Properties | None,
    ) -> None:
        self.connack = reason
        if not reason.is_failure:
            self.connected.set()

    def _on_message(self, client: mqtt.Client, userdata: object, message: mqtt.MQTTMessage) -> None:
        with self._changed:
            self.received.append((message.topic, bytes(message.payload)))
            self._changed.notify_all()

    def _answered(self, mid: int, codes: list[ReasonCode]) -> None:
        with self._changed:
            self._answers[mid] = codes
            self._changed.notify_all()

    def _on_subscribe(
        self,
        client: mqtt.Client,
        userdata: object,
        mid: int,
        reason_codes: list[ReasonCode],
        properties: Properties | None,
    ) -> None:
        self._answered(mid, list(reason_codes))

    def _on_publish(
        self,
        client: mqtt.Client,
        userdata: object,
        mid: int,
        reason_code: ReasonCode,
        properties: Properties | None,
    ) -> None:
        self._answered(mid, [reason_code])

    def _answer(self, mid: int, what: str) -> ReasonCode:
        with self._changed:
            answered = self._changed.wait_for(lambda: mid in self._answers, ANSWER_TIMEOUT_S)
            assert answered, f"the broker did not answer {what} in {ANSWER_TIMEOUT_S} s"
            (code,) = self._answers.pop(mid)
        return code

    def subscribe(self, topic: str) -> str:
        """Subscribe at QoS 1; the name of the SUBACK's reason code ("Granted QoS 1", "Not authorized")."""
        result, mid = self.client.subscribe(topic, qos=1)
        assert result == mqtt.MQTT_ERR_SUCCESS and mid is not None, f"subscribe {topic}: {result}"
        return self._answer(mid, f"the subscription to {topic}").getName()

    def publish(self, topic: str, payload: bytes, retain: bool = False) -> str:
        """Publish at QoS 1; the name of the PUBACK's reason code ("Success", "Not authorized")."""
        info = self.client.publish(topic, payload, qos=1, retain=retain)
        mid = info.mid
        assert info.rc == mqtt.MQTT_ERR_SUCCESS and mid is not None, f"publish {topic}: {info.rc}"
        return self._answer(mid, f"the publish on {topic}").getName()

    def wait_until(self, arrived: Callable[[list[tuple[str, bytes]]], bool]) -> list[tuple[str, bytes]]:
        """What has arrived once ``arrived`` holds for it; fails if it does not within the timeout."""
        with self._changed:
            done = self._changed.wait_for(lambda: arrived(self.received), ANSWER_TIMEOUT_S)
            got = list(self.received)
        assert done, f"not delivered in {ANSWER_TIMEOUT_S} s (received {got})"
        return got

    def forget_received(self) -> None:
        with self._changed:
            self.received.clear()

    def __enter__(self) -> AckedClient:
        self.client.connect("127.0.0.1", self.port, keepalive=10)
        self.client.loop_start()
        assert self.connected.wait(ANSWER_TIMEOUT_S), f"no successful CONNACK ({self.connack})"
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.disconnect()
        self.client.loop_stop()
