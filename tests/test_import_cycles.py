"""No import cycle anywhere in fieldtest/, the analysis stages point one way, and modules outside the
analysis import only its package (docs/architecture.md).

Read from the source (fieldtest.testkit.importgraph): imports inside functions, under TYPE_CHECKING,
relative ones and lazy package tables all count, so a cycle cannot hide behind a late import.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fieldtest.testkit.importgraph import cycle_path, cycles, import_graph

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "fieldtest"
GRAPH = import_graph(PACKAGE_DIR)


def _described(component: tuple[str, ...]) -> str:
    """One cycle as its chain of imports, and every module that lies on one with it."""
    return " -> ".join(cycle_path(GRAPH, component)) + f" (cycles among: {', '.join(component)})"


def test_no_import_cycle_in_fieldtest():
    found = cycles(GRAPH)
    assert not found, "import cycles:\n" + "\n".join(_described(c) for c in found)


ANALYSIS = "fieldtest.analysis"
# fieldtest.analysis's stages in pipeline order: each may import the ones before it, never after
STAGES = ("loading", "metrics", "causes", "prediction", "campaign", "rendering")
# above the stages: the pipeline (the one module that runs them in turn) and the commands
ABOVE_STAGES = ("pipeline", "cli", "predictcli")


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["fieldtest", "analysis"] else None


def stage_violations(graph: dict[str, frozenset[str]]) -> list[str]:
    """Every import of an analysis stage module that points to a later stage or above the stages, and
    every analysis module that sits in no stage."""
    found = []
    for module in sorted(m for m in graph if stage_of(m)):
        own = stage_of(module)
        if own not in STAGES:
            if own not in ABOVE_STAGES:
                found.append(f"{module} is in no stage ({', '.join(STAGES)})")
            continue
        for target in sorted(graph[module]):
            if target == ANALYSIS:
                found.append(f"{module} ({own}) imports {ANALYSIS}, whose names load the pipeline")
            elif (theirs := stage_of(target)) and (
                theirs not in STAGES or STAGES.index(theirs) > STAGES.index(own)
            ):
                found.append(f"{module} ({own}) imports {target} ({theirs})")
    return found


def test_analysis_stages_point_one_way():
    assert not stage_violations(GRAPH), "\n".join(stage_violations(GRAPH))


def test_the_stage_check_sees_a_backward_import():
    """An earlier stage importing a later one, the pipeline or the package, or a module outside every
    stage: each is named."""
    graph = {
        f"{ANALYSIS}.loading.trialdata": frozenset(
            {f"{ANALYSIS}.rendering.report", f"{ANALYSIS}.metrics.schema"}
        ),
        f"{ANALYSIS}.metrics.schema": frozenset({f"{ANALYSIS}.pipeline"}),
        f"{ANALYSIS}.causes.replay": frozenset({ANALYSIS, f"{ANALYSIS}.loading.trialdata"}),
        f"{ANALYSIS}.rendering.report": frozenset({f"{ANALYSIS}.metrics.schema"}),
        f"{ANALYSIS}.pipeline": frozenset({f"{ANALYSIS}.rendering.report"}),
        f"{ANALYSIS}.flat": frozenset(),
    }
    assert stage_violations(graph) == [
        f"{ANALYSIS}.causes.replay (causes) imports {ANALYSIS}, whose names load the pipeline",
        f"{ANALYSIS}.flat is in no stage ({', '.join(STAGES)})",
        f"{ANALYSIS}.loading.trialdata (loading) imports {ANALYSIS}.metrics.schema (metrics)",
        f"{ANALYSIS}.loading.trialdata (loading) imports {ANALYSIS}.rendering.report (rendering)",
        f"{ANALYSIS}.metrics.schema (metrics) imports {ANALYSIS}.pipeline (pipeline)",
    ]


def stage_imports_from_outside(graph: dict[str, frozenset[str]]) -> list[str]:
    """Every import of a module inside fieldtest.analysis by a module outside it: those take the
    package's public names (``fieldtest.analysis``, each loaded from its stage on first use), so the
    stages can move without their users changing. The command table of fieldtest/cli.py names the
    analysis commands by module path, a string, not an import."""
    return [
        f"{module} imports {target}: use {ANALYSIS}'s public names"
        for module in sorted(graph)
        if module != ANALYSIS and not module.startswith(ANALYSIS + ".")
        for target in sorted(graph[module])
        if target.startswith(ANALYSIS + ".")
    ]


def test_modules_outside_the_analysis_import_only_its_package():
    assert not stage_imports_from_outside(GRAPH), "\n".join(stage_imports_from_outside(GRAPH))


def test_the_outside_check_sees_a_stage_import(tmp_path):
    """A module outside the analysis that imports a stage module, in a function or not, is named; one
    that imports the package's names is not."""
    root = tmp_path / "fieldtest"
    _write(
        tmp_path,
        {"fieldtest/__init__.py": "", "fieldtest/analysis/__init__.py": "",
         "fieldtest/analysis/metrics/__init__.py": "", "fieldtest/analysis/metrics/schema.py": "",
         "fieldtest/perf.py": "def f():\n    from fieldtest.analysis.metrics.schema import Metrics\n",
         "fieldtest/runner.py": "from fieldtest.analysis import Metrics\n",
         "fieldtest/lifecycle.py": "from fieldtest.analysis.metrics import schema\n"},
    )  # fmt: skip
    assert stage_imports_from_outside(import_graph(root)) == [
        f"fieldtest.lifecycle imports {ANALYSIS}.metrics.schema: use {ANALYSIS}'s public names",
        f"fieldtest.perf imports {ANALYSIS}.metrics.schema: use {ANALYSIS}'s public names",
    ]


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


def test_the_analysis_commands_import_only_the_standard_library_before_the_fork():
    """fieldtest/analysis/cli.py forks its plot worker before the analysis loads: importing it (and
    so the stage packages it reads constants from) loads no third-party module."""
    code = (
        "import sys; before = set(sys.modules); import fieldtest.analysis.cli; "
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] not in sys.stdlib_module_names "
        "and not m.startswith('fieldtest')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
