"""MessagesTimer: the metric contract (docs/metrics.md) applied to Anthropic's Messages stream.

Sans-IO like `StreamTimer`, whose results it fills the same way. Each event's JSON `type` says what
it is (`message_start`, `content_block_start`/`_delta`/`_stop`, `message_delta`, `message_stop`,
`ping`, `error`), whether or not an `event:` line named it. An output event is a content block
delta carrying text, thinking or tool input, or the start of a `tool_use` block; thinking is not
visible (TTFO). `message_stop` ends the stream as `[DONE]` does OpenAI's. Usage: prompt tokens are
input + cache-read + cache-creation input tokens (Anthropic counts cached tokens apart), cached
tokens the cache-read ones, output tokens `message_delta`'s (`message_start` holds a placeholder).
"""

from __future__ import annotations

import json
from typing import Any

from grill_locust.client._timer import StreamTimer, ToolCall
from grill_locust.record import STATUS_BAD_EVENT, RawTiming

_INPUT_COUNTS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


class MessagesTimer(StreamTimer):
    """Collects one `/v1/messages` request's timings, text, thinking, tool calls and usage."""

    __slots__ = ("_started", "_blocks", "_tools", "_input_counts")

    def __init__(self, raw: RawTiming, *, secrets: tuple[str, ...] = ()) -> None:
        super().__init__(raw, secrets=secrets)
        self._started = False  # message_start arrived
        self._blocks: dict[int, str] = {}  # content block index -> its type, once started
        self._tools: dict[int, ToolCall] = {}  # tool_use blocks by index
        self._input_counts: dict[str, int] = {}  # the latest of each input count the usage gave

    def on_chunk(self, t: float, chunk: dict[str, Any]) -> None:
        """One parsed event (its `type` field names it)."""
        kind = chunk.get("type")
        if kind == "content_block_delta":  # nearly every event: first
            self._on_delta(t, chunk)
        elif kind == "content_block_start":
            self._on_block_start(t, chunk)
        elif kind == "message_start":
            if self._started:
                self._out_of_order(t, "a second message_start")
            self._started = True
            message = chunk.get("message")
            if isinstance(message, dict):
                self._on_message_usage(message.get("usage"), with_output=False)
        elif kind == "content_block_stop":
            index = self._index(chunk, kind)
            if index not in self._blocks:
                self._out_of_order(t, f"content_block_stop for block {index}, never started")
            self._finish_tool(index)
        elif kind == "message_delta":
            self._require_start(t, kind)
            delta = chunk.get("delta")
            stop_reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            if stop_reason:
                if type(stop_reason) is not str:
                    raise TypeError("stop_reason")
                self.finish(t, stop_reason)
            self._on_message_usage(chunk.get("usage"), with_output=True)
        elif kind == "message_stop":
            self._require_start(t, kind)
            self.on_done(t)
        elif kind == "error":
            self.on_error_payload(t, chunk)
        elif kind is None:
            text = json.dumps(chunk)[:80]
            self.fail(t, STATUS_BAD_EVENT, f"event without a type (not Anthropic's stream): {text}")
        # `ping`, and event types the API adds later, carry nothing to measure

    def close(self, t: float) -> RawTiming:
        for index in self._tools:
            self._finish_tool(index)
        return super().close(t)

    # --- events -------------------------------------------------------------------------------

    def _on_delta(self, t: float, chunk: dict[str, Any]) -> None:
        self._require_start(t, "content_block_delta")
        index = self._index(chunk, "content_block_delta")
        if index not in self._blocks:
            self._out_of_order(t, f"content_block_delta for block {index}, never started")
        delta = chunk.get("delta")
        if type(delta) is not dict:
            raise TypeError("delta")
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if type(text) is not str:
                raise TypeError("text")
            if text:
                self.text_parts.append(text)
                self._output(t, visible=True)
        elif kind == "thinking_delta":
            thinking = delta.get("thinking")
            if type(thinking) is not str:
                raise TypeError("thinking")
            if thinking:
                self.reasoning_parts.append(thinking)
                self.raw.reasoning_events += 1
                self._output(t, visible=False)
        elif kind == "input_json_delta":
            partial = delta.get("partial_json")
            if type(partial) is not str:
                raise TypeError("partial_json")
            if partial:
                call = self._tools.get(index)
                if call is None:  # a block never started (failed above): its input is kept all the same
                    call = self._tools[index] = ToolCall("", "", "")
                    self.tool_calls.append(call)
                call.add(partial)
                self.argument_chars += len(partial)
                self._output(t, visible=True)
        # signature_delta (a thinking block's signature), citations_delta: no generated output

    def _on_block_start(self, t: float, chunk: dict[str, Any]) -> None:
        self._require_start(t, "content_block_start")
        index = self._index(chunk, "content_block_start")
        if index in self._blocks:
            self._out_of_order(t, f"content_block_start for block {index}, already started")
        block = chunk.get("content_block")
        if type(block) is not dict:
            raise TypeError("content_block")
        kind = block.get("type")
        self._blocks[index] = str(kind)
        if kind == "tool_use":
            call = ToolCall(str(block.get("id") or ""), str(block.get("name") or ""), "")
            given = block.get("input")
            if given:  # a server that sends the whole input here rather than in pieces
                call.arguments = json.dumps(given)
            self._tools[index] = call
            self.tool_calls.append(call)
            self._output(t, visible=True)
        elif kind == "text" and block.get("text"):
            self.text_parts.append(str(block["text"]))
            self._output(t, visible=True)
        elif kind == "thinking" and block.get("thinking"):
            self.reasoning_parts.append(str(block["thinking"]))
            self.raw.reasoning_events += 1
            self._output(t, visible=False)

    def _output(self, t: float, *, visible: bool) -> None:
        self._output_times.append(t)
        if visible and self.raw.first_visible_time is None:
            self.raw.first_visible_time = t
        self.check_size(t)

    def _on_message_usage(self, usage: Any, *, with_output: bool) -> None:
        if not isinstance(usage, dict):
            return
        counts = self._input_counts
        for key in _INPUT_COUNTS:
            value = usage.get(key)
            if isinstance(value, int):
                counts[key] = value
        raw = self.raw
        if "input_tokens" in counts:
            raw.prompt_tokens = sum(counts.get(key, 0) for key in _INPUT_COUNTS)
        if "cache_read_input_tokens" in counts:
            raw.cached_tokens = counts["cache_read_input_tokens"]
        if with_output:
            output_tokens = usage.get("output_tokens")
            if isinstance(output_tokens, int):
                raw.completion_tokens = output_tokens

    def _finish_tool(self, index: int) -> None:
        call = self._tools.get(index)
        if call is not None and not call.arguments:
            call.arguments = "{}"  # a call without arguments, as an OpenAI stream says it

    # --- order --------------------------------------------------------------------------------

    @staticmethod
    def _index(chunk: dict[str, Any], kind: str) -> int:
        index = chunk.get("index")
        if type(index) is not int or index < 0:
            raise TypeError(f"{kind}.index")
        return index

    def _require_start(self, t: float, kind: str) -> None:
        if not self._started:
            self._out_of_order(t, f"{kind} before message_start")

    def _out_of_order(self, t: float, what: str) -> None:
        """An event out of Anthropic's order fails the request (`bad_event`); what it carries is kept."""
        self.fail(t, STATUS_BAD_EVENT, "events out of order: " + what)
