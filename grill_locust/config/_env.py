"""`${ENV}` expansion in every string of a scenario file."""

from __future__ import annotations

import os
import re
from typing import Any

from grill_locust.config._errors import ConfigError, LineMap, YamlPath, at

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


def env_reference_names(value: str) -> list[str]:
    """The variables `value` refers to (`${NAME}`, `${NAME:-default}`; `$${` is none)."""
    return [match.group(1) for match in _ENV_REFERENCE.finditer(value) if match.group(1)]


def expand_env(value: Any, path: YamlPath, source: str, lines: LineMap) -> Any:
    """`value` with every string expanded (`expand_env_string`); ConfigError naming the YAML path."""
    if isinstance(value, str):
        if "$" not in value:
            return value
        try:
            return expand_env_string(value)
        except KeyError as error:
            name = error.args[0]
            message = f"environment variable {name} is not set (set it, or write ${{{name}:-default}})"
            raise ConfigError(at(source, path, lines, message)) from None
        except ValueError as error:
            raise ConfigError(at(source, path, lines, str(error))) from None
    if isinstance(value, dict):
        return {key: expand_env(item, (*path, str(key)), source, lines) for key, item in value.items()}
    if isinstance(value, list):
        return [expand_env(item, (*path, index), source, lines) for index, item in enumerate(value)]
    return value
