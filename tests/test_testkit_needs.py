"""A test whose dependency is missing fails with the reason; it is never skipped."""

from __future__ import annotations

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


def test_no_test_skips_for_a_missing_dependency():
    from pathlib import Path

    tests = Path(__file__).parent
    offenders = [
        f"{path.name}:{number}"
        for path in sorted(tests.glob("test_*.py"))
        if path.name != Path(__file__).name
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "importorskip(" in line or ("skipif(" in line and "shutil.which" in line)
    ]
    assert offenders == []
