"""The `trace` kind: a production trace replayed once at its own times, each row's prompt of its input
length and generation run to its output length (reading the file and the schedule: workload/trace.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grill_locust.workload.kinds._kind import ChatKind
from grill_locust.workload.trace import TRACE_FORMATS, conversation_trace

if TYPE_CHECKING:
    from grill_locust.config import Conversation
    from grill_locust.workload.generators import ConversationScript, Workload
    from grill_locust.workload.seeding import ShapeKey

TRACE_KEYS_HELP = f"format: {' | '.join(TRACE_FORMATS)}, path: the trace file"


@dataclass(frozen=True)
class Trace(ChatKind):
    """Row `iteration` of the file, not a draw: workload/trace.py's trace_schedule says when."""

    def check(self, conversation: Conversation) -> dict[str, object]:
        for key in ("format", "path"):
            if getattr(conversation, key) is None:
                raise ValueError(f"{key}: kind {self.name!r} needs a {key} ({TRACE_KEYS_HELP})")
        if conversation.format not in TRACE_FORMATS:
            raise ValueError(f"format: expected {' | '.join(TRACE_FORMATS)}, got {conversation.format!r}")
        return {}

    def check_file(self, conversation: Conversation) -> None:
        conversation_trace(conversation)

    def api_refusal(self, api: str) -> str | None:
        # vLLM's Messages API drops ignore_eos: a row's output length could not be asked for there
        if api == "messages":
            return "replays a trace: it needs a backend with api: chat or completions, where output lengths can be asked for"
        return None

    def build_script(
        self,
        workload: Workload,
        conversation_id: str,
        user_key: str,
        iteration: int,
        rng: random.Random,
        shape: ShapeKey,
    ) -> ConversationScript:
        return workload.trace_script(conversation_id, user_key, iteration)


# its file and format, the window of it sent, in trace seconds, and generation run to each row's
# output length
TRACE = Trace(
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
    replays_at_own_times=True,
    replays_file=True,
)
