"""The package's import graph has no cycles, and its packages import one way only: down the layers
that docs/ARCHITECTURE.md draws ("Layers"), so every module can be read, and imported, on its own."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "grill_locust"
ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST, type_checking: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at module level or inside functions; those under `if TYPE_CHECKING:`
    only when `type_checking` (they never run, so they make no cycle, but they still depend on the
    module they name)."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
        children: list[ast.AST] = [*node.orelse]
    else:
        children = list(ast.iter_child_nodes(node))
    for child in children:
        yield from _imports(child, type_checking)


def imported_modules(module: str, path: Path, modules: set[str], type_checking: bool = False) -> set[str]:
    """The package's own modules that `module` imports (a name imported from a package counts as the
    submodule when there is one, else as the package)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8")), type_checking):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            found.add(submodule if submodule in modules else base)
    return {name for name in found if name in modules and name != module}


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    paths = {module_name(path): path for path in sorted((ROOT / PACKAGE).rglob("*.py"))}
    modules = set(paths)
    return {module: imported_modules(module, path, modules, type_checking) for module, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle per strongly connected group of modules (Tarjan's algorithm, then a
    breadth-first search inside each group)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)

    found = []
    for group in groups:
        start = min(group)
        paths = {start: [start]}
        frontier = [start]
        cycle: list[str] | None = None
        while frontier and cycle is None:
            following = []
            for node in frontier:
                for target in sorted(graph[node] & group):
                    if target == start:
                        cycle = paths[node] + [start]
                        break
                    if target not in paths:
                        paths[target] = paths[node] + [target]
                        following.append(target)
                if cycle:
                    break
            frontier = following
        assert cycle is not None
        found.append(cycle)
    return sorted(found)


def test_cycle_finder_reports_each_cycle_with_its_path() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set()}
    assert cycles(graph) == [["a", "b", "c", "a"], ["d", "e", "d"]]


def test_graph_sees_function_level_imports_and_skips_type_checking_ones(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from grill_locust.sim import engine\n"
        "if TYPE_CHECKING:\n"
        "    from grill_locust.report.build import Report\n"
        "def later():\n"
        "    from grill_locust.report.load import load_run\n"
        "    import grill_locust.record\n",
        encoding="utf-8",
    )
    modules = {"grill_locust.sim", "grill_locust.sim.engine", "grill_locust.report.build"}
    modules |= {"grill_locust.report.load", "grill_locust.record"}
    found = imported_modules("grill_locust.probe", source, modules)
    assert found == {"grill_locust.sim.engine", "grill_locust.report.load", "grill_locust.record"}


def test_package_has_no_import_cycles() -> None:
    graph = import_graph()
    assert "grill_locust.report.build" in graph and graph["grill_locust.sim.engine"]
    found = cycles(graph)
    assert not found, "import cycles in grill_locust:\n" + "\n".join("  " + " -> ".join(c) for c in found)


# The layers, lowest first: a module may import its own package (or top-level module) and anything on a
# lower layer, nothing beside it or above it. docs/ARCHITECTURE.md "Layers" draws the same table.
# "scenario" is the top-level scenario file's package; "grill_locust" is the package's lazy public API.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("record", "samples", "engines", "errors", "redact", "tokens"),
    ("command", "fim_templates"),
    ("client", "sim"),
    ("config",),
    ("workload",),
    ("scenario",),
    ("sinks",),
    ("telemetry",),
    ("verdicts",),
    ("report",),
    ("run",),
    ("cli", "ping", "grill_locust"),
)

# Imports against the layers that another part of issue 28 removes; the merge empties this list.
PENDING: dict[tuple[str, str], str] = {}


def unit_of(module: str) -> str:
    """The package (or top-level module) directly under grill_locust that `module` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(unit: str) -> int:
    for index, units in enumerate(LAYERS):
        if unit in units:
            return index
    raise AssertionError(f"grill_locust.{unit} is on no layer: add it to LAYERS (and the picture)")


def against_layers(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """Each pair of units (importer, imported) that imports sideways or up, with the modules doing it."""
    found: dict[tuple[str, str], list[str]] = {}
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            pair = (unit_of(module), unit_of(target))
            if pair[0] != pair[1] and layer_of(pair[1]) >= layer_of(pair[0]):
                found.setdefault(pair, []).append(f"{module} -> {target}")
    return found


def test_layer_check_sees_function_and_type_checking_imports_sideways_and_up(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from grill_locust.record import RequestRecord\n"
        "if TYPE_CHECKING:\n"
        "    from grill_locust.run.campaign import Campaign\n"
        "def later():\n"
        "    from grill_locust.sim import engine\n",
        encoding="utf-8",
    )
    modules = {
        "grill_locust.record",
        "grill_locust.run.campaign",
        "grill_locust.sim",
        "grill_locust.sim.engine",
    }
    imported = imported_modules("grill_locust.client.probe", source, modules, type_checking=True)
    found = against_layers({"grill_locust.client.probe": imported})
    assert found == {
        ("client", "run"): ["grill_locust.client.probe -> grill_locust.run.campaign"],
        ("client", "sim"): ["grill_locust.client.probe -> grill_locust.sim.engine"],
    }


def test_packages_import_only_down_the_layers() -> None:
    found = against_layers(import_graph(type_checking=True))
    unexpected = {pair: edges for pair, edges in found.items() if pair not in PENDING}
    assert not unexpected, "imports against the layers (tests/test_imports.py LAYERS):\n" + "\n".join(
        f"  {importer} -> {imported}: " + ", ".join(edges)
        for (importer, imported), edges in unexpected.items()
    )
    stale = sorted(set(PENDING) - set(found))
    assert not stale, f"PENDING lists pairs that no longer import against the layers: {stale}"
