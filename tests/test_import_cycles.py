"""No import cycles: a module never ends up importing itself, at load time or inside a function
(imports under `if TYPE_CHECKING:` are left out, they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "grill_locust"
# the parts of the package whose cycles are gone; the rest joins as its cycles are undone
CHECKED = ("grill_locust.client", "grill_locust.workload", "grill_locust.engines")


def module_files() -> dict[str, Path]:
    files = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def _runtime_imports(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            found += [i for other in child.orelse for i in _runtime_imports(other)]
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            found.append(child)
        found += _runtime_imports(child)
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    imported: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            # `from package import module` imports the module; `from module import name`, the module
            candidates = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        imported.update(c for c in candidates if c in modules and c != name)
    return imported


def cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    modules = module_files()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_runs_through_the_client_the_workload_or_the_engine_table() -> None:
    involved = [cycle for cycle in cycles() if any(m.startswith(CHECKED) for m in cycle)]
    assert involved == []


def test_the_cycle_finder_finds_a_cycle_through_a_package_and_its_module(tmp_path: Path) -> None:
    assert imports_of(
        "grill_locust.client._engine", PACKAGE / "client" / "_engine.py", module_files()
    ).isdisjoint({"grill_locust.client"})
    source = tmp_path / "m.py"
    source.write_text(
        "from grill_locust.client import _arrival\nif TYPE_CHECKING:\n    import grill_locust.sim\n"
    )
    found = imports_of("grill_locust.client._engine", source, module_files())
    assert found == {"grill_locust.client", "grill_locust.client._arrival"}
