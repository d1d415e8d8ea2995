"""CI installs every component a test may need (the native scanner, Debian's chromium), so there
a skip for a missing one is a failure (CTXDB_REQUIRE_COMPONENTS=1, tests/conftest_components.py);
elsewhere it stays a skip, and other skips are never touched."""

from __future__ import annotations

import pytest
from conftest_components import REQUIRE_ENV

CASES = """
import pytest
from conftest_components import skip_missing, without


@without("a marked thing", present=False)
def test_marked():
    pass


def test_called():
    skip_missing("a called thing")


def test_other_skip():
    pytest.skip("not about a component")


@without("a present thing", present=True)
def test_present():
    pass
"""


@pytest.fixture
def cases(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest("pytest_plugins = ['conftest_components']")
    pytester.makepyfile(test_cases=CASES)
    return pytester


def test_without_the_setting_a_missing_component_is_a_skip(
    cases: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    cases.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1, skipped=3)


def test_with_the_setting_a_missing_component_fails(
    cases: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    result = cases.runpytest_inprocess("-p", "no:cacheprovider", "-rfEs")
    # the mark is evaluated at setup (an error), the call fails in the test body
    result.assert_outcomes(passed=1, skipped=1, failed=1, errors=1)
    result.stdout.fnmatch_lines_random(
        [
            "*missing component: a marked thing; CTXDB_REQUIRE_COMPONENTS=1 requires it*",
            "*missing component: a called thing; CTXDB_REQUIRE_COMPONENTS=1 requires it*",
            "*not about a component*",
        ]
    )
