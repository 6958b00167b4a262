"""Which configured values are secrets: one rule for the scenario's redaction (files, logs, the
master's messages) and the client's scrubbing of what engines send back (errors in records).

A value is a secret when its key names one: headers such as `Authorization` or `X-Api-Key`, and any
key in `extra_body`, `sim_args` or `headers` containing one of `SECRET_KEY_WORDS`, at any depth.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

SECRET_KEY_WORDS = ("auth", "key", "token", "secret", "password", "cookie")


def is_secret_key(key: object) -> bool:
    return isinstance(key, str) and any(word in key.lower() for word in SECRET_KEY_WORDS)


def secret_key_values(value: object) -> Iterator[str]:
    """Every non-empty string under a secret-named key, anywhere in nested dicts and lists."""
    return (item for _, item in secret_key_paths(value))


def secret_key_paths(
    value: object, prefix: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(path from `value`, string) of every non-empty string under a secret-named key."""
    if isinstance(value, dict):
        for key, item in value.items():
            if is_secret_key(key) and isinstance(item, str) and item:
                yield (*prefix, key), item
            else:
                yield from secret_key_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from secret_key_paths(item, (*prefix, index))


def redact_secret_keys(value: object, shown_as: str) -> Any:
    """`value` with every string under a secret-named key replaced by `shown_as`."""
    if isinstance(value, dict):
        return {
            key: shown_as
            if is_secret_key(key) and isinstance(item, str) and item
            else redact_secret_keys(item, shown_as)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact_secret_keys(item, shown_as) for item in value]
    return value
