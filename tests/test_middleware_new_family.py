"""A new middleware family is its folder plus its catalog line (fieldtest/middleware/registry.py).

Proven on a scratch copy of the package: a family the kit has never seen (``quic``) is added there as
its folder ``fieldtest/middleware/quic/`` and one ``MiddlewareName`` line in ``fieldtest/catalog.py``,
nothing else; a fresh interpreter on that copy then finds it through the registry, checks a lab
side's launch arguments for it, asks its hooks, reads and writes its link settings (its
settings.py) under its name in a ``TransportConfig``, takes its own launch arguments (a link
setting with its lab default, a lab-only setting another family's launch refuses), accounts its
traffic in a capture by its own kinds (its wire.py), sweeps its perf field (its settings'
``PERF_FIELDS``: a ``--quic-streams`` flag, a ``quic_streams`` row field), and the copy's import
graph has no cycle.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from fieldtest.testkit.importgraph import cycles, import_graph

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "fieldtest"
CATALOG_LINE = '    MiddlewareName("quic-peer", "quic", twin=False),\n'

FAMILY_FILES = {
    "__init__.py": '"""QUIC (a family for the scratch copy\'s test only)."""\n',
    "family.py": textwrap.dedent(
        '''\
        """QUIC: one lab-only name, whose lab side starts one relay process."""

        from __future__ import annotations

        from fieldtest.middleware.declaration import Middleware


        class QuicPeer(Middleware):
            name = "quic-peer"
            summary = "QUIC between the sides' relays"
            lab_bridge = "quic-relay"

            def lab_side_processes(self, cfg, config_dir, *, zenohd=None):
                from fieldtest.middleware.quic.lab import relay_process

                return [relay_process(cfg)]


        MIDDLEWARES = (QuicPeer(),)
        '''
    ),
    "settings.py": textwrap.dedent(
        '''\
        """QUIC's link settings: the quic: block of TransportConfig."""

        from typing import Literal

        from pydantic import BaseModel, ConfigDict


        class Settings(BaseModel):
            model_config = ConfigDict(extra="forbid", frozen=True)

            port: int = 4433
            zero_rtt: bool = False
            streams: Literal["one", "per-topic"] = "one"


        LAUNCH_FIELDS = ("port",)  # quic_port:=
        PERF_FIELDS = {"streams": "QUIC rows: one stream or one per topic"}  # --quic-streams


        def lab_defaults(security):
            return {"port": 4443}  # the lab's relays listen apart from the twin's default


        class LabSettings(BaseModel):
            model_config = ConfigDict(extra="forbid", frozen=True)

            congestion: str = "cubic"  # quic_congestion:=, the relays' congestion control


        LAB_OWN_FAMILY_ONLY = {"congestion": "only the QUIC relays read it"}
        '''
    ),
    "wire.py": textwrap.dedent(
        '''\
        """QUIC on the wire: datagrams on its UDP port, the relays' control channel on its TCP port."""

        from fieldtest.middleware.quic.settings import Settings

        KINDS = {"quic_datagram": "user_data", "quic_control": "protocol"}
        UDP_PORTS = {4433: "quic_datagram"}


        def tcp_ports(config):
            return (config.settings(Settings).port,)


        def classify(payload):
            return "quic_control"
        '''
    ),
    "lab.py": textwrap.dedent(
        '''\
        """The relay each lab side starts."""

        from __future__ import annotations

        from fieldtest.middleware.launch import LabLaunch, SideProcess


        def relay_process(cfg: LabLaunch) -> SideProcess:
            return SideProcess("quic-relay", ["quic-relay", "--role", cfg.role], {}, {})
        '''
    ),
}

PROBE = textwrap.dedent(
    """\
    import json
    import struct
    import tempfile
    from pathlib import Path

    from fieldtest.labrun.configuration.launchsettings import LaunchArgError, parse_launch_args, with_lab_defaults
    from fieldtest.middleware import registry
    from fieldtest.middleware.labshared import side_processes
    from fieldtest.netem import wire
    from fieldtest.perf.case import PerfCase
    from fieldtest.perf.cli import _parser as perf_parser
    from fieldtest.perf.results import column
    from fieldtest.record import TrialRequest

    from fieldtest.linkconfig import TransportConfig
    from fieldtest.middleware.quic.settings import LabSettings, Settings


    def frame(proto, ports, payload):  # Ethernet + IPv4 from 10.0.0.1 to the robot, 10.0.0.2
        header = struct.pack(">HH", *ports) + (bytes(4) if proto == 17 else bytes(16))
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(header) + len(payload), 1, 0, 64, proto, 0,
                         bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
        if proto == 6:  # TCP: data offset 5 words, ACK
            header = header[:12] + bytes([5 << 4, 0x10]) + header[14:]
        return bytes(6) + bytes([2, 1, 1, 1, 1, 1]) + b"\\x08\\x00" + ip + header + payload


    def kinds_seen(config):
        frames = [frame(17, (50000, 4433), b"q" * 20), frame(6, (50001, 40001), b"hello")]
        pcap = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + b"".join(
            struct.pack("<IIII", i, 0, len(f), len(f)) + f for i, f in enumerate(frames))
        path = Path(tempfile.mkdtemp()) / "q.pcap"
        path.write_bytes(pcap)
        directions = wire.trial_wire_record(path, "10.0.0.2", 1.0, config)["wire"]["directions"]
        kinds = directions[wire.HOST_TO_ROBOT]["kinds"]
        return {kind: row["packets"] for kind, row in kinds.items() if row["packets"]}


    def refusal(args):
        try:
            parse_launch_args({"ros_distro": "jazzy", **args}, "host")
        except LaunchArgError as exc:
            return str(exc)
        return ""


    entry = registry.get("quic-peer")
    nested = TransportConfig.model_validate({"quic": {"zero_rtt": True}})
    flat = TransportConfig.model_validate({"quic_zero_rtt": True})  # the older flat form is read too
    cfg = parse_launch_args({"middleware": "quic-peer", "ros_distro": "jazzy", "record_ros2bag": "false"}, "host")
    tuned = parse_launch_args(
        {"middleware": "quic-peer", "ros_distro": "jazzy", "quic_port": "5000", "quic_congestion": "bbr"}, "host"
    )
    print(json.dumps({
        "file": registry.REGISTRY["quic-peer"].__module__,
        "family": entry.family,
        "families": registry.families()["quic"],
        "lab_names": registry.names(lab=True)[-1],
        "twin_names": "quic-peer" in registry.names(),
        "bridged": entry.lab_bridged(),
        "processes": [p.argv for p in side_processes(cfg, "/nonexistent")],
        "settings": nested.model_dump(mode="json")["quic"],
        "flat_read": flat == nested and flat.settings(Settings).zero_rtt,
        "free_port": nested.with_ports(lambda: 40001).settings(Settings).port,
        "lab_port": cfg.settings(Settings).port,
        "lab_trial_port": with_lab_defaults(TrialRequest(name="t")).transport.settings(Settings).port,
        "launch_tuned": [tuned.settings(Settings).port, tuned.lab_settings(LabSettings).congestion],
        "other_family": [refusal({"middleware": "dds"}), refusal({"middleware": "dds", "quic_congestion": "bbr"})],
        "wire_groups": [wire.GROUPS["user_data"][-1], wire.GROUPS["protocol"][-1]],
        "wire": kinds_seen(TransportConfig.model_validate({"quic": {"port": 40001}})),
        "perf_flag": perf_parser().parse_args(["--quic-streams", "per-topic", "one"]).quic_streams,
        "perf_rows": [
            column(PerfCase(middleware="quic-peer", quic_streams="per-topic").normalized()),
            PerfCase(middleware="quic-peer", quic_streams="").normalized().quic_streams,
            PerfCase(middleware="dds", quic_streams="per-topic").normalized().quic_streams,
        ],
    }))
    """
)


def scratch_copy_with_family(root: Path) -> Path:
    """A copy of the package with the quic family added as its folder and its catalog line."""
    package = root / "fieldtest"
    shutil.copytree(PACKAGE_DIR, package, ignore=shutil.ignore_patterns("__pycache__"))
    catalog = package / "catalog.py"
    text = catalog.read_text()
    end = text.index("\n)\n", text.index("CATALOG: tuple[MiddlewareName, ...] = ("))
    catalog.write_text(text[: end + 1] + CATALOG_LINE + text[end + 1 :])
    for name, content in FAMILY_FILES.items():
        (package / "middleware" / "quic" / name).parent.mkdir(parents=True, exist_ok=True)
        (package / "middleware" / "quic" / name).write_text(content)
    return package


def _changed_files(package: Path) -> list[str]:
    """The copy's files that differ from the package's or are new, relative to the package."""
    changed = []
    for path in sorted(package.rglob("*.py")):
        original = PACKAGE_DIR / path.relative_to(package)
        if not original.is_file() or original.read_bytes() != path.read_bytes():
            changed.append(str(path.relative_to(package)))
    return changed


def test_a_new_family_is_its_folder_plus_its_catalog_line(tmp_path):
    package = scratch_copy_with_family(tmp_path)
    assert _changed_files(package) == [
        "catalog.py",
        *(f"middleware/quic/{name}" for name in sorted(FAMILY_FILES)),
    ]
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found == {
        "file": "fieldtest.middleware.quic.family",
        "family": "quic",
        "families": ["quic-peer"],
        "lab_names": "quic-peer",
        "twin_names": False,
        "bridged": True,
        "processes": [["quic-relay", "--role", "host"]],
        "settings": {"port": 4433, "zero_rtt": True, "streams": "one"},
        "flat_read": True,
        "free_port": 40001,
        "lab_port": 4443,
        "lab_trial_port": 4443,
        "launch_tuned": [5000, "bbr"],
        "other_family": [
            "",
            "launch argument quic_congestion: only used with middleware quic-peer (only the QUIC relays read it)",
        ],
        "wire_groups": ["quic_datagram", "quic_control"],
        "wire": {"quic_datagram": 1, "quic_control": 1},
        "perf_flag": ["per-topic", "one"],
        "perf_rows": ["quic-peer (per-topic)", "one", ""],
    }
    assert cycles(import_graph(package)) == []


def test_a_family_declaring_another_familys_name_is_refused(tmp_path):
    """One name, one home: a family module that also declares a name the catalog gives another family
    (as a branch that moves a name to a new family but leaves its old class behind) stops the registry."""
    package = scratch_copy_with_family(tmp_path)
    family = package / "middleware" / "quic" / "family.py"
    family.write_text(
        family.read_text().replace(
            "MIDDLEWARES = (QuicPeer(),)",
            'class Stray(QuicPeer):\n    name = "zenoh-peer"\n\n\nMIDDLEWARES = (QuicPeer(), Stray())',
        )
    )
    done = subprocess.run(
        [sys.executable, "-c", "import fieldtest.middleware.registry"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "fieldtest.middleware.quic.family declares 'zenoh-peer', a name of family 'zenoh'" in done.stderr
