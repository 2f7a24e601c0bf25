"""A new middleware family is its folder plus its catalog line (fieldtest/middleware/registry.py).

Proven on a scratch copy of the package: a family the kit has never seen (``quic``) is added there as
its folder ``fieldtest/middleware/quic/`` and one ``MiddlewareName`` line in ``fieldtest/catalog.py``,
nothing else; a fresh interpreter on that copy then finds it through the registry, checks a lab
side's launch arguments for it, asks its hooks, reads and writes its link settings (its
settings.py) under its name in a ``TransportConfig``, and the copy's import graph has no cycle.
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

        from pydantic import BaseModel, ConfigDict


        class Settings(BaseModel):
            model_config = ConfigDict(extra="forbid", frozen=True)

            port: int = 4433
            zero_rtt: bool = False
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
    from fieldtest.labrun.configuration.launchsettings import parse_launch_args
    from fieldtest.middleware import registry
    from fieldtest.middleware.labshared import side_processes

    from fieldtest.linkconfig import TransportConfig
    from fieldtest.middleware.quic.settings import Settings

    entry = registry.get("quic-peer")
    nested = TransportConfig.model_validate({"quic": {"zero_rtt": True}})
    flat = TransportConfig.model_validate({"quic_zero_rtt": True})  # the older flat form is read too
    cfg = parse_launch_args({"middleware": "quic-peer", "ros_distro": "jazzy", "record_ros2bag": "false"}, "host")
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
        "settings": {"port": 4433, "zero_rtt": True},
        "flat_read": True,
        "free_port": 40001,
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
