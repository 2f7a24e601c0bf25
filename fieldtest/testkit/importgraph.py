"""The import graph of a package read from its source with ``ast``: which of its modules each module
imports, and the cycles in it. Used by the tests that keep the kit's layers and stages pointing one
way (tests/test_layers.py, tests/test_import_cycles.py).

Every import counts: at module level, inside functions (they run, just later), under
``TYPE_CHECKING``, relative and absolute, and the submodules a package's ``lazy_attributes`` table
names (fieldtest.lazy: they load on first use of the name).
"""

from __future__ import annotations

import ast
from pathlib import Path


def module_names(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every module below ``package_dir`` (itself included)."""
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _lazy_targets(module: str, tree: ast.Module) -> list[str]:
    """The submodules a ``lazy_attributes(__name__, TABLE, ...)`` call's table names."""
    tables = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_attributes"):
            continue
        table = node.args[1] if len(node.args) > 1 else None
        values = tables[table.id].values if isinstance(table, ast.Name) and table.id in tables else []
        for value in values:
            if (
                isinstance(value, ast.Constant)
                and isinstance(value.value, str)
                and value.value.startswith(".")
            ):
                found.append(module + value.value)
    return found


def imported_names(module: str, path: Path) -> list[tuple[str, ...]]:
    """What ``module`` imports, one tuple of dotted names per imported thing: the module it is, or
    for ``from a import b`` (``b`` a module or a name in ``a``) both ``a.b`` and ``a``."""
    tree = ast.parse(path.read_text(), str(path))
    names: list[tuple[str, ...]] = [(name,) for name in _lazy_targets(module, tree)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name,) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, path.name == "__init__.py", node)
            names += [(f"{base}.{alias.name}", base) for alias in node.names]
    return names


def import_graph(package_dir: Path, with_parents: bool = False) -> dict[str, frozenset[str]]:
    """module -> the package's modules it imports. ``from a import b`` is an edge to ``a.b`` when
    that is a module, else to ``a``. ``with_parents``: to ``a`` as well, and importing ``a.b.c`` is
    an edge to ``a`` and ``a.b`` too (their ``__init__`` runs first), for what a module reaches."""
    modules = module_names(package_dir)
    graph = {}
    for module, path in modules.items():
        found: set[str] = set()
        for candidates in imported_names(module, path):
            if with_parents:
                parts = candidates[0].split(".")
                found.update(p for i in range(1, len(parts) + 1) if (p := ".".join(parts[:i])) in modules)
            else:
                found.update(next(([name] for name in candidates if name in modules), []))
        found.discard(module)
        graph[module] = frozenset(found)
    return graph


def cycles(graph: dict[str, frozenset[str]]) -> list[tuple[str, ...]]:
    """The graph's strongly connected components of more than one module (each sorted), sorted:
    every module in one reaches every other, so each is one or more import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(tuple(sorted(component)))
    return sorted(found)


def cycle_path(graph: dict[str, frozenset[str]], component: tuple[str, ...]) -> list[str]:
    """One cycle through the component's first module, as the chain of imports (first = last)."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    todo = [start]
    while todo:  # breadth first: the shortest way back to the start
        node = todo.pop(0)
        for target in sorted(graph[node] & members):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, node, start]
            if target not in previous:
                previous[target] = node
                todo.append(target)
    return list(component)
