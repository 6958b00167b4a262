"""Reading a scenario: the file, then names resolved into targets (`load_scenario`, `parse_scenario`)."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from grill_locust.config import Backend, Model
from grill_locust.config._env import env_reference_names, expand_env
from grill_locust.config._errors import (
    ConfigError,
    LineMap,
    YamlPath,
    at,
    describe_validation_error,
    line_of,
)
from grill_locust.config._secrets import reveal, secret_paths
from grill_locust.config._yaml_lines import DuplicateKey, parse_yaml
from grill_locust.errors import GrillError
from grill_locust.fim_templates import FimChoiceError, choose_fim
from grill_locust.scenario._llm_grill import (
    backends_key,
    is_llm_grill_file,
    parse_load,
    with_llm_grill_defaults,
)
from grill_locust.scenario._schema import (
    Conversation,
    FileMixEntry,
    FileScenario,
    FileTarget,
    Persona,
    Scenario,
    SecretReference,
    Target,
    validate_conversation,
)
from grill_locust.workload.dataset import DatasetError
from grill_locust.workload.kinds import BUILTIN_CONVERSATION_KINDS
from grill_locust.workload.trace import TraceError

log = logging.getLogger(__name__)


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read, expand and validate a scenario file; ConfigError (one line) on any problem."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{source}: cannot read: {error}") from None
    data, lines, duplicates = parse_yaml(text, source)
    return _parse(data, source, lines, duplicates, Path(path).parent)


def parse_scenario(data: Any, source: str) -> Scenario:
    """Validate already-parsed scenario data (a dict as YAML gives it); `source` names it in errors.
    Files it names (a dataset's or a trace's path) are relative to the current folder."""
    return _parse(data, source, {}, [], Path.cwd())


def _parse(data: Any, source: str, lines: LineMap, duplicates: list[DuplicateKey], folder: Path) -> Scenario:
    """`folder`: where relative file paths of the scenario (datasets, traces) are read from."""
    if not isinstance(data, dict):
        what = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{source}: expected a mapping with backends, models, targets (got {what})")
    if duplicates:
        if not is_llm_grill_file(data):
            raise ConfigError(duplicates[0].describe(source))
        for duplicate in duplicates:  # llm-grill loads them, the last one winning
            log.warning("%s: the last one is used, as llm-grill does", duplicate.describe(source))
    written = data
    data = expand_env(data, (), source, lines)
    if is_llm_grill_file(data):
        data = with_llm_grill_defaults(data)
    try:
        file = FileScenario.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{source}: {describe_validation_error(error, (), lines, FileScenario)}") from None
    user_keys = [key for key in ("tiers", "ramp_levels", "concurrent_users") if key in file.load]
    if (
        "rates" in file.load and user_keys
    ):  # (a Load always has tiers: whether the file wrote them is said here)
        message = f"give {user_keys[0]} (users) or rates (per second), not both"
        raise ConfigError(at(source, ("load", "rates"), lines, message))
    load = parse_load(file.load, source, lines)
    backends = _unique("backends", file.backends, source, lines, key=backends_key(data))
    models = _unique("models", file.models, source, lines)
    declared = _unique("conversations", file.conversations, source, lines)
    for index, conversation in enumerate(file.conversations):
        if conversation.slo is not None:
            try:
                conversation.slo.over(file.slo)
            except ValidationError as error:
                where = ("conversations", index, "slo")
                raise ConfigError(
                    f"{source}: {describe_validation_error(error, where, lines, None)}"
                ) from None
    conversations = {
        name: _with_replay_file(index, conversation, folder, source, lines)
        for index, (name, conversation) in enumerate(declared.items())
    }
    for name in BUILTIN_CONVERSATION_KINDS:
        if name not in conversations:
            conversations[name] = validate_conversation({"name": name})
    targets: dict[str, Target] = {}
    raw_targets = data.get("targets") or []
    for index, file_target in enumerate(file.targets):
        backend_key = "server" if "server" in raw_targets[index] else "backend"
        target = _resolve_target(
            index, file_target, backend_key, backends, models, conversations, source, lines
        )
        if target.name in targets:
            raise ConfigError(
                at(source, ("targets", index, "name"), lines, f"duplicate target name {target.name!r}")
            )
        targets[target.name] = target
    scenario = Scenario(
        name=file.name or Path(source).stem,
        description=file.description,
        source=source,
        backends=list(backends.values()),
        models=list(models.values()),
        conversations=list(conversations.values()),
        targets=list(targets.values()),
        load=load,
        slo=file.slo,
        sinks=file.sinks,
    )
    return scenario.model_copy(update={"secret_references": _secret_references(written, lines, scenario)})


def parse_tiers(text: str, option: str = "--tiers") -> list[int]:
    """`"1,5,10"` -> [1, 5, 10], for command-line overrides; GrillError naming the option otherwise."""
    expected = "expected comma-separated positive numbers of users like 1,5,10"
    parts = text.replace(" ", "").split(",")
    if text.strip() and "" in parts:
        raise GrillError(f"{option}: item {parts.index('') + 1} of {text!r} is empty ({expected})")
    try:
        tiers = [int(part) for part in parts if part]
    except ValueError:
        tiers = []
    if not tiers or any(users < 1 for users in tiers):
        raise GrillError(f"{option}: {expected}, got {text!r}")
    return tiers


def _unique(
    section: str,
    items: list[Any],
    source: str,
    lines: LineMap,
    key: str | None = None,
) -> dict[str, Any]:
    by_name: dict[str, Any] = {}
    first_index: dict[str, int] = {}
    for index, item in enumerate(items):
        if item.name in by_name:
            message = f"duplicate name {item.name!r} (first at {key or section}[{first_index[item.name]}])"
            raise ConfigError(at(source, (key or section, index, "name"), lines, message))
        by_name[item.name] = item
        first_index[item.name] = index
    return by_name


def _secret_references(
    written: dict[str, Any], lines: LineMap, scenario: Scenario
) -> tuple[SecretReference, ...]:
    """Each secret as the file wrote it: its `${VAR}` text, or None where a value written literally
    holds a secret in the scenario (llm-grill's `api_key: none` is no key, hence no secret)."""
    held = {path for path, _ in secret_paths(reveal(scenario.model_dump()))}
    references = []
    for path, text in secret_paths(written, backends_key(written)):
        reference = SecretReference(path=path, text=text, line=line_of(path, lines))
        if env_reference_names(text):
            references.append(reference)
        elif reference.scenario_path in held:
            references.append(reference.model_copy(update={"text": None}))
    return tuple(references)


def _with_replay_file(
    index: int, conversation: Conversation, folder: Path, source: str, lines: LineMap
) -> Conversation:
    """A dataset or trace conversation with its file's absolute path (workers read the same file, with
    no scenario folder), once the file is read and every row checked: bad input stops the run here,
    before any request, naming the file's line."""
    written = getattr(conversation, "path", None)
    if not conversation.workload_kind.replays_file or written is None:
        return conversation
    path = os.path.abspath(folder / Path(written).expanduser())
    resolved = conversation.model_copy(update={"path": path})
    try:
        resolved.workload_kind.check_file(resolved)
    except (DatasetError, TraceError) as error:
        raise ConfigError(at(source, ("conversations", index, "path"), lines, str(error))) from None
    return resolved


def _resolve_target(
    index: int,
    file_target: FileTarget,
    backend_key: str,
    backends: dict[str, Backend],
    models: dict[str, Model],
    conversations: dict[str, Conversation],
    source: str,
    lines: LineMap,
) -> Target:
    def pick(field: str, what: str, name: str | None, known: dict[str, Any]) -> Any:
        path = ("targets", index, field)
        if name is None:
            if len(known) == 1:
                return next(iter(known.values()))
            choices = ", ".join(sorted(known))
            raise ConfigError(at(source, path, lines, f"required: which {what} (known: {choices})"))
        if name not in known:
            choices = ", ".join(sorted(known))
            raise ConfigError(at(source, path, lines, f"unknown {what} {name!r} (known: {choices})"))
        return known[name]

    backend: Backend = pick(backend_key, "backend", file_target.backend, backends)
    model: Model = pick("model", "model", file_target.model, models)
    if file_target.mix is not None and file_target.conversation is not None:
        message = "give either conversation or mix, not both"
        raise ConfigError(at(source, ("targets", index, "mix"), lines, message))
    if file_target.mix is None:
        conversation: Conversation = pick(
            "conversation", "conversation", file_target.conversation, conversations
        )
        personas = [Persona(conversation=conversation, weight=1.0)]
        _check_api(backend, conversation, ("targets", index, "conversation"), source, lines)
    else:
        personas = _mix_personas(index, file_target.mix, backend, conversations, source, lines)
    for persona in personas:
        _check_fim(index, backend, model, persona.conversation, models, conversations, source, lines)
    mix = file_target.mix is not None
    name = file_target.name or (
        f"{backend.name}/{model.name}/" + ("mix" if mix else personas[0].conversation.name)
    )
    return Target(name=name, backend=backend, model=model, personas=tuple(personas), mix=mix)


def _mix_personas(
    index: int,
    mix: list[FileMixEntry],
    backend: Backend,
    conversations: dict[str, Conversation],
    source: str,
    lines: LineMap,
) -> list[Persona]:
    """A target's `mix`: each entry's conversation (declared or built-in) and positive weight."""
    if not mix:
        message = "expected at least one {conversation: NAME, weight: NUMBER} entry, got an empty mix"
        raise ConfigError(at(source, ("targets", index, "mix"), lines, message))
    personas = []
    seen: set[str] = set()
    for position, entry in enumerate(mix):
        place = ("targets", index, "mix", position)
        if entry.conversation not in conversations:
            choices = ", ".join(sorted(conversations))
            message = f"unknown conversation {entry.conversation!r} (known: {choices})"
            raise ConfigError(at(source, (*place, "conversation"), lines, message))
        if entry.conversation in seen:
            message = f"conversation {entry.conversation!r} is already in this mix: give it one weight"
            raise ConfigError(at(source, (*place, "conversation"), lines, message))
        seen.add(entry.conversation)
        # it runs at the trace's times, not a developer's
        if conversations[entry.conversation].workload_kind.replays_at_own_times:
            message = (
                f"conversation {entry.conversation!r} replays a trace, which is its own target: not a persona"
            )
            raise ConfigError(at(source, (*place, "conversation"), lines, message))
        weight = entry.weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < math.inf:
            message = f"expected a positive number, got {weight!r}"
            raise ConfigError(at(source, (*place, "weight"), lines, message))
        conversation = conversations[entry.conversation]
        _check_api(backend, conversation, (*place, "conversation"), source, lines)
        personas.append(Persona(conversation=conversation, weight=float(weight)))
    return personas


def _check_api(
    backend: Backend, conversation: Conversation, place: YamlPath, source: str, lines: LineMap
) -> None:
    refusal = conversation.workload_kind.api_refusal(backend.api)
    if refusal is not None:
        message = (
            f"conversation {conversation.name!r} {refusal} (backend {backend.name!r} has api: {backend.api})"
        )
        raise ConfigError(at(source, place, lines, message))


def _check_fim(
    index: int,
    backend: Backend,
    model: Model,
    conversation: Conversation,
    models: dict[str, Model],
    conversations: dict[str, Conversation],
    source: str,
    lines: LineMap,
) -> None:
    """A target whose FIM keys cannot work is refused at load, naming the key of the conversation or
    model that wrote it (every FIM request of the target would fail the same way)."""
    if not _uses_fim(model, conversation):
        return
    try:
        choose_fim(backend.engine, model, conversation)
    except FimChoiceError as error:
        if error.owner == "conversation" and conversation.name in conversations:
            path: tuple[str | int, ...] = ("conversations", list(conversations).index(conversation.name))
        else:
            path = ("models", list(models).index(model.name))
        message = f"{error} (target {index}: backend {backend.name!r}, model {model.name!r})"
        raise ConfigError(at(source, (*path, error.key), lines, message)) from None


def _uses_fim(model: Model, conversation: Conversation) -> bool:
    """Whether the target's FIM keys count: it sends FIM requests (autocomplete), or a transport is
    named, which must work wherever it is written."""
    return (
        conversation.workload_kind.typed_completions or conversation.fim is not None or model.fim is not None
    )
