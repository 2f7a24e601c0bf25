"""The lab composes the shared endpoints and never the simulator: no lab module (and no ROS node)
imports fieldtest.twin, and the endpoints themselves import neither the twin nor rclpy."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAB = REPO / "fieldtest" / "labrun"
ENDPOINTS = REPO / "fieldtest" / "endpoints"
# The rehearsal's simulated Create 3 base runs the twin's Create 3 model on purpose: it is a simulator.
SIMULATORS = {"simbase"}
ROS_NODES = sorted((REPO / "host_ws" / "src").glob("fieldtest_*/fieldtest_*/*.py")) + sorted(
    (REPO / "robot_ws" / "src").glob("fieldtest_*/fieldtest_*/*.py")
)


def _modules(folder: Path, package: str, skip: set[str] = frozenset()) -> list[str]:
    """Every module under ``folder``, sub-packages included."""
    return [
        ".".join([package, *p.relative_to(folder).with_suffix("").parts])
        for p in sorted(folder.rglob("*.py"))
        if p.stem not in skip | {"__init__"}
    ]


LAB_MODULES = _modules(LAB, "fieldtest.labrun", SIMULATORS)
ENDPOINT_MODULES = _modules(ENDPOINTS, "fieldtest.endpoints")


def _loaded_after_import(modules: list[str]) -> list[str]:
    """Every module a fresh interpreter holds after importing ``modules`` (imports inside
    functions included once they run at import time)."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(out.stdout)


def _imported_names(path: Path) -> set[str]:
    """Module names in a file's import statements, wherever they are (ROS nodes import in main())."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _twin(names) -> list[str]:
    return sorted(n for n in names if n == "fieldtest.twin" or n.startswith("fieldtest.twin."))


def test_the_lab_modules_load_nothing_of_the_twin():
    assert LAB_MODULES, f"no lab modules found in {LAB}"
    assert _twin(_loaded_after_import(LAB_MODULES)) == []


@pytest.mark.parametrize(
    "path", [LAB / f"{'/'.join(m.split('.')[2:])}.py" for m in LAB_MODULES], ids=lambda p: p.stem
)
def test_no_lab_module_imports_the_twin_even_inside_a_function(path):
    assert _twin(_imported_names(path)) == []


def test_the_ros_nodes_are_found():
    assert {p.stem for p in ROS_NODES} >= {"square_driver", "link_monitor"}


@pytest.mark.parametrize("path", ROS_NODES, ids=lambda p: p.stem)
def test_the_ros_nodes_import_nothing_of_the_twin(path):
    assert _twin(_imported_names(path)) == []


def test_the_endpoints_load_neither_the_twin_nor_rclpy():
    assert {"fieldtest.endpoints.streamer", "fieldtest.endpoints.receiver"} <= set(ENDPOINT_MODULES)
    loaded = _loaded_after_import(ENDPOINT_MODULES)
    assert _twin(loaded) == [] and "rclpy" not in loaded
    for module in ENDPOINT_MODULES:
        path = ENDPOINTS / f"{module.rsplit('.', 1)[1]}.py"
        names = _imported_names(path)
        assert _twin(names) == [] and not {n for n in names if n.split(".")[0] == "rclpy"}, path
