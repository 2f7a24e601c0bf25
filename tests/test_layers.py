"""Layers only point down (docs/architecture.md): checked on the source, so it cannot regress.

Every ``import`` in a module counts, including the ones inside functions (they run, just later),
and so does everything those modules import in turn: a layer may not reach a forbidden one through
a third module either.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "fieldtest"
# The plain data every layer may read: the shared constants, the middleware catalog, TransportConfig.
PLAIN_DATA = ("fieldtest.names", "fieldtest.catalog", "fieldtest.linkconfig")
SHARED_NAMES = "fieldtest.names"
UPPER = ("fieldtest.twin", "fieldtest.labrun", "fieldtest.runner", "fieldtest.campaign", "fieldtest.cli")
# layer -> what it may never reach (the plain data modules are always allowed)
FORBIDDEN = {
    "fieldtest.catalog": ("fieldtest",),
    "fieldtest.linkconfig": ("fieldtest",),
    "fieldtest.record": ("fieldtest.transport", "fieldtest.security", "fieldtest.middleware", "fieldtest.analysis", *UPPER),
    "fieldtest.analysis": ("fieldtest.transport", "fieldtest.security", "fieldtest.middleware", *UPPER),
    "fieldtest.transport": ("fieldtest.security", "fieldtest.middleware", "fieldtest.analysis", *UPPER),
    "fieldtest.security": ("fieldtest.transport", "fieldtest.middleware", "fieldtest.analysis", *UPPER),
    "fieldtest.middleware": ("fieldtest.analysis", *UPPER),
    # a family's transport and infrastructure take their security fragment, never compute it
    **{
        f"fieldtest.middleware.{family}.{part}": ("fieldtest.security", "fieldtest.middleware.registry", "fieldtest.analysis", *UPPER)
        for family in ("dds", "zenoh", "mqtt")
        for part in ("transport", "infra", "bridge")
    },
    "fieldtest.endpoints": ("fieldtest.security", "fieldtest.middleware", "fieldtest.analysis", *UPPER),
}  # fmt: skip
# Known exceptions: the analysis replays the Create 3 model (pure kinematics, no middleware).
ALLOWED = {"fieldtest.analysis": ("fieldtest.twin", "fieldtest.twin.create3")}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE_ROOT.rglob("*.py")}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


@cache
def direct_imports(module: str) -> frozenset[str]:
    """The fieldtest modules ``module`` imports anywhere in its body (functions included)."""
    path = MODULES[module]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path.name == "__init__.py", node)
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            # importing a.b.c runs a/__init__ and a/b/__init__ too
            parts = name.split(".")
            found.update(
                ".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in MODULES
            )
    found.discard(module)
    return frozenset(found)


def reachable(module: str) -> dict[str, str]:
    """Every fieldtest module ``module`` reaches, with the module that imports it (for the message)."""
    seen: dict[str, str] = {}
    todo = [module]
    while todo:
        current = todo.pop()
        for name in direct_imports(current):
            if name not in seen and name != module:
                seen[name] = current
                todo.append(name)
    return seen


def _layer(module: str) -> str | None:
    matches = [layer for layer in FORBIDDEN if module == layer or module.startswith(layer + ".")]
    return max(matches, key=len) if matches else None


def _forbidden(layer: str, target: str) -> bool:
    if target in PLAIN_DATA or target in ALLOWED.get(layer, ()):
        return False
    if target == "fieldtest" or target == layer or target.startswith(layer + "."):
        return False
    return any(target == f or target.startswith(f + ".") for f in FORBIDDEN[layer])


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m)))
def test_layers_only_point_down(module):
    layer = _layer(module)
    via = reachable(module)
    bad = sorted(t for t in via if _forbidden(layer, t))
    chains = [f"{t} (imported by {via[t]})" for t in bad]
    assert not bad, f"{module} ({layer}) reaches {', '.join(chains)}"


def test_the_plain_data_modules_import_nothing_else():
    assert direct_imports("fieldtest.catalog") == frozenset()
    config_imports = direct_imports("fieldtest.linkconfig") - {"fieldtest"}
    assert config_imports == {"fieldtest.catalog", SHARED_NAMES}
    assert direct_imports(SHARED_NAMES) == frozenset()


def test_the_checker_sees_imports_inside_functions():
    """A function-level import is an edge too (the old transport -> security imports were)."""
    assert "fieldtest.middleware.zenoh.transport" in direct_imports("fieldtest.middleware.zenoh.family")
    assert "fieldtest.security" in direct_imports("fieldtest.middleware.zenoh.family")
    assert _forbidden("fieldtest.transport", "fieldtest.security.enforce")
    assert not _forbidden("fieldtest.record", "fieldtest.linkconfig")
