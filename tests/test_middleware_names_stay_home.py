"""No code outside fieldtest/middleware/ branches on a middleware, family, RMW or bridge name.

Such a comparison is a place a new middleware would have to be added by hand; the family packages
answer instead, through the ``Middleware`` hooks (docs/architecture.md, "How to add a middleware").
Scanned on the source: every ``==``/``!=``/``in``/``not in`` and every ``match`` case whose operand
is a string literal naming a middleware, a family, an RMW or a bridge (or a tuple/list/set of them).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fieldtest.catalog import CATALOG

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "fieldtest"
HOME = PACKAGE_ROOT / "middleware"
# Every word a branch on a middleware would compare against: the catalog's names and families, the
# lab's RMWs (RMW_IMPLEMENTATIONS keys and values), its bridges, routers and brokers.
MIDDLEWARE_WORDS = frozenset(
    {entry.name for entry in CATALOG}
    | {entry.family for entry in CATALOG}
    | {"zenoh", "mqtt", "dds", "cyclonedds", "fastrtps", "rmw_cyclonedds_cpp", "rmw_fastrtps_cpp"}
    | {"rmw_zenoh_cpp", "zenoh-bridge-ros2dds", "mqtt_client", "zenohd", "rmw_zenohd", "mosquitto"}
)
# Comparisons that name something else with the same word: the simulated Create 3's own DDS vendor
# (``--vendor``, as the real base's firmware), not the trial's middleware.
NOT_A_MIDDLEWARE = {
    ("fieldtest/labrun/rehearsal/simbase.py", "fastdds"),
    ("fieldtest/labrun/rehearsal/rehearsal.py", "fastdds"),
}


def _words(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & MIDDLEWARE_WORDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_words(e) for e in node.elts)) if node.elts else set()
    return set()


def name_comparisons(source: str, filename: str) -> list[str]:
    """``line: words`` for every comparison or match case against a middleware word."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            words = set().union(*(_words(o) for o in operands))
        elif isinstance(node, ast.match_case):
            words = {v.value.value for v in ast.walk(node.pattern) if isinstance(v, ast.MatchValue)
                     and isinstance(v.value, ast.Constant)} & MIDDLEWARE_WORDS  # fmt: skip
        else:
            continue
        words = {w for w in words if (filename, w) not in NOT_A_MIDDLEWARE}
        if words:
            found.append(
                f"{filename}:{node.lineno if hasattr(node, 'lineno') else node.pattern.lineno}: {sorted(words)}"
            )
    return found


OUTSIDE = sorted(p for p in PACKAGE_ROOT.rglob("*.py") if HOME not in p.parents)


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda p: str(p.relative_to(PACKAGE_ROOT)))
def test_no_branch_on_a_middleware_name_outside_its_home(path):
    found = name_comparisons(path.read_text(), str(path.relative_to(PACKAGE_ROOT.parent)))
    assert not found, "ask the middleware (fieldtest.middleware) instead of comparing names: " + "; ".join(
        found
    )


def test_the_scan_sees_each_form_of_comparison():
    source = """
if cfg.rmw == "zenoh": pass
if "mqtt" != family: pass
if name in ("zenoh-peer", "zenoh-router"): pass
if lab_bridge not in {"mqtt_client"}: pass
match rmw:
    case "cyclonedds": pass
if cfg.role == "robot" or path == "/tmp/dds_like": pass
"""
    found = name_comparisons(source, "x.py")
    assert [f.split(":")[1] for f in found] == ["2", "3", "4", "5", "7"]
