"""No code outside the family packages (fieldtest/middleware/<family>/) branches on a middleware,
family, RMW or bridge name.

Such a comparison is a place a new middleware would have to be added by hand; the family packages
answer instead, through the ``Middleware`` hooks (docs/architecture.md, "How to add a middleware").
Scanned on the source: every ``==``/``!=``/``in``/``not in`` and every ``match`` case whose operand
is a string literal naming a middleware, a family, an RMW or a bridge (or a tuple/list/set of them).
"""

from __future__ import annotations

import ast
import re
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
    ("fieldtest/labrun/rehearsal/labrehearsal.py", "fastdds"),
    # the stand-in's own ROS node name, as a key of the parameter file it reads
    ("fieldtest/labrun/rehearsal/mqtt_standin.py", "mqtt_client"),
}


def _words(node: ast.AST, constants: dict[str, set[str]] | None = None) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & MIDDLEWARE_WORDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Call)):  # frozenset((...)) too
        elements = node.args if isinstance(node, ast.Call) else node.elts
        return set().union(*(_words(e, constants) for e in elements)) if elements else set()
    if isinstance(node, ast.Name) and constants:
        return constants.get(node.id, set())
    return set()


def _module_constants(tree: ast.Module) -> dict[str, set[str]]:
    """Module-level names bound to literals of middleware words (``FAMILIES = ("mqtt",)``)."""
    constants = {}
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        words = _words(value) if value is not None else set()
        for target in targets:
            if words and isinstance(target, ast.Name):
                constants[target.id] = words
    return constants


def name_comparisons(source: str, filename: str) -> list[str]:
    """``line: words`` for every comparison or match case against a middleware word, directly or
    through a module constant that holds such words."""
    found = []
    tree = ast.parse(source, filename)
    constants = _module_constants(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            words = set().union(*(_words(o, constants) for o in operands))
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


# The family packages (middleware/<family>/) are the only homes: the shared middleware modules (base,
# registry, launch, lab) ask the hooks like everyone else.
FAMILY_HOMES = tuple(d for d in HOME.iterdir() if (d / "__init__.py").is_file())
OUTSIDE = sorted(p for p in PACKAGE_ROOT.rglob("*.py") if not any(h in p.parents for h in FAMILY_HOMES))


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
UDP_FAMILIES = ("mqtt",)
if family in UDP_FAMILIES: pass
ROLES = ("host", "robot")
if role in ROLES: pass
"""
    found = name_comparisons(source, "x.py")
    assert [f.split(":")[1] for f in found] == ["2", "3", "4", "5", "7", "10"]


# The security layer takes the settings each middleware declares (``Middleware.security_settings``,
# from its family's security.py) and never names a middleware or family, even without comparing.
SECURITY = PACKAGE_ROOT / "security"
CATALOG_WORDS = frozenset({entry.name for entry in CATALOG} | {entry.family for entry in CATALOG})
XML_ELEMENT_CALLS = ("Element", "SubElement")  # ElementTree: the tag is the first / second argument


def named_middlewares(source: str, filename: str) -> list[str]:
    """``line: word`` for every string literal that is a catalog name or family, docstrings and XML
    element tags aside (``<dds>`` is the root of the OMG DDS Security governance and permissions)."""
    tree = ast.parse(source, filename)
    skipped = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)} | {
        id(n.args[1 if n.func.attr == "SubElement" else 0])
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in XML_ELEMENT_CALLS
    }
    return [
        f"{filename}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in CATALOG_WORDS and id(node) not in skipped
    ]


@pytest.mark.parametrize(
    "path", sorted(SECURITY.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE_ROOT))
)
def test_security_names_no_middleware(path):
    found = named_middlewares(path.read_text(), str(path.relative_to(PACKAGE_ROOT.parent)))
    assert not found, (
        "a family's security belongs in fieldtest/middleware/<family>/security.py: " + "; ".join(found)
    )


def test_the_security_scan_sees_a_name_passed_as_an_argument():
    source = '''"""dds docstring"""
DDS = in_family("dds")
get_setting(name, "zenoh-peer")
kind = "dds-security"
root = ET.Element("dds")
ET.SubElement(root, "dds", name="mqtt")
'''
    assert [f.split(":")[1] for f in named_middlewares(source, "x.py")] == ["2", "3", "6"]


# Words of the non-DDS families as they appear in Python names (DDS Security is the keystore's own
# standard, SROS2, so "dds" names the shared machinery there, not a family).
FAMILY_NAME_PARTS = frozenset({"zenoh", "zenohd", "mqtt", "mosquitto", "rmw"})
# A family's name as a string fragment: its files, enclaves and node names in a keystore.
FAMILY_FRAGMENTS = tuple({entry.family.replace("-", "_") for entry in CATALOG if "-" in entry.family})


def _identifiers(tree: ast.AST):
    """(line, name) for every name a module defines, uses, imports or takes as a keyword."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.lineno, node.name
        elif isinstance(node, ast.arg):
            yield node.lineno, node.arg
        elif isinstance(node, ast.alias):
            yield node.lineno, node.asname or node.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.lineno, node.module
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.lineno, node.arg


def family_identifiers(source: str, filename: str) -> list[str]:
    """``line: name`` for every Python name (the module's own included) made of a family's words,
    and every string other than a docstring holding a family's name (``rmw_zenoh``)."""
    tree = ast.parse(source, filename)
    module = ("0", Path(filename).stem)
    found = [
        f"{filename}:{line}: {name}"
        for line, name in [module, *_identifiers(tree)]
        if set(re.split(r"[._]", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())) & FAMILY_NAME_PARTS
    ]
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    found += [
        f"{filename}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        if any(f in node.value.replace("-", "_") for f in FAMILY_FRAGMENTS)
    ]
    return found


@pytest.mark.parametrize(
    "path", sorted(SECURITY.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE_ROOT))
)
def test_security_holds_no_family_material(path):
    """A family's keystore material (rmw-zenoh's policy and enclaves) is its package's, written through
    ``Middleware.keystore_material``; fieldtest/security/ has no module, function or value of a family."""
    found = family_identifiers(path.read_text(), str(path.relative_to(PACKAGE_ROOT.parent)))
    assert not found, "a family's keystore material belongs in fieldtest/middleware/<family>/: " + "; ".join(
        found
    )


def test_the_family_identifier_scan_sees_names_modules_and_values():
    source = '''"""rmw_zenoh docstring"""
from .rmw_zenoh import RMW_ZENOH_ROLES
def _write_mqtt_acl(): pass
kit_dir = "fieldtest/rmw_zenoh"
governance = "fieldtest/governance/sros2.xml"
ZenohRouter.start
'''
    found = family_identifiers(source, "fieldtest/security/x.py")
    assert sorted(f.split(":")[1] for f in found) == ["2", "2", "3", "4", "6"]
    assert family_identifiers("", "fieldtest/security/rmw_zenoh.py") == [
        "fieldtest/security/rmw_zenoh.py:0: rmw_zenoh"
    ]


# Generic modules whose family parts live in the family packages (a family's wire form: its
# wire.py; the perf row fields it sweeps: its settings' PERF_FIELDS; the payload it carries: its
# Middleware's max_payload): like the security layer they name no middleware or family, in values
# or in names.
FAMILY_FREE = (PACKAGE_ROOT / "netem" / "wire.py", *sorted((PACKAGE_ROOT / "perf").glob("*.py")))


# A family package's dotted path (``fieldtest.middleware.dds``), as code that a string carries
# (a remote probe's source) would import it.
FAMILY_MODULE_PATHS = tuple(f"{PACKAGE_ROOT.name}.middleware.{home.name}" for home in FAMILY_HOMES)


def family_module_paths(source: str, filename: str) -> list[str]:
    """``line: string`` for every string other than a docstring that names a family's module."""
    tree = ast.parse(source, filename)
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    return [
        f"{filename}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        if any(re.search(rf"\b{re.escape(path)}\b", node.value) for path in FAMILY_MODULE_PATHS)
    ]


@pytest.mark.parametrize("path", FAMILY_FREE, ids=lambda p: str(p.relative_to(PACKAGE_ROOT)))
def test_the_generic_modules_name_no_family(path):
    filename = str(path.relative_to(PACKAGE_ROOT.parent))
    source = path.read_text()
    found = named_middlewares(source, filename) + family_identifiers(source, filename)
    found += family_module_paths(source, filename)
    assert not found, "a family's part belongs in fieldtest/middleware/<family>/: " + "; ".join(found)


def test_the_family_module_scan_sees_a_path_in_remote_code():
    source = '''"""fieldtest.middleware.dds docstring"""
probe = "from fieldtest.middleware.dds.security import check\\n"
shared = "fieldtest.middleware.registry"
other = "fieldtest.middleware.ddsx"
'''
    assert [f.split(":")[1] for f in family_module_paths(source, "x.py")] == ["2"]
