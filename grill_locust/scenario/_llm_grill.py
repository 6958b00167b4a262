"""llm-grill files: how to recognise one, its defaults where they differ from ours, its load section."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from grill_locust.config._errors import ConfigError, LineMap, YamlPath, at, describe_validation_error
from grill_locust.config._schema import DEFAULT_TIERS, LLM_GRILL_LOAD_KEYS, LlmGrillLoad, Load

_LLM_GRILL_ENGINE_KEYS = ("type", "backend")
# llm-grill monitored GPUs over SSH; grill-locust reads them from gpu_exporters: these keys are dropped
_LLM_GRILL_SSH_KEYS = ("gpu_monitoring", "ssh_host", "ssh_user")
_LLM_GRILL_BACKEND_ONLY = (*_LLM_GRILL_SSH_KEYS, "timeout")


def backends_key(data: dict[str, Any]) -> str:
    """The key a file lists its backends under: llm-grill's `servers` or our `backends`."""
    return "servers" if "servers" in data and "backends" not in data else "backends"


def is_llm_grill_file(data: dict[str, Any]) -> bool:
    """A file written for llm-grill: one of the keys only llm-grill uses, or conversations of turns alone."""
    if "servers" in data or "run_id" in data:
        return True
    load = data.get("load")
    if isinstance(load, dict) and LLM_GRILL_LOAD_KEYS & set(load):
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


def with_llm_grill_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """What llm-grill did with what such a file leaves out: engine `openai`, 512 max_tokens, one user,
    one iteration, no think time, 10 s between ramp levels; `api_key: none` is no key; its run_id and
    SSH keys are not ours."""
    data = {key: value for key, value in data.items() if key != "run_id"}
    key = backends_key(data)
    if isinstance(data.get(key), list):
        backends = []
        for backend in data[key]:
            if isinstance(backend, dict):
                backend = {k: v for k, v in backend.items() if k not in _LLM_GRILL_SSH_KEYS}
                if _means_no_key(backend.get("api_key")):
                    del backend["api_key"]
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


def _means_no_key(api_key: Any) -> bool:
    """llm-grill sends no Authorization header for `api_key: none` (its default); `None` and `NONE`
    are read alike, as no one means a bearer token of that name."""
    return isinstance(api_key, str) and api_key.strip().lower() == "none"


def parse_load(raw: dict[str, Any], source: str, lines: LineMap) -> Load:
    """The `load` section, native keys or llm-grill's (not both for one setting), as a `Load`."""
    native = {key: value for key, value in raw.items() if key not in LLM_GRILL_LOAD_KEYS}
    grill_keys = {key: value for key, value in raw.items() if key in LLM_GRILL_LOAD_KEYS}
    path: YamlPath = ("load",)
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
                raise ConfigError(at(source, (*path, grill_key), lines, message))
        try:
            grill = LlmGrillLoad.model_validate(grill_keys)
        except ValidationError as error:
            raise ConfigError(f"{source}: {describe_validation_error(error, path, lines, None)}") from None
        native.update(translate_llm_grill_load(grill, source, lines))
    try:
        return Load.model_validate(native)
    except ValidationError as error:
        raise ConfigError(f"{source}: {describe_validation_error(error, path, lines, Load)}") from None


def translate_llm_grill_load(grill: LlmGrillLoad, source: str, lines: LineMap) -> dict[str, Any]:
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
                    at(source, where, lines, f"expected a positive number of users, got {count}")
                )
    if isinstance(levels, list):
        out["tiers"] = levels
    elif isinstance(levels, int):
        if not isinstance(users, int):
            message = "a number of ramp levels needs concurrent_users (the last level) as a number"
            raise ConfigError(at(source, ("load", "ramp_levels"), lines, message))
        if levels < 1:
            raise ConfigError(
                at(source, ("load", "ramp_levels"), lines, f"expected at least 1 level, got {levels}")
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
