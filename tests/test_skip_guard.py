"""The suite's skip rule (tests/conftest.py), on small suites of its own: under GRILL_REQUIRE_REAL=1 a
skip that is not expected fails the run, and a gated test fails instead of skipping."""

from __future__ import annotations

import pytest

import tests.conftest as suite_rules
from tests.real_binaries import EXPECTED_SKIPS, REQUIRE_REAL_ENV

UNEXPECTED = """
import pytest

def test_runs():
    pass

def test_needs_something_absent():
    pytest.skip("frobnicator not installed")
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_inner=UNEXPECTED)
    return pytester


def test_an_unexpected_skip_fails_the_run_under_require_real(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REQUIRE_REAL_ENV, "1")
    result = inner.runpytest(plugins=[suite_rules])
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*skips not expected under GRILL_REQUIRE_REAL=1*",
            "test_inner.py::test_needs_something_absent: frobnicator not installed",
        ]
    )


def test_the_same_skip_passes_without_require_real(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(REQUIRE_REAL_ENV, raising=False)
    result = inner.runpytest(plugins=[suite_rules])
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.OK


def test_a_skip_at_collection_counts_too(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_REAL_ENV, "1")
    pytester.makepyfile(test_inner='import pytest\npytest.importorskip("no_such_module_here")\n')
    pytester.makepyfile(test_other="def test_runs():\n    pass\n")
    result = pytester.runpytest(plugins=[suite_rules])
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["test_inner.py: could not import 'no_such_module_here'*"])


def test_an_expected_skip_passes_under_require_real(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REQUIRE_REAL_ENV, "1")
    reason = next(iter(EXPECTED_SKIPS))
    pytester.makepyfile(test_inner=f"import pytest\n\ndef test_machine():\n    pytest.skip({reason!r})\n")
    result = pytester.runpytest(plugins=[suite_rules])
    result.assert_outcomes(skipped=1)
    assert result.ret == pytest.ExitCode.OK


GATED = """
from tests.real_binaries import require_binary

def test_gated():
    require_binary("grill-no-such-binary", install="apt-get install nothing")
"""


@pytest.mark.parametrize(("require_real", "outcome"), [("1", "failed"), (None, "skipped")])
def test_a_missing_binary_fails_under_require_real_and_skips_otherwise(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, require_real: str | None, outcome: str
) -> None:
    if require_real is None:
        monkeypatch.delenv(REQUIRE_REAL_ENV, raising=False)
    else:
        monkeypatch.setenv(REQUIRE_REAL_ENV, require_real)
    pytester.makepyfile(test_inner=GATED)
    result = pytester.runpytest("-rs", plugins=[suite_rules])
    result.assert_outcomes(**{outcome: 1})
    result.stdout.fnmatch_lines(["*grill-no-such-binary not installed (apt-get install nothing)*"])
