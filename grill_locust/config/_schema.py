"""The scenario schema: frozen pydantic models of what a file may say (native and llm-grill spellings)
and of the resolved campaign (`Scenario`, whose targets hold their backend, model and conversation)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
import re
import zlib
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from grill_locust.config._env import expand_env_string
from grill_locust.config._errors import ConfigError, YamlPath, at, describe_validation_error, shown_input
from grill_locust.config._secrets import REDACTED, reveal, secret_paths, walk_secrets
from grill_locust.engines import engine_facts, engine_name
from grill_locust.errors import GrillError
from grill_locust.fim_templates import FIM_FAMILIES, FIM_TEMPLATES
from grill_locust.record import STATUS_ABANDONED, STATUS_OK
from grill_locust.redact import redact_secret_keys
from grill_locust.sim.params import PROFILES as SIM_PROFILES
from grill_locust.sim.params import EngineParams
from grill_locust.workload.kinds import (
    BUILTIN_CONVERSATION_KINDS,
    KIND_MIX,
    MODEL_SETTINGS,
    WORKLOAD_KINDS,
    WorkloadKind,
    kind_names,
    size_fields,
)

FimTransport = Literal["template", "suffix", "infill"]  # FIM_TRANSPORTS, as a type
DEFAULT_TIERS = (1, 5, 10, 20, 50, 100, 150, 200)
DEFAULT_MAX_IN_FLIGHT = 1024  # an open-loop tier's cap on requests in flight, across its workers
_MAX_TOKENS_PER_MESSAGE = 1_000_000
_MAX_SUBAGENTS = 16


class _Frozen(BaseModel):
    # NaN and infinity pass every comparison a validator makes (`nan > 0` is False, `inf > 0` True):
    # no float of a scenario may be either. A field's docstring is its description in docs/scenarios.md.
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
    )


def _refuse_bool(expected: str) -> BeforeValidator:
    """YAML's true and false are Python's 1 and 0: a number field refuses them instead of reading them so."""

    def check(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"expected {expected}, got {str(value).lower()}")
        return value

    return BeforeValidator(check)


# a scenario's numbers: finite (the models' config), never a bool
Number = Annotated[float, _refuse_bool("a number")]
Count = Annotated[int, _refuse_bool("a whole number")]


class Timeouts(_Frozen):
    """Per-request time limits of one backend (seconds)."""

    connect_s: Number = Field(default=10.0, gt=0)
    """To open the connection."""
    first_token_s: Number = Field(default=300.0, gt=0)
    """From the send to the first output."""
    total_s: Number = Field(default=600.0, gt=0)
    """The whole request."""
    idle_s: Number = Field(default=60.0, gt=0)
    """Between two output events, once output has begun: a stream that stalls mid-answer fails then,
    not at `total_s`."""


# a free-form number (sim_args, extra_body) past this is no setting: JSON's exact integers end here
_MAX_FREE_NUMBER = 2**53
_SIM_PARAMS = {
    field.name: getattr(SIM_PROFILES["vllm"], field.name) for field in dataclasses.fields(EngineParams)
}


def _check_numbers(value: Any, field: str, inner: str = "") -> None:
    """Every number in a free-form mapping (sim_args, extra_body) finite and of a sane size."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_numbers(item, field, f"{inner}.{key}" if inner else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_numbers(item, field, f"{inner}[{index}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"{field}: {inner}: expected a finite number, got {value}")
        if abs(value) > _MAX_FREE_NUMBER:
            raise ValueError(f"{field}: {inner}: {value:g} is past the largest number accepted (2^53)")


class Backend(_Frozen):
    """One engine endpoint (OpenAI-compatible), as requests and scrapers reach it."""

    name: str = Field(min_length=1)
    """What targets call it."""
    url: str = ""
    """Base URL (a trailing /v1 is dropped); empty only for `engine: sim`, which the run starts itself."""
    engine: str = Field(validation_alias=AliasChoices("engine", "type", "backend"))
    """Which engine serves it, as grill_locust/engines.py names them (`openai`: any other OpenAI-compatible
    server; `sim`: the simulated engine); llm-grill's `type` or `backend`."""
    profile: str | None = None
    """`engine: sim` only: the simulated engine's profile (vllm when not given)."""
    sim_args: dict[str, Any] = Field(default_factory=dict)
    """`engine: sim` only: the simulator's settings (`grill sim --help`), e.g. `{max_num_seqs: 64}`."""
    api_key: SecretStr | None = None
    """Sent as `Authorization: Bearer` (and `x-api-key` over `messages`); write it as `${VAR}`."""
    api: Literal["chat", "completions", "messages"] = "chat"
    """The request API: /v1/chat/completions, /v1/completions or Anthropic's /v1/messages."""
    timeouts: Timeouts = Timeouts()
    """Per-request time limits; llm-grill's single `timeout: S` sets `total_s` (and caps the others)."""
    metrics_url: str | None = None
    """The engine's Prometheus /metrics (the engine's default route when not given)."""
    tokenize_url: str | None = None
    """The engine's /tokenize, used to calibrate prompt sizes (the engine's default route when not given)."""
    gpu_exporters: list[str] = Field(default_factory=list)
    """URLs of `grill gpu-exporter` on the engine's machines, scraped every telemetry interval."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Keys added to every request's JSON body."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers added to every request."""
    retries: Count = Field(default=0, ge=0, le=10)
    """Retries of a request answered HTTP 429 (no other failure is retried)."""
    other_keys: ClassVar[tuple[str, ...]] = ("timeout",)  # llm-grill's, read by _llm_grill_timeout

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
                total_s = float(total_s) if not isinstance(total_s, bool) else None
            except (TypeError, ValueError):
                total_s = None
            if total_s is None:
                raise ValueError(f"timeout: expected a number of seconds, got {data['timeout']!r}")
            if not 0 < total_s < math.inf:  # NaN fails this comparison too
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
        return engine_name(value) if isinstance(value, str) else value

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
            engine_params = {key: value for key, value in self.sim_args.items() if key in _SIM_PARAMS}
            try:  # checked now, not when the run starts the simulator
                SIM_PROFILES[profile].with_overrides(engine_params, "sim_args")
            except GrillError as error:
                raise ValueError(str(error)) from None
            for key, value in self.sim_args.items():
                if isinstance(value, bool) and not isinstance(_SIM_PARAMS.get(key), bool):
                    raise ValueError(
                        f"sim_args: {key}: expected a number or a name, got {str(value).lower()}"
                    )
        else:
            if self.profile is not None:
                raise ValueError("profile: only for engine: sim")
            if self.sim_args:
                raise ValueError("sim_args: only for engine: sim")
            if not self.url:
                raise ValueError("url: required (e.g. http://127.0.0.1:8000)")
        for field in ("sim_args", "extra_body"):
            _check_numbers(getattr(self, field), field)
        served = engine_facts(self.engine).apis
        if self.api not in served:
            raise ValueError(
                f"api: engine {self.engine!r} does not serve the {self.api} API "
                f"(it serves: {', '.join(sorted(served))})"
            )
        if self.url:
            for key, path in self._default_endpoints():
                if getattr(self, key) is None:
                    object.__setattr__(self, key, f"{self.url}{path}")
        return self

    def _default_endpoints(self) -> list[tuple[str, str]]:
        """(field, route) of the endpoints this engine serves without being configured."""
        facts = engine_facts(self.engine)
        routes = (("metrics_url", facts.metrics_path), ("tokenize_url", facts.tokenize_path))
        return [(key, path) for key, path in routes if path is not None]

    @property
    def managed(self) -> bool:
        """True for a simulated engine without a URL: the run starts it and stops it."""
        return self.engine == "sim" and not self.url

    def with_url(self, url: str) -> Backend:
        """This backend at another base URL (e.g. a simulated engine once started); default endpoints follow."""
        data = reveal(self.model_dump())
        if self.url:
            for key, path in self._default_endpoints():
                if data[key] == f"{self.url}{path}":
                    data[key] = None
        data["url"] = url
        return Backend.model_validate(data)


class Model(_Frozen):
    """A served model and the sampling settings sent with every request."""

    name: str = Field(min_length=1)
    """The model's name as the engine serves it (sent as `model`)."""
    max_tokens: Count = Field(default=256, gt=0)
    """Output tokens asked for per request, unless the conversation or its kind sets its own."""
    min_tokens: Count | None = Field(default=None, ge=0)
    """Output tokens the engine must generate at least (vLLM, SGLang, the simulator)."""
    temperature: Number = Field(default=0.0, ge=0)
    """Sampling temperature."""
    top_p: Number | None = Field(default=None, ge=0, le=1)
    """Nucleus sampling's probability mass (not sent when not given)."""
    top_k: Count | None = None
    """Sampling from the k likeliest tokens (not sent when not given)."""
    ignore_eos: bool = False
    """Ask the engine to generate `max_tokens` whatever the model's end of sequence."""
    fim: FimTransport | None = None
    """How fill-in-the-middle (autocomplete) requests reach it: the family's FIM tokens in a prompt
    (`template`), OpenAI's `suffix` field, or llama.cpp's /infill; a conversation's own `fim` wins."""
    fim_template: str | None = None
    """The family of its FIM tokens (grill_locust/fim_templates.py), where the model's name does not tell it."""

    @field_validator("fim_template")
    @classmethod
    def _known_fim_family(cls, value: str | None) -> str | None:
        return _fim_family(value)

    @model_validator(mode="after")
    def _min_below_max(self) -> Model:
        if self.min_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens: {self.min_tokens} is above max_tokens ({self.max_tokens})")
        return self

    def with_settings(self, max_tokens: int | None = None, ignore_eos: bool | None = None) -> Model:
        """These sampling settings with another max_tokens (min_tokens kept below it) or ignore_eos."""
        update: dict[str, Any] = {}
        if max_tokens is not None and max_tokens != self.max_tokens:
            update["max_tokens"] = max_tokens
            if self.min_tokens is not None and self.min_tokens > max_tokens:
                update["min_tokens"] = max_tokens
        if ignore_eos is not None and ignore_eos != self.ignore_eos:
            update["ignore_eos"] = ignore_eos
        return self.model_copy(update=update) if update else self


class Turn(_Frozen):
    """One scripted message of a fixed (llm-grill) conversation."""

    role: Literal["system", "user", "assistant"]
    """Who says it: the system prompt, the developer (user) or a scripted assistant reply."""
    content: str
    """The message's text, sent as written."""


class LogNormalTokens(_Frozen):
    """A size in tokens drawn from a log-normal with this median and 95th percentile (equal: fixed)."""

    median: Count = Field(ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    """The size's median, in tokens (a plain number gives a fixed size)."""
    p95: int = Field(ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    """The size's 95th percentile, in tokens: not below the median."""

    @model_validator(mode="before")
    @classmethod
    def _number_is_fixed(cls, data: Any) -> Any:
        return {"median": data, "p95": data} if isinstance(data, int) and not isinstance(data, bool) else data

    @model_validator(mode="after")
    def _p95_not_below_median(self) -> LogNormalTokens:
        if self.p95 < self.median:
            raise ValueError(f"p95: {self.p95} is below the median ({self.median})")
        return self


SLO_LATENCY_BOUNDS: tuple[str, ...] = (
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "e2e_p50_s",
    "e2e_p90_s",
    "e2e_p99_s",
)


# Per-request limits (slo_met): the record column each judges -> the SLO field that holds the limit
SLO_REQUEST_LIMITS: dict[str, str] = {"ttft_s": "ttft_s", "tpot_s": "tpot_ms", "e2e_s": "e2e_s"}
SLO_PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)
SLO_DEFAULT_PERCENTILE = 50  # limits with neither `percentile` nor `attainment` are judged at the median
# the bounds an SLO without per-request limits has unless it gives its own
SLO_DEFAULT_TIER_BOUNDS: dict[str, float] = {"ttft_p50_s": 2.0, "e2e_p50_s": 10.0}


class Slo(_Frozen):
    """The service level a tier must meet to count as capacity, each bound met at equality: each
    latency percentile given at most its bound (ttft_p50_s ... e2e_p99_s), success rate >= success_rate.
    Per-request limits (ttft_s, tpot_ms, e2e_s) judge each request (`judge`: slo_met); a tier meets them
    when that `percentile` of each limited metric is within its limit and/or when at least `attainment`
    of its requests meet every limit (limits alone: the median). Without per-request limits, TTFT p50
    <= 2 s and E2E p50 <= 10 s unless given. A scenario's `slo:` section; a conversation's own `slo:`
    wins over it, bound by bound, for that conversation; `grill report` judges tiers by them
    (report/capacity.py)."""

    ttft_p50_s: float | None = Field(default=None, gt=0)
    """A tier's TTFT median must be at most this (seconds); 2 s when no per-request limit is given."""
    ttft_p90_s: float | None = Field(default=None, gt=0)
    """A tier's TTFT p90 must be at most this (seconds)."""
    ttft_p99_s: float | None = Field(default=None, gt=0)
    """A tier's TTFT p99 must be at most this (seconds)."""
    e2e_p50_s: float | None = Field(default=None, gt=0)
    """A tier's end-to-end latency median must be at most this (seconds); 10 s when no per-request limit is given."""
    e2e_p90_s: float | None = Field(default=None, gt=0)
    """A tier's end-to-end latency p90 must be at most this (seconds)."""
    e2e_p99_s: float | None = Field(default=None, gt=0)
    """A tier's end-to-end latency p99 must be at most this (seconds)."""
    success_rate: Number = Field(default=0.99, gt=0, le=1)
    """The share of a tier's requests that must succeed."""
    ttft_s: Number | None = Field(default=None, gt=0)
    """Per-request limit on TTFT (seconds): each request's `slo_met` is judged by the limits."""
    tpot_ms: Number | None = Field(default=None, gt=0)
    """Per-request limit on time per output token (milliseconds); a request of fewer than 2 output
    tokens has none."""
    e2e_s: float | None = Field(default=None, gt=0)
    """Per-request limit on end-to-end latency (seconds)."""
    percentile: Literal[50, 90, 95, 99] | None = None
    """A tier meets the per-request limits when this percentile of each limited metric is within its
    limit (with neither this nor `attainment`: the median)."""
    attainment: Number | None = Field(default=None, gt=0, le=1)
    """A tier meets the per-request limits when at least this share of its requests met every limit."""

    @model_validator(mode="before")
    @classmethod
    def _default_tier_bounds(cls, data: Any) -> Any:
        if isinstance(data, dict) and all(data.get(name) is None for name in SLO_REQUEST_LIMITS.values()):
            return {**SLO_DEFAULT_TIER_BOUNDS, **data}
        return data

    @model_validator(mode="after")
    def _limits_for_verdicts(self) -> Slo:
        if not self.request_limits():
            for name in ("percentile", "attainment"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name}: judges per-request limits, and none is given (ttft_s, tpot_ms, e2e_s)"
                    )
        return self

    @classmethod
    def parse(cls, values: Mapping[str, Any]) -> Slo:
        """An SLO from plain values (run.json, flags); ConfigError `key: what was expected` otherwise."""
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise ConfigError(describe_validation_error(error, (), None, cls)) from None

    def latency_bounds(self) -> dict[str, float]:
        """Summary column -> bound in seconds, for the bounds this SLO has."""
        bounds = {name: getattr(self, name) for name in SLO_LATENCY_BOUNDS}
        return {name: bound for name, bound in bounds.items() if bound is not None}

    def request_limits(self) -> dict[str, float]:
        """Record column -> per-request limit in seconds, for the limits this SLO has."""
        limits = {column: getattr(self, name) for column, name in SLO_REQUEST_LIMITS.items()}
        if limits["tpot_s"] is not None:
            limits["tpot_s"] /= 1000.0
        return {column: limit for column, limit in limits.items() if limit is not None}

    def limit_percentile(self) -> int | None:
        """The percentile of each limited metric a tier must hold within its limit (None: not judged so)."""
        if not self.request_limits() or (self.percentile is None and self.attainment is not None):
            return None
        return self.percentile or SLO_DEFAULT_PERCENTILE

    def judge(
        self, status: str, ttft_s: float | None, tpot_s: float | None, e2e_s: float | None
    ) -> bool | None:
        """A request's slo_met: None where no per-request limit applies or the developer's typing
        abandoned it, False when it failed, else whether it is within every limit. A request with fewer
        than 2 output tokens has no TPOT (None or NaN): its TTFT and E2E judge it."""
        limits = self.request_limits()
        if not limits or status == STATUS_ABANDONED:
            return None
        if status != STATUS_OK:
            return False
        values = {"ttft_s": ttft_s, "tpot_s": tpot_s, "e2e_s": e2e_s}
        for column, limit in limits.items():
            value = values[column]
            if value is None or math.isnan(value):
                if column != "tpot_s":
                    return False  # a success without a TTFT or E2E is not one we can vouch for
            elif value > limit:
                return False
        return True

    def describe(self) -> str:
        parts = [
            f"{name.split('_')[0].upper()} {name.split('_')[1]} <= {bound:g} s"
            for name, bound in self.latency_bounds().items()
        ]
        limits = self.request_limits()
        if limits:
            each = ", ".join(
                f"TPOT <= {limit * 1000:g} ms"
                if column == "tpot_s"
                else f"{column[:-2].upper()} <= {limit:g} s"
                for column, limit in limits.items()
            )
            verdicts = []
            if self.limit_percentile() is not None:
                verdicts.append(f"at p{self.limit_percentile()}")
            if self.attainment is not None:
                verdicts.append(f"for >= {self.attainment * 100:g} % of requests")
            parts.append(f"per request {each} ({' and '.join(verdicts)})")
        return ", ".join([*parts, f"success >= {self.success_rate * 100:g} %"])


class ConversationSlo(_Frozen):
    """A conversation's own `slo:`: the bounds and limits it gives replace the scenario's for its requests."""

    ttft_p50_s: float | None = Field(default=None, gt=0)
    """A tier's TTFT median must be at most this (seconds)."""
    ttft_p90_s: float | None = Field(default=None, gt=0)
    """A tier's TTFT p90 must be at most this (seconds)."""
    ttft_p99_s: float | None = Field(default=None, gt=0)
    """A tier's TTFT p99 must be at most this (seconds)."""
    e2e_p50_s: float | None = Field(default=None, gt=0)
    """A tier's end-to-end latency median must be at most this (seconds)."""
    e2e_p90_s: float | None = Field(default=None, gt=0)
    """A tier's end-to-end latency p90 must be at most this (seconds)."""
    e2e_p99_s: float | None = Field(default=None, gt=0)
    """A tier's end-to-end latency p99 must be at most this (seconds)."""
    success_rate: Number | None = Field(default=None, gt=0, le=1)
    """The share of a tier's requests that must succeed."""
    ttft_s: Number | None = Field(default=None, gt=0)
    """Per-request limit on TTFT (seconds): each request's `slo_met` is judged by the limits."""
    tpot_ms: Number | None = Field(default=None, gt=0)
    """Per-request limit on time per output token (milliseconds); a request of fewer than 2 output
    tokens has none."""
    e2e_s: float | None = Field(default=None, gt=0)
    """Per-request limit on end-to-end latency (seconds)."""
    percentile: Literal[50, 90, 95, 99] | None = None
    """A tier meets the per-request limits when this percentile of each limited metric is within its
    limit (with neither this nor `attainment`: the median)."""
    attainment: Number | None = Field(default=None, gt=0, le=1)
    """A tier meets the per-request limits when at least this share of its requests met every limit."""

    def given(self) -> dict[str, float]:
        return {name: value for name, value in self.model_dump().items() if value is not None}

    def over(self, base: Slo) -> Slo:
        """The SLO of this conversation's requests; ValueError when it judges by no limit (percentile
        or attainment with no per-request limit here or in `base`)."""
        return _merged_slo(self, base)


@functools.lru_cache(maxsize=256)
def _merged_slo(own: ConversationSlo, base: Slo) -> Slo:
    # cached: each request's record is judged by its conversation's SLO
    return Slo.model_validate({**base.model_dump(), **own.given()})


class Conversation(_Frozen):
    """What one simulated user sends in one iteration: a workload kind and its sizes (tokens)."""

    name: str = Field(min_length=1)
    """The conversation's name, as targets and mixes refer to it (a built-in one's name implies its kind)."""
    kind: str  # a name of WORKLOAD_KINDS (checked in _kind_and_defaults)
    """The workload kind (workload/kinds/); `turns` imply `fixed`."""
    description: str = ""
    """Free text, for the reader of the scenario."""
    system_tokens: Count | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    """The system prompt's size in tokens (multi-turn; agentic: the tools' JSON counted in it)."""
    user_turns: Count | None = Field(default=None, ge=1, le=100)
    """Requests in one multi-turn session, each user turn one request."""
    turn_tokens: Count | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    """Each user turn's size in tokens (multi-turn)."""
    shared_system: bool | None = None
    """Whether every session of the conversation shares one system prompt (multi-turn)."""
    prefix_tokens: Count | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    """The shared prefix's size (shared-prefix); the text before the cursor (autocomplete)."""
    question_tokens: Count | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    """Each question's size after the shared prefix (shared-prefix)."""
    prompt_tokens: Count | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    """The single prompt's size (short-baseline, unique-prompts)."""
    steps: tuple[Count, Count] | None = None
    """Model calls per agent session as [min, max], drawn per session (a number n is [n, n])."""
    tool_result_tokens: LogNormalTokens | None = None
    """Each agent step's tool results, in all: a number, or a log-normal's {median, p95}."""
    step_max_tokens: Count | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    """max_tokens of an agent's steps before the last."""
    final_max_tokens: Count | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    """max_tokens of an agent's final answer (and of a summary when the context is compacted)."""
    context_limit_tokens: Count | None = Field(default=None, ge=1, le=10 * _MAX_TOKENS_PER_MESSAGE)
    """The agent's context limit: a request with its answer that would pass it is preceded by a summary."""
    subagents: Count | None = Field(default=None, ge=1, le=_MAX_SUBAGENTS)
    """Sub-agents one drawn step of an agent session starts, played in parallel."""
    suffix_tokens: Count | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    """The file after the code the developer types (autocomplete)."""
    requests: Count | None = Field(default=None, ge=1, le=100_000)
    """FIM requests one autocomplete iteration sends, abandoned ones included."""
    typing_cps: Number | None = Field(default=None, gt=0)
    """The developer's typing speed, characters per second (autocomplete)."""
    debounce_ms: Number | None = Field(default=None, ge=0)
    """The pause after a keystroke before a request goes out (autocomplete)."""
    accept_rate: Number | None = Field(default=None, ge=0, le=1)
    """The share of shown completions the developer accepts (autocomplete)."""
    budget_ms: Number | None = Field(default=None, gt=0)
    """The time a completion must arrive within to count as shown in budget (autocomplete)."""
    max_tokens: Count | None = Field(default=None, ge=1, le=_MAX_TOKENS_PER_MESSAGE)
    """Each request's max_tokens (autocomplete; dataset rows without their own), over the model's."""
    # a relative path is from the scenario file's folder (config/_load.py), or from the current folder
    # for data without a file
    path: str | None = Field(default=None, min_length=1)
    """The file a dataset or a trace replays; relative to the scenario file's folder."""
    format: str | None = None
    """dataset: jsonl or sharegpt (from the extension when not given); trace: one of its formats."""
    sample: Literal["seed", "order"] | None = None
    """dataset: rows drawn by the seed, or in file order."""
    speedup: Number | None = Field(default=None, gt=0)
    """trace: how much faster than recorded it is sent."""
    start_s: Number | None = Field(default=None, ge=0)
    """trace: the window replayed starts here, in trace seconds."""
    duration_s: Number | None = Field(default=None, gt=0)
    """trace: the window's length, in trace seconds (None: to the end)."""
    max_requests: Count | None = Field(default=None, ge=1)
    """trace: at most this many rows of the window."""
    ignore_eos: bool | None = None
    """trace: generation run to each row's output length, over the model's setting."""
    seed: Count = 0
    """What draws the conversation's text and shapes (from its name when not given)."""
    salt: bool = True
    """fixed: a line of its own first in each iteration, so none shares a cached prefix by accident."""
    turns: list[Turn] = Field(default_factory=list)
    """fixed: the scripted messages (role and content); each user turn is one request."""
    slo: ConversationSlo | None = None
    """This conversation's own service level, over the scenario's `slo` (its bounds win)."""
    fim: FimTransport | None = None
    """How FIM requests go: over the model's tokens (template), `suffix`, or /infill."""
    fim_template: str | None = None
    """The model's FIM family, when its name does not tell it."""

    @field_validator("fim_template")
    @classmethod
    def _known_fim_family(cls, value: str | None) -> str | None:
        return _fim_family(value)

    @model_validator(mode="before")
    @classmethod
    def _kind_and_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        name = data.get("name")
        kinds = kind_names()
        if "kind" not in data:
            if data.get("turns"):
                data["kind"] = next(k for k in kinds if WORKLOAD_KINDS[k].scripted_turns)
            elif isinstance(name, str) and name in BUILTIN_CONVERSATION_KINDS:
                data["kind"] = BUILTIN_CONVERSATION_KINDS[name]
            else:
                raise ValueError(f"kind: required, one of {', '.join(kinds)} (or give turns)")
        kind = data["kind"]
        if not isinstance(kind, str) or kind not in WORKLOAD_KINDS:
            choices = ", ".join(repr(name) for name in kinds[:-1]) + f" or {kinds[-1]!r}"
            raise ValueError(f"kind: expected {choices}, got {shown_input(kind, ())}")
        defaults = WORKLOAD_KINDS[kind].sizes
        for key in size_fields():
            if data.get(key) is not None and key not in defaults:
                used = ", ".join(defaults) or "turns"
                raise ValueError(f"{key}: not used by kind {kind!r} (it uses: {used})")
            # a setting the model gives too stays unwritten here (_settings_defaults): what the file
            # wrote is what model_fields_set holds
            if data.get(key) is None and key in defaults and key not in MODEL_SETTINGS:
                data[key] = defaults[key]
        if WORKLOAD_KINDS[kind].scripted_turns:
            if not data.get("turns"):
                raise ValueError(f"turns: kind {kind!r} needs turns (a list of role/content)")
        elif data.get("turns"):
            scripted = next(k for k in kinds if WORKLOAD_KINDS[k].scripted_turns)
            raise ValueError(f"turns: only for kind {scripted!r}, not {kind!r}")
        if data.get("seed") is None:
            data["seed"] = zlib.crc32(str(name).encode("utf-8"))
        return data

    @field_validator("steps", mode="before")
    @classmethod
    def _step_range(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value, value]
        if (
            isinstance(value, (list, tuple))
            and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            low, high = value
            if low < 1:
                raise ValueError(f"steps: expected at least 1 step, got {low}")
            if low > high:
                raise ValueError(f"steps: the minimum {low} is above the maximum {high}")
        elif value is not None:
            raise ValueError(f"steps: expected a number of steps or [min, max], got {value!r}")
        return value

    @model_validator(mode="after")
    def _settings_defaults(self) -> Conversation:
        """The kind's defaults of the settings a model gives too, set without counting as written."""
        for key, default in self.workload_kind.sizes.items():
            if key in MODEL_SETTINGS and getattr(self, key) is None:
                object.__setattr__(self, key, default)
        return self

    def settled(self, model: Model) -> Conversation:
        """This conversation as `model` drives it: each setting both give (MODEL_SETTINGS) is the
        conversation's where it wrote it, else the model's where the model wrote it, else the kind's
        default. Settling again changes nothing (the values settled count as written)."""
        kind_sizes = self.workload_kind.sizes
        update = {
            key: getattr(model, model_key)
            for key, model_key in MODEL_SETTINGS.items()
            if key in kind_sizes and key not in self.model_fields_set and model_key in model.model_fields_set
        }
        return self.model_copy(update=update) if update else self

    def sending(self, model: Model) -> Model:
        """`model`'s sampling settings as this (settled) conversation's requests send them: its
        max_tokens and ignore_eos where its kind has them (an agent's steps set theirs per request)."""
        kind_sizes = self.workload_kind.sizes
        return model.with_settings(
            max_tokens=self.max_tokens if "max_tokens" in kind_sizes else None,
            ignore_eos=self.ignore_eos if "ignore_eos" in kind_sizes else None,
        )

    @model_validator(mode="after")
    def _kind_checks(self) -> Conversation:
        for key, value in self.workload_kind.check(self).items():
            object.__setattr__(self, key, value)
        return self

    @property
    def workload_kind(self) -> WorkloadKind:
        return WORKLOAD_KINDS[self.kind]

    @property
    def requests_per_iteration(self) -> float:
        """Requests one iteration (one whole conversation) sends; for an agentic session, the expected
        number (workload/agentic.py says how it is estimated)."""
        return self.workload_kind.requests_per_iteration(self)


class Persona(_Frozen):
    """One conversation of a team's mix and its weight: its share of a tier's developers."""

    conversation: Conversation
    """What this persona's developers send."""
    weight: Number = Field(gt=0)
    """Its share of the tier's developers, relative to the other personas' weights."""


class Target(_Frozen):
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
        from grill_locust.config._apportion import persona_index

        return self.personas[persona_index(self.weights, developer)].conversation

    def persona_counts(self, developers: int) -> dict[str, int]:
        """Developers of a tier of this size per persona, in the mix's order."""
        from grill_locust.config._apportion import persona_counts

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


class LlmGrillLoad(_Frozen):
    """llm-grill's `load` section; translated into `Load`."""

    concurrent_users: Count | list[Count] | None = None
    """Users of the one tier, or a list of tiers; as a number, the last level of `ramp_levels`' steps."""
    ramp_levels: Count | list[Count] | None = None
    """The tiers of users (`tiers`); a number n splits `concurrent_users` into n even steps."""
    iterations: Count | None = Field(default=None, ge=1)
    """Iterations per user and tier (llm-grill's default 1)."""
    ramp_up_seconds: Number | None = Field(default=None, ge=0)
    """Seconds to start the largest tier's users (a `spawn_rate` of its users over this time)."""
    think_time_seconds: Number | None = Field(default=None, ge=0)
    """Pause between a user's requests (llm-grill's default 0); `think_time_s`."""
    ramp_pause_seconds: Number | None = Field(default=None, ge=0)
    """Pause at 0 users between tiers (llm-grill's default 10); `pause_s`."""


LLM_GRILL_LOAD_KEYS = frozenset(LlmGrillLoad.model_fields) - {"iterations"}


SEARCH_BY = ("users", "rate")
DEFAULT_SEARCH_PRECISION = {"users": 1.0, "rate": 0.1}  # users: a step in users; rate: relative


class Search(_Frozen):
    """A capacity search: the largest load meeting the SLO, by bisection on probe tiers of `probe_s`
    each, inside the bracket `users: [lo, hi]` (concurrent users) or `rate: [lo, hi]` (requests/s).
    It stops when the bracket found is within `precision`: users apart (a whole number, default 1),
    or a relative width for rates (default 0.1: the smallest failing rate within 10 % of the largest
    passing one)."""

    users: list[Count] | None = None
    """The bracket `[lo, hi]` of concurrent users searched."""
    rate: list[Number] | None = None
    """The bracket `[lo, hi]` of open-loop rates searched (requests/s), bisected in log space."""
    probe_s: Number = Field(default=60.0, gt=0)
    """Each probe tier's length (seconds)."""
    precision: Number | None = Field(default=None, gt=0)
    """Where the search stops: users apart (whole, default 1), or a rate bracket's relative width
    (default 0.1)."""

    @model_validator(mode="after")
    def _one_bracket(self) -> Search:
        given = [name for name in SEARCH_BY if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                "expected one of users: [lo, hi] or rate: [lo, hi]"
                + (f", got both {' and '.join(given)}" if given else "")
            )
        low, high = self.bracket
        name = self.by
        if len(getattr(self, name)) != 2:
            raise ValueError(f"{name}: expected a bracket [lo, hi] of two numbers")
        if low <= 0:
            raise ValueError(f"{name}: the bracket's low end must be above 0, got {low:g}")
        if name == "rate" and low * self.probe_s < 1:
            raise ValueError(
                f"rate: the bracket's low end {low:g} per second sends no request in probe_s "
                f"({self.probe_s:g} s): give at least {1 / self.probe_s:.3g} (one send per probe)"
            )
        if high <= low:
            raise ValueError(f"{name}: bracket upside down or empty: [{low:g}, {high:g}] needs lo < hi")
        if name == "users" and self.precision is not None and self.precision != int(self.precision):
            raise ValueError(f"precision: a users search steps by whole users, got {self.precision:g}")
        return self

    @property
    def by(self) -> str:
        """ "users" or "rate": what the search varies."""
        return "users" if self.users is not None else "rate"

    @property
    def bracket(self) -> tuple[float, float]:
        values = self.users if self.users is not None else self.rate
        assert values is not None
        return float(values[0]), float(values[-1])

    @property
    def stop_precision(self) -> float:
        return self.precision if self.precision is not None else DEFAULT_SEARCH_PRECISION[self.by]


# the keys of a load a search takes the place of (`rates`: open-loop tiers)
TIER_KEYS_BESIDE_SEARCH = ("tiers", "rates", *sorted(LLM_GRILL_LOAD_KEYS))


class Load(_Frozen):
    """The campaign shape: tiers of concurrent users (or open-loop rates), iterations per user and tier,
    pauses; or a capacity search (`search`) in place of the tiers."""

    tiers: list[Count] = Field(default_factory=lambda: list(DEFAULT_TIERS), min_length=1)
    """Concurrent users of each tier, in order."""
    iterations: Count = Field(default=5, ge=1)
    """Conversations each user plays per tier: a tier ends when users x iterations have arrived."""
    pause_s: Number = Field(default=30.0, ge=0)
    """Pause at 0 users between tiers, for the engine to drain (none after the last)."""
    think_time_s: Number = Field(default=0.5, ge=0)
    """A user's pause between two requests."""
    spawn_rate: Number | None = Field(default=None, gt=0)
    """Users started per second in every tier (not given: a tier's users start at once)."""
    ramp_s: Number | None = Field(default=None, gt=0)
    """Each tier's users start evenly over this many seconds (a spawn rate of users / ramp_s, so every
    tier takes as long to fill); give it or `spawn_rate`."""
    warmup_s: Number | None = Field(default=None, gt=0)
    """Requests started within this many seconds of their tier's start are warmup: recorded, counted
    toward the tier's iterations, left out of its statistics."""
    warmup_requests: Count | None = Field(default=None, ge=1)
    """A tier's first N requests by send time, over all its users and workers, are warmup (picked from
    the records by the report)."""
    warmup_requests_per_user: Count | None = Field(default=None, ge=1)
    """Each developer's first N requests of a tier are warmup."""
    tier_timeout_s: Number = Field(default=1800.0, gt=0)
    """A tier still running after this long is cut and marked incomplete."""
    engine_wait_s: Number = Field(default=120.0, ge=0)
    """After a tier that measured an engine outage: how long to hold at 0 users for the backend to
    answer again before the tier runs once more (past it the campaign stops, exit 3); 0: no hold, no
    re-run."""
    rates: list[Number] | None = Field(default=None, min_length=1)
    """Open-loop tiers in place of `tiers`: each a rate (requests/s; sessions/s for kinds whose
    iteration is a session), its sends drawn from `arrival` for `duration_s`."""
    arrival: Literal["poisson", "constant", "gamma"] = "poisson"
    """A rate tier's arrival process: exponential gaps, 1/rate, or gamma gaps of shape `burstiness`."""
    burstiness: Number = Field(default=1.0, gt=0)
    """Gamma's shape: 1 is Poisson, below 1 burstier (vllm bench's `--burstiness`)."""
    duration_s: Number = Field(default=60.0, gt=0)
    """How long each rate tier sends (seconds); the requests still running then finish as cooldown."""
    max_in_flight: Count = Field(default=DEFAULT_MAX_IN_FLIGHT, ge=1)
    """A rate tier's cap on sends playing at once, across its workers: a send past it waits, late."""
    search: Search | None = None
    """A capacity search in place of `tiers` or `rates`: the largest load meeting the SLO."""
    other_keys: ClassVar[tuple[str, ...]] = tuple(sorted(LLM_GRILL_LOAD_KEYS))  # translated before validation

    @model_validator(mode="before")
    @classmethod
    def _search_or_tiers(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("search") is not None:
            beside = [key for key in TIER_KEYS_BESIDE_SEARCH if key in data]
            if beside:
                raise ValueError(f"search: a capacity search picks its own tiers; remove {beside[0]}")
        return data

    @field_validator("tiers")
    @classmethod
    def _positive_tiers(cls, value: list[int]) -> list[int]:
        for index, users in enumerate(value):
            if users < 1:
                raise ValueError(f"tiers[{index}]: expected a positive number of users, got {users}")
        return value

    @model_validator(mode="after")
    def _one_spawn_setting(self) -> Load:
        if self.spawn_rate is not None and self.ramp_s is not None:
            raise ValueError("ramp_s: give spawn_rate or ramp_s, not both")
        if self.rates is not None and self.ramp_s is not None:
            raise ValueError(
                "ramp_s: a rate tier has no ramp (its sends follow the arrival process): remove it"
            )
        return self

    @model_validator(mode="after")
    def _rates_send_within_their_tier(self) -> Load:
        # a rate whose mean gap outlasts the tier sends nothing, and 1/rate may not even be a number
        for index, rate in enumerate(self.rates or ()):
            if rate * self.duration_s < 1:
                raise ValueError(
                    f"rates[{index}]: {rate:g} per second sends no request in duration_s "
                    f"({self.duration_s:g} s): give at least {1 / self.duration_s:.3g} (one send per tier)"
                )
        return self

    @model_validator(mode="after")
    def _warmup_within_the_tier(self) -> Load:
        """A warmup as long as a tier leaves nothing of it measured. Only rate tiers and search probes have
        a length to compare; a tier of users lasts as long as its iterations take."""
        if self.warmup_s is None:
            return self
        if self.search is not None:
            length, name = self.search.probe_s, "search.probe_s"
        elif self.rates is not None:
            length, name = self.duration_s, "duration_s"
        else:
            return self
        if self.warmup_s >= length:
            raise ValueError(
                f"warmup_s: {self.warmup_s:g} s is not shorter than {name} ({length:g} s): every request "
                "of a tier would be warmup"
            )
        return self

    def spawn_rate_for(self, tier_users: int) -> float | None:
        """Users started per second in a tier of `tier_users`; None: all at once."""
        if self.ramp_s is not None:
            return tier_users / self.ramp_s
        return self.spawn_rate

    def warmup(self, since_tier_start_s: float, request_ordinal: int) -> bool | None:
        """Whether a request is warmup by what its worker knows: started `since_tier_start_s` after its
        tier's start, the developer's `request_ordinal`-th (0-based) of the tier; None when no warmup is
        configured. The tier's first `warmup_requests` are the report's to pick: no worker sees them all."""
        per_user = self.warmup_requests_per_user
        if self.warmup_s is None and self.warmup_requests is None and per_user is None:
            return None
        in_time = self.warmup_s is not None and since_tier_start_s < self.warmup_s
        return in_time or (per_user is not None and request_ordinal < per_user)

    @field_validator("rates")
    @classmethod
    def _positive_rates(cls, value: list[float] | None) -> list[float] | None:
        for index, rate in enumerate(value or ()):
            if rate <= 0:
                raise ValueError(f"rates[{index}]: expected a positive rate per second, got {rate}")
        return value

    @property
    def open_loop(self) -> bool:
        return self.rates is not None


class InfluxSettings(_Frozen):
    url: str
    """InfluxDB's URL (`--influx-url`, INFLUX_URL)."""
    org: str = ""
    """The InfluxDB organisation."""
    bucket: str
    """The bucket written to."""
    token: SecretStr | None = None
    """The API token; prefer INFLUX_TOKEN or `${VAR}` to writing it here."""

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        return _check_http_url(value, strip_v1=False)

    @field_validator("token", mode="before")
    @classmethod
    def _empty_token_is_none(cls, value: Any) -> Any:
        return None if value == "" else value


class Sinks(_Frozen):
    """Where records and telemetry go besides the results folder."""

    influx: InfluxSettings | None = None
    """Write records, tier summaries and telemetry to InfluxDB as the run goes."""


class SecretReference(_Frozen):
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


class Scenario(_Frozen):
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
        return redact_secret_keys(walk_secrets(data, lambda secret: REDACTED), REDACTED)

    def literal_secrets(self) -> list[SecretReference]:
        """The secrets written literally in the file (no `${VAR}`): workers cannot receive them."""
        return [reference for reference in self.secret_references if reference.text is None]

    def to_wire(self) -> dict[str, Any]:
        """Plain data for the master -> worker message, which any process reaching the master's port
        receives: no secret value in it. Each secret travels as the `${VAR}` text of its file, expanded
        by every worker from its own environment (`from_wire`); one written literally, as nothing."""
        data = reveal(self.model_dump())
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


class FileMixEntry(_Frozen):
    """One persona of a target's mix, as the file writes it."""

    conversation: str
    """A conversation's name."""
    weight: Any
    """Its share of each tier's developers (a positive number, relative to the other entries'; checked
    where the target is resolved, config/_load.py, with the entry's place)."""


class FileTarget(_Frozen):
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


class FileScenario(_Frozen):
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


def _fim_family(value: str | None) -> str | None:
    if value is not None and value not in FIM_TEMPLATES:
        raise ValueError(f"fim_template: unknown family {value!r} (one of {', '.join(FIM_FAMILIES)})")
    return value


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
