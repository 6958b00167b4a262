"""The simulated engine's OpenAI-compatible server: routes, request validation, streaming, faults, truth.

One asyncio loop runs both the HTTP connections and the engine's step loop; a step's tokens are written
to the sockets the moment the step ends.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import signal
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from grill_locust.fim_templates import FIM_TEMPLATES
from grill_locust.record import percentile
from grill_locust.sim import anthropic, wire
from grill_locust.sim.engine import Engine
from grill_locust.sim.faults import FAULT_HEADER, FaultPicker, FaultSettings
from grill_locust.sim.httpserver import HttpConnection, HttpRequest
from grill_locust.sim.metrics import render_metrics
from grill_locust.sim.params import EngineParams
from grill_locust.sim.sequence import Sequence
from grill_locust.sim.text import OUTPUT_JSON, VOCAB_SIZE, output_text, render_chat, token_ids
from grill_locust.sim.tools import ToolCall, ToolError, answers_with_a_call, plan_tool_call
from grill_locust.sim.truth import TruthLog

NO_STOP = 1 << 62
SIM_FIM_TEMPLATE = FIM_TEMPLATES["qwen-coder"]  # the simulated model's FIM tokens (and /infill's)
FINISH_TOOL_CALLS = "tool_calls"
SPIN_WINDOW_S = 0.0015  # epoll waits in whole milliseconds: spin the last stretch of a step instead
TRUTH_MARGIN_S = 0.002  # leave this much of a step's wait free of truth-log writing
JITTER_SAMPLES = 200_000
IDLE_FLUSH_S = 0.5
MAX_LAG_S = 0.05  # far behind the step timeline (overruns show as jitter until then): restart it at now


class SimServer:
    """The simulated engine behind an HTTP/1.1 listener."""

    serves_suffix = True  # OpenAI's `suffix` on /v1/completions fills the middle (llama-server ignores it)

    def __init__(
        self,
        params: EngineParams,
        served_model_name: str = "grill-sim",
        api_key: str | None = None,
        faults: FaultSettings | None = None,
        truth_log: str | None = None,
        spin_window_s: float = SPIN_WINDOW_S,
        profile: str = "custom",
    ) -> None:
        self.params = params
        self.profile = profile
        self.model = served_model_name
        self.api_key = api_key
        self.engine = Engine(params)
        self.faults = FaultPicker(faults or FaultSettings())
        self.truth = TruthLog(truth_log) if truth_log else None
        self.spin_window_s = spin_window_s
        self.clock = time.monotonic
        self.wall_offset = time.time() - time.monotonic()
        self.created = int(time.time())
        self.events = 0  # SSE output events written
        self.requests = 0
        self.jitter_s: deque[float] = deque(maxlen=JITTER_SAMPLES)
        self.wake = asyncio.Event()
        self.stopping = asyncio.Event()
        self.port = 0
        self._rng = random.Random(0x5EED)
        self._id_prefix = os.urandom(4).hex()
        self.routes: dict[tuple[str, str], Callable[[HttpConnection, HttpRequest], None]] = {
            ("GET", "/health"): self._health,
            ("GET", "/v1/models"): self._models,
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/completions"): self._completions,
            ("POST", anthropic.MESSAGES_PATH): self._messages,
            ("POST", "/tokenize"): self._tokenize,
            ("GET", "/metrics"): self._metrics,
            ("GET", "/sim/stats"): self._stats,
            ("POST", "/sim/stats/reset"): self._stats_reset,
        }

    # -- running
    async def serve(self, host: str, port: int, ready: Callable[[int], None] | None = None) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: HttpConnection(self.handle), host, port, backlog=2048)
        self.port = server.sockets[0].getsockname()[1]
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(signum, self.stopping.set)
            except (NotImplementedError, RuntimeError):
                pass
        step_task = asyncio.create_task(self._step_loop())
        gc.freeze()  # everything allocated so far lives forever: keep it out of the collector's scans
        if ready is not None:
            ready(self.port)
        try:
            await self.stopping.wait()
        finally:
            step_task.cancel()
            server.close()
            if self.truth is not None:
                self.truth.close()

    async def _step_loop(self) -> None:
        """Steps back to back: a step starts when the previous one ends (its deadline), while the
        previous step's tokens are being written, as output processing overlaps the next forward pass
        in real engines. When the loop falls more than MAX_LAG_S behind, the timeline restarts at now."""
        engine = self.engine
        clock = self.clock
        start: float | None = None
        while True:
            if engine.idle:
                self.wake.clear()
                if self.truth is not None:
                    self.truth.flush()
                await self.wake.wait()
                start = None
                continue
            now = clock()
            if start is None or now - start > MAX_LAG_S:
                start = now
            step = engine.schedule(start)
            if step.empty:
                await self._wait_for_work(engine.earliest_trickle_s())
                start = None
                continue
            deadline = start + step.duration_s
            if self.truth is not None and self.truth.pending:
                self.truth.drain(until=deadline - TRUTH_MARGIN_S - self.spin_window_s, clock=clock)
            await self._sleep_until(deadline)
            now = clock()
            self.jitter_s.append(now - deadline)
            engine.commit(step, now)
            start = deadline

    async def _sleep_until(self, deadline: float) -> None:
        clock = self.clock
        remaining = deadline - clock()
        if remaining > self.spin_window_s:
            await asyncio.sleep(remaining - self.spin_window_s)
        while clock() < deadline:
            await asyncio.sleep(0)

    async def _wait_for_work(self, until: float | None) -> None:
        """Nothing can run now (only trickled streams): wait for their next token or a new request."""
        self.wake.clear()
        timeout = IDLE_FLUSH_S if until is None else max(0.0, until - self.clock())
        try:
            await asyncio.wait_for(self.wake.wait(), timeout)
        except TimeoutError:
            pass

    # -- routing
    def handle(self, conn: HttpConnection, request: HttpRequest) -> None:
        route = self.routes.get((request.method, request.path))
        error_body = self.error_body_for(request.path)
        if route is None:
            if any(path == request.path for _, path in self.routes):
                conn.respond(405, error_body(405, "Method Not Allowed"))
            else:
                conn.respond(404, b'{"detail":"Not Found"}')
            return
        if self.api_key and request.path.startswith("/v1/"):
            bearer = request.headers.get("authorization", "") == f"Bearer {self.api_key}"
            # Anthropic's clients send the key as x-api-key
            keyed = (
                request.path == anthropic.MESSAGES_PATH and request.headers.get("x-api-key") == self.api_key
            )
            if not (bearer or keyed):
                conn.respond(401, error_body(401, "Unauthorized"))
                return
        try:
            route(conn, request)
        except BadRequest as error:
            conn.respond(error.status, error_body(error.status, str(error), error.param))
        except ToolError as error:
            conn.respond(400, error_body(400, str(error), "tools"))

    def _health(self, conn: HttpConnection, request: HttpRequest) -> None:
        conn.respond(200, b"", "application/json")

    def _models(self, conn: HttpConnection, request: HttpRequest) -> None:
        card = {
            "id": self.model,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": self.model,
            "parent": None,
            "max_model_len": self.params.max_model_len,
            "permission": [],
        }
        conn.respond(200, wire.json_body({"object": "list", "data": [card]}))

    def _tokenize(self, conn: HttpConnection, request: HttpRequest) -> None:
        body = _json_object(request.body)
        if "messages" in body:
            messages = body["messages"]
            if not isinstance(messages, list):
                raise BadRequest("messages: expected a list of messages", "messages")
            ids = token_ids(render_chat(messages, body.get("tools")))
        elif isinstance(body.get("prompt"), str):
            ids = token_ids(body["prompt"])
        elif isinstance(body.get("content"), str):  # llama.cpp's shape, answered in llama.cpp's shape
            conn.respond(200, wire.json_body({"tokens": token_ids(body["content"])}))
            return
        else:
            raise BadRequest("prompt or messages: field required", "prompt")
        answer = {
            "count": len(ids),
            "max_model_len": self.params.max_model_len,
            "tokens": ids,
            "token_strs": None,
        }
        conn.respond(200, wire.json_body(answer))

    def _metrics(self, conn: HttpConnection, request: HttpRequest) -> None:
        text = render_metrics(self.engine, self.model, self.params.metrics_flavor)
        conn.respond(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")

    def _stats(self, conn: HttpConnection, request: HttpRequest) -> None:
        jitter = sorted(self.jitter_s)
        counters = self.engine.counters

        def pick(q: float) -> float | None:
            return percentile(jitter, q) * 1000.0 if jitter else None

        stats = {
            "profile": self.profile,
            "steps": counters.steps,
            "events": self.events,
            "requests": self.requests,
            "running": len(self.engine.running),
            "waiting": len(self.engine.waiting),
            "kv_usage": self.engine.cache.usage(),
            "jitter_samples": len(jitter),
            "jitter_p50_ms": pick(50),
            "jitter_p99_ms": pick(99),
            "jitter_max_ms": jitter[-1] * 1000.0 if jitter else None,
            "truth_pending": len(self.truth.pending) if self.truth else 0,
            "aborted_requests": counters.aborted_requests,
            "wasted_tokens": counters.aborted_generation_tokens,
            "wasted_tokens_after_close": counters.aborted_tokens_after_close,
        }
        conn.respond(200, wire.json_body(stats))

    def _stats_reset(self, conn: HttpConnection, request: HttpRequest) -> None:
        self.jitter_s.clear()
        conn.respond(200, b"{}")

    # -- completions
    def _chat(self, conn: HttpConnection, request: HttpRequest) -> None:
        body = _json_object(request.body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages: field required (a non-empty list)", "messages")
        for message in messages:
            if not isinstance(message, dict) or "role" not in message:
                raise BadRequest("messages: each message needs a role", "messages")
            calls = message.get("tool_calls")
            if calls is not None and not (
                isinstance(calls, list) and all(isinstance(c, dict) for c in calls)
            ):
                raise BadRequest("messages: an assistant's tool_calls must be a list of objects", "messages")
        self._generate(conn, request, body, wire.CHAT, token_ids(render_chat(messages, body.get("tools"))))

    def _messages(self, conn: HttpConnection, request: HttpRequest) -> None:
        """Anthropic's Messages API: the chat request with the same content, answered in Anthropic's events."""
        try:
            body = anthropic.chat_request(_json_object(request.body))
        except ValueError as error:
            raise BadRequest(str(error)) from None
        ids = token_ids(render_chat(body["messages"], body.get("tools")))
        self._generate(conn, request, body, anthropic.MESSAGES, ids)

    def _completions(self, conn: HttpConnection, request: HttpRequest) -> None:
        body = _json_object(request.body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            suffix = body.get("suffix") if self.serves_suffix else None
            if isinstance(suffix, str) and suffix:  # as an engine serving `suffix` does: its model's template
                prompt = SIM_FIM_TEMPLATE.render(prompt, suffix)
            ids = token_ids(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            ids = list(prompt)
        else:
            raise BadRequest("prompt: field required (a string, or a list of token ids)", "prompt")
        if not ids:
            raise BadRequest("prompt: must not be empty", "prompt")
        self._generate(conn, request, body, wire.COMPLETIONS, ids)

    def _generate(
        self, conn: HttpConnection, request: HttpRequest, body: dict[str, object], kind: str, ids: list[int]
    ) -> None:
        arrival = self.clock()
        prompt_len = len(ids)
        max_tokens = self._max_tokens(body, kind, prompt_len)
        min_tokens = _int_field(body, "min_tokens", 0) or 0
        seed = body.get("seed")
        tool_call = None
        # the call is fixed by the seed, else by the prompt, even when sampling
        if kind in (wire.CHAT, anthropic.MESSAGES) and answers_with_a_call(body.get("messages")):
            tool_call = plan_tool_call(
                body.get("tools"),
                body.get("tool_choice"),
                seed if isinstance(seed, int) else hash(tuple(ids)),
            )
        try:
            fault = self.faults.pick(request.headers.get(FAULT_HEADER))
        except ValueError as error:
            raise BadRequest(f"{FAULT_HEADER}: unknown fault {error}", FAULT_HEADER) from None
        # what the request asked for, as the truth log shows it: explicit settings can be checked as received
        sampling = {
            "max_tokens": max_tokens,
            "ignore_eos": bool(body.get("ignore_eos")),
            "temperature": body.get("temperature"),
        }
        self.requests += 1
        request_id = request.headers.get("x-request-id") or f"{self._id_prefix}{self.requests:012x}"
        response_id = self._response_id(kind, request_id)
        headers = self._reply_headers(request_id)

        if fault in ("500", "503", "429", "400", "501"):
            status = int(fault)
            messages = {
                500: "Internal server error (simulated)",
                503: "Service unavailable (simulated)",
                429: "Too many requests (simulated)",
                400: "This engine does not serve this request as sent (simulated)",
                501: "This engine does not implement this request (simulated)",
            }
            if status == 429:
                headers.append(("retry-after", str(self.faults.settings.retry_after_s)))
            conn.respond(status, self.error_body_for(request.path)(status, messages[status]), headers=headers)
            if self.truth is not None:
                now = self.clock()
                record = self._truth_base(
                    request_id, request.path, kind, fault, status, arrival, now, prompt_len
                )
                self.truth.add({**record, **sampling})
            return

        if not isinstance(seed, int):
            temperature = body.get("temperature")
            seed = hash(tuple(ids)) if temperature in (None, 0, 0.0) else self._rng.getrandbits(32)
        rng = random.Random(seed)
        output_start = rng.randrange(VOCAB_SIZE)
        natural = self.params.natural_output_tokens
        if body.get("ignore_eos"):
            stop_after = NO_STOP
        else:
            stop_after = max(min_tokens, 1, int(natural * (0.5 + rng.random())))
        call_at = NO_STOP
        if tool_call is not None:  # reasoning, a little text, then the call, which ends the answer
            reasoning_tokens = self.params.reasoning_tokens
            text_tokens = tool_call.preamble_tokens
            if body.get("ignore_eos"):  # the call comes last in an answer of max_tokens
                text_tokens = max_tokens - reasoning_tokens - tool_call.token_count
            text_tokens = max(text_tokens, min_tokens - reasoning_tokens - tool_call.token_count, 0)
            call_at = reasoning_tokens + text_tokens
            stop_after = call_at + tool_call.token_count
        stream = bool(body.get("stream"))
        options = body.get("stream_options")
        include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
        writer = AnthropicWriter if kind == anthropic.MESSAGES else self._writer_class(kind)
        reply = writer(
            self, conn, kind, request_id, response_id, stream, include_usage, fault, arrival, request.path
        )
        reply.plan_tool_call(tool_call, call_at)
        gap_s = self.faults.settings.trickle_gap_ms / 1000.0 if fault == "trickle" else 0.0
        seq = Sequence(
            request_id,
            ids,
            max_tokens,
            stop_after,
            output_start,
            arrival,
            reply.on_token,
            reply.on_finish,
            gap_s,
        )
        reply.seq = seq
        reply.sampling = sampling
        limit = seq.output_limit
        after_first = fault in ("cut", "error_mid")  # at least one token before, where the answer has two
        reply.fault_at = min(max(1, limit // 2), limit - 1) if after_first else max(0, limit // 2)
        conn.on_close = reply.on_client_gone
        if stream:
            conn.start_stream(headers, reply.opening())
        else:
            reply.headers = headers
        if fault == "stall":
            return  # accepted, then nothing: the client's timeout must fire
        self.engine.add(seq)
        self.wake.set()

    def _max_tokens(self, body: dict[str, object], kind: str, prompt_len: int) -> int:
        """The output budget of a request, after checking its model and that it fits the context."""
        model = body.get("model")
        if model is not None and model != self.model:
            raise BadRequest(f"The model `{model}` does not exist.", "model", status=404)
        max_model_len = self.params.context_limit  # a request that fits no slot is refused
        default_max = 16 if kind == wire.COMPLETIONS else max_model_len - prompt_len
        max_tokens = _int_field(body, "max_completion_tokens", None)
        if max_tokens is None:
            max_tokens = _int_field(body, "max_tokens", default_max)
        if max_tokens is None or max_tokens < 1:
            raise BadRequest("max_tokens: must be at least 1", "max_tokens")
        if prompt_len + max_tokens > max_model_len:
            raise BadRequest(
                f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                f"{prompt_len + max_tokens} tokens ({prompt_len} in the messages, {max_tokens} in the completion). "
                "Please reduce the length of the messages or completion.",
                "max_tokens" if prompt_len < max_model_len else "messages",
            )
        return max_tokens

    def _writer_class(self, kind: str) -> type[ResponseWriter]:
        return ResponseWriter

    def _response_id(self, kind: str, request_id: str) -> str:
        return {wire.CHAT: "chatcmpl-", wire.COMPLETIONS: "cmpl-", anthropic.MESSAGES: "msg_"}[
            kind
        ] + request_id

    def _reply_headers(self, request_id: str) -> list[tuple[str, str]]:
        return [("x-request-id", request_id)]

    def error_body_for(self, path: str) -> Callable[..., bytes]:
        """The error body of the route at `path`: Anthropic's on /v1/messages, the server's own elsewhere."""
        return anthropic.error_body if path == anthropic.MESSAGES_PATH else self.error_body

    def error_body(self, status: int, message: str, param: str | None = None) -> bytes:
        return wire.error_body(status, message, param)

    def _truth_base(
        self,
        request_id: str,
        path: str,
        kind: str,
        fault: str | None,
        status: int,
        arrival: float,
        end: float,
        prompt_len: int,
    ) -> dict[str, object]:
        offset = self.wall_offset
        return {
            "request_id": request_id,
            "endpoint": path,
            "api": kind,
            "status": status,
            "outcome": "error",
            "fault": fault,
            "arrival": round(arrival + offset, 6),
            "admitted": None,
            "first_token": None,
            "end": round(end + offset, 6),
            "prompt_tokens": prompt_len,
            "cached_tokens": 0,
            "output_tokens": 0,
            "finish_reason": None,
            "preemptions": 0,
            "event_times": [],
        }


class StreamTemplates(Protocol):
    """What the token path needs of a wire format's chunk templates (`wire`, `llamacpp_wire`)."""

    content_open: bytes
    reasoning_open: bytes
    close_running: bytes

    def role_event(self) -> bytes: ...

    def broken_event(self) -> bytes: ...

    def tool_call_openings(self, call: ToolCall) -> list[bytes]: ...


class ResponseWriter:
    """Writes one request's answer as its sequence produces tokens (streamed or all at the end), in
    vLLM's wire format; `llamacpp.LlamaCppResponseWriter` writes llama.cpp's, `AnthropicWriter`
    Anthropic's events."""

    closes_after_stream = False  # llama-server closes the connection after each stream

    __slots__ = (
        "server",
        "conn",
        "kind",
        "request_id",
        "response_id",
        "stream",
        "include_usage",
        "fault",
        "fault_at",
        "arrival",
        "path",
        "seq",
        "sampling",
        "templates",
        "reasoning_tokens",
        "tool_call",
        "call_at",
        "call_end",
        "tool_call_openings",
        "event_times",
        "outcome",
        "headers",
        "ended",
    )

    def __init__(
        self,
        server: SimServer,
        conn: HttpConnection,
        kind: str,
        request_id: str,
        response_id: str,
        stream: bool,
        include_usage: bool,
        fault: str | None,
        arrival: float,
        path: str,
    ) -> None:
        self.server = server
        self.conn = conn
        self.kind = kind
        self.request_id = request_id
        self.response_id = response_id
        self.stream = stream
        self.include_usage = include_usage
        self.fault = fault
        self.fault_at = 0
        self.arrival = arrival
        self.path = path
        self.seq: Sequence | None = None
        self.sampling: dict[str, object] = {}  # the request's max_tokens, ignore_eos, temperature
        self.templates: StreamTemplates = self._templates(kind, response_id, server.created, server.model)
        self.reasoning_tokens = server.params.reasoning_tokens
        self.tool_call: ToolCall | None = None
        self.call_at = self.call_end = NO_STOP  # where the tool call's tokens begin and end
        self.tool_call_openings: list[bytes] = []
        self.event_times: list[float] | None = [] if server.truth is not None else None
        self.outcome = "ok"
        self.headers: list[tuple[str, str]] = []
        self.ended = False

    def plan_tool_call(self, call: ToolCall | None, call_at: int) -> None:
        """The answer ends with `call`, whose header is output token `call_at`."""
        self.tool_call = call
        if call is not None:
            self.call_at = call_at
            self.call_end = call_at + call.token_count
            if self.stream and self.kind == wire.CHAT:
                self.tool_call_openings = self.templates.tool_call_openings(call)

    def _templates(self, kind: str, response_id: str, created: int, model: str) -> StreamTemplates:
        return wire.ChunkTemplates(kind, response_id, created, model)

    def opening(self) -> bytes:
        """What a stream starts with, before any token: vLLM's role-only chunk (chat)."""
        return self.templates.role_event() if self.kind == wire.CHAT else b""

    def on_token(self, seq: Sequence, now: float) -> None:
        """Hot path: one output event."""
        index = seq.output_count - 1
        if index + 1 == self.call_end and seq.finish_reason is not None:
            seq.finish_reason = FINISH_TOOL_CALLS  # the call is whole: that, not the length, ended it
        if not self.stream:
            if self.fault in ("cut", "error_mid") and index == self.fault_at:
                self.outcome = self.fault
                self.server.engine.cancel(seq, now)
                if self.fault == "cut":
                    self.conn.abort()
                else:
                    status = 500
                    self.conn.respond(
                        status, self.error_body(status, ERROR_MID_MESSAGE), headers=self.headers
                    )
            elif self.event_times is not None:
                self.event_times.append(now)
            return
        if self.fault == "stall_mid" and index >= 1:
            if self.outcome == "ok":  # the engine drops it; the client hears nothing more
                self.outcome = "stalled"
                self.server.engine.cancel(seq, now)
            return
        if self.fault is not None and index == self.fault_at:
            if self.fault == "cut":
                self.outcome = "cut"
                self.conn.abort()
                self.server.engine.cancel(seq, now)
                return
            if self.fault == "error_mid":  # the engine fails the request; the stream ends with the error
                self.outcome = "error_mid"
                self.server.engine.cancel(seq, now)
                self.conn.end_stream(self.error_event(500, ERROR_MID_MESSAGE))
                return
            if self.fault == "bad_json":
                self.conn.write_chunk(self.broken_event())
        data = self.token_event(seq, index)
        if self.event_times is not None:
            self.event_times.append(self.server.clock())  # just before the write, as the client's t is after
        self.conn.write_chunk(data)
        self.server.events += 1

    # -- the wire format (vLLM's OpenAI chunks here; AnthropicWriter's events for /v1/messages)
    error_body = staticmethod(wire.error_body)
    error_event = staticmethod(wire.error_event)

    def token_event(self, seq: Sequence, index: int) -> bytes:
        templates = self.templates
        if index >= self.call_at:
            opening = self.tool_call_openings[index - self.call_at]
        else:
            token = OUTPUT_JSON[(seq.output_start + index) % VOCAB_SIZE]
            opening = (
                templates.reasoning_open if index < self.reasoning_tokens else templates.content_open
            ) + token
        if seq.finish_reason is None:
            return opening + templates.close_running
        return opening + self._last_close(seq.finish_reason)

    def _last_close(self, finish_reason: str) -> bytes:
        """The end of the last token's chunk: vLLM puts the finish reason on it."""
        templates = self.templates
        assert isinstance(templates, wire.ChunkTemplates)
        return templates.close_final % finish_reason.encode()

    def broken_event(self) -> bytes:
        return self.templates.broken_event()

    def on_finish(self, seq: Sequence, now: float) -> None:
        if self.ended:
            return
        self.ended = True
        conn = self.conn
        # stamped before the last write, as each event is: a stamp taken after it would read late by
        # whatever delays the simulator between the write and the clock, and the client's end look early
        end = self.server.clock()
        if seq.finish_reason is None or self.outcome != "ok":  # cut, failed, or the client went away
            if self.outcome == "ok":
                self.outcome = "client_closed"
        elif self.stream:
            conn.end_stream(self.stream_end(seq), close=self.closes_after_stream)
        else:
            body = self.whole_body(seq, *self._answer(seq))
            if self.fault == "bad_json":
                body = body[: len(body) // 2]
            conn.respond(200, body, headers=self.headers)
        self._record_truth(seq, end)
        self._release(seq)

    def _release(self, seq: Sequence) -> None:
        """Break the reply <-> sequence cycle so that reference counting frees both at once (no GC pause)."""
        seq.on_token = None
        seq.on_finish = None
        self.seq = None
        self.conn.on_close = None

    def on_client_gone(self) -> None:
        seq = self.seq
        if seq is None or self.ended:
            return
        if self.outcome == "ok":
            self.outcome = "client_closed"
        if self.fault == "stall":
            self.ended = True
            self._record_truth(seq, self.server.clock())
            self._release(seq)
            return
        self.server.engine.abort(seq, self.server.clock())

    def _reasoning_count(self, seq: Sequence) -> int | None:
        """The reasoning tokens usage reports: as vLLM with a reasoning parser, chat replies only
        (completions carry the reasoning as text); None when the engine is no reasoning model."""
        if not self.reasoning_tokens or self.kind != wire.CHAT:
            return None
        return min(self.reasoning_tokens, seq.output_count)

    def _answer(self, seq: Sequence) -> tuple[str | None, str, ToolCall | None]:
        """A whole answer's reasoning, text and tool call; a call cut short by max_tokens stays text,
        as an engine's tool parser leaves what it cannot parse."""
        count = seq.output_count
        reasoning_count = min(self.reasoning_tokens, count)
        reasoning = output_text(seq.output_start, reasoning_count) if reasoning_count else None
        text_end = min(count, self.call_at)
        content = output_text(seq.output_start + reasoning_count, text_end - reasoning_count)
        call = self.tool_call
        if call is not None and count < self.call_end:
            content += call.arguments_so_far(count - self.call_at)
            call = None
        return reasoning, content, call

    def stream_end(self, seq: Sequence) -> bytes:
        templates = self.templates
        assert isinstance(templates, wire.ChunkTemplates)
        tail = b""
        if self.include_usage:
            tail = templates.usage_event(
                seq.prompt_len, seq.output_count, seq.num_cached, self._reasoning_count(seq)
            )
        return tail + wire.DONE_EVENT

    def whole_body(self, seq: Sequence, reasoning: str | None, content: str, call: ToolCall | None) -> bytes:
        usage = wire.usage_body(seq.prompt_len, seq.output_count, seq.num_cached, self._reasoning_count(seq))
        reason = seq.finish_reason or "stop"
        created = self.server.created
        model = self.server.model
        if self.kind == wire.CHAT:
            calls = [wire.message_tool_call(call)] if call is not None else None
            return wire.chat_response(
                self.response_id, created, model, content, reasoning, reason, usage, calls
            )
        return wire.completion_response(
            self.response_id, created, model, (reasoning or "") + content, reason, usage
        )

    def _record_truth(self, seq: Sequence, end: float) -> None:
        truth = self.server.truth
        if truth is None:
            return
        offset = self.server.wall_offset
        times = self.event_times or []
        status = 500 if self.outcome == "error_mid" and not self.stream else 200  # answered as an error
        record = self.server._truth_base(
            self.request_id, self.path, self.kind, self.fault, status, self.arrival, end, seq.prompt_len
        )
        record.update(
            outcome=self.outcome,
            stream=self.stream,
            admitted=None if seq.admitted_at is None else round(seq.admitted_at + offset, 6),
            first_token=round(times[0] + offset, 6) if times else None,
            cached_tokens=seq.num_cached,
            output_tokens=len(times),  # written (or, not streamed, generated) before any cut or close
            finish_reason=seq.finish_reason,
            preemptions=seq.preemptions,
            event_times=[round(t + offset, 6) for t in times],
            **self.sampling,
        )
        if seq.closed_at is not None:  # abandoned: every token generated for it, and those after the close
            record.update(
                wasted_tokens=seq.output_count, wasted_after_close=seq.output_count - seq.output_at_close
            )
        truth.add(record)


class AnthropicWriter(ResponseWriter):
    """Writes one /v1/messages answer in Anthropic's events (or as one message, not streamed)."""

    __slots__ = ("message_stream",)
    error_body = staticmethod(anthropic.error_body)
    error_event = staticmethod(anthropic.error_event)

    def plan_tool_call(self, call: ToolCall | None, call_at: int) -> None:
        super().plan_tool_call(call, call_at)
        self.message_stream = anthropic.MessageStream(
            self.response_id, self.server.model, self.reasoning_tokens, self.call_at, call
        )

    def opening(self) -> bytes:
        return b""  # message_start waits for the first token: its usage has the cached count by then

    def token_event(self, seq: Sequence, index: int) -> bytes:
        usage = anthropic.usage_body(seq.prompt_len, seq.num_cached, 0) if index == 0 else {}
        return self.message_stream.token(index, OUTPUT_JSON[(seq.output_start + index) % VOCAB_SIZE], usage)

    def broken_event(self) -> bytes:
        return self.message_stream.broken_event()

    def stream_end(self, seq: Sequence) -> bytes:
        usage = anthropic.usage_body(seq.prompt_len, seq.num_cached, seq.output_count)
        return self.message_stream.end(seq.finish_reason or "stop", usage)

    def whole_body(self, seq: Sequence, reasoning: str | None, content: str, call: ToolCall | None) -> bytes:
        usage = anthropic.usage_body(seq.prompt_len, seq.num_cached, seq.output_count)
        reason = seq.finish_reason or "stop"
        return anthropic.message_body(
            self.response_id, self.server.model, reasoning, content, call, reason, usage
        )


ERROR_MID_MESSAGE = "Internal server error mid-stream (simulated)"


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the request body is not valid JSON") from None
    if not isinstance(value, dict):
        raise BadRequest("the request body must be a JSON object")
    return value


def _int_field(body: dict[str, object], name: str, default: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name}: expected an integer", name)
    return value
