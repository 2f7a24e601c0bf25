"""A test whose dependency is missing fails with the reason; it is never skipped."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fieldtest.testkit import needs


def test_a_missing_program_fails_naming_it_and_the_install_step():
    with pytest.raises(pytest.fail.Exception, match=r"needs no-such-tool-x1 on PATH: run `make install`"):
        needs.tools("sh", "no-such-tool-x1")
    needs.tools("sh")


def test_a_missing_python_package_fails_naming_it():
    with pytest.raises(pytest.fail.Exception, match=r"needs the Python package no_such_package_x1"):
        needs.module("no_such_package_x1")
    assert needs.module("json").dumps([]) == "[]"


# Every way a test can end without running to its assertions and still not fail. "xfail" in any form
# is one: an imperative xfail stops the test, a marked one turns a failure into a pass.
SKIP_NAMES = {"skip", "skipif", "importorskip", "xfail", "Skipped", "XFailed"}
UNITTEST_SKIP_NAMES = {"skip", "skipIf", "skipUnless", "SkipTest", "skipTest", "expectedFailure"}
SKIP_MODULES = ("pytest", "_pytest", "unittest")
MARKING_BY_NAME = {"add_marker", "applymarker"}  # item.add_marker("skip") marks by the marker's name
# Ways a conftest leaves tests out without a skip: they are never collected, or deselected by hand.
LEAVING_OUT = {"collect_ignore", "collect_ignore_glob", "pytest_ignore_collect", "pytest_deselected"}


def _skip_module(name: str | None) -> bool:
    return name is not None and name.split(".")[0] in SKIP_MODULES


def skips_in(source: str) -> list[int]:
    """Line numbers where ``source`` skips or xfails a test, in any spelling: through pytest or
    unittest, attribute or imported name, aliased or not, ``self.skipTest``, ``getattr(pytest, ...)``,
    a marker added by its name; or leaves tests out of the run (collect_ignore, deselection)."""
    tree = ast.parse(source)
    names = SKIP_NAMES | UNITTEST_SKIP_NAMES
    module_aliases = set()  # names bound to pytest, unittest or anything imported from them
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            module_aliases |= {(a.asname or a.name).split(".")[0] for a in node.names if _skip_module(a.name)}
        elif isinstance(node, ast.ImportFrom) and _skip_module(node.module):
            for alias in node.names:
                if alias.name in names or alias.name == "*":
                    lines.add(node.lineno)
                module_aliases.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in {"skipTest", "SkipTest"}:
            lines.add(node.lineno)  # unittest's, on any object (self.skipTest)
        elif isinstance(node, ast.Attribute) and node.attr in names:
            root = node.value
            while isinstance(root, ast.Attribute | ast.Call):
                root = root.value if isinstance(root, ast.Attribute) else root.func
            if isinstance(root, ast.Name) and root.id in module_aliases:
                lines.add(node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name | ast.Attribute)
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr)
            in {"getattr", *MARKING_BY_NAME}
            and any(isinstance(a, ast.Constant) and a.value in names for a in node.args)
        ):
            lines.add(node.lineno)
        if (
            isinstance(node, ast.Name | ast.Attribute | ast.FunctionDef)
            and (getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "name", None))
            in LEAVING_OUT
        ):
            lines.add(node.lineno)
    return sorted(lines)


SKIPPING = {
    "pytest.skip": "import pytest\ndef test():\n    pytest.skip('no tool')\n",
    "skip exception": "import pytest\ndef test():\n    raise pytest.skip.Exception('no tool')\n",
    "mark.skip": "import pytest\n@pytest.mark.skip(reason='later')\ndef test():\n    pass\n",
    "mark.skipif": "import pytest\n@pytest.mark.skipif(True, reason='x')\ndef test():\n    pass\n",
    "module mark": "import pytest\npytestmark = [pytest.mark.skipif(True, reason='x')]\n",
    "param mark": "import pytest\nP = pytest.param(1, marks=pytest.mark.skip)\n",
    "importorskip": "import pytest\nnp = pytest.importorskip('numpy')\n",
    "imperative xfail": "import pytest\ndef test():\n    pytest.xfail('flaky')\n",
    "xfail mark": "import pytest\n@pytest.mark.xfail(run=False)\ndef test():\n    pass\n",
    "aliased module": "import pytest as pt\ndef test():\n    pt.skip('no tool')\n",
    "imported skip": "from pytest import skip\ndef test():\n    skip('no tool')\n",
    "imported alias": "from pytest import skip as give_up\ndef test():\n    give_up('no tool')\n",
    "imported mark": "from pytest import mark\n@mark.skipif(True, reason='x')\ndef test():\n    pass\n",
    "outcomes": "from _pytest.outcomes import Skipped\ndef test():\n    raise Skipped('no tool')\n",
    "getattr": "import pytest\ndef test():\n    getattr(pytest, 'skip')('no tool')\n",
    "unittest decorator": "import unittest\n@unittest.skipIf(True, 'x')\ndef test():\n    pass\n",
    "unittest import": "from unittest import skipUnless\n@skipUnless(False, 'x')\ndef test():\n    pass\n",
    "unittest exception": "import unittest\ndef test():\n    raise unittest.SkipTest('no tool')\n",
    "skipTest": "import unittest\nclass T(unittest.TestCase):\n    def test(self):\n        self.skipTest('x')\n",
    "star import": "from pytest import *\n",
    "marker by name": "def test(request):\n    request.node.add_marker('xfail')\n",
    "applied by name": "def test(request):\n    request.applymarker('skip')\n",
    "collect_ignore": "collect_ignore = ['test_lab_perf.py']\n",
    "ignore hook": "def pytest_ignore_collect(collection_path, config):\n    return True\n",
    "deselected": "def pytest_collection_modifyitems(config, items):\n"
    "    config.hook.pytest_deselected(items=items[:1])\n    del items[:1]\n",
}


@pytest.mark.parametrize("form", SKIPPING)
def test_the_skip_guard_sees_every_form_of_skip(form):
    assert skips_in(SKIPPING[form]) != []


def test_the_skip_guard_leaves_what_is_not_a_skip_alone():
    clean = (
        "import pytest\nfrom fieldtest.natnet import protocol\n"
        "def test(reader):\n"
        "    reader.skip(4)  # a reader's own skip is no test outcome\n"
        "    assert protocol.skip_section is not None  # fmt: skip\n"
        "    pytest.fail('needs a tool')\n"
    )
    assert skips_in(clean) == []


def test_no_test_skips():
    """The suite, its helpers and the test kit: a missing dependency fails with the reason
    (``fieldtest.testkit.needs``), nothing is skipped or expected to fail."""
    root = Path(__file__).resolve().parents[1]
    sources = sorted([*(root / "tests").rglob("*.py"), *(root / "fieldtest" / "testkit").rglob("*.py")])
    offenders = [
        f"{path.relative_to(root)}:{line}" for path in sources for line in skips_in(path.read_text())
    ]
    assert offenders == []


# Skips the source guard cannot see: by a marker's name, from a helper outside tests/, at collection.
RUN_TIME_SKIPS = {
    "test_by_name.py": "def test(request):\n    request.node.add_marker('xfail')\n    assert False\n",
    "lab_helper.py": "import pytest\ndef need_tool():\n    pytest.skip('no tool')\n",
    "test_in_a_helper.py": "import lab_helper\ndef test():\n    lab_helper.need_tool()\n",
    "test_at_collection.py": "import pytest\npytest.skip('no tool', allow_module_level=True)\n",
    "test_passes.py": "def test():\n    pass\n",
}


def test_a_skip_or_xfail_at_run_time_fails_the_test(pytester):
    """fieldtest.testkit.noskip (tests/conftest.py loads it) fails every skip and expected failure
    however it came about; without it the same tests are skipped and xfailed, not failed."""
    pytester.makepyfile(**{name.removesuffix(".py"): code for name, code in RUN_TIME_SKIPS.items()})
    unguarded = pytester.runpytest("-p", "no:cacheprovider")
    unguarded.assert_outcomes(passed=1, skipped=2, xfailed=1)
    guarded = pytester.runpytest(
        "-p", "no:cacheprovider", "-p", "fieldtest.testkit.noskip", "--continue-on-collection-errors"
    )  # fmt: skip
    guarded.assert_outcomes(passed=1, failed=2, errors=1)
    assert guarded.stdout.str().count("the suite skips nothing") >= 3, guarded.stdout.str()


# The test kit's modules that exist to fail the calling test (pytest.fail with the reason); every
# other module of fieldtest/ is library code that `make test-wheels` or a user runs without pytest.
PYTEST_HELPERS = {
    "fieldtest/testkit/needs.py",
    "fieldtest/testkit/noskip.py",
    "fieldtest/testkit/refusal.py",
}


def test_only_the_test_helpers_import_pytest():
    root = Path(__file__).resolve().parents[1]
    importers = set()
    for path in (root / "fieldtest").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(name.split(".")[0] == "pytest" for name in names):
                importers.add(str(path.relative_to(root)))
    assert importers == PYTEST_HELPERS


def test_an_empty_wheelhouse_is_refused_naming_the_command_that_fills_it(tmp_path, monkeypatch):
    from fieldtest.testkit.wheelhouse import FILL_COMMAND, EmptyWheelhouse, registry_free_pip

    monkeypatch.setenv("FIELDTEST_CACHE", str(tmp_path))
    with pytest.raises(EmptyWheelhouse, match=f"no wheels in {tmp_path}/wheelhouse: run `{FILL_COMMAND}`"):
        with registry_free_pip():
            pass
