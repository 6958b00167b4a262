"""Scenario files: the schema (native and llm-grill compatible), `${ENV}` expansion and validation.

`load_scenario(path)` reads a YAML file and returns a frozen `Scenario` whose targets hold resolved
objects (backend, model, conversation). Every user error is a `ConfigError`: one line naming the file,
the YAML path and what was expected, e.g. `x.yaml: targets[2].backend: unknown backend 'vlm' (known: vllm)`.

llm-grill files load unchanged: `servers` for `backends`, a server's `type`/`backend` for `engine` and
`timeout` for `timeouts.total_s`, `conversations` with `turns`, targets with `server`, and a `load`
section with `concurrent_users`, `ramp_levels`, `iterations`, `ramp_up_seconds`,
`think_time_seconds`, `ramp_pause_seconds`. Where such a file leaves a value out, llm-grill's default
applies (engine `openai`, 512 max_tokens, 1 user, 1 iteration, no think time, 10 s between levels), and
its SSH GPU-monitoring keys and `run_id` are accepted and left aside.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from grill_locust.errors import GrillError
from grill_locust.redact import redact_secret_keys, secret_key_values

ENGINES = ("vllm", "sglang", "llamacpp", "tgi", "ollama", "litellm", "openai", "sim")
SIM_PROFILES = ("vllm", "vllm-no-prefix-cache", "sglang", "llamacpp")
# engines that serve Prometheus /metrics and a /tokenize endpoint at these paths by default
ENGINES_WITH_METRICS = ("vllm", "sglang", "llamacpp", "sim")
ENGINES_WITH_TOKENIZE = ("vllm", "sglang", "llamacpp", "sim")
# spellings seen in other tools' files, after lower-casing and dropping ".", "-", "_" and spaces
_ENGINE_SYNONYMS = {
    "llamacppserver": "llamacpp",
    "llamaserver": "llamacpp",
    "textgenerationinference": "tgi",
    "openaicompatible": "openai",
    "simulated": "sim",
}

KINDS = ("multi-turn", "shared-prefix", "short-baseline", "unique-prompts", "fixed")
# built-in conversations, usable by name in targets without declaring them
BUILTIN_CONVERSATION_KINDS = {
    "multi-turn-session": "multi-turn",
    "shared-prefix": "shared-prefix",
    "short-baseline": "short-baseline",
    "unique-prompts": "unique-prompts",
}
# the size fields each kind uses, with their defaults (tokens), in the spirit of the seed study
KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "multi-turn": {"system_tokens": 1500, "user_turns": 4, "turn_tokens": 150, "shared_system": False},
    "shared-prefix": {"prefix_tokens": 4000, "question_tokens": 100},
    "short-baseline": {"prompt_tokens": 50},
    "unique-prompts": {"prompt_tokens": 3000},
    "fixed": {},
}
_SIZE_FIELDS = (
    "system_tokens",
    "user_turns",
    "turn_tokens",
    "shared_system",
    "prefix_tokens",
    "question_tokens",
    "prompt_tokens",
)

DEFAULT_TIERS = (1, 5, 10, 20, 50, 100, 150, 200)
SECRET_KEYS = frozenset({"api_key", "token"})
REDACTED = "***"
_MAX_TOKENS_PER_MESSAGE = 1_000_000


class ConfigError(GrillError):
    """A scenario file that cannot be used, explained in one line."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class Timeouts(_Frozen):
    """Per-request time limits of one backend (seconds)."""

    connect_s: float = Field(default=10.0, gt=0)
    first_token_s: float = Field(default=300.0, gt=0)
    total_s: float = Field(default=600.0, gt=0)


class Backend(_Frozen):
    """One engine endpoint (OpenAI-compatible), as requests and scrapers reach it."""

    name: str = Field(min_length=1)
    url: str = ""  # base URL without /v1; empty only for `engine: sim`, which the run starts itself
    engine: str = Field(validation_alias=AliasChoices("engine", "type", "backend"))
    profile: str | None = None
    sim_args: dict[str, Any] = Field(default_factory=dict)
    api_key: SecretStr | None = None
    api: Literal["chat", "completions"] = "chat"
    timeouts: Timeouts = Timeouts()
    metrics_url: str | None = None
    tokenize_url: str | None = None
    gpu_exporters: list[str] = Field(default_factory=list)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    retries: int = Field(default=0, ge=0, le=10)  # for HTTP 429 only

    @model_validator(mode="before")
    @classmethod
    def _llm_grill_timeout(cls, data: Any) -> Any:
        """llm-grill's single `timeout` (seconds) caps the whole request."""
        if isinstance(data, dict) and "timeout" in data:
            data = dict(data)
            total_s = data.pop("timeout")
            if "timeouts" in data:
                raise ValueError("give either timeout or timeouts, not both")
            try:
                total_s = float(total_s)
            except (TypeError, ValueError):
                raise ValueError(f"timeout: expected a number of seconds, got {total_s!r}") from None
            if total_s <= 0:
                raise ValueError(f"timeout: expected a positive number of seconds, got {total_s:g}")
            data["timeouts"] = {
                "total_s": total_s,
                "first_token_s": min(300.0, total_s),
                "connect_s": min(10.0, total_s),
            }
        return data

    @field_validator("engine", mode="before")
    @classmethod
    def _known_engine(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        key = re.sub(r"[\s._-]", "", value.lower())
        key = _ENGINE_SYNONYMS.get(key, key)
        if key not in ENGINES:
            raise ValueError(f"unknown engine {value!r} (known: {', '.join(sorted(ENGINES))})")
        return key

    @field_validator("api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, value: Any) -> Any:
        return None if value == "" else value  # `${KEY:-}` with KEY unset: no key, no header

    @field_validator("url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        if value == "":
            return value
        return _check_http_url(value, strip_v1=True)

    @field_validator("metrics_url", "tokenize_url")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        return None if value is None else _check_http_url(value, strip_v1=False)

    @field_validator("gpu_exporters")
    @classmethod
    def _exporter_urls(cls, value: list[str]) -> list[str]:
        return [_check_http_url(url, strip_v1=False) for url in value]

    @model_validator(mode="after")
    def _engine_rules(self) -> Backend:
        if self.engine == "sim":
            profile = self.profile or "vllm"
            if profile not in SIM_PROFILES:
                raise ValueError(
                    f"profile: unknown sim profile {profile!r} (known: {', '.join(SIM_PROFILES)})"
                )
            object.__setattr__(self, "profile", profile)
        else:
            if self.profile is not None:
                raise ValueError("profile: only for engine: sim")
            if self.sim_args:
                raise ValueError("sim_args: only for engine: sim")
            if not self.url:
                raise ValueError("url: required (e.g. http://127.0.0.1:8000)")
        if self.url:
            if self.metrics_url is None and self.engine in ENGINES_WITH_METRICS:
                object.__setattr__(self, "metrics_url", f"{self.url}/metrics")
            if self.tokenize_url is None and self.engine in ENGINES_WITH_TOKENIZE:
                object.__setattr__(self, "tokenize_url", f"{self.url}/tokenize")
        return self

    @property
    def managed(self) -> bool:
        """True for a simulated engine without a URL: the run starts it and stops it."""
        return self.engine == "sim" and not self.url

    def with_url(self, url: str) -> Backend:
        """This backend at another base URL (e.g. a simulated engine once started); default endpoints follow."""
        data = _reveal(self.model_dump())
        if self.url:
            for key, path in (("metrics_url", "/metrics"), ("tokenize_url", "/tokenize")):
                if data[key] == f"{self.url}{path}":
                    data[key] = None
        data["url"] = url
        return Backend.model_validate(data)


class Model(_Frozen):
    """A served model and the sampling settings sent with every request."""

    name: str = Field(min_length=1)
    max_tokens: int = Field(default=256, gt=0)
    min_tokens: int | None = Field(default=None, ge=0)
    temperature: float = Field(default=0.0, ge=0)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = None
    ignore_eos: bool = False

    @model_validator(mode="after")
    def _min_below_max(self) -> Model:
        if self.min_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens: {self.min_tokens} is above max_tokens ({self.max_tokens})")
        return self


class Turn(_Frozen):
    """One scripted message of a fixed (llm-grill) conversation."""

    role: Literal["system", "user", "assistant"]
    content: str


class Conversation(_Frozen):
    """What one simulated user sends in one iteration: a workload kind and its sizes (tokens)."""

    name: str = Field(min_length=1)
    kind: Literal["multi-turn", "shared-prefix", "short-baseline", "unique-prompts", "fixed"]
    description: str = ""
    system_tokens: int | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    user_turns: int | None = Field(default=None, ge=1, le=100)
    turn_tokens: int | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    shared_system: bool | None = None
    prefix_tokens: int | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    question_tokens: int | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    prompt_tokens: int | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    seed: int = 0
    salt: bool = True
    turns: list[Turn] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _kind_and_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        name = data.get("name")
        if "kind" not in data:
            if data.get("turns"):
                data["kind"] = "fixed"
            elif isinstance(name, str) and name in BUILTIN_CONVERSATION_KINDS:
                data["kind"] = BUILTIN_CONVERSATION_KINDS[name]
            else:
                raise ValueError(f"kind: required, one of {', '.join(KINDS)} (or give turns)")
        kind = data["kind"]
        if kind not in KIND_DEFAULTS:
            return data  # the Literal check names the choices
        defaults = KIND_DEFAULTS[kind]
        for key in _SIZE_FIELDS:
            if data.get(key) is not None and key not in defaults:
                used = ", ".join(defaults) or "turns"
                raise ValueError(f"{key}: not used by kind {kind!r} (it uses: {used})")
            if data.get(key) is None and key in defaults:
                data[key] = defaults[key]
        if kind == "fixed":
            if not data.get("turns"):
                raise ValueError("turns: kind 'fixed' needs turns (a list of role/content)")
        elif data.get("turns"):
            raise ValueError(f"turns: only for kind 'fixed', not {kind!r}")
        if data.get("seed") is None:
            data["seed"] = zlib.crc32(str(name).encode("utf-8"))
        return data

    @model_validator(mode="after")
    def _has_user_turn(self) -> Conversation:
        if self.kind == "fixed" and not any(turn.role == "user" for turn in self.turns):
            raise ValueError("turns: needs at least one user turn (each user turn is one request)")
        return self

    @property
    def requests_per_iteration(self) -> int:
        """Requests one iteration (one whole conversation) sends."""
        if self.kind == "fixed":
            return sum(1 for turn in self.turns if turn.role == "user")
        if self.kind == "multi-turn":
            return self.user_turns or 1
        return 1


class Target(_Frozen):
    """One thing to measure: a conversation sent to a model on a backend."""

    name: str
    backend: Backend
    model: Model
    conversation: Conversation


class Load(_Frozen):
    """The campaign shape: tiers of concurrent users, iterations per user and tier, pauses."""

    tiers: list[int] = Field(default_factory=lambda: list(DEFAULT_TIERS), min_length=1)
    iterations: int = Field(default=5, ge=1)
    pause_s: float = Field(default=30.0, ge=0, allow_inf_nan=False)
    think_time_s: float = Field(default=0.5, ge=0, allow_inf_nan=False)
    # users per second; None: a tier's users start at once
    spawn_rate: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    tier_timeout_s: float = Field(default=1800.0, gt=0, allow_inf_nan=False)

    @field_validator("tiers")
    @classmethod
    def _positive_tiers(cls, value: list[int]) -> list[int]:
        for index, users in enumerate(value):
            if users < 1:
                raise ValueError(f"tiers[{index}]: expected a positive number of users, got {users}")
        return value


class Slo(_Frozen):
    """The service level a tier must meet to count as capacity."""

    ttft_p50_s: float = Field(default=2.0, gt=0)
    e2e_p50_s: float = Field(default=10.0, gt=0)
    success_rate: float = Field(default=0.99, gt=0, le=1)


class InfluxSettings(_Frozen):
    url: str
    org: str = ""
    bucket: str
    token: SecretStr | None = None

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        return _check_http_url(value, strip_v1=False)

    @field_validator("token", mode="before")
    @classmethod
    def _empty_token_is_none(cls, value: Any) -> Any:
        return None if value == "" else value


class Sinks(_Frozen):
    influx: InfluxSettings | None = None


class Scenario(_Frozen):
    """A whole campaign: what to measure (targets) and how hard (load)."""

    name: str
    description: str = ""
    source: str = ""  # the file it came from, for messages
    backends: list[Backend]
    models: list[Model]
    conversations: list[Conversation]
    targets: list[Target]
    load: Load = Load()
    slo: Slo = Slo()
    sinks: Sinks = Sinks()

    def redacted(self) -> dict[str, Any]:
        """The scenario as plain data with every secret shown as "***" (for files and logs): SecretStr
        fields, and any value whose key names a secret (headers like x-api-key or Authorization,
        `api_key` inside sim_args or extra_body)."""
        return redact_secret_keys(_walk_secrets(self.model_dump(), lambda secret: REDACTED), REDACTED)

    def to_wire(self) -> dict[str, Any]:
        """Plain data including secrets: only for the master -> worker message, never for logs."""
        return _reveal(self.model_dump())

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Scenario:
        return cls.model_validate(data)

    def with_overrides(
        self,
        tiers: list[int] | None = None,
        iterations: int | None = None,
        pause_s: float | None = None,
        think_time_s: float | None = None,
    ) -> Scenario:
        """A copy with command-line overrides of the load applied (validated like the file)."""
        changes = {"tiers": tiers, "iterations": iterations, "pause_s": pause_s, "think_time_s": think_time_s}
        load_data = self.load.model_dump()
        load_data.update({key: value for key, value in changes.items() if value is not None})
        try:
            load = Load.model_validate(load_data)
        except ValidationError as error:
            raise ConfigError(f"override: {_describe_validation_error(error, (), None)}") from None
        return self.model_copy(update={"load": load})

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


class _FileTarget(_Frozen):
    name: str | None = None
    backend: str | None = Field(default=None, validation_alias=AliasChoices("backend", "server"))
    model: str | None = None
    conversation: str


class _FileScenario(_Frozen):
    name: str | None = None
    description: str = ""
    backends: list[Backend] = Field(validation_alias=AliasChoices("backends", "servers"), min_length=1)
    models: list[Model] = Field(min_length=1)
    conversations: list[Conversation] = Field(default_factory=list)
    targets: list[_FileTarget] = Field(min_length=1)
    load: dict[str, Any] = Field(default_factory=dict)
    slo: Slo = Slo()
    sinks: Sinks = Sinks()


class _LlmGrillLoad(_Frozen):
    """llm-grill's `load` section; translated into `Load`."""

    concurrent_users: int | list[int] | None = None
    ramp_levels: int | list[int] | None = None
    iterations: int | None = Field(default=None, ge=1)
    ramp_up_seconds: float | None = Field(default=None, ge=0)
    think_time_seconds: float | None = Field(default=None, ge=0)
    ramp_pause_seconds: float | None = Field(default=None, ge=0)


_LLM_GRILL_LOAD_KEYS = frozenset(_LlmGrillLoad.model_fields) - {"iterations"}


# ---- public entry points ----------------------------------------------------------------------


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read, expand and validate a scenario file; ConfigError (one line) on any problem."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{source}: cannot read: {error}") from None
    data, lines = _parse_yaml(text, source)
    return parse_scenario(data, source, _lines=lines)


def parse_scenario(
    data: Any, source: str, _lines: dict[tuple[str | int, ...], int] | None = None
) -> Scenario:
    """Validate already-parsed scenario data (a dict as YAML gives it); `source` names it in errors."""
    lines = _lines or {}
    if not isinstance(data, dict):
        what = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{source}: expected a mapping with backends, models, targets (got {what})")
    data = _expand_env(data, (), source, lines)
    if _is_llm_grill_file(data):
        data = _with_llm_grill_defaults(data)
    try:
        file = _FileScenario.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{source}: {_describe_validation_error(error, (), lines)}") from None
    load = _parse_load(file.load, source, lines)
    backends = _unique("backends", file.backends, source, lines, key=_backends_key(data))
    models = _unique("models", file.models, source, lines)
    declared = _unique("conversations", file.conversations, source, lines)
    conversations = dict(declared)
    for name in BUILTIN_CONVERSATION_KINDS:
        if name not in conversations:
            conversations[name] = Conversation.model_validate({"name": name})
    targets: dict[str, Target] = {}
    raw_targets = data.get("targets") or []
    for index, file_target in enumerate(file.targets):
        backend_key = "server" if "server" in raw_targets[index] else "backend"
        target = _resolve_target(
            index, file_target, backend_key, backends, models, conversations, source, lines
        )
        if target.name in targets:
            raise ConfigError(
                _at(source, ("targets", index, "name"), lines, f"duplicate target name {target.name!r}")
            )
        targets[target.name] = target
    return Scenario(
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


def parse_tiers(text: str, option: str = "--tiers") -> list[int]:
    """`"1,5,10"` -> [1, 5, 10], for command-line overrides; GrillError naming the option otherwise."""
    try:
        tiers = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        tiers = []
    if not tiers or any(users < 1 for users in tiers):
        raise GrillError(
            f"{option}: expected comma-separated positive numbers of users like 1,5,10, got {text!r}"
        )
    return tiers


# ---- YAML with line numbers --------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML would silently keep the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
        try:
            duplicate = key in seen
        except TypeError:
            continue  # unhashable keys: PyYAML reports them itself
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _parse_yaml(text: str, source: str) -> tuple[Any, dict[tuple[str | int, ...], int]]:
    loader = _StrictLoader(text)
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
    lines: dict[tuple[str | int, ...], int] = {}
    if node is not None:
        _record_lines(node, (), lines)
    return data, lines


def _record_lines(
    node: yaml.Node, path: tuple[str | int, ...], lines: dict[tuple[str | int, ...], int]
) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                child = (*path, str(key_node.value))
                _record_lines(value_node, child, lines)
                lines[child] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record_lines(item, (*path, index), lines)


# ---- ${ENV} expansion --------------------------------------------------------------------------

_ENV_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}")


def expand_env_string(value: str, environ: dict[str, str] | os._Environ[str] | None = None) -> str:
    """Expand `${VAR}`, `${VAR:-default}` (unset or empty) and `${VAR-default}` (unset); `$${` is a literal `${`.

    Raises KeyError(name) for an unset variable without default, ValueError for a malformed reference.
    """
    env = os.environ if environ is None else environ

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "\0{"  # protected from the malformed-reference check below
        name, operator, default = match.group(1), match.group(2), match.group(3)
        current = env.get(name)
        if operator == ":-" and not current:
            return default
        if operator == "-" and current is None:
            return default
        if current is None:
            raise KeyError(name)
        return current

    expanded = _ENV_REFERENCE.sub(substitute, value)
    if "${" in expanded:
        raise ValueError("malformed ${...} reference: expected ${NAME} or ${NAME:-default}")
    return expanded.replace("\0{", "${")


def _expand_env(
    value: Any, path: tuple[str | int, ...], source: str, lines: dict[tuple[str | int, ...], int]
) -> Any:
    if isinstance(value, str):
        if "$" not in value:
            return value
        try:
            return expand_env_string(value)
        except KeyError as error:
            name = error.args[0]
            message = f"environment variable {name} is not set (set it, or write ${{{name}:-default}})"
            raise ConfigError(_at(source, path, lines, message)) from None
        except ValueError as error:
            raise ConfigError(_at(source, path, lines, str(error))) from None
    if isinstance(value, dict):
        return {key: _expand_env(item, (*path, str(key)), source, lines) for key, item in value.items()}
    if isinstance(value, list):
        return [_expand_env(item, (*path, index), source, lines) for index, item in enumerate(value)]
    return value


# ---- llm-grill files: its defaults where they differ from ours -------------------------------

_LLM_GRILL_ENGINE_KEYS = ("type", "backend")
# llm-grill monitored GPUs over SSH; grill-locust reads them from gpu_exporters: these keys are dropped
_LLM_GRILL_SSH_KEYS = ("gpu_monitoring", "ssh_host", "ssh_user")
_LLM_GRILL_BACKEND_ONLY = (*_LLM_GRILL_SSH_KEYS, "timeout")


def _is_llm_grill_file(data: dict[str, Any]) -> bool:
    """A file written for llm-grill: one of the keys only llm-grill uses, or conversations of turns alone."""
    if "servers" in data or "run_id" in data:
        return True
    load = data.get("load")
    if isinstance(load, dict) and _LLM_GRILL_LOAD_KEYS & set(load):
        return True
    backends = data.get("backends")
    for backend in backends if isinstance(backends, list) else ():
        if isinstance(backend, dict) and any(
            k in backend for k in _LLM_GRILL_ENGINE_KEYS + _LLM_GRILL_BACKEND_ONLY
        ):
            return True
    conversations = data.get("conversations")
    return any(
        isinstance(c, dict) and "turns" in c and "kind" not in c
        for c in (conversations if isinstance(conversations, list) else ())
    )


def _with_llm_grill_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """What llm-grill did with what such a file leaves out: engine `openai`, 512 max_tokens, one user,
    one iteration, no think time, 10 s between ramp levels; its run_id and SSH keys are not ours."""
    data = {key: value for key, value in data.items() if key != "run_id"}
    key = _backends_key(data)
    if isinstance(data.get(key), list):
        backends = []
        for backend in data[key]:
            if isinstance(backend, dict):
                backend = {k: v for k, v in backend.items() if k not in _LLM_GRILL_SSH_KEYS}
                if not any(k in backend for k in ("engine", *_LLM_GRILL_ENGINE_KEYS)):
                    backend["engine"] = "openai"
            backends.append(backend)
        data[key] = backends
    if isinstance(data.get("models"), list):
        data["models"] = [
            {"max_tokens": 512, **model} if isinstance(model, dict) else model for model in data["models"]
        ]
    load = data.get("load") or {}
    if isinstance(load, dict):  # anything else gets its error from the schema
        load = dict(load)
        if not {"tiers", "concurrent_users", "ramp_levels"} & set(load):
            load["concurrent_users"] = 1
        load.setdefault("iterations", 1)
        if "think_time_s" not in load:
            load.setdefault("think_time_seconds", 0.0)
        if "pause_s" not in load:
            load.setdefault("ramp_pause_seconds", 10.0)
        data["load"] = load
    return data


# ---- load section: native keys or llm-grill's --------------------------------------------------


def _parse_load(raw: dict[str, Any], source: str, lines: dict[tuple[str | int, ...], int]) -> Load:
    native = {key: value for key, value in raw.items() if key not in _LLM_GRILL_LOAD_KEYS}
    grill_keys = {key: value for key, value in raw.items() if key in _LLM_GRILL_LOAD_KEYS}
    path: tuple[str | int, ...] = ("load",)
    if grill_keys:
        for native_key, grill_key in (
            ("tiers", "ramp_levels"),
            ("tiers", "concurrent_users"),
            ("spawn_rate", "ramp_up_seconds"),
            ("think_time_s", "think_time_seconds"),
            ("pause_s", "ramp_pause_seconds"),
        ):
            if native_key in native and grill_key in grill_keys:
                message = f"give {native_key} or {grill_key}, not both"
                raise ConfigError(_at(source, (*path, grill_key), lines, message))
        try:
            grill = _LlmGrillLoad.model_validate(grill_keys)
        except ValidationError as error:
            raise ConfigError(f"{source}: {_describe_validation_error(error, path, lines)}") from None
        native.update(_translate_llm_grill_load(grill, source, lines))
    try:
        return Load.model_validate(native)
    except ValidationError as error:
        raise ConfigError(f"{source}: {_describe_validation_error(error, path, lines, Load)}") from None


def _translate_llm_grill_load(
    grill: _LlmGrillLoad, source: str, lines: dict[tuple[str | int, ...], int]
) -> dict[str, Any]:
    """llm-grill: `ramp_levels` lists the user counts (or, as a number, splits `concurrent_users`
    into that many even steps); `concurrent_users` alone is a single tier; `ramp_up_seconds` is the
    time to start the largest tier."""
    out: dict[str, Any] = {}
    users = grill.concurrent_users
    levels = grill.ramp_levels
    for key, value in (("concurrent_users", users), ("ramp_levels", levels)):
        counts = value if isinstance(value, list) else [value] if key == "concurrent_users" else []
        for index, count in enumerate(counts):
            if count is not None and count < 1:
                where = ("load", key, index) if isinstance(value, list) else ("load", key)
                raise ConfigError(
                    _at(source, where, lines, f"expected a positive number of users, got {count}")
                )
    if isinstance(levels, list):
        out["tiers"] = levels
    elif isinstance(levels, int):
        if not isinstance(users, int):
            message = "a number of ramp levels needs concurrent_users (the last level) as a number"
            raise ConfigError(_at(source, ("load", "ramp_levels"), lines, message))
        if levels < 1:
            raise ConfigError(
                _at(source, ("load", "ramp_levels"), lines, f"expected at least 1 level, got {levels}")
            )
        out["tiers"] = sorted({max(1, -(-users * step // levels)) for step in range(1, levels + 1)})
    elif isinstance(users, list):
        out["tiers"] = users
    elif isinstance(users, int):
        out["tiers"] = [users]
    if grill.ramp_up_seconds:
        largest = max(out.get("tiers") or DEFAULT_TIERS)
        out["spawn_rate"] = largest / grill.ramp_up_seconds
    if grill.think_time_seconds is not None:
        out["think_time_s"] = grill.think_time_seconds
    if grill.ramp_pause_seconds is not None:
        out["pause_s"] = grill.ramp_pause_seconds
    return out


# ---- names and references ----------------------------------------------------------------------


def _backends_key(data: dict[str, Any]) -> str:
    return "servers" if "servers" in data and "backends" not in data else "backends"


def _unique(
    section: str,
    items: list[Any],
    source: str,
    lines: dict[tuple[str | int, ...], int],
    key: str | None = None,
) -> dict[str, Any]:
    by_name: dict[str, Any] = {}
    first_index: dict[str, int] = {}
    for index, item in enumerate(items):
        if item.name in by_name:
            message = f"duplicate name {item.name!r} (first at {key or section}[{first_index[item.name]}])"
            raise ConfigError(_at(source, (key or section, index, "name"), lines, message))
        by_name[item.name] = item
        first_index[item.name] = index
    return by_name


def _resolve_target(
    index: int,
    file_target: _FileTarget,
    backend_key: str,
    backends: dict[str, Backend],
    models: dict[str, Model],
    conversations: dict[str, Conversation],
    source: str,
    lines: dict[tuple[str | int, ...], int],
) -> Target:
    def pick(field: str, what: str, name: str | None, known: dict[str, Any]) -> Any:
        path = ("targets", index, field)
        if name is None:
            if len(known) == 1:
                return next(iter(known.values()))
            choices = ", ".join(sorted(known))
            raise ConfigError(_at(source, path, lines, f"required: which {what} (known: {choices})"))
        if name not in known:
            choices = ", ".join(sorted(known))
            raise ConfigError(_at(source, path, lines, f"unknown {what} {name!r} (known: {choices})"))
        return known[name]

    backend: Backend = pick(backend_key, "backend", file_target.backend, backends)
    model: Model = pick("model", "model", file_target.model, models)
    conversation: Conversation = pick("conversation", "conversation", file_target.conversation, conversations)
    name = file_target.name or f"{backend.name}/{model.name}/{conversation.name}"
    return Target(name=name, backend=backend, model=model, conversation=conversation)


# ---- errors as one line ------------------------------------------------------------------------


def _format_path(path: tuple[str | int, ...] | list[str | int]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def _line_of(path: tuple[str | int, ...], lines: dict[tuple[str | int, ...], int]) -> int | None:
    for end in range(len(path), 0, -1):  # the top level's line (the first line) would mislead
        line = lines.get(tuple(path[:end]))
        if line is not None:
            return line
    return None


def _at(
    source: str, path: tuple[str | int, ...], lines: dict[tuple[str | int, ...], int] | None, message: str
) -> str:
    line = _line_of(path, lines or {}) if path else None
    suffix = f" (line {line})" if line else ""
    return f"{source}: {_format_path(path)}: {message}{suffix}"


def _describe_validation_error(
    error: ValidationError,
    prefix: tuple[str | int, ...],
    lines: dict[tuple[str | int, ...], int] | None,
    root: type[BaseModel] | None = None,
) -> str:
    """The most specific pydantic error as `yaml.path: what was expected (line N)` (no file name): the
    first of those whose path goes deepest (of a value that may be a number or a list, the bad item)."""
    errors = error.errors(include_url=False)

    def location(item: Any) -> tuple[str | int, ...]:
        return _clean_loc(tuple(part for part in item["loc"] if isinstance(part, (str, int))))

    first = max(errors, key=lambda item: len(location(item)))  # max keeps the first of equals
    loc = location(first)
    path = (*prefix, *loc)
    if root is None and not prefix:
        root = _FileScenario
    message = _explain(first, path, root)
    message, path = _split_inner_path(message, path)
    line = _line_of(path, lines or {})
    suffix = f" (line {line})" if line else ""
    return f"{_format_path(path)}: {message}{suffix}"


def _clean_loc(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    # pydantic adds union/type tags such as 'list[int]' or 'int' to some locations
    return tuple(
        part
        for part in loc
        if isinstance(part, int)
        or not (("[" in part and "]" in part) or part in {"int", "float", "str", "bool", "none"})
    )


def _split_inner_path(message: str, path: tuple[str | int, ...]) -> tuple[str, tuple[str | int, ...]]:
    """Our validators start messages with the key they are about ('profile: ...'): move it to the path."""
    match = re.match(r"^([a-z_]+)(\[\d+\])?: (.*)$", message)
    if not match:
        return message, path
    key, index, rest = match.groups()
    new_path: tuple[str | int, ...] = path if path and path[-1] == key else (*path, key)
    if index:
        new_path = (*new_path, int(index[1:-1]))
    return rest, new_path


_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def _explain(error: Any, path: tuple[str | int, ...], root: type[BaseModel] | None) -> str:
    kind = error["type"]
    shown = _shown_input(error.get("input"), path)
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        known = _known_keys(root, path[:-1]) if root else []
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


def _shown_input(value: Any, path: tuple[str | int, ...]) -> str:
    if any(part in SECRET_KEYS for part in path if isinstance(part, str)):
        return "a secret value (not shown)"
    if isinstance(value, (dict, list)):
        return f"a {'mapping' if isinstance(value, dict) else 'list'}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _known_keys(root: type[BaseModel], path: tuple[str | int, ...]) -> list[str]:
    """The keys a mapping at `path` accepts (walking the model classes along the path)."""
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
    if model is _FileScenario:
        return sorted(
            ["name", "description", "backends", "servers", "models", "conversations", "targets"]
            + ["load", "slo", "sinks"]
        )
    keys = set()
    for name, field in model.model_fields.items():
        keys.add(name)
        if isinstance(field.validation_alias, AliasChoices):
            keys.update(str(choice) for choice in field.validation_alias.choices)
    if model is Backend:
        keys.add("timeout")
    if model is Load:
        keys.update(_LLM_GRILL_LOAD_KEYS)
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


# ---- secrets -----------------------------------------------------------------------------------


def _walk_secrets(value: Any, replace: Any) -> Any:
    if isinstance(value, SecretStr):
        return replace(value)
    if isinstance(value, dict):
        return {key: _walk_secrets(item, replace) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk_secrets(item, replace) for item in value]
    return value


def _reveal(value: Any) -> Any:
    return _walk_secrets(value, lambda secret: secret.get_secret_value())


def _check_http_url(value: str, strip_v1: bool) -> str:
    url = value.strip().rstrip("/")
    match = re.fullmatch(r"https?://[^\s/:]+(:\d{1,5})?(/\S*)?", url)
    if not match:
        if re.match(r"[a-z][a-z0-9+.-]*://[^/\s]*@", url, re.I):  # user:password@host: never echo it
            shown = re.sub(r"(://)[^/\s]*@", r"\1***@", url, count=1)
            raise ValueError(
                f"credentials in a URL ({shown!r}) are not sent: give them as api_key or headers"
            )
        raise ValueError(f"expected an http(s)://host[:port] URL, got {value!r}")
    if strip_v1 and url.endswith("/v1"):
        url = url[: -len("/v1")]  # llm-grill and OpenAI clients write the /v1 base; we add it per request
    return url


def iter_secrets(scenario: Scenario) -> Iterator[str]:
    """Every secret value in a scenario (for tests and log scrubbing)."""
    for backend in scenario.backends:
        if backend.api_key is not None and backend.api_key.get_secret_value():
            yield backend.api_key.get_secret_value()
        for extra in (backend.headers, backend.sim_args, backend.extra_body):
            yield from secret_key_values(extra)
    influx = scenario.sinks.influx
    if influx is not None and influx.token is not None and influx.token.get_secret_value():
        yield influx.token.get_secret_value()
