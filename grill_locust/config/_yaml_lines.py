"""YAML with line numbers: the parsed data and the line of every YAML path, for messages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from grill_locust.config._errors import ConfigError, LineMap, YamlPath, format_path


@dataclass(frozen=True)
class DuplicateKey:
    """A key given twice in one mapping (PyYAML keeps the last value): `path` is the mapping's."""

    path: YamlPath
    key: str
    line: int
    column: int
    first_line: int

    def describe(self, source: str) -> str:
        where = f" in {format_path(self.path)}" if self.path else ""
        return f"{source}:{self.line}:{self.column}: duplicate key {self.key!r}{where} (first at line {self.first_line})"


def parse_yaml(text: str, source: str) -> tuple[Any, LineMap, list[DuplicateKey]]:
    """The data, the line of every YAML path, and the keys given twice (the caller decides whether
    that is an error: llm-grill files allow it)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = None if node is None else loader.construct_document(node)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = " ".join(str(part) for part in (error.problem or error.context or "invalid YAML").split())
        raise ConfigError(f"{where}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: YAML syntax error: {' '.join(str(error).split())}") from None
    finally:
        loader.dispose()
    lines: LineMap = {}
    duplicates: list[DuplicateKey] = []
    if node is not None:
        _walk(node, (), lines, duplicates)
    return data, lines, duplicates


def _walk(node: yaml.Node, path: YamlPath, lines: LineMap, duplicates: list[DuplicateKey]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        first_lines: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                child = (*path, str(key_node.value))
                _walk(value_node, child, lines, duplicates)
                line = key_node.start_mark.line + 1
                lines[child] = line
                identity = (key_node.tag, key_node.value)  # '1' and 1 are two keys
                if identity in first_lines:
                    column = key_node.start_mark.column + 1
                    duplicates.append(DuplicateKey(path, key_node.value, line, column, first_lines[identity]))
                else:
                    first_lines[identity] = line
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), lines, duplicates)
