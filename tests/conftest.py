"""The suite's own rule: under GRILL_REQUIRE_REAL=1 (CI) a skip whose reason is not in EXPECTED_SKIPS
makes the run fail, with the skips listed at the end (README's test command stays plain pytest)."""

from __future__ import annotations

import pytest

from tests.real_binaries import EXPECTED_SKIPS, REQUIRE_REAL_ENV, require_real

# shared assertions (run against the simulator and the real engine): show what failed, as in test files
pytest.register_assert_rewrite("tests.llamacpp_contract")


def skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


class UnexpectedSkips:
    """Collects the skips (of collection and of tests) that EXPECTED_SKIPS does not list."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str]] = []  # (node id, reason)

    def _check(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = skip_reason(report)
            if reason not in EXPECTED_SKIPS:
                self.found.append((report.nodeid, reason))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._check(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._check(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.found and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.found:
            terminalreporter.section(f"skips not expected under {REQUIRE_REAL_ENV}=1", red=True)
            for node_id, reason in self.found:
                terminalreporter.line(f"{node_id}: {reason}")
            terminalreporter.line(
                "install what is missing, or list a skip that is truly the machine's in "
                "tests/real_binaries.py EXPECTED_SKIPS with why"
            )


def pytest_configure(config: pytest.Config) -> None:
    if require_real():
        config.pluginmanager.register(UnexpectedSkips(), "grill-unexpected-skips")
