"""Layers only point down (docs/architecture.md): checked on the source, so it cannot regress.

Every ``import`` in a module counts, including the ones inside functions (they run, just later),
and so does everything those modules import in turn: a layer may not reach a forbidden one through
a third module either.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fieldtest.testkit.importgraph import import_graph

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "fieldtest"
# The bottom layer: plain data and helpers every layer may read (they import only each other).
PLAIN = (
    "fieldtest.names", "fieldtest.catalog", "fieldtest.linkconfig", "fieldtest.plan", "fieldtest.qos",
    "fieldtest.rosmsg", "fieldtest.procs", "fieldtest.realtime", "fieldtest.errors",
)  # fmt: skip
RECORD, TRANSPORT, SECURITY = "fieldtest.record", "fieldtest.transport", "fieldtest.security"
MIDDLEWARE, ANALYSIS, ENDPOINTS = "fieldtest.middleware", "fieldtest.analysis", "fieldtest.endpoints"
TWIN, LABRUN, RUNNER = "fieldtest.twin", "fieldtest.labrun", "fieldtest.runner"
UPPER = (
    TWIN,
    LABRUN,
    RUNNER,
    "fieldtest.lifecycle",
    "fieldtest.trialcampaign",
    "fieldtest.perf",
    "fieldtest.cli",
)
FAMILY_LINKS = tuple(
    f"{MIDDLEWARE}.{family}.{part}"
    for family in ("dds", "zenoh", "mqtt")
    for part in ("transport", "infra", "bridge")
)
# Each family's settings.py is plain data too (its link settings, read by the record and the
# analysis): it may pass through its package's __init__ modules, which import nothing.
FAMILY_SETTINGS = tuple(
    f"{MIDDLEWARE}.{path.parent.name}.settings"
    for path in sorted((PACKAGE_ROOT / "middleware").glob("*/settings.py"))
)
SETTINGS_PACKAGES = frozenset({MIDDLEWARE} | {module.rsplit(".", 1)[0] for module in FAMILY_SETTINGS})
# layer -> what it may never reach; docs/architecture.md's table lists exactly these
# (test_the_docs_table_is_this_table)
FORBIDDEN = {
    **{module: (RECORD, TRANSPORT, SECURITY, MIDDLEWARE, ANALYSIS, ENDPOINTS, *UPPER) for module in (*PLAIN, *FAMILY_SETTINGS)},
    RECORD: (TRANSPORT, SECURITY, MIDDLEWARE, ANALYSIS, ENDPOINTS, *UPPER),
    TRANSPORT: (SECURITY, MIDDLEWARE, ANALYSIS, ENDPOINTS, *UPPER),
    SECURITY: (TRANSPORT, MIDDLEWARE, ANALYSIS, ENDPOINTS, *UPPER),
    ANALYSIS: (TRANSPORT, SECURITY, MIDDLEWARE, ENDPOINTS, *UPPER),
    MIDDLEWARE: (ANALYSIS, ENDPOINTS, *UPPER),
    # a family's transport and infrastructure take their security fragment, never compute it
    **{module: (SECURITY, f"{MIDDLEWARE}.registry", ANALYSIS, ENDPOINTS, *UPPER) for module in FAMILY_LINKS},
    ENDPOINTS: (SECURITY, MIDDLEWARE, ANALYSIS, *UPPER),
    TWIN: (LABRUN, RUNNER, "fieldtest.trialcampaign", "fieldtest.cli"),
    RUNNER: (LABRUN, "fieldtest.cli"),
}  # fmt: skip
# Known exceptions: the analysis replays the Create 3 model (pure kinematics, no middleware).
ALLOWED = {"fieldtest.analysis": ("fieldtest.twin", "fieldtest.twin.create3model")}


REACHES = import_graph(PACKAGE_ROOT, with_parents=True)
MODULES = set(REACHES)


def direct_imports(module: str) -> frozenset[str]:
    """The fieldtest modules ``module`` imports anywhere in its body (functions included)."""
    return REACHES[module]


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
    if target in ALLOWED.get(layer, ()):
        return False
    if target == "fieldtest" or target == layer or target.startswith(layer + "."):
        return False
    if target in FAMILY_SETTINGS or target in SETTINGS_PACKAGES:
        return False
    return any(target == f or target.startswith(f + ".") for f in FORBIDDEN[layer])


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m)))
def test_layers_only_point_down(module):
    layer = _layer(module)
    via = reachable(module)
    bad = sorted(t for t in via if _forbidden(layer, t))
    chains = [f"{t} (imported by {via[t]})" for t in bad]
    assert not bad, f"{module} ({layer}) reaches {', '.join(chains)}"


@pytest.mark.parametrize("module", (*PLAIN, *FAMILY_SETTINGS))
def test_the_plain_data_modules_reach_only_each_other(module):
    assert set(reachable(module)) <= {*PLAIN, *FAMILY_SETTINGS, *SETTINGS_PACKAGES, "fieldtest"}


# A family's wire form (its kinds in a capture's accounting) is loaded by fieldtest.netem.wire for
# any capture: plain like its settings.
FAMILY_WIRE = tuple(
    f"{MIDDLEWARE}.{path.parent.name}.wire"
    for path in sorted((PACKAGE_ROOT / "middleware").glob("*/wire.py"))
)


@pytest.mark.parametrize("module", FAMILY_WIRE)
def test_a_familys_wire_form_reaches_only_the_plain_data_modules(module):
    assert set(reachable(module)) <= {*PLAIN, *FAMILY_SETTINGS, *SETTINGS_PACKAGES, "fieldtest"}


@pytest.mark.parametrize("package", sorted(SETTINGS_PACKAGES))
def test_the_packages_above_a_family_settings_module_import_nothing(package):
    """Reading a family's settings loads its package's __init__ first: it must stay empty of imports."""
    assert direct_imports(package) == frozenset()


def test_every_family_with_settings_has_its_settings_module_checked():
    assert {"fieldtest.middleware.dds.settings", "fieldtest.middleware.zenoh.settings"} <= set(
        FAMILY_SETTINGS
    )


def test_the_docs_table_is_this_table():
    """docs/architecture.md's layer table lists exactly FORBIDDEN: each row's modules and what they never import."""
    docs = (PACKAGE_ROOT.parent / "docs" / "architecture.md").read_text()
    table = docs.split("## Layers")[1].split("\n\n")[1]
    rows = [line.split("|")[1:-1] for line in table.splitlines()[2:]]
    documented = {}
    for _layer, modules, never, _what in rows:
        for module in re.findall(r"`([\w.{}<>,]+)`", modules):
            documented[module] = tuple(re.findall(r"`([\w.]+)`", never))
    expected = {module: tuple(sorted(targets)) for module, targets in FORBIDDEN.items()}
    families = {m for m in FORBIDDEN if m in FAMILY_LINKS or m in FAMILY_SETTINGS}
    expected = {m: t for m, t in expected.items() if m not in families}
    expected["fieldtest.middleware.<family>.settings"] = tuple(sorted(FORBIDDEN[FAMILY_SETTINGS[0]]))
    expected["fieldtest.middleware.<family>.{transport,infra,bridge}"] = tuple(
        sorted(FORBIDDEN[FAMILY_LINKS[0]])
    )
    assert {m: tuple(sorted(t)) for m, t in documented.items()} == expected


def test_the_checker_sees_imports_inside_functions():
    """A function-level import is an edge too (the old transport -> security imports were)."""
    assert "fieldtest.middleware.zenoh.transport" in direct_imports("fieldtest.middleware.zenoh.family")
    assert "fieldtest.middleware.dds.security" in direct_imports("fieldtest.middleware.dds.family")
    assert _forbidden("fieldtest.transport", "fieldtest.security.enforce")
    assert not _forbidden("fieldtest.record", "fieldtest.linkconfig")


def _module_name(path: Path, package_root: Path) -> list[str]:
    parts = [package_root.name, *path.relative_to(package_root).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imported_module(node: ast.ImportFrom, path: Path, package_root: Path) -> str:
    """The absolute name of the module ``node`` imports from (a relative import resolved)."""
    if not node.level:
        return node.module or ""
    package = _module_name(path, package_root)
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_family_imports(package_root: Path, *others: Path) -> list[str]:
    """``file: line: name`` for every ``_private`` name imported from a family package
    (fieldtest/middleware/<family>/) by a module outside it: another family, the shared
    fieldtest/middleware modules, any other part of the kit (``package_root``) or the ``others``
    folders (tools, benchmarks). What two families share, or what the kit uses of one, is public or
    lives in fieldtest/middleware itself. The tests are left out: they may test a private helper."""
    middleware = package_root / "middleware"
    families = {p.name for p in middleware.iterdir() if (p / "__init__.py").is_file()}
    prefix = f"{package_root.name}.middleware."
    found = []
    for root in (package_root, *others):
        for path in sorted(root.rglob("*.py")):
            inside = path.relative_to(middleware).parts[0] if path.is_relative_to(middleware) else None
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ImportFrom):
                    continue
                module = _imported_module(node, path, package_root)
                owner = module.removeprefix(prefix).split(".")[0]
                if not module.startswith(prefix) or owner not in families or owner == inside:
                    continue
                found += [
                    f"{path.relative_to(package_root.parent)}:{node.lineno}: {module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_")
                ]
    return found


def test_no_module_outside_a_family_imports_its_private_names():
    repository = PACKAGE_ROOT.parent
    assert private_family_imports(PACKAGE_ROOT, repository / "tools", repository / "benchmarks") == []


def test_the_private_import_check_sees_one(tmp_path):
    """zenoh/lab.py importing dds.lab's ``_local_only`` (as it once did), the lab's MQTT stand-in
    importing the MQTT transport's ``_disable_nagle`` (as it once did) and a shared middleware
    module importing a family's private name relatively are named; a public name, a private name of
    its own family, and the shared fieldtest/middleware modules' own are not."""
    package = tmp_path / "fieldtest"
    files = {
        "middleware/dds/lab.py": "def _local_only(): ...\ndef public(): ...\n",
        "middleware/zenoh/lab.py": "from fieldtest.middleware.dds.lab import _local_only, public\n"
        "from fieldtest.middleware.zenoh.infra import _own\nfrom fieldtest.middleware.labshared import _shared\n"
        "from .infra import _own\n",
        "middleware/zenoh/infra.py": "def _own(): ...\n",
        "middleware/labshared.py": "def _shared(): ...\n",
        "middleware/registry.py": "from .labshared import _shared\nfrom .dds.lab import _local_only\n",
        "labrun/standin.py": "from fieldtest.middleware.mqtt import transport\n"
        "from fieldtest.middleware.mqtt.transport import _disable_nagle, open_mqtt\n",
        "middleware/mqtt/transport.py": "def _disable_nagle(): ...\n",
    }
    for name in ("", "middleware/", "middleware/dds/", "middleware/zenoh/", "middleware/mqtt/", "labrun/"):
        files[name + "__init__.py"] = ""
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    assert private_family_imports(package) == [
        "fieldtest/labrun/standin.py:2: fieldtest.middleware.mqtt.transport._disable_nagle",
        "fieldtest/middleware/registry.py:2: fieldtest.middleware.dds.lab._local_only",
        "fieldtest/middleware/zenoh/lab.py:1: fieldtest.middleware.dds.lab._local_only",
    ]
