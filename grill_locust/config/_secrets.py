"""Which scenario values are secrets, and how they are hidden (files, logs) or revealed (the wire)."""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

SECRET_KEYS = frozenset({"api_key", "token"})
REDACTED = "***"


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
