"""A pytest plugin that turns every skip and expected failure into a failure, at run time.

The suite's source guard (tests/test_testkit_needs.py) reads the tests for the spellings of a skip;
this sees the outcome however it came about: a marker added by name (``item.add_marker("skip")``),
a skip raised by a library the test calls, a module that skips while it is collected."""

from __future__ import annotations

from collections.abc import Generator

import pytest

REASON = "the suite skips nothing: a missing dependency fails with the reason (fieldtest.testkit.needs)"


def _as_failure(report: pytest.TestReport | pytest.CollectReport) -> None:
    if report.skipped:  # a skip, or an expected failure that failed (pytest reports xfail as a skip)
        what = f"expected to fail ({report.wasxfail})" if hasattr(report, "wasxfail") else "skipped"
        detail = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
        report.outcome = "failed"
        report.longrepr = f"{what}: {detail}\n{REASON}"
    elif report.passed and hasattr(report, "wasxfail"):  # marked xfail, and passed
        report.outcome = "failed"
        report.longrepr = f"marked as expected to fail ({report.wasxfail}) and passed\n{REASON}"


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outside pytest's own skipping plugin: its final word
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _as_failure(report)
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _as_failure(report)
    return report
