"""One-line error messages: `file: yaml.path: what was expected (line N)`, from pydantic's errors too."""

from __future__ import annotations

import re
from typing import Any, get_args

from pydantic import AliasChoices, BaseModel, ValidationError

from grill_locust.config._secrets import SECRET_KEYS
from grill_locust.errors import GrillError

YamlPath = tuple[str | int, ...]  # keys and list indices from the top of the file
LineMap = dict[YamlPath, int]  # the line (1-based) each YAML path starts on


class ConfigError(GrillError):
    """A scenario file that cannot be used, explained in one line."""


def format_path(path: YamlPath | list[str | int]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def line_of(path: YamlPath, lines: LineMap) -> int | None:
    for end in range(len(path), 0, -1):  # the top level's line (the first line) would mislead
        line = lines.get(tuple(path[:end]))
        if line is not None:
            return line
    return None


def at(source: str, path: YamlPath, lines: LineMap | None, message: str) -> str:
    line = line_of(path, lines or {}) if path else None
    suffix = f" (line {line})" if line else ""
    return f"{source}: {format_path(path)}: {message}{suffix}"


def describe_validation_error(
    error: ValidationError,
    prefix: YamlPath,
    lines: LineMap | None,
    root: type[BaseModel] | None,
) -> str:
    """The most specific pydantic error as `yaml.path: what was expected (line N)` (no file name): the
    first of those whose path goes deepest (of a value that may be a number or a list, the bad item)."""
    errors = error.errors(include_url=False)

    def location(item: Any) -> YamlPath:
        return _clean_loc(tuple(part for part in item["loc"] if isinstance(part, (str, int))))

    first = max(errors, key=lambda item: len(location(item)))  # max keeps the first of equals
    loc = location(first)
    path = (*prefix, *loc)
    message = _explain(first, path, root, loc)
    message, path = _split_inner_path(message, path)
    line = line_of(path, lines or {})
    suffix = f" (line {line})" if line else ""
    return f"{format_path(path)}: {message}{suffix}"


def _clean_loc(loc: YamlPath) -> YamlPath:
    # pydantic adds union/type tags such as 'list[int]' or 'int' to some locations
    return tuple(
        part
        for part in loc
        if isinstance(part, int)
        or not (("[" in part and "]" in part) or part in {"int", "float", "str", "bool", "none"})
    )


def _split_inner_path(message: str, path: YamlPath) -> tuple[str, YamlPath]:
    """Our validators start messages with the key they are about ('profile: ...'): move it to the path."""
    match = re.match(r"^([a-z_]+)(\[\d+\])?: (.*)$", message)
    if not match:
        return message, path
    key, index, rest = match.groups()
    new_path: YamlPath = path if path and path[-1] == key else (*path, key)
    if index:
        new_path = (*new_path, int(index[1:-1]))
    return rest, new_path


_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def _explain(error: Any, path: YamlPath, root: type[BaseModel] | None, loc: YamlPath) -> str:
    """What pydantic's `error` means in plain words; `loc` is its place under `root`, `path` in the file."""
    kind = error["type"]
    shown = shown_input(error.get("input"), path)
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        known = _known_keys(root, loc[:-1]) if root else []
        hint = f" (known: {', '.join(known)})" if known else ""
        return f"unknown key{hint}"
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"expected a whole number, got {shown}"
    if kind in ("float_parsing", "float_type"):
        return f"expected a number, got {shown}"
    if kind in ("bool_parsing", "bool_type"):
        return f"expected true or false, got {shown}"
    if kind in ("string_type",):
        return f"expected text, got {shown}"
    if kind in ("list_type",):
        return f"expected a list, got {shown}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a mapping (key: value), got {shown}"
    if kind == "too_short":
        return "expected at least one entry"
    if kind in _BOUNDS:
        limit = next(iter((error.get("ctx") or {}).values()), "?")
        limit_text = f"{limit:g}" if isinstance(limit, float) else str(limit)
        return f"expected a value {_BOUNDS[kind]} {limit_text}, got {shown}"
    message = str(error["msg"])
    message = message.replace("Input should be", "expected").replace("String should", "expected text to")
    return f"{message}, got {shown}"


def shown_input(value: Any, path: YamlPath) -> str:
    if any(part in SECRET_KEYS for part in path if isinstance(part, str)):
        return "a secret value (not shown)"
    if isinstance(value, (dict, list)):
        return f"a {'mapping' if isinstance(value, dict) else 'list'}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _known_keys(root: type[BaseModel], path: YamlPath) -> list[str]:
    """The keys a mapping at `path` accepts (walking the model classes along the path): fields, their
    aliases, and the `other_keys` a model reads in a validator of its own (llm-grill's spellings)."""
    model: Any = root
    for part in path:
        if isinstance(part, int):
            continue
        field = _field_named(model, part)
        if field is None:
            return []
        model = _model_in(field.annotation)
        if model is None:
            return []
    keys = set()
    for name, field in model.model_fields.items():
        keys.add(name)
        if isinstance(field.validation_alias, AliasChoices):
            keys.update(str(choice) for choice in field.validation_alias.choices)
    keys.update(getattr(model, "other_keys", ()))
    return sorted(keys)


def _field_named(model: type[BaseModel], key: str) -> Any:
    for name, field in model.model_fields.items():
        if name == key:
            return field
        if isinstance(field.validation_alias, AliasChoices) and key in field.validation_alias.choices:
            return field
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
