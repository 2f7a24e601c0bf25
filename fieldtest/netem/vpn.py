"""A VPN between the twin's host and robot: OpenVPN over a TUN device, tunnelled in UDP over
whichever link the trial has (a network setting, ``vpn: openvpn``, beside the link profile).

Kim et al. 2018 compared SROS2 with OpenVPN between two ROS 2 machines; the
study does not say how their OpenVPN was set up, so the kit runs OpenVPN 2.6 as its manual
recommends for two peers: TLS mode, each side with a key and a self-signed certificate the other
pins by its SHA-256 fingerprint (``--peer-fingerprint``, openvpn(8) 2.6, "peer-fingerprint": it
replaces a CA for a point-to-point set-up), the data channel in AES-256-GCM. Static-key mode
(``--secret``) is not used: openvpn(8) 2.6 marks it deprecated and it has no AEAD cipher.

Each side is one ``openvpn`` process in its node's namespace; ``vpn0`` is a point-to-point TUN
device (``--ifconfig local remote``), and the trial's processes bind to its addresses, so every
packet between host and robot crosses the link as OpenVPN's UDP (port 1194). The keys are made per
topology in a temporary folder, deleted at teardown.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fieldtest.errors import FieldtestError

VPN_SETTINGS = ("none", "openvpn")
VPN_IFACE = "vpn0"
VPN_SUBNET = "10.79.0.0/30"  # one point-to-point pair: host .1, robot .2
OPENVPN_PORT = 1194  # IANA's port for OpenVPN, openvpn(8) --port default
# openvpn(8) 2.6 --data-ciphers default is AES-256-GCM:AES-128-GCM:CHACHA20-POLY1305: its first, pinned
# so that both sides and every run use the same one
DATA_CIPHER = "AES-256-GCM"
UP_TIMEOUT_S = 20.0
# openvpn logs this line once the tunnel is up and its routes set (openvpn(8), --up-delay's note)
READY_LINE = "Initialization Sequence Completed"
# the data channel's bytes per packet around the tunnelled IP packet with an AEAD cipher:
# opcode/peer-id 4 + packet id 4 + GCM tag 16 (openvpn(8) 2.6, "--data-ciphers"), in UDP/IPv4 (28)
OVERHEAD_BYTES = 4 + 4 + 16 + 28


class VpnError(FieldtestError, RuntimeError):
    """The VPN could not be set up or did not come up (one line: which side and why)."""


@dataclass(frozen=True)
class Peer:
    """One side of the tunnel: its node's namespace, its address on the link and in the tunnel."""

    node: str
    namespace: str
    underlay: str
    address: str


def check_setting(vpn: str) -> str:
    """``vpn`` if it names a VPN setting, else VpnError naming the known ones."""
    if vpn not in VPN_SETTINGS:
        raise VpnError(f"vpn {vpn!r}: use {' or '.join(VPN_SETTINGS)}")
    return vpn


def tunnel_addresses() -> tuple[str, str]:
    hosts = ipaddress.ip_network(VPN_SUBNET).hosts()
    return str(next(hosts)), str(next(hosts))


def _self_signed(node: str, key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    """A certificate for one row's tunnel, valid from a day back (clock skew) for two days; the
    peer checks its fingerprint, so no CA signs it (the netem layer holds no keystore)."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"fieldtest-vpn-{node}")])
    now = dt.datetime.now(dt.timezone.utc)
    return (
        x509.CertificateBuilder(subject_name=name, issuer_name=name, public_key=key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )


def make_keys(folder: Path, nodes: list[str]) -> dict[str, str]:
    """A P-256 key and a self-signed certificate per node in ``folder``; node -> fingerprint."""
    prints = {}
    for node in nodes:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _self_signed(node, key)
        (folder / f"{node}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path = folder / f"{node}.key"
        key_path.touch(mode=0o600)
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        der = cert.public_bytes(serialization.Encoding.DER)
        prints[node] = ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())
    return prints


def openvpn_argv(own: Peer, other: Peer, folder: Path, other_print: str, server: bool) -> list[str]:
    """One side's ``openvpn`` command line (every option from openvpn(8), 2.6)."""
    role = ["--tls-server", "--dh", "none"] if server else ["--tls-client"]  # ECDH only: no DH file
    return [
        "openvpn",
        "--dev", VPN_IFACE, "--dev-type", "tun",
        "--proto", "udp", "--local", own.underlay, "--remote", other.underlay,
        "--port", str(OPENVPN_PORT),
        "--ifconfig", own.address, other.address,  # a point-to-point device: own, then peer
        *role,
        "--cert", str(folder / f"{own.node}.crt"), "--key", str(folder / f"{own.node}.key"),
        "--peer-fingerprint", other_print,
        "--data-ciphers", DATA_CIPHER,
        # the kernel's data channel offload (ovpn-dco) would move the data path into the kernel where
        # it exists: off, so every machine measures the same userspace OpenVPN
        "--disable-dco",
        "--ping", "1", "--ping-exit", "30",  # a vanished peer ends the side (and the row) in 30 s
        "--verb", "3",
    ]  # fmt: skip


class OpenVpnTunnel:
    """The two ``openvpn`` processes of one tunnel, started with ``run(node, argv, **popen)`` (the
    topology's, so its teardown ends them); ``wait_up`` raises VpnError, one line, if it does not
    come up."""

    def __init__(self, host: Peer, robot: Peer, run: Callable[..., Any], log_dir: Path | None = None):
        if shutil.which("openvpn") is None:
            raise VpnError("vpn openvpn: the openvpn program is missing (tools/install.sh installs it)")
        self.peers = (host, robot)
        self._folder = Path(tempfile.mkdtemp(prefix="fieldtest-vpn-"))
        self.log_dir = log_dir or self._folder
        self.logs = {p.node: self.log_dir / f"openvpn-{p.node}.log" for p in self.peers}
        prints = make_keys(self._folder, [host.node, robot.node])
        self.procs = {}
        for own, other, server in ((host, robot, True), (robot, host, False)):
            argv = openvpn_argv(own, other, self._folder, prints[other.node], server)
            with self.logs[own.node].open("w") as log:
                self.procs[own.node] = run(own.node, argv, stdout=log, stderr=log)

    def wait_up(self, timeout_s: float = UP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = [p.node for p in self.peers]
        while waiting:
            for node in list(waiting):
                if READY_LINE in self._log(node):
                    waiting.remove(node)
                elif self.procs[node].poll() is not None:
                    raise VpnError(
                        f"vpn openvpn: the {node} side exited with code {self.procs[node].returncode}: "
                        f"{self._last_line(node)}"
                    )
            if waiting and time.monotonic() > deadline:
                node = waiting[0]
                raise VpnError(
                    f"vpn openvpn: the tunnel did not come up within {timeout_s:g} s ({node}: "
                    f"{self._last_line(node)}): the peer is down or unreachable"
                )
            time.sleep(0.05)

    def _log(self, node: str) -> str:
        try:
            return self.logs[node].read_text(errors="replace")
        except OSError:
            return ""

    def _last_line(self, node: str) -> str:
        lines = [line.strip() for line in self._log(node).splitlines() if line.strip()]
        return lines[-1] if lines else "no output"

    def describe(self) -> dict[str, Any]:
        """What the trial or perf record stores about the tunnel."""
        return {
            "kind": "openvpn",
            "version": openvpn_version(),
            "device": f"{VPN_IFACE} (tun, point-to-point)",
            "transport": f"udp {OPENVPN_PORT}",
            "mode": "tls, self-signed certificates pinned by sha256 fingerprint",
            "data_cipher": DATA_CIPHER,
            "overhead_bytes_per_packet": OVERHEAD_BYTES,
            "members": {p.node: {"underlay": p.underlay, "address": p.address} for p in self.peers},
        }

    def close(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)


_version: list[str] = []


def openvpn_version() -> str:
    """``OpenVPN 2.6.14`` (the first words of ``openvpn --version``), or "" if it does not run."""
    if not _version:
        import subprocess

        try:
            out = subprocess.run(["openvpn", "--version"], capture_output=True, text=True).stdout
        except OSError:
            out = ""
        _version.append(" ".join(out.split()[:2]))
    return _version[0]
