"""The scenario file's models: `Conversation`, the union of the workload kinds' models discriminated by
`kind`; the resolved campaign (`Scenario`, whose targets hold their backend, model and conversations);
and the file as written (`FileScenario`, before names are resolved)."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import (
    AliasChoices,
    Field,
    SerializeAsAny,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)

from grill_locust.config import (
    KIND_MIX,
    Backend,
    ConfigError,
    Frozen,
    Load,
    Model,
    Number,
    Sinks,
    Slo,
    expand_env_string,
)
from grill_locust.config._apportion import persona_counts, persona_index
from grill_locust.config._errors import YamlPath, at, describe_validation_error, shown_input
from grill_locust.config._secrets import REDACTED, reveal, secret_paths, walk_secrets
from grill_locust.redact import redact_secret_keys
from grill_locust.workload.kinds import (
    BUILTIN_CONVERSATION_KINDS,
    WORKLOAD_KINDS,
    ConversationBase,
    kind_names,
)


def kind_of(data: Mapping[str, Any]) -> str:
    """The union's discriminator: the kind a conversation's data names, or the one it implies where it
    names none (`turns` imply the scripted kind; a built-in conversation's name, its own); ValueError
    ("kind: why") when it names no registered kind."""
    kinds = kind_names()
    kind = data.get("kind")
    if kind is None:
        name = data.get("name")
        if data.get("turns"):
            return next(k for k in kinds if WORKLOAD_KINDS[k].scripted_turns)
        if isinstance(name, str) and name in BUILTIN_CONVERSATION_KINDS:
            return BUILTIN_CONVERSATION_KINDS[name]
        raise ValueError(f"kind: required, one of {', '.join(kinds)} (or give turns)")
    if not isinstance(kind, str) or kind not in WORKLOAD_KINDS:
        choices = ", ".join(repr(name) for name in kinds[:-1]) + f" or {kinds[-1]!r}"
        raise ValueError(f"kind: expected {choices}, got {shown_input(kind, ())}")
    return kind


def _of_its_kind(value: Any, handler: ValidatorFunctionWrapHandler) -> ConversationBase:
    """Validate a conversation with its kind's model. The registry is read at each validation, not when
    this module is imported: a kind registered later (a plugin, a test) is a member of the union too."""
    if isinstance(value, ConversationBase):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping (key: value), got {shown_input(value, ())}")
    kind = kind_of(value)
    return WORKLOAD_KINDS[kind].conversation_model.model_validate({**value, "kind": kind})


if TYPE_CHECKING:
    Conversation = ConversationBase
else:
    # the members listed are those registered when this module is imported (what docs/scenarios.md
    # documents); each instance is dumped as its own kind's model
    Conversation = Annotated[
        SerializeAsAny[Union[tuple(kind.conversation_model for kind in WORKLOAD_KINDS.values())]],  # noqa: UP007
        WrapValidator(_of_its_kind),
    ]
_CONVERSATION: TypeAdapter[Conversation] = TypeAdapter(Conversation)


def validate_conversation(data: Any) -> Conversation:
    """One conversation from plain data (as a scenario file writes it), validated by its kind's model."""
    return _CONVERSATION.validate_python(data)


class Persona(Frozen):
    """One conversation of a team's mix and its weight: its share of a tier's developers."""

    conversation: Conversation
    """What this persona's developers send."""
    weight: Number = Field(gt=0)
    """Its share of the tier's developers, relative to the other personas' weights."""


class Target(Frozen):
    """One thing to measure: a conversation, or a team's mix of them (personas), sent to a model on a
    backend. A mix's developer k plays persona `persona_index(weights, k)` at every tier."""

    name: str
    """How results name it."""
    backend: Backend
    """Where its requests go."""
    model: Model
    """The model they ask for and its sampling settings."""
    personas: tuple[Persona, ...] = Field(min_length=1)
    """Its conversation (one persona), or its mix's."""
    mix: bool = False
    """Whether it was named a `mix` (its tiers are judged persona by persona), even of one persona."""

    @model_validator(mode="before")
    @classmethod
    def _one_conversation(cls, data: Any) -> Any:
        """`conversation=` is a target of that one conversation."""
        if isinstance(data, dict) and "conversation" in data:
            data = dict(data)
            data["personas"] = [{"conversation": data.pop("conversation"), "weight": 1.0}]
        return data

    @model_validator(mode="after")
    def _settled_personas(self) -> Target:
        """Each persona's conversation as this target's model drives it (Conversation.settled)."""
        personas = tuple(
            persona.model_copy(update={"conversation": persona.conversation.settled(self.model)})
            for persona in self.personas
        )
        object.__setattr__(self, "personas", personas)
        return self

    @property
    def sent_model(self) -> Model:
        """The model's sampling settings as this target's conversation sends them (Conversation.sending)."""
        return self.conversation.sending(self.model)

    @property
    def conversation(self) -> Conversation:
        """The conversation of a target that has one; a mix target's developers each have theirs
        (`for_developer`)."""
        if self.mix:
            raise ValueError(f"target {self.name!r} is a mix: take a developer's target (for_developer)")
        return self.personas[0].conversation

    @property
    def conversation_label(self) -> str:
        """What this target's tiers as a whole are called: its conversation, or its mix spelled out."""
        if not self.mix:
            return self.conversation.name
        return "whole tier: " + ", ".join(f"{p.conversation.name} {p.weight:g}" for p in self.personas)

    @property
    def kind_label(self) -> str:
        return KIND_MIX if self.mix else self.conversation.kind

    @property
    def weights(self) -> tuple[float, ...]:
        return tuple(persona.weight for persona in self.personas)

    def persona_of(self, developer: int) -> Conversation:
        """The conversation 0-based `developer` of a tier plays (the same at every tier)."""
        return self.personas[persona_index(self.weights, developer)].conversation

    def persona_counts(self, developers: int) -> dict[str, int]:
        """Developers of a tier of this size per persona, in the mix's order."""
        counts = persona_counts(self.weights, developers)
        return {p.conversation.name: n for p, n in zip(self.personas, counts, strict=True)}

    def for_developer(self, developer: int) -> Target:
        """This target as developer `developer` sends it: one conversation, its persona's."""
        return self._sending(self.persona_of(developer)) if self.mix else self

    def persona_targets(self) -> list[Target]:
        """This target as each of its personas sends it (itself, for a target of one conversation)."""
        return [self._sending(p.conversation) for p in self.personas] if self.mix else [self]

    def _sending(self, conversation: Conversation) -> Target:
        persona = Persona(conversation=conversation, weight=1.0)
        return self.model_copy(update={"personas": (persona,), "mix": False})


class SecretReference(Frozen):
    """A secret of the scenario file as written there: `text` holds its `${VAR}` reference(s), which each
    worker expands from its own environment; None when the value is written literally (never sent)."""

    path: YamlPath
    """Where the secret stands, as the file spells it (llm-grill's `servers` too)."""
    text: str | None
    """The file's text of it, with its `${VAR}` reference(s)."""
    line: int | None = None
    """Its line in the file, for messages."""

    @property
    def scenario_path(self) -> YamlPath:
        """Where the value stands in a Scenario's data (whose backends are always `backends`)."""
        return ("backends", *self.path[1:]) if self.path[0] == "servers" else self.path

    def describe_literal(self, source: str) -> str:
        lines = {self.path: self.line} if self.line else None
        return at(
            source,
            self.path,
            lines,
            "a secret written literally in the file never goes to workers (a distributed run refuses it): "
            "write ${NAME} and set NAME in the environment of the master and of every worker",
        )

    def expand(self, source: str, environ: Mapping[str, str]) -> str:
        """The value in this process's environment; ConfigError naming the variable when it is unset."""
        if self.text is None:
            raise ConfigError(self.describe_literal(source))
        try:
            return expand_env_string(self.text, dict(environ))
        except KeyError as error:
            name = error.args[0]
            message = (
                f"environment variable {name} is not set on this worker "
                f"(workers take the scenario's secrets from their own environment: set {name} there)"
            )
            raise ConfigError(at(source, self.path, None, message)) from None


class Scenario(Frozen):
    """A whole campaign: what to measure (targets) and how hard (load)."""

    name: str
    """The scenario's name (the file's stem when it gives none)."""
    description: str = ""
    """Free text, kept in run.json."""
    source: str = ""
    """The file it came from, for messages."""
    backends: list[Backend]
    """The engine endpoints."""
    models: list[Model]
    """The served models and their sampling settings."""
    conversations: list[Conversation]
    """The workloads."""
    targets: list[Target]
    """What is measured, each resolved to its backend, model and conversations."""
    load: Load = Load()
    """The campaign's shape."""
    slo: Slo = Slo()
    """The service level a tier must meet to count as capacity."""
    sinks: Sinks = Sinks()
    """Where records go besides the results folder."""
    secret_references: tuple[SecretReference, ...] = ()
    """Each secret as the file wrote it: how workers get it (to_wire, from_wire); set by load_scenario."""

    def redacted(self) -> dict[str, Any]:
        """The scenario as plain data with every secret shown as "***" (for files and logs): SecretStr
        fields, and any value whose key names a secret (headers like x-api-key or Authorization,
        `api_key` inside sim_args or extra_body)."""
        data = self.model_dump(exclude={"secret_references"})
        redacted: dict[str, Any] = redact_secret_keys(walk_secrets(data, lambda secret: REDACTED), REDACTED)
        return redacted

    def literal_secrets(self) -> list[SecretReference]:
        """The secrets written literally in the file (no `${VAR}`): workers cannot receive them."""
        return [reference for reference in self.secret_references if reference.text is None]

    def to_wire(self) -> dict[str, Any]:
        """Plain data for the master -> worker message, which any process reaching the master's port
        receives: no secret value in it. Each secret travels as the `${VAR}` text of its file, expanded
        by every worker from its own environment (`from_wire`); one written literally, as nothing."""
        data: dict[str, Any] = reveal(self.model_dump())
        written = {reference.scenario_path: reference for reference in self.secret_references}
        held = [path for path, _ in secret_paths(data)]
        for path in held:
            _set_at(data, path, None)
        # every reference travels, also one empty here (`${KEY:-}`): the worker's environment decides;
        # a secret no file wrote (a scenario made in code) travels as one written literally
        unwritten = [SecretReference(path=path, text=None) for path in held if path not in written]
        data["secret_references"] = [r.model_dump() for r in (*written.values(), *unwritten)]
        _copy_backends_into_targets(data)
        return data

    @classmethod
    def from_wire(cls, data: dict[str, Any], environ: Mapping[str, str] | None = None) -> Scenario:
        """The scenario of `to_wire`, its secrets expanded from `environ` (this process's environment);
        ConfigError naming the variable a secret needs and `environ` lacks."""
        data = copy.deepcopy(data)
        env = os.environ if environ is None else environ
        source = data.get("source") or "the scenario"
        for item in data.get("secret_references") or ():
            reference = SecretReference.model_validate(item)
            _set_at(data, reference.scenario_path, reference.expand(source, env))
        _copy_backends_into_targets(data)
        return cls.model_validate(data)

    def with_overrides(
        self,
        tiers: list[int] | None = None,
        iterations: int | None = None,
        pause_s: float | None = None,
        think_time_s: float | None = None,
    ) -> Scenario:
        """A copy with command-line overrides of the load applied (validated like the file)."""
        if tiers is not None and self.load.open_loop:  # tiers of users would be ignored beside the rates
            raise ConfigError(
                "override: tiers: this scenario's load is open-loop (load.rates); change its rates"
            )
        changes = {"tiers": tiers, "iterations": iterations, "pause_s": pause_s, "think_time_s": think_time_s}
        load_data = self.load.model_dump(exclude_unset=True)  # a search's tiers stay unwritten
        load_data.update({key: value for key, value in changes.items() if value is not None})
        try:
            load = Load.model_validate(load_data)
        except ValidationError as error:
            raise ConfigError(f"override: {describe_validation_error(error, (), None, Load)}") from None
        return self.model_copy(update={"load": load})

    def conversation_slos(self) -> dict[str, dict[str, float]]:
        """The bounds each conversation's own `slo:` gives, by conversation (run.json keeps them for
        `grill report`)."""
        return {c.name: c.slo.given() for c in self.conversations if c.slo is not None and c.slo.given()}

    def slo_of(self, conversation: str) -> Slo:
        """The SLO `conversation`'s requests are judged by: its own `slo:` over the scenario's."""
        own = next((c.slo for c in self.conversations if c.name == conversation), None)
        return self.slo if own is None else own.over(self.slo)

    def target_names(self) -> list[str]:
        return [target.name for target in self.targets]

    def with_backend_urls(self, urls: dict[str, str]) -> Scenario:
        """A copy where the named backends (e.g. simulated engines just started) have these base URLs,
        in `backends` and in every target."""
        moved = {
            backend.name: backend.with_url(urls[backend.name])
            for backend in self.backends
            if backend.name in urls
        }
        unknown = sorted(set(urls) - set(moved))
        if unknown:
            raise ConfigError(f"{self.source}: no backend named {', '.join(unknown)}")
        backends = [moved.get(backend.name, backend) for backend in self.backends]
        targets = [
            target.model_copy(update={"backend": moved[target.backend.name]})
            if target.backend.name in moved
            else target
            for target in self.targets
        ]
        return self.model_copy(update={"backends": backends, "targets": targets})


# ---- the file layer: what a YAML file may say, before names are resolved ----------------------


class FileMixEntry(Frozen):
    """One persona of a target's mix, as the file writes it."""

    conversation: str
    """A conversation's name."""
    weight: Any
    """Its share of each tier's developers (a positive number, relative to the other entries'; checked
    where the target is resolved, scenario/_load.py, with the entry's place)."""


class FileTarget(Frozen):
    """One thing to measure, naming a backend, a model and a conversation or mix of the file."""

    name: str | None = None
    """How results name it (default: `backend/model/conversation`, or `backend/model/mix`)."""
    backend: str | None = Field(default=None, validation_alias=AliasChoices("backend", "server"))
    """A backend's name (may be left out when the file has one backend); llm-grill's `server`."""
    model: str | None = None
    """A model's name (may be left out when the file has one model)."""
    conversation: str | None = None
    """A conversation's name; give it or `mix`."""
    mix: list[FileMixEntry] | None = None
    """A team in one tier: each developer plays one of these conversations, by weight."""


class FileScenario(Frozen):
    """A scenario file as written, native or llm-grill's, before names are resolved."""

    name: str | None = None
    """The scenario's name (default: the file's stem)."""
    description: str = ""
    """Free text, kept in run.json."""
    backends: list[Backend] = Field(validation_alias=AliasChoices("backends", "servers"), min_length=1)
    """The engine endpoints; llm-grill's `servers`."""
    models: list[Model] = Field(min_length=1)
    """The served models and their sampling settings."""
    conversations: list[Conversation] = Field(default_factory=list)
    """The workloads, each of a kind."""
    targets: list[FileTarget] = Field(min_length=1)
    """What to measure: backend x model x conversation (or mix)."""
    load: dict[str, Any] = Field(default_factory=dict)
    """The campaign's shape (`Load`, or llm-grill's spellings of it), validated once translated."""
    slo: Slo = Slo()
    """The service level a tier must meet to count as capacity."""
    sinks: Sinks = Sinks()
    """Where records go besides the results folder."""


def iter_secrets(scenario: Scenario) -> Iterator[str]:
    """Every secret value in a scenario (for tests and log scrubbing)."""
    for _, value in secret_paths(reveal(scenario.model_dump())):
        yield value


def _set_at(data: Any, path: YamlPath, value: Any) -> None:
    """Put `value` at `path` in nested dicts and lists, making the dicts on the way that are missing."""
    for part in path[:-1]:
        if isinstance(data, dict) and not isinstance(data.get(part), (dict, list)):
            data[part] = {}
        data = data[part]
    data[path[-1]] = value


def _copy_backends_into_targets(data: dict[str, Any]) -> None:
    """Each target's backend is its named backend (after the backends' secrets changed)."""
    by_name = {backend["name"]: backend for backend in data.get("backends") or ()}
    for target in data.get("targets") or ():
        target["backend"] = copy.deepcopy(by_name[target["backend"]["name"]])
