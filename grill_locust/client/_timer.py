"""StreamTimer: applies the metric contract (docs/metrics.md) to a stream's events as they arrive.

Sans-IO: the caller passes each event's arrival time `t` (monotonic seconds) and its data; the
timer fills a `RawTiming` that `grill_locust.record.measure()` turns into metrics. An output event
is a chunk whose delta carries non-empty `content`, `reasoning_content` / `reasoning` or
`tool_calls` (chat), or non-empty `text` (completions); role-only, empty and usage-only chunks are
not output. The first non-reasoning output sets `first_visible_time` (TTFO). llama.cpp's own chunks
(`/infill`: `content` and `stop`, no `choices`) are output when their `content` is not empty.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from grill_locust.client._replies import error_code, error_message, scrub, summarize_body
from grill_locust.client._sse import DONE_MARKER, NamedEvent
from grill_locust.record import (
    STATUS_BAD_EVENT,
    STATUS_EMPTY,
    STATUS_OK,
    STATUS_STREAM_CUT,
    RawTiming,
    http_status_kind,
)


class ToolCall:
    """One tool call the model made, whole: its id, the tool's name and the arguments as the JSON
    text the engine streamed (not parsed: an agent sends it back as it came). The arguments come in
    pieces (`add`), joined once when read: adding to one string would copy it at every piece."""

    __slots__ = ("id", "name", "_pieces")

    def __init__(self, id: str, name: str, arguments: str = "") -> None:  # noqa: A002 - the API's name
        self.id = id
        self.name = name
        self._pieces = [arguments] if arguments else []

    @property
    def arguments(self) -> str:
        pieces = self._pieces
        if len(pieces) > 1:
            pieces[:] = ["".join(pieces)]
        return pieces[0] if pieces else ""

    @arguments.setter
    def arguments(self, value: str) -> None:
        self._pieces = [value] if value else []

    def add(self, piece: str) -> None:
        self._pieces.append(piece)

    def __repr__(self) -> str:
        return f"ToolCall(id={self.id!r}, name={self.name!r}, arguments={self.arguments!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolCall):
            return NotImplemented
        return (self.id, self.name, self.arguments) == (other.id, other.name, other.arguments)


class Text:
    """A reply's text as it streams in: pieces joined a block at a time (a list of every token's
    string costs ~60 bytes a token over the text itself), and its length so far."""

    __slots__ = ("chars", "_blocks", "_pieces")

    BLOCK_PIECES = 256

    def __init__(self) -> None:
        self.chars = 0
        self._blocks: list[str] = []
        self._pieces: list[str] = []

    def append(self, piece: str) -> None:
        self.chars += len(piece)
        pieces = self._pieces
        pieces.append(piece)
        if len(pieces) >= self.BLOCK_PIECES:
            self._blocks.append("".join(pieces))
            pieces.clear()

    def __str__(self) -> str:
        return "".join(self._blocks) + "".join(self._pieces)


def _loads(data: str | bytes) -> Any:
    """A JSON value: orjson (a third of the standard library's time on a chunk, and it reads the
    bytes without decoding them first); what only the standard library accepts (NaN, integers
    beyond 64 bits, invalid UTF-8 read as U+FFFD) goes to `json.loads`, whose ValueError stands."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    return json.loads(_text(data))


def _text(data: str | bytes) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


# What one reply may hold (more than any model's output limit): past either, the engine is not
# stopping, and the stream fails as `bad_event` rather than growing the worker without bound.
MAX_OUTPUT_EVENTS = 1 << 18
MAX_REPLY_CHARS = 1 << 22


class StreamTimer:
    """Collects one request's timings, text and usage from its parsed stream events."""

    __slots__ = (
        "raw",
        "text_parts",
        "reasoning_parts",
        "argument_chars",
        "overflow",
        "done",
        "tool_calls",
        "_output_times",
        "_timings",
        "secrets",
    )

    def __init__(self, raw: RawTiming, *, secrets: tuple[str, ...] = ()) -> None:
        self.raw = raw
        self.text_parts = Text()
        self.reasoning_parts = Text()
        self.argument_chars = 0  # of the tool calls' arguments
        # the reply passed what a record keeps (`MAX_OUTPUT_EVENTS`, `MAX_REPLY_CHARS`): it failed, and
        # the rest of the stream is to be dropped unread
        self.overflow = False
        self.done = False  # `[DONE]` arrived
        # tool calls by their index in the stream: name first, arguments in pieces (not in `text`)
        self.tool_calls: list[ToolCall] = []
        self._output_times = raw.output_times
        self._timings: dict[str, Any] | None = None  # llama.cpp's `timings`, the last one sent
        self.secrets = secrets

    # --- events -------------------------------------------------------------------------------

    def on_event(self, t: float, event: str | NamedEvent) -> None:
        """One SSE event, as `SSEParser.feed` returns it."""
        if type(event) is str:
            self.on_data(t, event)
        else:
            assert isinstance(event, NamedEvent)
            if event.name == "error":
                self.on_error_payload(t, _loads_or_text(event.data))
            else:  # other named events (none of our engines send them) still carry chunks
                self.on_data(t, event.data)

    def on_data(self, t: float, data: str | bytes) -> None:
        """The data of one SSE event (text, or the bytes of a whole event): a JSON chunk or `[DONE]`."""
        try:
            chunk = _loads(data)
        except ValueError:
            text = _text(data)
            if text.strip() == DONE_MARKER:
                self.on_done(t)
            else:
                self.fail(t, STATUS_BAD_EVENT, "unparseable event: " + scrub(text, self.secrets, limit=80))
            return
        if type(chunk) is not dict:
            text = _text(data)
            self.fail(
                t, STATUS_BAD_EVENT, "event is not a JSON object: " + scrub(text, self.secrets, limit=80)
            )
            return
        try:
            self.on_chunk(t, chunk)
        except (AttributeError, TypeError):  # a field of the wrong type: `choices` not a list of objects...
            text = _text(data)
            self.fail(t, STATUS_BAD_EVENT, "malformed chunk: " + scrub(text, self.secrets, limit=80))

    def on_chunk(self, t: float, chunk: dict[str, Any]) -> None:
        """One parsed chunk (chat.completion.chunk or text_completion)."""
        choices = chunk.get("choices")
        if choices:
            output = visible = False
            for choice in choices:
                delta = choice.get("delta")
                if delta is not None:
                    content = delta.get("content")
                    if content:
                        if type(content) is not str:
                            raise TypeError("content")
                        self.text_parts.append(content)
                        output = visible = True
                    if content is None or len(delta) > 1:  # more than text: reasoning, tool calls, a role
                        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                        if reasoning:
                            if type(reasoning) is not str:
                                raise TypeError("reasoning")
                            self.reasoning_parts.append(reasoning)
                            self.raw.reasoning_events += 1
                            output = True
                        tool_calls = delta.get("tool_calls")
                        if tool_calls:
                            output = visible = True
                            self._on_tool_call_deltas(tool_calls)
                else:
                    text = choice.get("text")
                    if text:
                        if type(text) is not str:
                            raise TypeError("text")
                        self.text_parts.append(text)
                        output = visible = True
                finish_reason = choice.get("finish_reason")
                if finish_reason:
                    if type(finish_reason) is not str:
                        raise TypeError("finish_reason")
                    self.finish(t, finish_reason)
            if output:
                self._output_times.append(t)
                if visible and self.raw.first_visible_time is None:
                    self.raw.first_visible_time = t
                self.check_size(t)
        elif "stop" in chunk and "content" in chunk:
            self._on_llamacpp_chunk(t, chunk)
        usage = chunk.get("usage")
        if usage:
            self._on_usage(usage)
        if "timings" in chunk:
            self._timings = chunk["timings"]
        if chunk.get("error") is not None or chunk.get("object") == "error":
            self.on_error_payload(t, chunk)

    def _on_llamacpp_chunk(self, t: float, chunk: dict[str, Any]) -> None:
        """llama.cpp's own stream (/infill, /completion): `content` per token, `stop: true` on the last
        chunk with the token counts and `timings`; no `[DONE]` follows it. `stop_type` "limit" is
        OpenAI's finish reason "length"; an end-of-text token or a stop word, "stop"."""
        content = chunk["content"]
        raw = self.raw
        if content:
            if type(content) is not str:
                raise TypeError("content")
            self.text_parts.append(content)
            self._output_times.append(t)
            if raw.first_visible_time is None:
                raw.first_visible_time = t
            self.check_size(t)
        if chunk["stop"] is True:
            self.finish(t, "length" if chunk.get("stop_type") == "limit" else "stop")
            predicted = chunk.get("tokens_predicted")
            if type(predicted) is int:
                raw.completion_tokens = predicted
            evaluated = chunk.get("tokens_evaluated")  # the whole prompt, its cached part included
            if type(evaluated) is int:
                raw.prompt_tokens = evaluated

    def _on_tool_call_deltas(self, deltas: list[dict[str, Any]]) -> None:
        """OpenAI's streamed tool calls: each piece names its call by `index`; the first piece of a
        call carries its id and name, later ones add to its arguments."""
        calls = self.tool_calls
        for delta in deltas:
            index = delta.get("index", len(calls) - 1 if calls else 0)
            if type(index) is not int or index < 0:
                raise TypeError("tool_calls.index")
            while len(calls) <= index:
                calls.append(ToolCall("", "", ""))
            call = calls[index]
            if delta.get("id"):
                call.id = str(delta["id"])
            function = delta.get("function") or {}
            if function.get("name"):
                call.name += str(function["name"])
            arguments = function.get("arguments")
            if arguments:
                if type(arguments) is not str:
                    raise TypeError("tool_calls.function.arguments")
                call.add(arguments)
                self.argument_chars += len(arguments)

    def finish(self, t: float, reason: str) -> None:
        """The engine gave the reply's finish reason at `t` (the first such event keeps its time)."""
        self.raw.finish_reason = reason
        if self.raw.finish_time is None:
            self.raw.finish_time = t

    def on_done(self, t: float) -> None:
        """`data: [DONE]`: the end of the stream; E2E ends here."""
        if not self.done:
            self.done = True
            if self.raw.end_time is None:
                self.raw.end_time = t

    def on_error_payload(self, t: float, payload: Any) -> None:
        """An error reported inside a 200 stream: `http_<code>` when it names one, else `stream_cut`."""
        code = error_code(payload)
        message = error_message(payload) or "error event"
        status = http_status_kind(code) if code is not None else STATUS_STREAM_CUT
        self.fail(t, status, "error event: " + scrub(message, self.secrets))

    def on_opaque_body(self, t: float, content_type: str, body: bytes) -> None:
        """A 2xx reply that was not an event stream: an empty body, a whole JSON completion, an
        HTML page... It becomes a record with a kind, keeping any usage it reports."""
        text = body.strip()
        if not text:
            self.fail(t, STATUS_EMPTY, "empty response body")
            return
        try:
            payload = _loads(text)
        except ValueError:
            payload = None
        if isinstance(payload, dict):
            if payload.get("usage"):
                self._on_usage(payload["usage"])
            choices = payload.get("choices")
            if choices and isinstance(choices, list) and isinstance(choices[0], dict):
                finish_reason = choices[0].get("finish_reason")
                if finish_reason:
                    self.raw.finish_reason = finish_reason
                self.fail(t, STATUS_BAD_EVENT, "a non-streaming JSON reply to a streaming request")
                return
            message = error_message(payload)
            if message:
                self.fail(t, STATUS_BAD_EVENT, "error reply: " + scrub(message, self.secrets))
                return
            keys = ", ".join(list(payload)[:5])
            self.fail(t, STATUS_BAD_EVENT, f"JSON reply without choices (keys: {keys})")
            return
        summary = scrub(summarize_body(body, content_type), self.secrets)
        self.fail(
            t, STATUS_BAD_EVENT, f"not an event stream ({content_type or 'no content-type'}): {summary}"
        )

    def fail(self, t: float, status: str, error: str) -> None:
        """The request failed at `t`: the first failure names the status; timings so far are kept."""
        if self.raw.status == STATUS_OK:
            self.raw.status = status
            self.raw.error = error
        if self.raw.end_time is None:
            self.raw.end_time = t

    def close(self, t: float) -> RawTiming:
        """The body ended at `t` (framing complete or connection closed). Without `[DONE]` and
        without a finish_reason the stream was cut."""
        raw = self.raw
        if raw.end_time is None:
            raw.end_time = t
        if raw.status == STATUS_OK and not self.done and raw.finish_reason is None:
            raw.status = STATUS_STREAM_CUT
            raw.error = "stream ended without finish_reason or [DONE]"
        self._apply_timings()
        return raw

    # --- results ------------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return str(self.text_parts)

    @property
    def reasoning(self) -> str:
        return str(self.reasoning_parts)

    def check_size(self, t: float) -> None:
        """After an output event: a reply past what a record keeps fails (`bad_event`) and is dropped,
        so that an engine that never stops holds a bounded share of the worker's memory."""
        if self.overflow:
            return
        events = len(self._output_times)
        chars = self.text_parts.chars + self.reasoning_parts.chars + self.argument_chars
        if events > MAX_OUTPUT_EVENTS:
            why = f"more than {MAX_OUTPUT_EVENTS:,} output events"
        elif chars > MAX_REPLY_CHARS:
            why = f"more than {MAX_REPLY_CHARS:,} characters of output"
        else:
            return
        self.overflow = True
        self.fail(t, STATUS_BAD_EVENT, f"a reply of {why}: the engine did not stop (stream dropped)")

    def _on_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        raw = self.raw
        prompt_tokens = usage.get("prompt_tokens")
        if isinstance(prompt_tokens, int):
            raw.prompt_tokens = prompt_tokens
        completion_tokens = usage.get("completion_tokens")
        if isinstance(completion_tokens, int):
            raw.completion_tokens = completion_tokens
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            cached = details.get("cached_tokens")
            if isinstance(cached, int):
                raw.cached_tokens = cached
        completion_details = usage.get("completion_tokens_details")
        if isinstance(completion_details, dict):
            reasoning_tokens = completion_details.get("reasoning_tokens")
            if isinstance(reasoning_tokens, int):
                raw.reasoning_tokens = reasoning_tokens

    def _apply_timings(self) -> None:
        """llama.cpp reports the prompt cache in `timings` (cache_n: reused, prompt_n: computed);
        it fills what the usage object left out."""
        timings = self._timings
        if not isinstance(timings, dict):
            return
        raw = self.raw
        cache_n = timings.get("cache_n")
        prompt_n = timings.get("prompt_n")
        if raw.cached_tokens is None and isinstance(cache_n, int):
            raw.cached_tokens = cache_n
        if raw.prompt_tokens is None and isinstance(prompt_n, int):
            raw.prompt_tokens = prompt_n + (cache_n if isinstance(cache_n, int) else 0)
        predicted_n = timings.get("predicted_n")
        if raw.completion_tokens is None and isinstance(predicted_n, int):
            raw.completion_tokens = predicted_n


def _loads_or_text(data: str) -> Any:
    try:
        return _loads(data)
    except ValueError:
        return data
