"""A kind is named in its own module only: outside grill_locust/workload/kinds/, code asks a
conversation's kind (an attribute or a method) instead of comparing its name."""

from __future__ import annotations

import ast
from pathlib import Path

from grill_locust.workload.kinds import WORKLOAD_KINDS

PACKAGE = Path(__file__).resolve().parents[2] / "grill_locust"
KINDS_PACKAGE = PACKAGE / "workload" / "kinds"


def kind_literals(source: str, kinds: set[str]) -> list[tuple[int, str]]:
    """The lines where a kind's name is a string constant used as a kind: compared (==, in), passed or
    stored as a `kind`, assigned to a *KIND* name, or a key of a table keyed by several kinds."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []

    def constants(node: ast.AST) -> list[ast.Constant]:
        if isinstance(node, ast.Constant) and node.value in kinds:
            return [node]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [c for element in node.elts for c in constants(element)]
        if isinstance(node, ast.Call):  # frozenset({...}), tuple([...])
            return [c for argument in node.args for c in constants(argument)]
        return []

    def stores_kind(target: ast.AST) -> bool:
        if isinstance(target, ast.Name):
            return "KIND" in target.id.upper()
        if isinstance(target, ast.Attribute):
            return "kind" in target.attr.lower()
        if isinstance(target, ast.Subscript):
            key = target.slice
            return isinstance(key, ast.Constant) and key.value == "kind"
        return False

    for node in ast.walk(tree):
        hits: list[ast.Constant] = []
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                hits += constants(operand)
        elif isinstance(node, ast.keyword) and node.arg == "kind":
            hits += constants(node.value)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "kind":
                    hits += constants(value)
            keyed = [c for key in node.keys if key is not None for c in constants(key)]
            if len(keyed) >= 2:
                hits += keyed
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(stores_kind(target) for target in targets):
                hits += constants(node.value)
        found += [(hit.lineno, str(hit.value)) for hit in hits]
    return found


def test_no_module_outside_the_kinds_package_names_a_kind() -> None:
    kinds = set(WORKLOAD_KINDS)
    named = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {kind!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not path.is_relative_to(KINDS_PACKAGE)
        for line, kind in kind_literals(path.read_text(), kinds)
    ]
    assert not named, "ask the conversation's kind instead of naming it:\n" + "\n".join(named)


def test_the_check_sees_each_way_a_kind_is_named() -> None:
    kinds = {"agentic", "trace"}
    source = "\n".join(
        [
            'if conversation.kind == "agentic": pass',  # 1: compared
            'if kind in ("trace", "agentic"): pass',  # 2: in a tuple, twice
            'record = build(kind="trace")',  # 3: passed as kind
            'row = {"kind": "agentic"}',  # 4: stored as kind
            'TRACE_KIND = "trace"',  # 5: a *KIND* name
            'SESSION_KINDS = frozenset({"agentic", "trace"})',  # 6: twice
            'data["kind"] = "trace"',  # 7
            'BUILDERS = {"agentic": 1, "trace": 2}',  # 8: a table keyed by kinds
            "message = \"kind 'trace' needs a path\"",  # words in a message: no
            'columns = {"agentic": 1, "ok": 2}',  # one key only: a column, no
        ]
    )
    lines = [line for line, _ in kind_literals(source, kinds)]
    assert sorted(lines) == [1, 2, 2, 3, 4, 5, 6, 6, 7, 8, 8]
