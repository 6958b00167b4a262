"""CI runs README's test command, word for word, in a virtualenv of its own: what passes in CI is what a
reader runs on a fresh machine, where only what pyproject.toml declares is installed."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real_binaries import REQUIRE_REAL_ENV, require_real

if sys.version_info >= (3, 11):
    import tomllib
else:  # mypy, which the style tests run, brings tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
TEST_COMMAND = "pip install -e '.[test]' && python -m pytest -q"


def test_ci_runs_the_readme_test_command() -> None:
    readme_lines = (ROOT / "README.md").read_text().splitlines()
    ci_lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert TEST_COMMAND in readme_lines
    assert ci_lines[-1] == TEST_COMMAND


def test_ci_runs_in_a_virtualenv_that_hides_the_machines_packages() -> None:
    """The machine's own site-packages once hid a package the [test] extra lacked (jsonschema)."""
    if not require_real():
        pytest.skip(f"checks CI's environment: runs under {REQUIRE_REAL_ENV}=1 (.ci/run)")
    assert sys.prefix != sys.base_prefix, f"not in a virtualenv: {sys.prefix}"
    config = (Path(sys.prefix) / "pyvenv.cfg").read_text()
    assert re.search(r"^include-system-site-packages\s*=\s*false\s*$", config, re.M), config


def _imports(tree: ast.AST) -> Iterator[str]:
    """Top-level names of absolute imports, following only the branch of an `if sys.version_info` that
    this Python takes (tomli before 3.11)."""
    if isinstance(tree, ast.If) and ast.unparse(tree.test).startswith("sys.version_info"):
        taken = eval(compile(ast.Expression(tree.test), "<test>", "eval"), {"sys": sys})
        for node in tree.body if taken else tree.orelse:
            yield from _imports(node)
        return
    if isinstance(tree, ast.Import):
        yield from (alias.name.split(".")[0] for alias in tree.names)
    elif isinstance(tree, ast.ImportFrom) and tree.level == 0 and tree.module:
        yield tree.module.split(".")[0]
    for node in ast.iter_child_nodes(tree):
        yield from _imports(node)


def third_party_imports(folders: list[str]) -> dict[str, str]:
    """module -> the first file importing it, for the modules that are neither stdlib nor the project's
    own (a package or a test helper module beside the tests)."""
    files = [path for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))]
    local = {path.stem for path in ROOT.rglob("*.py")} | {path.name for path in ROOT.iterdir()}
    found: dict[str, str] = {}
    for path in files:
        for module in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if module not in sys.stdlib_module_names and module not in local:
                found.setdefault(module, str(path.relative_to(ROOT)))
    return found


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(*extras: str) -> set[str]:
    """Distribution names of pyproject.toml's dependencies and of the given extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [
        *project["dependencies"],
        *(r for e in extras for r in project["optional-dependencies"][e]),
    ]
    return {normalised(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r).group()) for r in requirements}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("folders", "extras"),
    [(["grill_locust", "locustfiles"], ()), (["tests"], ("test",))],
    ids=["code", "tests"],
)
def test_every_imported_package_is_declared(folders: list[str], extras: tuple[str, ...]) -> None:
    """A package imported only because another one brings it today (numpy by pandas, jsonschema by a
    tool) vanishes from a fresh install when that one changes: each is declared by name."""
    providers = importlib.metadata.packages_distributions()
    allowed = declared(*extras)
    undeclared = {
        module: f"{where} (installed by: {', '.join(providers.get(module, ['nothing']))})"
        for module, where in third_party_imports(folders).items()
        if not {normalised(d) for d in providers.get(module, [])} & allowed
    }
    assert not undeclared, (
        f"imported but not in pyproject.toml {list(extras) or 'dependencies'}: {undeclared}"
    )
