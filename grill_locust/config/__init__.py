"""What every workload kind shares in a scenario file: its backends, models, load, SLO and sinks, the
field types the kinds' models use, `${ENV}` expansion, YAML with line numbers and one-line errors.

The scenario file itself (its top-level model, the union of the kinds' models, its loader and the
llm-grill translation) is `grill_locust.scenario`'s, above the workload kinds. Every user error is a
`ConfigError`: one line naming the file, the YAML path and what was expected, e.g.
`x.yaml: targets[2].backend: unknown backend 'vlm' (known: vllm)`.

Modules, lowest first: `_secrets` (which values are secret), `_errors` (one-line messages),
`_yaml_lines` (YAML with line numbers), `_env` (`${ENV}`), `_apportion` (a mix's developers per
persona), `_schema` (the models).
"""

from grill_locust.config._env import expand_env_string
from grill_locust.config._errors import ConfigError
from grill_locust.config._schema import (
    DEFAULT_TIERS,
    KIND_MIX,
    MAX_TOKENS_PER_MESSAGE,
    SLO_LATENCY_BOUNDS,
    Backend,
    ConversationSlo,
    Count,
    FimTransport,
    Frozen,
    Load,
    Model,
    Number,
    Search,
    Sinks,
    Slo,
    check_fim_family,
)

__all__ = [
    "DEFAULT_TIERS",
    "KIND_MIX",
    "MAX_TOKENS_PER_MESSAGE",
    "SLO_LATENCY_BOUNDS",
    "Backend",
    "ConfigError",
    "ConversationSlo",
    "Count",
    "FimTransport",
    "Frozen",
    "Load",
    "Model",
    "Number",
    "Search",
    "Sinks",
    "Slo",
    "check_fim_family",
    "expand_env_string",
]
