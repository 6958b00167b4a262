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
        mark, problem = _syntax_error(error, text)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
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


# PyYAML's names for what it found, in plain words
_FOUND = {
    "'<stream end>'": "the end of the file",
    "'<scalar>'": "a value",
    "':'": "':'",
    "'<block mapping start>'": "a key",
    "'<block sequence start>'": "a list item",
    "'?'": "a key",
    "'-'": "a list item",
}
_FLOW = {"[": ("flow sequence", "]"), "{": ("flow mapping", "}")}


def _syntax_error(error: yaml.MarkedYAMLError, text: str) -> tuple[yaml.Mark | None, str]:
    """Where a syntax error is and what it is, in plain words: an unclosed quote or bracket is
    reported where it opened (PyYAML notices it where the file ends), bad indentation and tabs
    where they are; anything else with PyYAML's own words."""
    context = " ".join((error.context or "").split())
    problem = " ".join((error.problem or "").split())
    opened, at = error.context_mark, error.problem_mark
    got = next(
        (problem.partition(f" but {verb} ")[2] for verb in ("found", "got") if f" but {verb} " in problem), ""
    )
    found = _FOUND.get(got, "")
    if context == "while scanning a quoted scalar" and "end of stream" in problem and opened is not None:
        quote = "single" if _char_at(opened) == "'" else "double"
        return opened, f"unclosed {quote} quote opened at {_place(opened)}"
    if context.startswith("while parsing a flow") and at is not None:
        bracket = _open_bracket(text, at.index) or opened
        if bracket is not None and _char_at(bracket) in _FLOW:
            what, closer = _FLOW[_char_at(bracket)]
            message = f"unclosed {what} '{_char_at(bracket)}' opened at {_place(bracket)}"
            if found and got != "'<stream end>'":
                message += f" (at {_place(at)}: expected ',' or '{closer}', found {found})"
            return bracket, message
    if problem.startswith("expected <block end>") and at is not None and opened is not None:
        if got in ("'<block mapping start>'", "'<block sequence start>'"):
            return at, (
                f"bad indentation: {found} at {_place(at)} lines up with nothing above it "
                f"(the block it belongs to starts at {_place(opened)})"
            )
        if got in ("'?'", "'-'"):
            others = "list items" if got == "'?'" else "keys"
            return at, (
                f"{found} at {_place(at)} in the block of {others} that starts at {_place(opened)} "
                "(a block is either a mapping or a list: indent one under a key)"
            )
    if problem == "mapping values are not allowed here" and at is not None:
        return at, (
            f"bad indentation or an unquoted ': ' at {_place(at)}: a key indented deeper than the one "
            "above it, or a value holding ': ' (quote the value)"
        )
    if problem.startswith("found character '\\t'") and at is not None:
        return at, f"a tab at {_place(at)}: indent with spaces (YAML does not allow tabs there)"
    at_end = at is None or at.index >= len(text.rstrip())
    mark = opened if at_end and opened is not None else at or opened
    words = problem or context or "invalid YAML"
    if context and opened is not None and mark is not opened:
        words += f" ({context} at {_place(opened)})"
    return mark, words


def _place(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _char_at(mark: yaml.Mark) -> str:
    buffer = mark.buffer or ""
    return buffer[mark.pointer] if 0 <= mark.pointer < len(buffer) else ""


def _open_bracket(text: str, before: int) -> yaml.Mark | None:
    """Where the innermost `[` or `{` still open at character `before` opened."""
    stack: list[yaml.Mark] = []
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.index >= before:
                break
            if isinstance(token, (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken)):
                stack.append(token.start_mark)
            elif isinstance(token, (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken)) and stack:
                stack.pop()
    except yaml.YAMLError:
        pass  # the tokens up to the error are what matter
    return stack[-1] if stack else None


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
