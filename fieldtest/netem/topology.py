"""Emulated lab networks for the twin: one Linux network namespace per node, joined by a switch.

Layout (a star, see docs/networks.md): a switch namespace holds a bridge; every node (host,
robot, broker/router, mocap, recorder, ...) lives in its own namespace with one interface
``net0`` and one address, attached to the bridge through its own link. Nodes listed as
``wireless`` (by default the robot) get the link profile; the others are wired (a plain veth,
or ``wired_profile``). An emulated link is a veth with netem on both ends when the kernel has
netem, else two TAP devices joined by the userspace forwarder ``linkfwd``.

Names carry the owning pid and a random suffix, so concurrent trials never collide; teardown
runs on context exit, at interpreter exit, on SIGTERM/SIGHUP, and ``cleanup_stale`` removes
what a killed run left behind.
"""

from __future__ import annotations

import atexit
import functools
import heapq
import ipaddress
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fieldtest.errors import FieldtestError
from fieldtest.netem.forwarder import ForwarderError, LinkForwarder, build_forwarder
from fieldtest.netem.overlay import OVERLAY_IFACE, Member, build_overlay, describe_overlay, overlay_addresses
from fieldtest.netem.profiles import Direction, LinkProfile, get_profile
from fieldtest.netem.vpn import (
    UP_TIMEOUT_S,
    VPN_IFACE,
    OpenVpnTunnel,
    Peer,
    VpnError,
    check_setting,
    tunnel_addresses,
)
from fieldtest.netem.wifi80211 import Wifi80211Link

log = logging.getLogger(__name__)

PREFIX = "ftn"
NAME_RE = re.compile(rf"^{PREFIX}-(\d+)-([0-9a-f]{{6}})-([a-z0-9_-]+)$")
NODE_RE = re.compile(r"^[a-z0-9_-]{1,24}$")
IFACE = "net0"
BRIDGE = "br0"
AP_PORT = "pap"  # the ns-3 access point's wired side on the switch bridge
MULTICAST_NET = "224.0.0.0/4"


class TopologyError(FieldtestError, RuntimeError):
    """The emulated network could not be built, or an operation needs one that is not there."""


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise TopologyError(f"{' '.join(argv)}: {result.stderr.strip() or 'failed'}")
    return result


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["ip", *args], check=check)


def _bridge(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["bridge", *args], check=check)


def _new_base() -> str:
    return f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}"


def list_namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _has_cap_sys_admin() -> bool:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) & (1 << 21))
    except OSError:
        pass
    return os.geteuid() == 0


_availability: dict[str, tuple[bool, str]] = {}


def netns_available() -> tuple[bool, str]:
    """Can this process create network namespaces? (ok, reason) - the reason says what is missing."""
    if "netns" in _availability:
        return _availability["netns"]
    if not os.path.exists("/proc/self/ns/net"):
        result = (False, "this system has no Linux network namespaces")
    elif shutil.which("ip") is None:
        result = (False, "the 'ip' command (iproute2) is missing: apt install iproute2")
    elif not _has_cap_sys_admin():
        result = (False, "creating network namespaces needs root (CAP_SYS_ADMIN); run the trial as root")
    else:
        name = f"{_new_base()}-probe"
        probe = _ip("netns", "add", name, check=False)
        if probe.returncode != 0:
            result = (False, f"'ip netns add' failed: {probe.stderr.strip()}")
        else:
            _ip("netns", "del", name, check=False)
            result = (True, "network namespaces available")
    _availability["netns"] = result
    return result


def netem_available() -> tuple[bool, str]:
    """Does the kernel have the netem qdisc? Tried on a veth inside a throw-away namespace."""
    if "netem" in _availability:
        return _availability["netem"]
    ok, reason = netns_available()
    if ok:
        name = f"{_new_base()}-probe"
        _ip("netns", "add", name)
        try:
            _ip("-n", name, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1")
            tc = _run(
                ["tc", "-n", name, "qdisc", "add", "dev", "probe0", "root", "netem", "delay", "1ms"], False
            )
            ok = tc.returncode == 0
            reason = "netem available" if ok else f"no netem in this kernel ({tc.stderr.strip()})"
        finally:
            _ip("netns", "del", name, check=False)
    _availability["netem"] = (ok, reason)
    return ok, reason


def tap_available() -> tuple[bool, str]:
    """Can the userspace forwarder run (TAP devices and a compiled linkfwd)?"""
    if not os.path.exists("/dev/net/tun"):
        return False, "/dev/net/tun is missing (no TUN/TAP support)"
    try:
        build_forwarder()
    except ForwarderError as exc:
        return False, str(exc)
    return True, "TAP devices and the userspace forwarder available"


def choose_backend(requested: str = "auto") -> tuple[str, str]:
    """'netem' or 'userspace' and why. 'auto' prefers netem, the standard tool, when present."""
    if requested not in ("auto", "netem", "userspace"):
        raise TopologyError(f"unknown link backend {requested!r} (auto, netem, userspace)")
    ok, reason = netns_available()
    if not ok:
        raise TopologyError(reason)
    netem_ok, netem_reason = netem_available() if requested != "userspace" else (False, "not requested")
    if requested == "netem" and not netem_ok:
        raise TopologyError(netem_reason)
    if netem_ok:
        return "netem", netem_reason
    tap_ok, tap_reason = tap_available()
    if not tap_ok:
        raise TopologyError(f"{netem_reason}; and the userspace fallback cannot run: {tap_reason}")
    return "userspace", f"{netem_reason}; using the userspace TAP forwarder"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_namespace_processes(ns: str) -> None:
    """End whatever still runs inside one of our namespaces (we started it)."""
    pids = [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split() if p.isdigit()]
    for pid in pids:
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def cleanup_stale() -> list[str]:
    """Delete namespaces of ours whose owning process is gone (a run killed with SIGKILL)."""
    removed = []
    for ns in list_namespaces():
        match = NAME_RE.match(ns)
        if match and not _pid_alive(int(match.group(1))):
            _kill_namespace_processes(ns)
            _ip("netns", "del", ns, check=False)
            removed.append(ns)
    if removed:
        log.info("removed %d stale namespaces: %s", len(removed), ", ".join(removed))
    return removed


def netem_args(d: Direction, profile: LinkProfile, outage: bool = False) -> list[str]:
    """The ``tc qdisc ... netem`` arguments for one direction of a profile."""
    args = ["netem", "limit", str(d.queue_packets)]
    if d.delay_ms or d.jitter_ms:
        args += ["delay", f"{round(d.delay_ms * 1000)}us"]
        if d.jitter_ms:
            args += [f"{round(d.jitter_ms * 1000)}us", "distribution", "normal"]
    if outage:
        args += ["loss", "random", "100%"]
    elif d.burst is not None:
        good = 1 - (1 - d.loss_pct / 100) * (1 - d.burst.loss_good_pct / 100)
        bad = 1 - (1 - d.loss_pct / 100) * (1 - d.burst.loss_bad_pct / 100)
        args += ["loss", "gemodel", f"{d.burst.p_pct:g}%", f"{d.burst.r_pct:g}%", f"{bad * 100:g}%"]
        args += [f"{good * 100:g}%"]
    elif d.loss_pct:
        args += ["loss", "random", f"{d.loss_pct:g}%"]
    if d.rate_kbit:
        args += ["rate", f"{d.rate_kbit:g}kbit"]
    elif d.jitter_ms and not profile.reorder:
        # with a rate set, sch_netem schedules each packet after the previous one: no reordering
        args += ["rate", "10gbit"]
    return args


@dataclass
class NodeLink:
    node: str
    namespace: str
    address: str
    port: str  # the node's interface name on the switch side ("": an 802.11 station, via the AP)
    profile: LinkProfile | None  # None: a plain wired veth without emulation
    forwarder: LinkForwarder | None = None
    down: bool = False
    overlay_address: str | None = None  # the node's address on the UDP overlay, when the trial has one
    vpn_address: str | None = None  # the node's address in the VPN tunnel, when the trial has one

    @property
    def emulated(self) -> bool:
        return self.profile is not None

    @property
    def station(self) -> bool:
        """On the ns-3 802.11 link: a station of the simulated access point."""
        return self.profile is not None and self.profile.wifi80211 is not None


@dataclass(order=True)
class _Event:
    due_ns: int
    seq: int
    label: str = field(compare=False)
    action: Callable[[], None] = field(compare=False)


class _Scheduler:
    """Runs fault actions at monotonic times on one background thread."""

    def __init__(self, on_done: Callable[[str, int, int], None]):
        self._events: list[_Event] = []
        self._cond = threading.Condition()
        self._seq = 0
        self._stopped = False
        self._on_done = on_done
        self._thread = threading.Thread(target=self._loop, name="netem-faults", daemon=True)
        self._thread.start()

    def add(self, due_ns: int, label: str, action: Callable[[], None]) -> None:
        with self._cond:
            self._seq += 1
            heapq.heappush(self._events, _Event(due_ns, self._seq, label, action))
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._events.clear()
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (
                    not self._events or self._events[0].due_ns > time.monotonic_ns()
                ):
                    wait = (self._events[0].due_ns - time.monotonic_ns()) / 1e9 if self._events else None
                    self._cond.wait(timeout=wait)
                if self._stopped:
                    return
                event = heapq.heappop(self._events)
            try:
                event.action()
                self._on_done(event.label, event.due_ns, time.monotonic_ns())
            except Exception as exc:  # a fault that fails must not kill the scheduler
                log.error("fault %s failed: %s", event.label, exc)
                self._on_done(f"{event.label} FAILED: {exc}", event.due_ns, time.monotonic_ns())


class Topology:
    """An emulated lab network; use as ``with Topology("wifi", nodes=[...]) as topo:``.

    ``profile`` applies to the ``wireless`` nodes' links (robot by default); other nodes are
    wired: a plain veth, or ``wired_profile`` if given. With an 802.11 profile (``wifi80211``) the
    wireless nodes are stations of one access point simulated by ns-3, bridged to the wired ones. Built on construction; ``close()``
    (or leaving the ``with`` block, exiting, SIGTERM/SIGHUP) tears everything down. ``vpn="openvpn"``
    joins the two nodes with an OpenVPN tunnel over their links (netem/vpn.py): their addresses are
    then the tunnel's; one that is not up within ``vpn_timeout_s`` is a TopologyError.
    """

    emulated = True

    def __init__(
        self,
        profile: str | dict | LinkProfile,
        nodes: list[str] | tuple[str, ...] = ("host", "robot"),
        wireless: list[str] | tuple[str, ...] = ("robot",),
        wired_profile: str | dict | LinkProfile | None = None,
        backend: str = "auto",
        subnet: str = "10.77.0.0/24",
        overlay_subnet: str = "10.78.0.0/24",
        seed: int | None = None,
        user_profiles: dict[str, Any] | None = None,
        vpn: str = "none",
        vpn_timeout_s: float = UP_TIMEOUT_S,
    ):
        self.profile = get_profile(profile, user_profiles)
        self.vpn_setting = self._check_vpn(vpn, nodes)
        self.vpn_timeout_s = vpn_timeout_s
        self.wired_profile = get_profile(wired_profile, user_profiles) if wired_profile is not None else None
        if self.wired_profile is not None and self.wired_profile.wifi80211 is not None:
            raise TopologyError(
                f"wired_profile {self.wired_profile.name!r} is an 802.11 link: use it as profile"
            )
        self._validate_nodes(nodes, wireless)
        wired = [n for n in nodes if n not in wireless]
        if self.profile.wifi80211 is not None and self.profile.wifi80211.mac == "adhoc" and wired:
            raise TopologyError(
                f"profile {self.profile.name!r} is an ad hoc 802.11 link, with no access point to reach the "
                f"wired nodes {', '.join(wired)}: put them on the link (wireless) or use infrastructure mode"
            )
        self.backend, self.backend_reason = choose_backend(backend)
        self.base = _new_base()
        self.switch_ns = f"{self.base}-sw"
        self.seed = seed
        self.links: dict[str, NodeLink] = {}
        self.fault_log: list[dict[str, Any]] = []
        self._procs: list[subprocess.Popen] = []
        self._created: list[str] = []
        self._closed = False
        self._close_lock = threading.Lock()
        self._prev_handlers: dict[int, Any] = {}
        self._scheduler: _Scheduler | None = None
        self.wifi_link: Wifi80211Link | None = None
        self.wifi_final: dict[str, Any] = {}
        self.overlay: dict[str, Member] = {}
        self.vpn: OpenVpnTunnel | None = None
        hosts = ipaddress.ip_network(subnet).hosts()
        cleanup_stale()
        self._install_teardown_hooks()
        try:
            self._build_switch()
            for node in nodes:
                link_profile = self.profile if node in wireless else self.wired_profile
                self._build_node(node, str(next(hosts)), f"p{len(self.links)}", link_profile, subnet)
            self._start_wifi80211()
            self._pin_neighbours()
            if self.profile.overlay:
                self._build_overlay(overlay_subnet)
            if self.vpn_setting != "none":
                self._build_vpn()
        except BaseException:
            self.close()
            raise
        self._scheduler = _Scheduler(self._log_fault)

    # -- construction -------------------------------------------------------------------------
    @staticmethod
    def _validate_nodes(nodes: list[str] | tuple[str, ...], wireless: list[str] | tuple[str, ...]) -> None:
        if not nodes or len(set(nodes)) != len(nodes):
            raise TopologyError(f"nodes must be distinct names, got {list(nodes)}")
        for node in nodes:
            if not NODE_RE.match(node):
                raise TopologyError(f"node name {node!r}: use 1-24 of a-z 0-9 _ -")
        missing = [n for n in wireless if n not in nodes]
        if missing:
            raise TopologyError(f"wireless node(s) {missing} are not among nodes {list(nodes)}")

    def _check_vpn(self, vpn: str, nodes: list[str] | tuple[str, ...]) -> str:
        try:
            check_setting(vpn)
        except VpnError as exc:
            raise TopologyError(str(exc)) from None
        if vpn != "none" and (len(nodes) != 2 or self.profile.overlay):
            raise TopologyError(
                f"vpn {vpn}: the tunnel joins two nodes (host and robot) over their own links, not "
                f"{', '.join(nodes)}{' on an overlay' if self.profile.overlay else ''}"
            )
        return vpn

    def _add_namespace(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._created.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def _build_switch(self) -> None:
        self._add_namespace(self.switch_ns)
        # no IPv6 on the bridge and its ports: their link-local chatter (MLD, router solicitations)
        # is the emulator's own and would cross the emulated links (on 802.11, the air at the basic rate)
        for scope in ("default", "all"):
            _run(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.switch_ns,
                    "sysctl",
                    "-qw",
                    f"net.ipv6.conf.{scope}.disable_ipv6=1",
                ]
            )
        # no IGMP snooping: multicast is flooded to every port, as by a plain switch or AP
        _ip("-n", self.switch_ns, "link", "add", BRIDGE, "type", "bridge", "stp_state", "0",
            "forward_delay", "0", "mcast_snooping", "0")  # fmt: skip
        _ip("-n", self.switch_ns, "link", "set", BRIDGE, "up")

    def _build_node(
        self, node: str, address: str, port: str, profile: LinkProfile | None, subnet: str
    ) -> None:
        ns = f"{self.base}-{node}"
        self._add_namespace(ns)
        link = NodeLink(node, ns, address, port, profile)
        self.links[node] = link
        if link.station:  # its frames reach the switch through the simulated access point
            link.port = ""
            _ip("-n", ns, "tuntap", "add", "dev", IFACE, "mode", "tap")
        elif profile is not None and self.backend == "userspace":
            _ip("-n", ns, "tuntap", "add", "dev", IFACE, "mode", "tap")
            _ip("-n", self.switch_ns, "tuntap", "add", "dev", port, "mode", "tap")
        else:
            _ip("-n", self.switch_ns, "link", "add", port, "type", "veth", "peer", "name", IFACE, "netns", ns)
        if not link.station:
            _ip("-n", self.switch_ns, "link", "set", port, "master", BRIDGE)
            _ip("-n", self.switch_ns, "link", "set", port, "up")
        _run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{IFACE}.disable_ipv6=1"])
        prefix = ipaddress.ip_network(subnet).prefixlen
        _ip("-n", ns, "addr", "add", f"{address}/{prefix}", "dev", IFACE)
        _ip("-n", ns, "link", "set", IFACE, "up")
        _ip("-n", ns, "route", "add", MULTICAST_NET, "dev", IFACE)
        if link.station:
            return
        if profile is not None and self.backend == "userspace":
            link.forwarder = LinkForwarder(ns, IFACE, self.switch_ns, port, seed=self._link_seed(node))
        if profile is not None:
            self._apply(link, profile)

    def _start_wifi80211(self) -> None:
        """One ns-3 simulation for all stations: they share the access point and its channel."""
        stations = {n: (ln.namespace, IFACE) for n, ln in self.links.items() if ln.station}
        config = self.profile.wifi80211
        if config is None or not stations:
            return
        _ip("-n", self.switch_ns, "tuntap", "add", "dev", AP_PORT, "mode", "tap")
        _ip("-n", self.switch_ns, "link", "set", AP_PORT, "master", BRIDGE)
        _ip("-n", self.switch_ns, "link", "set", AP_PORT, "up")
        seed = None if self.seed is None else self.seed * 1000
        self.wifi_link = Wifi80211Link(config, stations, (self.switch_ns, AP_PORT), seed=seed)

    def _pin_neighbours(self) -> None:
        """Permanent ARP entries between the nodes: the first packets of a trial must not wait for
        an ARP exchange that an emulated lossy or slow link (or a forwarder still starting) delays
        by a 1 s retransmission."""
        macs = {}
        for node, link in self.links.items():
            info = json.loads(_ip("-n", link.namespace, "-j", "link", "show", IFACE).stdout)
            macs[node] = info[0]["address"]
        for node, link in self.links.items():
            for other, peer in self.links.items():
                if other != node:
                    _ip("-n", link.namespace, "neigh", "replace", peer.address, "lladdr", macs[other],
                        "dev", IFACE, "nud", "permanent")  # fmt: skip

    def _build_overlay(self, subnet: str) -> None:
        """Every node joins one UDP overlay over its own leg (netem/overlay.py), as ZeroTier."""
        addresses = overlay_addresses(list(self.links), subnet)
        self.overlay = {
            node: Member(link.namespace, link.address, addresses[node]) for node, link in self.links.items()
        }
        multicast = MULTICAST_NET if self.profile.multicast else None
        build_overlay(self.overlay, subnet, _ip, _bridge, IFACE, multicast)
        for node, link in self.links.items():
            link.overlay_address = addresses[node]

    def _build_vpn(self) -> None:
        """An OpenVPN tunnel between the two nodes over their links (netem/vpn.py); the trial's
        processes use its addresses from here on."""
        (host, robot), addresses = self.links.values(), tunnel_addresses()
        peers = [
            Peer(ln.node, ln.namespace, ln.address, a) for ln, a in zip((host, robot), addresses, strict=True)
        ]
        try:
            self.vpn = OpenVpnTunnel(peers[0], peers[1], self.run)
            self.vpn.wait_up(self.vpn_timeout_s)
        except VpnError as exc:
            raise TopologyError(str(exc)) from None
        for link, peer in zip((host, robot), peers, strict=True):
            link.vpn_address = peer.address
            ns = link.namespace
            # no IPv6 link-local chatter of the emulator's own in the tunnel (as on the legs); the
            # trial's multicast goes into the tunnel, never onto the leg in the clear
            _run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{VPN_IFACE}.disable_ipv6=1"])
            _ip("-n", ns, "route", "replace", MULTICAST_NET, "dev", VPN_IFACE)

    def _link_seed(self, node: str) -> int | None:
        return None if self.seed is None else self.seed * 1000 + list(self.links).index(node)

    # -- link control -------------------------------------------------------------------------
    def _check_change(self, link: NodeLink, profile: LinkProfile) -> None:
        if profile.overlay != self.profile.overlay or (
            profile.overlay and profile.multicast != self.profile.multicast
        ):
            raise TopologyError(
                f"node {link.node!r}: profile {profile.name!r} "
                f"(overlay {profile.overlay}, multicast {profile.multicast}) differs from the trial's "
                f"network {self.profile.name!r} (overlay {self.profile.overlay}, multicast "
                f"{self.profile.multicast}): the UDP overlay is built with the network and cannot "
                "change during a trial"
            )
        if link.station or profile.wifi80211 is not None:
            raise TopologyError(
                f"node {link.node!r}: an 802.11 (ns-3) link cannot change profile during a trial; "
                "give it as the trial's network"
            )

    def _apply(self, link: NodeLink, profile: LinkProfile) -> None:
        self._check_change(link, profile)
        link.profile = profile
        if link.forwarder is not None:
            link.forwarder.apply(profile)
            return
        self._netem_apply(link, profile, outage=link.down)

    def _netem_apply(self, link: NodeLink, profile: LinkProfile, outage: bool) -> None:
        up = netem_args(profile.up, profile, outage)
        down = netem_args(profile.down, profile, outage)
        _run(["tc", "-n", link.namespace, "qdisc", "replace", "dev", IFACE, "root", *up])
        _run(["tc", "-n", self.switch_ns, "qdisc", "replace", "dev", link.port, "root", *down])
        # netem cannot filter by address: without multicast the node gets no multicast route and
        # the switch port stops flooding multicast to it
        flood = "on" if profile.multicast else "off"
        _run(["bridge", "-n", self.switch_ns, "link", "set", "dev", link.port, "mcast_flood", flood])
        if link.overlay_address is not None or link.vpn_address is not None:
            return  # the overlay or the tunnel carries the multicast: its route stays
        verb = "replace" if profile.multicast else "del"
        _ip("-n", link.namespace, "route", verb, MULTICAST_NET, "dev", IFACE, check=profile.multicast)

    def _set_down(self, link: NodeLink, down: bool) -> None:
        link.down = down
        if link.station:
            if self.wifi_link is None:
                raise TopologyError(f"node {link.node!r}: its 802.11 link is not running")
            self.wifi_link.set_down(link.node, down)
        elif link.forwarder is not None:
            link.forwarder.set_link(not down)
        else:
            assert link.profile is not None  # only emulated links go down
            self._netem_apply(link, link.profile, outage=down)

    def _set_links_down(self, links: list[NodeLink], down: bool) -> None:
        for link in links:
            self._set_down(link, down)

    @property
    def _started_scheduler(self) -> _Scheduler:
        if self._scheduler is None:
            raise TopologyError("the topology is still being built: nothing can be scheduled on it yet")
        return self._scheduler

    def _emulated_links(self, node: str | None) -> list[NodeLink]:
        if node is not None:
            link = self._link(node)
            if not link.emulated:
                raise TopologyError(f"node {node!r} has a plain wired link; faults need an emulated link")
            return [link]
        links = [link for link in self.links.values() if link.emulated]
        if not links:
            raise TopologyError("no emulated link in this topology")
        return links

    def _log_fault(self, label: str, due_ns: int, done_ns: int) -> None:
        self.fault_log.append({"event": label, "due_monotonic_ns": due_ns, "done_monotonic_ns": done_ns})

    @staticmethod
    def _due(at_s: float, t0_ns: int | None) -> int:
        base = time.monotonic_ns() if t0_ns is None else t0_ns
        return base + int(at_s * 1e9)

    def check_profile_change(self, profile: str | dict | LinkProfile, node: str | None = None) -> LinkProfile:
        """The profile, if the emulated link(s) can change to it; else TopologyError (802.11 links)."""
        new = get_profile(profile)
        for link in self._emulated_links(node):
            self._check_change(link, new)
        return new

    def set_profile(
        self,
        profile: str | dict | LinkProfile,
        node: str | None = None,
        at_s: float | None = None,
        t0_ns: int | None = None,
    ) -> LinkProfile:
        """Change the emulated link(s) to ``profile``: now, or ``at_s`` after ``t0_ns`` (monotonic).

        Packets already in flight keep their schedule; new packets see the new profile.
        """
        new = self.check_profile_change(profile, node)  # refused now, not when it comes due
        links = self._emulated_links(node)

        def apply() -> None:
            for link in links:
                self._apply(link, new)

        if at_s is None:
            apply()
            self._log_fault(f"profile -> {new.name}", time.monotonic_ns(), time.monotonic_ns())
        else:
            self._started_scheduler.add(self._due(at_s, t0_ns), f"profile -> {new.name}", apply)
        return new

    def schedule_outage(
        self, at_s: float, duration_s: float, node: str | None = None, t0_ns: int | None = None
    ) -> None:
        """Drop everything on the emulated link(s) from ``at_s`` for ``duration_s`` seconds.

        Times count from ``t0_ns`` (time.monotonic_ns(), e.g. the trial start) or from now.
        """
        if at_s < 0 or duration_s <= 0:
            raise TopologyError(f"outage needs at_s >= 0 and duration_s > 0, got {at_s}, {duration_s}")
        links = self._emulated_links(node)
        start = self._due(at_s, t0_ns)
        label = ",".join(link.node for link in links)
        scheduler = self._started_scheduler
        scheduler.add(start, f"outage start ({label})", functools.partial(self._set_links_down, links, True))
        end = start + int(duration_s * 1e9)
        scheduler.add(end, f"outage end ({label})", functools.partial(self._set_links_down, links, False))

    # -- use ----------------------------------------------------------------------------------
    def _link(self, node: str) -> NodeLink:
        if node not in self.links:
            raise TopologyError(f"unknown node {node!r}; nodes: {', '.join(self.links)}")
        return self.links[node]

    def address(self, node: str) -> str:
        """The address the trial's processes use to reach ``node`` (its overlay address if any)."""
        link = self._link(node)
        return link.vpn_address or link.overlay_address or link.address

    def interface(self, node: str) -> str:
        """The interface that carries ``node``'s trial traffic (the overlay's, if any)."""
        link = self._link(node)
        return VPN_IFACE if link.vpn_address else OVERLAY_IFACE if link.overlay_address else IFACE

    def namespace(self, node: str) -> str:
        return self._link(node).namespace

    def command(self, node: str, argv: list[str]) -> list[str]:
        """``argv`` wrapped to run inside ``node``'s namespace (for callers with their own Popen)."""
        return ["ip", "netns", "exec", self.namespace(node), *argv]

    def run(
        self, node: str, argv: list[str], env: dict[str, str] | None = None, **popen_kwargs: Any
    ) -> subprocess.Popen[Any]:  # of bytes or str, as popen_kwargs' text says
        """Start ``argv`` inside ``node``'s namespace. The topology ends it at teardown."""
        if self._closed:
            raise TopologyError("topology already closed")
        proc = subprocess.Popen(self.command(node, argv), env=env, **popen_kwargs)
        self._procs = [p for p in self._procs if p.poll() is None] + [proc]
        return proc

    def link_stats(self) -> dict[str, dict]:
        """Forwarder counters per emulated node (userspace backend), e.g. drops and lateness."""
        return {n: ln.forwarder.stats() for n, ln in self.links.items() if ln.forwarder is not None}

    def reset_link_stats(self) -> None:
        """Clear the forwarders' counters and lateness record (a trial's start, after its probes)."""
        for link in self.links.values():
            if link.forwarder is not None:
                link.forwarder.reset_stats()

    def simulator_record(self) -> dict[str, Any] | None:
        """The ns-3 802.11 link's figures (lag, CPU, frames by kind) for the trial record, or None."""
        return self.wifi_link.record() if self.wifi_link is not None else None

    def describe(self) -> dict[str, Any]:
        """What the trial record stores about the network."""
        out = {
            "backend": self.backend,
            "backend_reason": self.backend_reason,
            "profile": self.profile.summary(),
            "nodes": {
                n: {
                    "address": ln.vpn_address or ln.overlay_address or ln.address,
                    **({"leg_address": ln.address} if ln.overlay_address or ln.vpn_address else {}),
                    "namespace": ln.namespace,
                    "link": ln.profile.name if ln.profile else "wired (no emulation)",
                    **({"wifi": "station"} if ln.station else {}),
                }
                for n, ln in self.links.items()
            },
            "faults": list(self.fault_log),
        }
        if self.overlay:
            out["overlay"] = describe_overlay(self.overlay, self.profile.multicast)
        if self.vpn is not None:
            out["vpn"] = self.vpn.describe()
        if self.wifi_link is not None:
            out["wifi80211"] = {"simulator": "ns-3", "access_point_port": AP_PORT, "pid": self.wifi_link.pid}
        return out

    # -- teardown -----------------------------------------------------------------------------
    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _install_teardown_hooks(self) -> None:
        atexit.register(self.close)
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread; atexit still applies
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._prev_handlers[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.close()
        previous = self._prev_handlers.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _restore_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self._prev_handlers.items():
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, previous)
        self._prev_handlers.clear()

    def close(self) -> None:
        """Stop processes and forwarders, delete the namespaces. Safe to call more than once."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self._scheduler is not None:
            self._scheduler.stop()
        self._stop_processes()
        for link in self.links.values():
            if link.forwarder is not None:
                link.forwarder.stop()
        if self.wifi_link is not None:
            self.wifi_final = self.wifi_link.stop()
        if self.vpn is not None:
            self.vpn.close()
        for ns in reversed(self._created):
            _kill_namespace_processes(ns)
            _ip("netns", "del", ns, check=False)
        self._restore_handlers()
        atexit.unregister(self.close)

    def _stop_processes(self, timeout_s: float = 3.0) -> None:
        running = [p for p in self._procs if p.poll() is None]
        for proc in running:
            proc.terminate()
        deadline = time.monotonic() + timeout_s
        for proc in running:
            try:
                proc.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class LoopbackTopology:
    """The fallback without namespaces: every node is this machine's loopback, no emulation."""

    emulated = False
    backend = "loopback"

    def __init__(
        self,
        profile: str | dict | LinkProfile,
        nodes: list[str] | tuple[str, ...] = ("host", "robot"),
        reason: str = "",
        **_: Any,
    ) -> None:
        self.profile = get_profile(profile)
        self.nodes = list(nodes)
        self.reason = reason
        self._procs: list[subprocess.Popen] = []

    def __enter__(self) -> LoopbackTopology:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def address(self, node: str) -> str:
        return "127.0.0.1"

    def command(self, node: str, argv: list[str]) -> list[str]:
        return list(argv)

    def run(
        self, node: str, argv: list[str], env: dict[str, str] | None = None, **popen_kwargs: Any
    ) -> subprocess.Popen[Any]:
        proc = subprocess.Popen(list(argv), env=env, **popen_kwargs)
        self._procs.append(proc)
        return proc

    def _unsupported(self, *args: Any, **kwargs: Any) -> None:
        raise TopologyError(f"link faults need network namespaces, which are unavailable: {self.reason}")

    set_profile = _unsupported
    schedule_outage = _unsupported

    def link_stats(self) -> dict[str, dict]:
        return {}

    def reset_link_stats(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "loopback",
            "backend_reason": self.reason,
            "profile": self.profile.summary(),
            "profile_applied": False,
            "nodes": {n: {"address": "127.0.0.1", "link": "loopback"} for n in self.nodes},
            "faults": [],
        }

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=3)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def emulated_topology(topo: Topology | LoopbackTopology | None) -> Topology | None:
    """``topo`` where it emulates links; None on loopback (also where namespaces fell back to it)."""
    return topo if isinstance(topo, Topology) else None


def open_topology(
    profile: str | dict | LinkProfile, nodes: list[str] | tuple[str, ...] = ("host", "robot"), **kwargs: Any
) -> Topology | LoopbackTopology:
    """A Topology if namespaces work here, else a LoopbackTopology and a clear warning."""
    try:
        choose_backend(kwargs.get("backend", "auto"))
    except TopologyError as exc:
        reason = str(exc)
    else:
        return Topology(profile, nodes=nodes, **kwargs)
    if kwargs.get("vpn", "none") != "none":  # a tunnel needs the namespaces: never silently without
        raise TopologyError(f"vpn {kwargs['vpn']}: needs network namespaces ({reason})")
    log.warning(
        "network emulation unavailable (%s): falling back to loopback; link profile %r is NOT applied",
        reason,
        get_profile(profile).name,
    )
    return LoopbackTopology(profile, nodes=nodes, reason=reason)
