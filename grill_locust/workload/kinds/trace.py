"""The `trace` kind: a production trace replayed once at its own times, each row's prompt of its input
length and generation run to its output length (reading the file and the schedule: workload/trace.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from grill_locust.config import Count, Number
from grill_locust.workload.kinds._conversation import ConversationBase
from grill_locust.workload.kinds._kind import ChatKind
from grill_locust.workload.trace import TRACE_FORMATS, conversation_trace

if TYPE_CHECKING:
    from grill_locust.workload.generators import ConversationScript, Workload
    from grill_locust.workload.seeding import ShapeKey

TRACE_KEYS_HELP = f"format: {' | '.join(TRACE_FORMATS)}, path: the trace file"


class TraceConversation(ConversationBase):
    """A `trace` conversation's keys: a production trace replayed once at its own times."""

    kind: Literal["trace"]
    """Each row of the trace sent at its time, its prompt of the row's input length."""
    format: str | None = None
    """The trace's format: one of its formats (grill_locust/workload/trace.py)."""
    # a relative path is from the scenario file's folder (scenario/_load.py), or from the current
    # folder for data without a file
    path: str | None = Field(default=None, min_length=1)
    """The trace file; relative to the scenario file's folder."""
    speedup: Number = Field(default=1.0, gt=0)
    """How much faster than recorded it is sent."""
    start_s: Number = Field(default=0.0, ge=0)
    """The window replayed starts here, in trace seconds."""
    duration_s: Number | None = Field(default=None, gt=0)
    """The window's length, in trace seconds (None: to the end)."""
    max_requests: Count | None = Field(default=None, ge=1)
    """At most this many rows of the window."""
    ignore_eos: bool = True
    """Generation run to each row's output length, over the model's setting."""

    @model_validator(mode="after")
    def _file_and_format(self) -> TraceConversation:
        for key in ("format", "path"):
            if getattr(self, key) is None:
                raise ValueError(f"{key}: kind {self.kind!r} needs a {key} ({TRACE_KEYS_HELP})")
        if self.format not in TRACE_FORMATS:
            raise ValueError(f"format: expected {' | '.join(TRACE_FORMATS)}, got {self.format!r}")
        return self


@dataclass(frozen=True)
class Trace(ChatKind):
    """Row `iteration` of the file, not a draw: workload/trace.py's trace_schedule says when."""

    def check_file(self, conversation: ConversationBase) -> None:
        assert isinstance(conversation, TraceConversation)
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


TRACE = Trace(TraceConversation, replays_at_own_times=True, replays_file=True)
