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

Modules, lowest first: `_secrets` (which values are secret), `_errors` (one-line messages),
`_yaml_lines` (YAML with line numbers), `_env` (`${ENV}`), `_schema` (the models), `_llm_grill`
(llm-grill's spellings and defaults), `_load` (the entry points).
"""

from grill_locust.config._env import expand_env_string
from grill_locust.config._errors import ConfigError
from grill_locust.config._load import load_scenario, parse_scenario, parse_tiers
from grill_locust.config._schema import (
    BUILTIN_CONVERSATION_KINDS,
    DEFAULT_TIERS,
    KIND_MIX,
    SLO_LATENCY_BOUNDS,
    Backend,
    Conversation,
    ConversationSlo,
    Model,
    Persona,
    Scenario,
    Search,
    Slo,
    Target,
    iter_secrets,
)

__all__ = [
    "BUILTIN_CONVERSATION_KINDS",
    "DEFAULT_TIERS",
    "KIND_MIX",
    "SLO_LATENCY_BOUNDS",
    "Backend",
    "ConfigError",
    "Conversation",
    "ConversationSlo",
    "Model",
    "Persona",
    "Scenario",
    "Search",
    "Slo",
    "Target",
    "expand_env_string",
    "iter_secrets",
    "load_scenario",
    "parse_scenario",
    "parse_tiers",
]
