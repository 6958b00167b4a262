"""The workload kinds, listed once: each kind's size fields with their defaults, and the built-in
conversation of that kind. The scenario schema validates conversations against this table; the
generators (generators.py) have one script builder per kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# A size field's default: a number of tokens or turns, a rate or a time, a switch, an inclusive
# [min, max] range drawn per session, a log-normal's {median, p95} in tokens, a choice by name, or None
# for an optional feature left off (or a value the conversation must give).
SizeDefault = int | float | bool | tuple[int, int] | Mapping[str, int] | str | None


@dataclass(frozen=True)
class WorkloadKind:
    """One kind of conversation. `sizes`: the fields it uses (tokens, turns; a dataset's file) with their defaults,
    in the spirit of the seed study; `builtin`: a conversation of this kind usable by name in targets
    without declaring it (None: none)."""

    name: str
    sizes: Mapping[str, SizeDefault]
    builtin: str | None = None


WORKLOAD_KINDS: dict[str, WorkloadKind] = {
    kind.name: kind
    for kind in (
        WorkloadKind(
            "multi-turn",
            {"system_tokens": 1500, "user_turns": 4, "turn_tokens": 150, "shared_system": False},
            builtin="multi-turn-session",
        ),
        WorkloadKind(
            "shared-prefix", {"prefix_tokens": 4000, "question_tokens": 100}, builtin="shared-prefix"
        ),
        WorkloadKind("short-baseline", {"prompt_tokens": 50}, builtin="short-baseline"),
        WorkloadKind("unique-prompts", {"prompt_tokens": 3000}, builtin="unique-prompts"),
        WorkloadKind("fixed", {}),  # scripted turns (llm-grill's conversations)
        # a coding agent's tool-calling loop (workload/agentic.py); system_tokens counts the tools' JSON too
        WorkloadKind(
            "agentic",
            {
                "system_tokens": 8000,
                "steps": (10, 30),
                "tool_result_tokens": {"median": 600, "p95": 4000},
                "step_max_tokens": 256,
                "final_max_tokens": 1024,
                "context_limit_tokens": None,
                "subagents": None,
            },
        ),
        # a developer typing through a file, a FIM request at each pause (workload/autocomplete.py)
        WorkloadKind(
            "autocomplete",
            {
                "prefix_tokens": 1500,
                "suffix_tokens": 400,
                "requests": 20,
                "typing_cps": 6.0,
                "debounce_ms": 150.0,
                "accept_rate": 0.3,
                "budget_ms": 400.0,
                "max_tokens": 64,
            },
        ),
        # recorded prompts or conversations replayed from a file (workload/dataset.py): its path, its
        # format (from the extension when not given), rows drawn by the seed or in order, a max_tokens
        # for rows without their own
        WorkloadKind("dataset", {"path": None, "format": None, "sample": "seed", "max_tokens": None}),
        # a production trace replayed at its own times (workload/trace.py): its file and format, the
        # window of it sent, in trace seconds, and generation run to each row's output length
        WorkloadKind(
            "trace",
            {
                "format": None,
                "path": None,
                "speedup": 1.0,
                "start_s": 0.0,
                "duration_s": None,
                "max_requests": None,
                "ignore_eos": True,
            },
        ),
    )
}
KINDS: tuple[str, ...] = tuple(WORKLOAD_KINDS)
# the sizes a model sets too, each with the model's field: a conversation's written value wins, then the
# model's written one, then the kind's default (config/_schema.py, Conversation.settled)
MODEL_SETTINGS: dict[str, str] = {
    "max_tokens": "max_tokens",
    "step_max_tokens": "max_tokens",
    "final_max_tokens": "max_tokens",
    "ignore_eos": "ignore_eos",
}
# every size field of any kind, in the table's order
SIZE_FIELDS: tuple[str, ...] = tuple(
    dict.fromkeys(field for kind in WORKLOAD_KINDS.values() for field in kind.sizes)
)
# built-in conversation name -> its kind
BUILTIN_CONVERSATION_KINDS: dict[str, str] = {
    kind.builtin: kind.name for kind in WORKLOAD_KINDS.values() if kind.builtin is not None
}
