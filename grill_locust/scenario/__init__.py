"""The scenario file: its top-level model, the union of the workload kinds' models, its loader and the
llm-grill translation.

`load_scenario(path)` reads a YAML file and returns a frozen `Scenario` whose targets hold resolved
objects (backend, model, conversation). Every user error is a `ConfigError`: one line naming the file,
the YAML path and what was expected, e.g. `x.yaml: targets[2].backend: unknown backend 'vlm' (known: vllm)`.

llm-grill files load unchanged: `servers` for `backends`, a server's `type`/`backend` for `engine` and
`timeout` for `timeouts.total_s`, `conversations` with `turns`, targets with `server`, and a `load`
section with `concurrent_users`, `ramp_levels`, `iterations`, `ramp_up_seconds`,
`think_time_seconds`, `ramp_pause_seconds`. Where such a file leaves a value out, llm-grill's default
applies (engine `openai`, 512 max_tokens, 1 user, 1 iteration, no think time, 10 s between levels), and
its SSH GPU-monitoring keys and `run_id` are accepted and left aside.

Modules, lowest first: `_schema` (the models), `_llm_grill` (llm-grill's spellings and defaults),
`_load` (the entry points).
"""

from grill_locust.scenario._load import load_scenario, parse_scenario, parse_tiers
from grill_locust.scenario._schema import (
    Conversation,
    Persona,
    Scenario,
    SecretReference,
    Target,
    iter_secrets,
    validate_conversation,
)

__all__ = [
    "Conversation",
    "Persona",
    "Scenario",
    "SecretReference",
    "Target",
    "iter_secrets",
    "load_scenario",
    "parse_scenario",
    "parse_tiers",
    "validate_conversation",
]
