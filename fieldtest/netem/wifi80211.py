"""The 802.11 link: ns-3's Wi-Fi model run in real time, joined to the trial's namespaces by TAP devices.

``ns3/wifi_link.cc`` is compiled once against Debian's libns3-dev (``fieldtest.cbuild``). One process
simulates one basic service set: every wireless node is a station of one access point, whose wired
side is a TAP on the switch bridge. Python talks to it over stdin/stdout like the userspace
forwarder; its figures (frames, retries, rates and airtime by kind and by station, drops, power
save: frames buffered, time dozing, beacons; lag behind real time, CPU) are written to a JSON file on ``stats`` and when it exits.
"""

from __future__ import annotations

import json
import select
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from fieldtest.cbuild import BuildError, build_cxx
from fieldtest.errors import FieldtestError
from fieldtest.netem.forwarder import end_by_stdin, link_pipes
from fieldtest.netem.profiles import Wifi80211
from fieldtest.realtime import LINK_REALTIME_PRIORITY

SOURCE = Path(__file__).parent / "ns3" / "wifi_link.cc"
NS3_MODULES = (
    "ns3-wifi",
    "ns3-fd-net-device",
    "ns3-bridge",
    "ns3-mobility",
    "ns3-propagation",
    "ns3-network",
)
READY_TIMEOUT_S = 30.0  # association takes a few beacon intervals; compiling is done before


class Wifi80211Error(FieldtestError, RuntimeError):
    """The ns-3 link could not be built, did not start, or refused a command."""


def build_wifi_link() -> Path:
    """Compile wifi_link.cc unless the binary for this exact source already exists (about a minute)."""
    try:
        return build_cxx(SOURCE, pkg_config=(*NS3_MODULES, "ns3-core"))
    except BuildError as exc:
        raise Wifi80211Error(
            f"the ns-3 802.11 link cannot be built (apt install libns3-dev g++): {exc}"
        ) from None


class Wifi80211Link:
    """One running simulation. ``stations`` maps node name -> (namespace, tap); ``ap_port`` is the
    (namespace, tap) of the access point's wired side, or None for a BSS without wired nodes (an ad
    hoc link has no access point: wired nodes do not reach its stations)."""

    def __init__(
        self,
        config: Wifi80211,
        stations: dict[str, tuple[str, str]],
        ap_port: tuple[str, str] | None,
        seed: int | None = None,
    ):
        self.config = config
        self._stats_dir = tempfile.TemporaryDirectory(prefix="fieldtest-wifi80211-")
        self.stats_path = Path(self._stats_dir.name) / "stats.json"
        argv = [
            str(build_wifi_link()),
            f"--stats={self.stats_path}",
            f"--rt-priority={LINK_REALTIME_PRIORITY}",
            *config.program_args(),
        ]
        if seed is not None:
            argv += [f"--seed={seed % 2**31 + 1}", "--run=1"]
        argv += config.power_save_args(list(stations))
        argv += [f"--sta={name}:{ns}:{tap}" for name, (ns, tap) in stations.items()]
        if ap_port is not None and config.mac == "infrastructure":  # an ad hoc link has no access point
            argv.append(f"--ap={ap_port[0]}:{ap_port[1]}")
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self._stdin, self._stdout, stderr = link_pipes(self.proc)
        first = self._read_line(READY_TIMEOUT_S)
        if first != "ready":
            err = first or (stderr.read().strip() if self.proc.poll() is not None else "")
            self.stop()
            raise Wifi80211Error(f"the ns-3 802.11 link did not start: {err or 'no answer'}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read_line(self, timeout_s: float) -> str:
        ready, _, _ = select.select([self._stdout], [], [], timeout_s)
        return self._stdout.readline().strip() if ready else ""

    def _command(self, line: str) -> None:
        with self._lock:
            if self.proc.poll() is not None:
                raise Wifi80211Error(f"the ns-3 802.11 link exited with code {self.proc.returncode}")
            self._stdin.write(line + "\n")
            self._stdin.flush()
            reply = self._read_line(5.0)
        if reply != "ok":
            raise Wifi80211Error(f"the ns-3 802.11 link refused {line!r}: {reply or 'no reply'}")

    def set_down(self, node: str, down: bool) -> None:
        """Drop every frame to and from ``node``'s station (an outage), or pass them again."""
        self._command(f"{'down' if down else 'up'} {node}")

    def ap_forget(self, node: str) -> None:
        """Fault injection: the access point forgets ``node``'s association while the station keeps
        it, the state ns-3 3.37 leaves after a lost ACK of an association response."""
        self._command(f"ap-forget {node}")

    def stats(self) -> dict[str, Any]:
        """The simulation's figures now (the program writes them to its stats file)."""
        if self.proc.poll() is None:
            self._command("stats")
        return self.read_stats()

    def read_stats(self) -> dict[str, Any]:
        try:
            return json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return {}

    def record(self) -> dict[str, Any]:
        """What the trial record keeps: the figures plus the lag bound that decides validity."""
        try:
            stats = self.stats()
        except Wifi80211Error as exc:  # the figures written last still say how far it fell behind
            stats = {**self.read_stats(), "error": str(exc)}
        stats.pop("beacon_log", None)  # every beacon's time: for tests, too long for a record
        return {
            **stats,
            "lag_bound_ms": self.config.lag_bound_ms,
            "config": self.config.model_dump(mode="json"),
        }

    def stop(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """End of stdin stops the simulation, which writes its final figures; returns them."""
        end_by_stdin(self.proc, timeout_s)
        final = self.read_stats()
        self._stats_dir.cleanup()
        return final


if __name__ == "__main__":  # build ahead of the first trial (tools/install.sh does the same)
    print(build_wifi_link())
