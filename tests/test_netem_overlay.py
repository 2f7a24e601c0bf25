"""The 4G overlay (netem/overlay.py): the nodes reach each other through a UDP tunnel over their
cellular legs, multicast replicated by the sender, as the seed's ZeroTier set-up (real namespaces,
real sockets, the kernel's interface counters and tcpdump as the witnesses)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from fieldtest.netem import profiles
from fieldtest.netem.overlay import OVERHEAD_BYTES, OVERLAY_IFACE, VXLAN_PORT
from fieldtest.netem.topology import IFACE, Topology, TopologyError
from fieldtest.testkit import needs

NODES = ("host", "robot", "broker")
GROUP = "239.255.77.1"
PORT = 17711
RECEIVER = """
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", {port}))
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, struct.pack("4s4s", socket.inet_aton("{group}"), socket.inet_aton("{address}")))
s.settimeout({timeout})
print("ready", flush=True)
got, closed = 0, False
try:
    while got < {count} and not closed:
        closed = s.recv(4096) == b"end"
        got += not closed
except OSError:
    pass
print(got, "end" if closed else "no-end", flush=True)
"""
SENDER = """
import errno, json, socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("{address}"))
errors = []
for _ in range({count}):
    try:
        s.sendto(b"x" * {size}, ("{target}", {port}))
    except OSError as exc:
        errors.append(errno.errorcode.get(exc.errno, str(exc.errno)))
    time.sleep(0.01)
for member in {closing}:  # unicast, after the others on the same path: a receiver stops at it
    s.sendto(b"end", (member, {port}))
print(json.dumps(errors), flush=True)
"""


def _fast_4g(monkeypatch, **fields) -> str:
    """The 4g profile's switches on a short leg (little delay, no loss), as a built-in."""
    fast = {**profiles.BUILTIN["4g"], "up": {"delay_ms": 2.0}, "down": {"delay_ms": 2.0}, **fields}
    monkeypatch.setitem(profiles.BUILTIN, "4g-fast", fast)
    return "4g-fast"


@pytest.fixture
def cellular(monkeypatch):
    """Three machines, each on a cellular leg of its own."""
    needs.netns()
    with Topology(_fast_4g(monkeypatch), nodes=NODES, wireless=NODES) as topo:
        yield topo


def _tx_packets(topo: Topology, node: str, iface: str) -> int:
    info = json.loads(subprocess.run(
        ["ip", "-n", topo.namespace(node), "-j", "-s", "link", "show", iface],
        capture_output=True, text=True, check=True,
    ).stdout)  # fmt: skip
    return info[0]["stats64"]["tx"]["packets"]


def _receive(topo: Topology, node: str, count: int) -> subprocess.Popen:
    code = RECEIVER.format(port=PORT, group=GROUP, address=topo.address(node), timeout=5, count=count)
    proc = topo.run(node, [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _send(
    topo: Topology, node: str, target: str, count: int, size: int = 100, closing: tuple[str, ...] = ()
) -> list[str]:
    """Send ``count`` datagrams, then b"end" to each node in ``closing``; the send errors (errno names)."""
    members = [topo.address(member) for member in closing]
    code = SENDER.format(
        address=topo.address(node), target=target, port=PORT, count=count, size=size, closing=members
    )
    sent = subprocess.run(
        topo.command(node, [sys.executable, "-c", code]),
        check=True,
        timeout=30,
        capture_output=True,
        text=True,
    )
    return json.loads(sent.stdout)


def _received(proc: subprocess.Popen) -> tuple[int, str]:
    """How many datagrams a receiver got, and whether it stopped at b"end" ("end", else "no-end")."""
    got, how = proc.communicate(timeout=15)[0].split()
    return int(got), how


def test_the_4g_profile_is_an_overlay_and_every_node_gets_an_address_on_it(cellular):
    described = cellular.describe()
    assert described["overlay"]["overhead_bytes_per_frame"] == OVERHEAD_BYTES
    for node in NODES:
        on_leg = described["nodes"][node]["leg_address"]
        assert cellular.address(node) != on_leg
        assert cellular.address(node) == described["overlay"]["members"][node]["address"]
        assert cellular.interface(node) == OVERLAY_IFACE


def test_multicast_is_replicated_by_the_sender_into_one_unicast_datagram_per_member(cellular):
    receivers = [_receive(cellular, node, 20) for node in ("robot", "broker")]
    before = _tx_packets(cellular, "host", IFACE)
    assert _send(cellular, "host", GROUP, 20) == []
    got = [_received(proc)[0] for proc in receivers]
    sent_on_leg = _tx_packets(cellular, "host", IFACE) - before
    assert got == [20, 20]  # both members heard the group
    # one copy per other member crossed the host's cellular leg (the leg carries no multicast)
    assert 40 <= sent_on_leg < 44, sent_on_leg


def test_unicast_leaves_the_leg_encapsulated_in_udp_with_the_overlay_overhead(cellular, tmp_path):
    capture = tmp_path / "leg.txt"
    with capture.open("w") as out:
        dump = subprocess.Popen(
            cellular.command("robot", ["tcpdump", "--immediate-mode", "-i", IFACE, "-n", "-e", "-l", "udp"]),
            stdout=out, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        while "listening" not in (line := dump.stderr.readline()):
            assert line, "tcpdump did not start"
        receiver = _receive(cellular, "robot", 6)
        assert _send(cellular, "host", cellular.address("robot"), 5, size=1000, closing=("robot",)) == []
        assert _received(receiver) == (5, "end")
        host_leg = cellular.describe()["nodes"]["host"]["leg_address"]
        outer = re.compile(rf"length (\d+): {re.escape(host_leg)}\.\d+ > [\d.]+\.{VXLAN_PORT}: VXLAN")
        closing_size = len(b"end") + 8 + 20 + 14 + OVERHEAD_BYTES

        def outer_sizes() -> list[int]:
            return [int(m.group(1)) for m in map(outer.search, capture.read_text().splitlines()) if m]

        # tcpdump writes a line per packet in the order it sees them: once the closing b"end", sent
        # after the five, is in, anything the five brought with them is in too
        deadline = time.monotonic() + 10
        while closing_size not in outer_sizes() and time.monotonic() < deadline:
            time.sleep(0.05)
        dump.terminate()
        dump.wait(timeout=5)
    sizes = outer_sizes()
    # the outer frame: 1000 bytes of payload, the inner UDP/IP/Ethernet headers, then VXLAN's 50
    assert sizes.count(1000 + 8 + 20 + 14 + OVERHEAD_BYTES) == 5, capture.read_text()[-3000:]
    assert closing_size in sizes, capture.read_text()[-3000:]
    # nothing crossed the leg outside the tunnel (tcpdump prints the inner frame on its own line)
    # an outer line starts with its time stamp, HH:MM:SS.ffffff (an inner line with a MAC such as
    # 22:77:27:... would match a looser pattern)
    stamped = re.compile(r"\d\d:\d\d:\d\d\.\d{6} ")
    outer_lines = [line for line in capture.read_text().splitlines() if stamped.match(line)]
    assert not [line for line in outer_lines if f".{PORT}:" in line], outer_lines


def test_a_profile_change_cannot_add_or_remove_the_overlay_during_a_trial(cellular):
    with pytest.raises(TopologyError, match="overlay"):
        cellular.check_profile_change("wifi", node="robot")
    cellular.check_profile_change({"extends": "4g-fast", "loss_pct": 5.0}, node="robot")


def test_an_overlay_without_multicast_delivers_none_and_sends_nothing_on_the_leg(monkeypatch):
    needs.netns()
    with Topology(_fast_4g(monkeypatch, multicast=False), nodes=NODES, wireless=NODES) as topo:
        assert topo.describe()["overlay"]["multicast"] == "none"
        receivers = [_receive(topo, node, 5) for node in ("robot", "broker")]
        before = _tx_packets(topo, "host", IFACE)
        assert _send(topo, "host", GROUP, 5, closing=("robot", "broker")) == []  # sent, and dropped
        # each receiver got the unicast b"end" sent after the group's datagrams on the same tunnel
        assert [_received(proc) for proc in receivers] == [(0, "end"), (0, "end")]
        assert _tx_packets(topo, "host", IFACE) - before < 3
        with pytest.raises(TopologyError, match="multicast"):
            topo.check_profile_change({"extends": "4g-fast", "multicast": True}, node="robot")
