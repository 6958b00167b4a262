"""Which scenario values are secrets, where they stand, and how they are hidden (files, logs) or
revealed (inside one process)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import SecretStr

from grill_locust.redact import secret_key_paths

SECRET_KEYS = frozenset({"api_key", "token"})
REDACTED = "***"
# a backend's dicts whose secret-named keys (grill_locust.redact) hold secrets
BACKEND_SECRET_HOLDERS = ("headers", "extra_body", "sim_args")


def walk_secrets(value: Any, replace: Any) -> Any:
    if isinstance(value, SecretStr):
        return replace(value)
    if isinstance(value, dict):
        return {key: walk_secrets(item, replace) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [walk_secrets(item, replace) for item in value]
    return value


def reveal(value: Any) -> Any:
    return walk_secrets(value, lambda secret: secret.get_secret_value())


def secret_paths(data: Any, backends_key: str = "backends") -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(path, value) of every secret string in plain scenario data, as a file gives it or as a Scenario
    dumps (revealed): each backend's api_key and the secret-named keys under its headers, extra_body and
    sim_args; sinks.influx.token. Targets' copies of their backend are not listed."""
    if not isinstance(data, dict):
        return
    backends = data.get(backends_key)
    for index, backend in enumerate(backends if isinstance(backends, list) else []):
        if not isinstance(backend, dict):
            continue
        api_key = backend.get("api_key")
        if isinstance(api_key, str) and api_key:
            yield (backends_key, index, "api_key"), api_key
        for holder in BACKEND_SECRET_HOLDERS:
            yield from secret_key_paths(backend.get(holder), (backends_key, index, holder))
    sinks = data.get("sinks")
    influx = sinks.get("influx") if isinstance(sinks, dict) else None
    token = influx.get("token") if isinstance(influx, dict) else None
    if isinstance(token, str) and token:
        yield ("sinks", "influx", "token"), token
