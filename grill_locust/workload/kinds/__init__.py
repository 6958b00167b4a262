"""The workload kinds, listed once. Each kind is a module of this package behind one Protocol
(`WorkloadKind`, _kind.py) holding its configuration model (a `ConversationBase` with its sizes,
defaults and checks, _conversation.py); the scenario file's `Conversation` is the union of the
registered kinds' models (grill_locust/scenario/), and the load, the estimate, the user and the report
ask a conversation's kind instead of naming it.

A kind from elsewhere (a plugin, a test) joins with `register(kind)` before its scenario is loaded."""

from __future__ import annotations

from grill_locust.config import KIND_MIX
from grill_locust.workload.kinds._conversation import MODEL_SETTINGS, ConversationBase, kind_name
from grill_locust.workload.kinds._kind import (
    REQUESTS_PER_S,
    SESSIONS_PER_S,
    ChatKind,
    Iteration,
    KindTarget,
    PlannedSend,
    Sender,
    SizeDefault,
    WorkloadKind,
)
from grill_locust.workload.kinds._registry import (
    BUILTIN_CONVERSATION_KINDS,
    WORKLOAD_KINDS,
    kind_named,
    kind_names,
    names_where,
    register,
    size_fields,
    unregister,
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


def rate_unit(kind: str) -> str:
    """What a rate tier of this kind (a record's `kind`, a mix's "mix": its developers' sessions)
    counts per second; a kind no longer registered (in old results), requests."""
    if kind == KIND_MIX:
        return SESSIONS_PER_S
    workload_kind = WORKLOAD_KINDS.get(kind)
    return workload_kind.rate_unit if workload_kind is not None else REQUESTS_PER_S


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
    "MODEL_SETTINGS",
    "REQUESTS_PER_S",
    "SESSIONS_PER_S",
    "WORKLOAD_KINDS",
    "ChatKind",
    "ConversationBase",
    "Iteration",
    "KindTarget",
    "PlannedSend",
    "Sender",
    "SizeDefault",
    "WorkloadKind",
    "kind_name",
    "kind_named",
    "kind_names",
    "names_where",
    "rate_unit",
    "register",
    "size_fields",
    "unregister",
]
