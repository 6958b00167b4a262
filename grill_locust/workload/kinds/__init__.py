"""The workload kinds, listed once. Each kind is a module of this package behind one Protocol
(`WorkloadKind`, _kind.py); the scenario schema validates conversations against the registry, and the
load, the estimate, the user and the report ask a conversation's kind instead of naming it.

A kind from elsewhere (a plugin, a test) joins with `register(kind)` before its scenario is loaded."""

from __future__ import annotations

from grill_locust.workload.kinds._kind import (
    REQUESTS_PER_S,
    SESSIONS_PER_S,
    ChatKind,
    Iteration,
    PlannedSend,
    Sender,
    SizeDefault,
    WorkloadKind,
)
from grill_locust.workload.kinds.agentic import AGENTIC
from grill_locust.workload.kinds.autocomplete import AUTOCOMPLETE
from grill_locust.workload.kinds.dataset import DATASET
from grill_locust.workload.kinds.study import FIXED, MULTI_TURN, SHARED_PREFIX, SHORT_BASELINE, UNIQUE_PROMPTS
from grill_locust.workload.kinds.trace import TRACE

# the names records carry for agent sessions (each record a step, `turn` its number) and for a typing
# developer's FIM requests (`turn` the request's index in the iteration)
KIND_AGENTIC = AGENTIC.name
KIND_AUTOCOMPLETE = AUTOCOMPLETE.name
# the kind of a mix target's phases and whole-tier rows: its personas' kinds mixed (no workload kind has
# this name)
KIND_MIX = "mix"
# name -> kind, in the order errors list them
WORKLOAD_KINDS: dict[str, WorkloadKind] = {}
# built-in conversation name -> its kind's name
BUILTIN_CONVERSATION_KINDS: dict[str, str] = {}
# the sizes a model sets too, each with the model's field: a conversation's written value wins, then the
# model's written one, then the kind's default (config/_schema.py, Conversation.settled)
MODEL_SETTINGS: dict[str, str] = {
    "max_tokens": "max_tokens",
    "step_max_tokens": "max_tokens",
    "final_max_tokens": "max_tokens",
    "ignore_eos": "ignore_eos",
}


def register(kind: WorkloadKind) -> WorkloadKind:
    """Add a kind (its sizes must be fields the scenario schema has); a name taken is refused."""
    if kind.name in WORKLOAD_KINDS:
        raise ValueError(f"workload kind {kind.name!r} is already registered")
    WORKLOAD_KINDS[kind.name] = kind
    if kind.builtin is not None:
        BUILTIN_CONVERSATION_KINDS[kind.builtin] = kind.name
    return kind


def unregister(name: str) -> None:
    """Remove a kind added by `register` (a test's, once it has run)."""
    kind = WORKLOAD_KINDS.pop(name)
    if kind.builtin is not None:
        BUILTIN_CONVERSATION_KINDS.pop(kind.builtin, None)


def kind_named(name: str) -> WorkloadKind:
    return WORKLOAD_KINDS[name]


def kind_names() -> tuple[str, ...]:
    return tuple(WORKLOAD_KINDS)


def names_where(has: str) -> list[str]:
    """The names of the kinds whose attribute `has` (a flag of WorkloadKind) is true: for records,
    which carry their kind's name."""
    return [kind.name for kind in WORKLOAD_KINDS.values() if getattr(kind, has)]


def rate_unit(kind: str) -> str:
    """What a rate tier of this kind (a record's `kind`, a mix's KIND_MIX: its developers' sessions)
    counts per second; a kind no longer registered (in old results), requests."""
    if kind == KIND_MIX:
        return SESSIONS_PER_S
    workload_kind = WORKLOAD_KINDS.get(kind)
    return workload_kind.rate_unit if workload_kind is not None else REQUESTS_PER_S


def size_fields() -> tuple[str, ...]:
    """Every size field of any kind, in the registry's order."""
    return tuple(dict.fromkeys(field for kind in WORKLOAD_KINDS.values() for field in kind.sizes))


for _kind in (
    MULTI_TURN,
    SHARED_PREFIX,
    SHORT_BASELINE,
    UNIQUE_PROMPTS,
    FIXED,  # scripted turns (llm-grill's conversations)
    AGENTIC,
    AUTOCOMPLETE,
    DATASET,
    TRACE,
):
    register(_kind)

__all__ = [
    "BUILTIN_CONVERSATION_KINDS",
    "KIND_AGENTIC",
    "KIND_AUTOCOMPLETE",
    "KIND_MIX",
    "MODEL_SETTINGS",
    "REQUESTS_PER_S",
    "SESSIONS_PER_S",
    "WORKLOAD_KINDS",
    "ChatKind",
    "Iteration",
    "PlannedSend",
    "Sender",
    "SizeDefault",
    "WorkloadKind",
    "kind_named",
    "kind_names",
    "names_where",
    "rate_unit",
    "register",
    "size_fields",
    "unregister",
]
