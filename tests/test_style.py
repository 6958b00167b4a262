"""The codebase's own habits (shared/STYLE.md): ruff lint and format, mypy on grill_locust/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_finds_nothing_to_lint_or_reformat() -> None:
    lint = run("ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout[-3000:]
    layout = run("ruff", "format", "--check", ".")
    assert layout.returncode == 0, layout.stdout[-3000:]


def test_mypy_is_clean_on_the_package() -> None:
    typed = run("mypy", "-p", "grill_locust")
    assert typed.returncode == 0, typed.stdout[-3000:]
