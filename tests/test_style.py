"""The codebase's own habits: ruff lint and format, mypy on grill_locust/ (strict on the modules that
pyproject.toml lists as strict)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # mypy, which these tests run, brings tomli before 3.11
    import tomli as tomllib

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


def strict_modules() -> list[str]:
    """The modules pyproject.toml makes strict (the override that disallows untyped definitions)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    overrides = config["tool"]["mypy"].get("overrides", [])
    return [name for o in overrides if o.get("disallow_untyped_defs") for name in o["module"]]


def test_mypy_is_strict_on_the_listed_modules_and_only_there(tmp_path: Path) -> None:
    """A probe package with the same untyped function in each strict module and in one other: mypy,
    under the project's configuration, flags it in the strict ones only."""
    modules = strict_modules()
    assert {"grill_locust.sim.*", "grill_locust.record", "grill_locust.engines"} <= set(modules)
    untyped = "def identity(value):\n    return value\n"
    expected = set()
    for name in [*modules, "grill_locust.loose"]:
        parts = name.removesuffix(".*").split(".") + (["probe"] if name.endswith(".*") else [])
        for depth in range(1, len(parts)):
            (tmp_path.joinpath(*parts[:depth]) / "__init__.py").parent.mkdir(parents=True, exist_ok=True)
            (tmp_path.joinpath(*parts[:depth]) / "__init__.py").touch()
        path = tmp_path.joinpath(*parts).with_suffix(".py")
        path.write_text(untyped, encoding="utf-8")
        if name in modules:
            expected.add(path.relative_to(tmp_path).as_posix())
    typed = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / ".cache"),
            "-p",
            "grill_locust",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    flagged = {line.split(":")[0] for line in typed.stdout.splitlines() if "[no-untyped-def]" in line}
    assert flagged == expected, typed.stdout[-3000:]
