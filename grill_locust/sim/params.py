"""Engine parameters of the simulated engine and the named profiles that set them.

A profile reproduces an engine's *shape* (batching, prefix reuse, queueing), not its absolute speed.
Every field can be overridden from a YAML file or a command-line flag of the same name.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grill_locust.errors import GrillError

CACHE_BLOCKS = "blocks"  # paged KV cache, prefix reuse by chained block hashes (vLLM, SGLang)
CACHE_SLOTS = "slots"  # a few slots, each keeping only its own last prompt (llama.cpp)
# the largest number any engine parameter takes (tokens, blocks, milliseconds): past it a size only
# exhausts memory or a step never ends
MAX_PARAM_VALUE = 10_000_000


@dataclass(frozen=True, slots=True)
class EngineParams:
    """Everything that decides how the simulated engine schedules and how long a step takes."""

    max_num_seqs: int = 256  # running requests at most (llama.cpp: the number of slots)
    max_num_batched_tokens: int = 4096  # tokens per step (prefill chunks + one per decode)
    max_model_len: int = 131072  # longest prompt + output accepted (Qwen2.5-Coder-32B: 128k)
    block_size: int = 16  # KV block (page) size in tokens; 1 = token-granular radix reuse
    # Qwen2.5-Coder-32B on one 80 GB GPU: 64 layers x 8 KV heads x 128 dims x 2 (K, V) x 2 bytes = 256 KiB
    # a token; 0.9 x 79.6 GiB less 34 GB of FP8 weights and ~3 GiB of activations leaves 37 GiB = 151,552
    kv_blocks: int = 9472  # KV capacity in blocks: 151,552 tokens, one 128k session and a little more
    prefix_caching: bool = True
    # vLLM V1: prompts are prefilled in chunks that share a step with decodes. Off (vLLM V0's default
    # scheduler): a step either prefills whole prompts, waiting ones first, or decodes; the first prompt
    # goes whole even past max_num_batched_tokens (V0 required that budget to hold max_model_len)
    chunked_prefill: bool = True
    # vLLM's --long-prefill-token-threshold: the most prompt tokens one request prefills in a step
    # (0 = the whole budget, vLLM's default), which leaves room for newcomers beside a long prefill
    long_prefill_token_threshold: int = 0
    # A closed stream is noticed at once (as vLLM), or only when a token written to it fails
    # (`abort_on_write`, as llama-server: a request still waiting or prefilling is prefilled whole),
    # or at a poll of the connection every abort_poll_ms (0 = none) from the request's arrival; the
    # engine drops the request at its first step abort_delay_ms after noticing (0 = the next step).
    # Until then it keeps its KV and keeps generating: wasted tokens
    abort_on_write: bool = False
    abort_poll_ms: float = 0.0
    abort_delay_ms: float = 0.0
    cache_kind: str = CACHE_BLOCKS
    # step time = a + b * decode_batch + c * prefill_tokens + d * kv_tokens
    step_a_ms: float = 12.0
    step_b_ms: float = 0.03
    step_c_ms: float = 0.015
    step_d_ms: float = 0.00005
    reasoning_tokens: int = 0  # the first R output tokens stream as `reasoning_content`
    natural_output_tokens: int = 600  # mean length at which an answer stops by itself (no ignore_eos)
    fim_tokens: bool = True  # the model has FIM tokens: llama.cpp's /infill refuses a model without them
    metrics_flavor: str = (
        "vllm"  # "sglang": its /metrics names too; "llamacpp": llama-server's answers and names
    )

    def step_time_s(self, decode_batch: int, prefill_tokens: int, kv_tokens: int) -> float:
        step_ms = (
            self.step_a_ms
            + self.step_b_ms * decode_batch
            + self.step_c_ms * prefill_tokens
            + self.step_d_ms * kv_tokens
        )
        return step_ms / 1000.0

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv_blocks * self.block_size

    @property
    def slot_tokens(self) -> int:
        """The context of one llama.cpp slot: the KV capacity split evenly (its `-c` over `-np`)."""
        return self.kv_capacity_tokens // self.max_num_seqs

    @property
    def context_limit(self) -> int:
        """The most tokens (prompt + output) one request may ask for: a slot's context bounds it too."""
        if self.cache_kind == CACHE_SLOTS:
            return min(self.max_model_len, self.slot_tokens)
        return self.max_model_len

    def with_overrides(self, overrides: dict[str, object], source: str) -> EngineParams:
        """A copy with `overrides` applied (keys may use dashes); bad keys or values raise GrillError."""
        known = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for raw_key, value in overrides.items():
            key = str(raw_key).replace("-", "_")
            if key not in known:
                raise GrillError(f"{source}: {raw_key}: unknown engine parameter (one of {', '.join(known)})")
            changes[key] = _coerce(key, getattr(self, key), value, source)
        params = dataclasses.replace(self, **changes)
        params.validate(source)
        return params

    def validate(self, source: str) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size", "kv_blocks"):
            if getattr(self, name) < 1:
                raise GrillError(f"{source}: {name}: must be at least 1")
        for name in ("long_prefill_token_threshold", "abort_poll_ms", "abort_delay_ms"):
            if getattr(self, name) < 0:
                raise GrillError(f"{source}: {name}: must be at least 0")
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, (bool, str)) and value > MAX_PARAM_VALUE:
                raise GrillError(
                    f"{source}: {field.name}: {value:g} is past the largest value ({MAX_PARAM_VALUE:,})"
                )
        if self.cache_kind not in (CACHE_BLOCKS, CACHE_SLOTS):
            raise GrillError(f"{source}: cache_kind: expected '{CACHE_BLOCKS}' or '{CACHE_SLOTS}'")
        if self.kv_capacity_tokens < self.max_model_len and self.cache_kind == CACHE_BLOCKS:
            raise GrillError(f"{source}: kv_blocks: {self.kv_blocks} blocks cannot hold max_model_len tokens")


def _coerce(key: str, current: object, value: Any, source: str) -> bool | int | float | str:
    try:
        if isinstance(current, bool):
            if isinstance(value, str):
                lowered = value.lower()
                if lowered in ("on", "true", "yes", "1"):
                    return True
                if lowered in ("off", "false", "no", "0"):
                    return False
                raise ValueError(value)
            return bool(value)
        if isinstance(value, bool):  # YAML's true is 1 to Python: never a number here
            raise ValueError(value)
        if isinstance(current, int):
            return int(value)
        if isinstance(current, float):
            number = float(value)
            if not math.isfinite(number):  # NaN passes every bound's comparison
                raise ValueError(value)
            return number
        return str(value)
    except (TypeError, ValueError, OverflowError):
        raise GrillError(
            f"{source}: {key}: cannot use {str(value).lower() if isinstance(value, bool) else repr(value)} "
            f"(expected {type(current).__name__})"
        ) from None


_VLLM = EngineParams()
PROFILES: dict[str, EngineParams] = {
    "vllm": _VLLM,
    "vllm-no-prefix-cache": dataclasses.replace(_VLLM, prefix_caching=False),
    "vllm-no-chunked-prefill": dataclasses.replace(_VLLM, chunked_prefill=False),
    # SGLang: radix tree at token granularity (page size 1), the same memory; a little slower per step here
    "sglang": dataclasses.replace(
        _VLLM,
        block_size=1,
        kv_blocks=_VLLM.kv_capacity_tokens,
        step_a_ms=13.0,
        step_b_ms=0.04,
        step_c_ms=0.02,
        metrics_flavor="sglang",
    ),
    # llama.cpp: 4 slots, no paging, each slot keeps its own last prompt; slow prefill and decode.
    # `-c 131072 -np 4` on the same GPU (its f16 KV holds ~150k tokens): a slot holds 32k, not a 128k session
    "llamacpp": dataclasses.replace(
        _VLLM,
        max_num_seqs=4,
        max_num_batched_tokens=2048,
        kv_blocks=131072 // _VLLM.block_size,
        cache_kind=CACHE_SLOTS,
        step_a_ms=25.0,
        step_b_ms=1.0,
        step_c_ms=0.25,
        step_d_ms=0.0001,
        # llama-server (b11434, measured in tests/real/test_llama_autocomplete.py) notices a closed
        # stream only when a token write fails: waiting and prefilling requests are prefilled whole
        abort_on_write=True,
        metrics_flavor="llamacpp",
    ),
}


def resolve_params(
    profile: str, config_path: str | None = None, overrides: dict[str, object] | None = None
) -> EngineParams:
    """Profile, then the YAML file's values, then explicit overrides (flags), in that order."""
    if profile not in PROFILES:
        raise GrillError(f"--profile: unknown profile {profile!r} (one of {', '.join(PROFILES)})")
    params = PROFILES[profile]
    if config_path:
        import yaml  # only needed for --config; keeps the server importable with the stdlib alone

        path = Path(config_path)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as error:
            raise GrillError(
                f"{config_path}: cannot read engine parameters: {error}".splitlines()[0]
            ) from None
        if not isinstance(data, dict):
            raise GrillError(f"{config_path}: expected a mapping of engine parameters")
        params = params.with_overrides(data, config_path)
    if overrides:
        params = params.with_overrides(overrides, "flags")
    return params
