"""How a TLS listener refuses a client, read from the wire: the alert it sends, or the connection
it drops. A test that waits for a refusal fails when none comes in time: slow is not refused."""

from __future__ import annotations

import socket
import ssl

import pytest

# MQTT 3.1.1 CONNECT, clean session, keep-alive 10 s, client id "x"
MQTT_CONNECT = bytes([0x10, 13, 0, 4]) + b"MQTT" + bytes([4, 2, 0, 10, 0, 1]) + b"x"


def tls_alert(
    port: int, ca_certs: str, certfile: str | None = None, keyfile: str | None = None, timeout_s: float = 5.0
) -> str:
    """The TLS alert (``ssl.SSLError.reason``) with which the listener on 127.0.0.1:``port`` refuses
    a client with these files. Fails the calling test if the session is let through or not refused
    within ``timeout_s``."""
    context = ssl.create_default_context(cafile=ca_certs)
    context.check_hostname = False
    if certfile is not None:
        context.load_cert_chain(certfile, keyfile)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as raw:
        try:
            with context.wrap_socket(raw) as tls:
                tls.recv(1)  # TLS 1.3: the server judges the client's certificate after the handshake
        except ssl.SSLError as exc:
            return str(exc.reason)
        except TimeoutError:
            pass
    pytest.fail(f"the listener on port {port} did not refuse the TLS session in {timeout_s} s", pytrace=False)


def plain_mqtt_answer(port: int, timeout_s: float = 5.0) -> str:
    """What the listener on 127.0.0.1:``port`` answers an MQTT CONNECT sent in the clear: "reset" or
    "closed" (a TLS listener's refusal), else the test fails (a CONNACK, or no answer in time)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        try:
            sock.sendall(MQTT_CONNECT)
            answer = sock.recv(64)
        except ConnectionResetError:
            return "reset"
        except TimeoutError:
            pytest.fail(f"the listener on port {port} did not answer in {timeout_s} s", pytrace=False)
    if answer == b"" or answer[:1] == b"\x15":  # closed, or a TLS alert record
        return "closed"
    pytest.fail(f"the listener on port {port} answered a clear-text CONNECT: {answer!r}", pytrace=False)
