"""Skips for a component this machine lacks (the native scanner, Debian's chromium), and the
plugin that makes them failures where every component must be there.

A test that needs a component skips through `without` (a mark) or `skip_missing` (a call), whose
reason starts with `MISSING`. With `CTXDB_REQUIRE_COMPONENTS=1` (set by .ci/run, which installs
every component) such a skip is reported as a failure, so CI cannot pass with a component
silently left out; other skips stay skips. Registered through `pytest_plugins` in
tests/conftest.py; the helpers are imported by name.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_ENV = "CTXDB_REQUIRE_COMPONENTS"
MISSING = "missing component: "
NATIVE = "the native scanner (ctxdb/landing/_native, built from native/ when cargo is there)"
NATIVE_SOURCES = "the native scanner's sources (native/)"
BROWSER = "Debian's chromium and chromium-driver (/usr/bin; .ci/run installs them)"
NODE = "Node.js (`node` on PATH; .ci/run installs Debian's nodejs)"
REDIS = "Debian's redis-server (the Celery tests' broker; .ci/run installs it)"


def without(component: str, present: bool) -> pytest.MarkDecorator:
    """A mark that skips the test (or module) when `component` is not `present`."""
    return pytest.mark.skipif(not present, reason=MISSING + component)


def skip_missing(component: str) -> NoReturn:
    """Skip the running test: `component` is not there."""
    pytest.skip(MISSING + component)


def components_required() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


def skip_reason(report: pytest.TestReport) -> str:
    """The reason of a skip report (`Skipped: ` removed)."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A skip for a missing component fails the test when components are required."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and components_required():
        reason = skip_reason(report)
        if reason.startswith(MISSING):
            report.outcome = "failed"
            report.longrepr = f"{reason}; {REQUIRE_ENV}=1 requires it (CI installs it)"
    return report
