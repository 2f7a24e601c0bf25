"""No import cycle anywhere in fieldtest/, and the analysis stages point one way (docs/architecture.md).

Read from the source (fieldtest.testkit.importgraph): imports inside functions, under TYPE_CHECKING,
relative ones and lazy package tables all count, so a cycle cannot hide behind a late import.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fieldtest.testkit.importgraph import cycle_path, cycles, import_graph

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "fieldtest"
GRAPH = import_graph(PACKAGE_DIR)
# Cycles not broken yet, each named in full: the test fails when one grows, a new one appears, or
# one is gone (then delete its entry), so this list can only shrink.
KNOWN_CYCLES: dict[tuple[str, ...], str] = {
    (
        "fieldtest.analysis",
        "fieldtest.analysis.analyze",
        "fieldtest.analysis.basecheck",
        "fieldtest.analysis.basesplit",
        "fieldtest.analysis.causes",
        "fieldtest.analysis.compare",
    ): "analysis: flat modules, split by stage next",
    (
        "fieldtest.analysis.latency",
        "fieldtest.analysis.motion",
        "fieldtest.analysis.plotdata",
    ): "analysis: flat modules, split by stage next",
    (
        "fieldtest.middleware.base",
        "fieldtest.middleware.dds.family",
        "fieldtest.middleware.dds.lab",
        "fieldtest.middleware.lab",
        "fieldtest.middleware.launch",
        "fieldtest.middleware.mqtt.family",
        "fieldtest.middleware.mqtt.lab",
        "fieldtest.middleware.registry",
        "fieldtest.middleware.rmw_zenoh.family",
        "fieldtest.middleware.rmw_zenoh.lab",
        "fieldtest.middleware.zenoh.family",
        "fieldtest.middleware.zenoh.lab",
    ): "LabLaunch (middleware.launch) looks families up in the registry, whose families build LabLaunch",
}


def _described(component: tuple[str, ...]) -> str:
    return " -> ".join(cycle_path(GRAPH, component)) + f" ({len(component)} modules in the cycle)"


def test_no_import_cycle_in_fieldtest():
    found = cycles(GRAPH)
    new = [_described(c) for c in found if c not in KNOWN_CYCLES]
    gone = [c for c in KNOWN_CYCLES if c not in found]
    assert not new, "import cycles:\n" + "\n".join(new)
    assert not gone, f"no longer cycles (delete them from KNOWN_CYCLES): {gone}"


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / "pkg"


@pytest.mark.parametrize(
    "kind, text",
    [
        ("module level", "from pkg.a import A\n"),
        ("relative", "from .a import A\n"),
        ("inside a function", "def f():\n    from . import a\n"),
        ("under TYPE_CHECKING", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"),
        ("lazy table", "from fieldtest.lazy import lazy_attributes\nT = {'A': '.a'}\nlazy_attributes(__name__, T, {})\n"),
    ],
)  # fmt: skip
def test_the_checker_sees_every_kind_of_import(tmp_path, kind, text):
    """pkg.a imports pkg.b at module level; pkg.b imports pkg.a in the way named: a cycle each time
    (pkg.b is the package itself for the lazy table)."""
    b = "pkg/__init__.py" if kind == "lazy table" else "pkg/b.py"
    importer = "pkg" if kind == "lazy table" else "pkg.b"
    package = _write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": f"import {importer}\n", b: text})
    graph = import_graph(package)
    component = tuple(sorted(["pkg.a", importer]))
    assert cycles(graph) == [component]
    assert cycle_path(graph, component) == [component[0], component[1], component[0]]


def test_the_checker_finds_nothing_in_a_chain(tmp_path):
    package = _write(
        tmp_path,
        {"pkg/__init__.py": "", "pkg/a.py": "from . import b\n", "pkg/b.py": "def f():\n    import pkg.c\n",
         "pkg/c.py": "import json\n"},
    )  # fmt: skip
    assert cycles(import_graph(package)) == []
