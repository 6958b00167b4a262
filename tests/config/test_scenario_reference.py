"""docs/scenarios.md is what docs/build_scenarios.py makes of the configuration models, and every key in
it says what it does: the reference of a scenario file cannot drift from what a file may hold."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

REPO = Path(__file__).resolve().parents[2]


@functools.cache
def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_scenarios", REPO / "docs" / "build_scenarios.py")
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = builder  # its dataclasses look their module up while being made
    spec.loader.exec_module(builder)
    return builder


def test_committed_reference_is_what_the_models_say() -> None:
    assert (REPO / "docs" / "scenarios.md").read_text() == _builder().render(), (
        "docs/scenarios.md differs from the models: run python docs/build_scenarios.py"
    )


def test_every_scenario_key_has_a_description() -> None:
    missing = _builder().undocumented()
    assert not missing, f"give these fields a docstring (their description in docs/scenarios.md): {missing}"


class _Documented(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")


class _Sizes(_Documented):
    median: int = Field(default=10, ge=1)
    """The median size."""


class _Chat(_Documented):
    kind: Literal["chat"]
    """A chat."""
    turns: int = Field(default=4, gt=0)
    """User turns per session."""


class _Agent(_Documented):
    kind: Literal["agent"]
    """An agent."""
    sizes: dict[str, _Sizes] = Field(default_factory=dict)
    """Sizes by tool."""


class _File(_Documented):
    conversations: list[Annotated[_Chat | _Agent, Field(discriminator="kind")]]
    """The workloads."""
    steps: tuple[int, int] | None = None


def test_reference_walks_a_discriminated_union_into_each_kind() -> None:
    builder = _builder()
    text = builder.render(_File)
    assert "## conversations[] (kind: chat)" in text
    assert "## conversations[] (kind: agent)" in text
    assert "| `conversations[].turns` | whole number > 0 | `4` | User turns per session. |" in text
    assert "| `conversations[].sizes{name}.median` | whole number >= 1 | `10` | The median size. |" in text
    assert "| `steps` | [whole number, whole number] (optional) | — |  |" in text
    assert builder.undocumented(_File) == ["_File.steps"]
