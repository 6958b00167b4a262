"""What every workload kind shares in a scenario file: frozen pydantic models of its backends, models,
load, SLO and sinks (native and llm-grill spellings), and the field types the kinds' own models use."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping
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

from grill_locust.config._errors import ConfigError, describe_validation_error
from grill_locust.config._secrets import reveal
from grill_locust.engines import engine_facts, engine_name
from grill_locust.errors import GrillError
from grill_locust.fim_templates import FIM_FAMILIES, FIM_TEMPLATES
from grill_locust.record import STATUS_ABANDONED, STATUS_OK
from grill_locust.sim.params import PROFILES as SIM_PROFILES
from grill_locust.sim.params import EngineParams

FimTransport = Literal["template", "suffix", "infill"]  # FIM_TRANSPORTS, as a type
DEFAULT_TIERS = (1, 5, 10, 20, 50, 100, 150, 200)
DEFAULT_MAX_IN_FLIGHT = 1024  # an open-loop tier's cap on requests in flight, across its workers
MAX_TOKENS_PER_MESSAGE = 1_000_000


class Frozen(BaseModel):
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


class Timeouts(Frozen):
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


class Backend(Frozen):
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
        return check_http_url(value, strip_v1=True)

    @field_validator("metrics_url", "tokenize_url")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        return None if value is None else check_http_url(value, strip_v1=False)

    @field_validator("gpu_exporters")
    @classmethod
    def _exporter_urls(cls, value: list[str]) -> list[str]:
        return [check_http_url(url, strip_v1=False) for url in value]

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


class Model(Frozen):
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
    def _knowncheck_fim_family(cls, value: str | None) -> str | None:
        return check_fim_family(value)

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


class Slo(Frozen):
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


class ConversationSlo(Frozen):
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


KIND_MIX = "mix"  # the kind of a mix target's phases and whole-tier rows (no workload kind has this name)


class LlmGrillLoad(Frozen):
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


class Search(Frozen):
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


class Load(Frozen):
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


class InfluxSettings(Frozen):
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
        return check_http_url(value, strip_v1=False)

    @field_validator("token", mode="before")
    @classmethod
    def _empty_token_is_none(cls, value: Any) -> Any:
        return None if value == "" else value


class Sinks(Frozen):
    """Where records and telemetry go besides the results folder."""

    influx: InfluxSettings | None = None
    """Write records, tier summaries and telemetry to InfluxDB as the run goes."""


def check_fim_family(value: str | None) -> str | None:
    if value is not None and value not in FIM_TEMPLATES:
        raise ValueError(f"fim_template: unknown family {value!r} (one of {', '.join(FIM_FAMILIES)})")
    return value


def check_http_url(value: str, strip_v1: bool) -> str:
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
