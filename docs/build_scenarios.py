"""Writes docs/scenarios.md: every key a scenario file may hold, from the configuration models themselves.

The models are the one home of each key's type, default and description (a field's docstring), so the
reference cannot drift from what a file may say: run `python docs/build_scenarios.py` after changing a
model; tests/config/test_scenario_reference.py fails while the committed file and the models disagree,
and when a field has no description. The walk is generic: nested models, lists, dicts, optionals and
unions (a discriminated union on `kind` lists each kind's model under its own heading).
"""

from __future__ import annotations

import enum
import json
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from grill_locust.config._schema import LlmGrillLoad, Load
from grill_locust.scenario._schema import FileScenario

OUTPUT = Path(__file__).resolve().parent / "scenarios.md"
ROOT_MODEL: type[BaseModel] = FileScenario
# sections the file model holds as plain data because they are translated (llm-grill's spellings) before
# their own model validates them: documented by that model, and the spellings beside it
SECTION_MODELS: dict[str, tuple[tuple[type[BaseModel], str], ...]] = {
    "load": ((Load, ""), (LlmGrillLoad, "llm-grill's spellings, translated into the keys above")),
}

HEADER = """# Scenario file reference

Every key a scenario file may hold: its YAML path (`[]`: each item of a list, `{name}`: each value of a
map), its type and bounds, its default, and what it does. Generated from the configuration models
(`python docs/build_scenarios.py`; do not edit by hand). How the pieces work together — a campaign, the
workloads, the report — is README.md's; what each result column means, docs/metrics.md's.
"""


@dataclass(frozen=True)
class Key:
    """One row of the reference: a field of a model at its YAML path."""

    path: str
    aliases: tuple[str, ...]
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Section:
    """The keys one model contributes, under the heading of its place in the file."""

    title: str
    doc: str
    keys: tuple[Key, ...]


def _args(annotation: Any) -> tuple[Any, ...]:
    return typing.get_args(annotation)


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (Union, types.UnionType)


def _strip(annotation: Any) -> tuple[Any, list[Any]]:
    """The annotation without `Annotated[...]`, and the metadata (bounds) it carried."""
    metadata: list[Any] = []
    while typing.get_origin(annotation) is typing.Annotated:
        annotation, *extra = _args(annotation)
        metadata.extend(extra)
    return annotation, metadata


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds, through lists, dicts, tuples, optionals and unions."""
    annotation, _ = _strip(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in _args(annotation):
        for model in _models_in(arg):
            if model not in found:
                found.append(model)
    return found


def shared_base(models: list[type[BaseModel]]) -> type[BaseModel] | None:
    """The model every member of a discriminated union extends, where it holds `kind` too (the fields
    every kind has): documented once, each kind's section then lists only its own keys."""
    if len(models) < 2:
        return None
    for base in models[0].__mro__:
        if (
            isinstance(base, type)
            and issubclass(base, BaseModel)
            and "kind" in base.model_fields
            and all(issubclass(model, base) for model in models)
        ):
            return base
    return None


def _bounds(metadata: list[Any]) -> str:
    words = []
    for item in metadata:
        for name, symbol in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            value = getattr(item, name, None)
            if isinstance(item, getattr(annotated_types, name.capitalize())) and value is not None:
                words.append(f"{symbol} {value:g}" if isinstance(value, float) else f"{symbol} {value}")
        if isinstance(item, annotated_types.MinLen) and item.min_length:
            words.append(f"at least {item.min_length} long")
    return ", ".join(words)


def type_name(annotation: Any, field_bounds: tuple[Any, ...] = ()) -> str:
    """How a reader of YAML would call a value of this annotation (with the field's own bounds)."""
    annotation, metadata = _strip(annotation)
    bounds = _bounds([*metadata, *field_bounds])
    if _is_union(annotation):
        members = [arg for arg in _args(annotation) if arg is not type(None)]
        if shared_base(_models_in(annotation)) is not None:
            return "one of the kinds below, by `kind`"
        text = " or ".join(type_name(arg, field_bounds) for arg in members)
        return f"{text} (optional)" if len(members) < len(_args(annotation)) else text
    origin = typing.get_origin(annotation)
    if origin is Literal:
        text = " | ".join(json.dumps(value) for value in _args(annotation))
    elif origin in (list, tuple) and _args(annotation):
        items = [arg for arg in _args(annotation) if arg is not Ellipsis]
        if origin is tuple and Ellipsis not in _args(annotation):
            text = "[" + ", ".join(type_name(arg) for arg in items) + "]"
        else:
            text = f"list of {type_name(items[0])}"
    elif origin is dict:
        key, value = _args(annotation)
        text = f"map of {type_name(key)} to {type_name(value)}"
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        text = f"{annotation.__name__} (keys below)"
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        text = " | ".join(json.dumps(member.value) for member in annotation)
    else:
        text = {
            bool: "true | false",
            int: "whole number",
            float: "number",
            str: "text",
            SecretStr: "secret text",
        }.get(annotation, "any")
    return f"{text} {bounds}" if bounds else text


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True, validated_data={})
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "its keys' defaults"
    if value is None:
        return "—"
    return f"`{json.dumps(value)}`"


def _description(field: FieldInfo) -> str:
    return " ".join((field.description or "").split())


def _aliases(name: str, field: FieldInfo) -> list[str]:
    choices = getattr(field.validation_alias, "choices", None) or ()
    return [choice for choice in choices if isinstance(choice, str) and choice != name]


def _variant_title(model: type[BaseModel]) -> str:
    """A union member's heading: its `kind` where it declares one, else its name."""
    kind = model.model_fields.get("kind")
    if kind is not None and typing.get_origin(kind.annotation) is Literal:
        return "kind: " + " | ".join(str(value) for value in _args(kind.annotation))
    return model.__name__


def _item_path(path: str, annotation: Any) -> str:
    """Where the keys of a model inside `annotation` stand: `[]` for a list's items, `{name}` a map's."""
    annotation, _ = _strip(annotation)
    if _is_union(annotation):
        members = [arg for arg in _args(annotation) if arg is not type(None)]
        return _item_path(path, members[0]) if len(members) == 1 else path
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        return _item_path(f"{path}[]", _args(annotation)[0])
    if origin is dict:
        return _item_path(f"{path}{{name}}", _args(annotation)[1])
    return path


def sections(
    model: type[BaseModel], path: str = "", title: str = "", shared: type[BaseModel] | None = None
) -> Iterator[Section]:
    """The model's own keys (without those of `shared`, documented in a section of their own, but for
    `kind`), then those of each model below it, depth first, each model once per place."""
    keys = []
    below: list[tuple[type[BaseModel], str, str, type[BaseModel] | None]] = []
    for name, field in model.model_fields.items():
        if shared is not None and name in shared.model_fields and name != "kind":
            continue
        key_path = f"{path}.{name}" if path else name
        translated = SECTION_MODELS.get(key_path)
        keys.append(
            Key(
                path=key_path,
                aliases=tuple(_aliases(name, field)),
                type=f"{translated[0][0].__name__} (keys below)"
                if translated
                else type_name(field.annotation, tuple(field.metadata)),
                default=default_text(field),
                description=_description(field),
            )
        )
        if translated:
            for inner_model, note in translated:
                below.append((inner_model, key_path, f"{key_path} ({note})" if note else key_path, None))
            continue
        item_path = _item_path(key_path, field.annotation)
        inner = _models_in(field.annotation)
        base = shared_base(inner)
        if base is not None:
            below.append((base, item_path, f"{item_path} (every kind)", None))
        for inner_model in inner:
            heading = f"{item_path} ({_variant_title(inner_model)})" if len(inner) > 1 else item_path
            below.append((inner_model, item_path, heading, base))
    doc = " ".join((model.__doc__ or "").split())
    yield Section(title=title or "Top level", doc=doc, keys=tuple(keys))  # a title: a YAML path
    for inner_model, item_path, heading, base in below:
        yield from sections(inner_model, item_path, heading, base)


def undocumented(model: type[BaseModel] = ROOT_MODEL) -> list[str]:
    """`Model.field` of each field reached from the root that has no description."""
    missing: list[str] = []
    seen: set[type[BaseModel]] = set()

    def walk(current: type[BaseModel]) -> None:
        if current in seen:
            return
        seen.add(current)
        for name, field in current.model_fields.items():
            if not _description(field):
                missing.append(f"{current.__name__}.{name}")
            translated = SECTION_MODELS.get(name) if current is ROOT_MODEL else None
            for inner_model in [m for m, _ in translated or ()] or _models_in(field.annotation):
                walk(inner_model)

    walk(model)
    return missing


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(model: type[BaseModel] = ROOT_MODEL) -> str:
    """docs/scenarios.md's text."""
    lines = [HEADER]
    for section in sections(model):
        lines += ["", f"## {section.title}", ""]
        if section.doc:
            lines += [section.doc, ""]
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        for key in section.keys:
            path = f"`{key.path}`" + "".join(f" (also `{alias}`)" for alias in key.aliases)
            lines.append(f"| {path} | {_cell(key.type)} | {_cell(key.default)} | {_cell(key.description)} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    OUTPUT.write_text(render())
    missing = undocumented()
    if missing:
        print(f"fields without a docstring: {', '.join(missing)}", file=sys.stderr)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
