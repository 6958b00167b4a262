"""CI runs README's test command, word for word: what passes in CI is what a reader runs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_COMMAND = "pip install -e '.[test]' && python -m pytest -q"


def test_ci_runs_the_readme_test_command() -> None:
    readme_lines = (ROOT / "README.md").read_text().splitlines()
    ci_lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert TEST_COMMAND in readme_lines
    assert ci_lines[-1] == TEST_COMMAND
