"""The simulated engine answering as llama.cpp's `llama-server` does (the `llamacpp` flavor): its
chunks with `timings`, usage in a chat stream only when asked, the connection closed after each stream,
`/slots`, `/tokenize` on `content`, `/metrics` in `llamacpp:*` names, its error bodies, HTTP 400
for a prompt that does not fit a slot's context, and `/infill` (fill-in-the-middle with other files
as context) in its own stream, or HTTP 501 for a model without FIM tokens (`fim_tokens: false`)."""

from __future__ import annotations

from typing import Any

from grill_locust.fim_templates import FILE_SEPARATOR_TOKEN, REPO_NAME_TOKEN
from grill_locust.sim import llamacpp_wire
from grill_locust.sim.httpserver import HttpConnection, HttpRequest
from grill_locust.sim.kvcache import SlotCache
from grill_locust.sim.metrics import PredictionTotals, render_llamacpp_metrics
from grill_locust.sim.sequence import Sequence
from grill_locust.sim.server import (
    SIM_FIM_TEMPLATE,
    BadRequest,
    ResponseWriter,
    SimServer,
    StreamTemplates,
    _int_field,
    _json_object,
)
from grill_locust.sim.text import OUTPUT_IDS, OUTPUT_JSON, VOCAB_SIZE, output_text, prompt_tokens
from grill_locust.sim.tools import ToolCall
from grill_locust.sim.wire import CHAT
from grill_locust.tokens import token_id, tokenize

PUBLIC_PATHS = frozenset({"/health", "/v1/health"})  # answered without the API key, as llama-server does
TOKEN_ID_SPACE = 1 << 31  # the simulated tokenizer's ids are 31-bit hashes (`tokens.token_id`)
NO_FIM_TOKENS = (
    "Infill is not supported by this model: prefix token is missing. suffix token is missing. "
    "middle token is missing. "
)
# llama-server's /infill names the repository and the file being completed with fixed words
INFILL_REPOSITORY = "myproject\n"
INFILL_FILE = "filename\n"


class ContextExceeded(BadRequest):
    """A prompt of at least a slot's context: llama-server refuses it before any work."""

    def __init__(self, prompt_tokens: int, slot_context: int) -> None:
        super().__init__(
            f"request ({prompt_tokens} tokens) exceeds the available context size ({slot_context} tokens)"
        )
        self.prompt_tokens = prompt_tokens
        self.slot_context = slot_context


class LlamaCppServer(SimServer):
    """`SimServer` with llama-server's routes, HTTP errors and answers."""

    serves_suffix = False  # llama-server takes OpenAI's `suffix` and leaves it out of the prompt

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.totals = PredictionTotals()
        self.live_tasks: dict[str, int] = {}  # request id -> llama-server's task number, while it runs
        self.slot_tasks: dict[int, int] = {}  # slot -> the task it served last
        self.routes.update(
            {
                ("GET", "/health"): self._health,
                ("GET", "/v1/health"): self._health,
                ("GET", "/v1/models"): self._models,
                ("GET", "/models"): self._models,
                ("POST", "/tokenize"): self._tokenize,
                ("GET", "/metrics"): self._metrics,
                ("GET", "/slots"): self._slots,
                ("POST", "/infill"): self._infill,
            }
        )

    def handle(self, conn: HttpConnection, request: HttpRequest) -> None:
        """llama-server closes the connection after any error; an unknown route or method is a 404."""
        route = self.routes.get((request.method, request.path))
        if route is None:
            conn.respond(404, llamacpp_wire.http_error_body(404, "File Not Found"), close=True)
            return
        if self.api_key and request.path not in PUBLIC_PATHS and not request.path.startswith("/sim/"):
            headers = request.headers
            if self.api_key not in (
                headers.get("authorization", "").removeprefix("Bearer "),
                headers.get("x-api-key"),
            ):
                conn.respond(401, llamacpp_wire.http_error_body(401, "Invalid API Key"), close=True)
                return
        try:
            route(conn, request)
        except ContextExceeded as error:
            body = llamacpp_wire.exceed_context_body(error.prompt_tokens, error.slot_context)
            conn.respond(400, body, close=True)
        except BadRequest as error:
            conn.respond(error.status, llamacpp_wire.error_body(error.status, str(error)), close=True)

    # -- routes
    def _health(self, conn: HttpConnection, request: HttpRequest) -> None:
        conn.respond(200, b'{"status":"ok"}', headers=list(llamacpp_wire.HEADERS))

    def _models(self, conn: HttpConnection, request: HttpRequest) -> None:
        params = self.params
        body = llamacpp_wire.models_body(
            self.model, self.created, params.context_limit, params.max_model_len, TOKEN_ID_SPACE
        )
        conn.respond(200, body, headers=list(llamacpp_wire.HEADERS))

    def _tokenize(self, conn: HttpConnection, request: HttpRequest) -> None:
        """llama-server's `{"content"}` shape; vLLM's (`prompt`, `messages`) is answered in vLLM's, for
        backends that name this server `engine: sim` (the real one would count no tokens)."""
        body = _json_object(request.body)
        if "content" not in body and ("prompt" in body or "messages" in body):
            super()._tokenize(conn, request)
            return
        content = body.get("content", "")  # llama-server tokenizes nothing when `content` is missing
        if not isinstance(content, str):
            raise BadRequest("content: expected a string", "content")
        tokens = prompt_tokens(content)  # special tokens' spellings are read as them, as llama-server does
        ids = [token_id(token) for token in tokens]
        pieces = tokens if body.get("with_pieces") else None
        conn.respond(200, llamacpp_wire.tokenize_body(ids, pieces), headers=list(llamacpp_wire.HEADERS))

    def _metrics(self, conn: HttpConnection, request: HttpRequest) -> None:
        text = render_llamacpp_metrics(self.engine, self.totals)
        conn.respond(200, text.encode(), "text/plain; version=0.0.4", headers=list(llamacpp_wire.HEADERS))

    def _slots(self, conn: HttpConnection, request: HttpRequest) -> None:
        engine = self.engine
        slot_context = self.params.context_limit
        cache = engine.cache
        running = {seq.slot: seq for seq in engine.running}
        slots = []
        for slot in range(self.params.max_num_seqs):
            seq = running.get(slot)
            if seq is not None:
                body = llamacpp_wire.slot_body(
                    slot,
                    slot_context,
                    True,
                    self.live_tasks.get(seq.request_id, self.slot_tasks.get(slot, 0)),
                    seq.num_computed,
                    seq.num_computed - seq.num_cached,
                    seq.num_cached,
                    seq.output_count,
                    seq.max_tokens - seq.output_count,
                )
            else:
                held = len(cache.kept[slot]) if isinstance(cache, SlotCache) else 0
                body = llamacpp_wire.slot_body(
                    slot, slot_context, False, self.slot_tasks.get(slot), held, 0, 0, 0, -1
                )
            slots.append(body)
        conn.respond(200, llamacpp_wire.json_body(slots), headers=list(llamacpp_wire.HEADERS))

    # -- completions
    def _infill(self, conn: HttpConnection, request: HttpRequest) -> None:
        """llama.cpp's fill-in-the-middle: the prompt is built from the request's fields (`infill_ids`)
        and answered in llama.cpp's own stream."""
        body = _json_object(request.body)
        if not self.params.fim_tokens:
            raise BadRequest(NO_FIM_TOKENS, status=501)
        self._generate(conn, request, body, llamacpp_wire.INFILL, self._infill_ids(body))

    def _infill_ids(self, body: dict[str, Any]) -> list[int]:
        """The prompt llama-server builds for /infill (Qwen2.5-Coder's repository-level layout): the
        repository token and name, each `input_extra` file as the file separator, its name and text,
        the separator and name of the file being completed, then its prefix, `prompt`, suffix among the
        FIM tokens. As llama-server does, the prefix keeps its last 3/4 of a batch, the suffix its
        first 1/4 less the prompt, the extra files what the slot's context leaves after a batch and
        twice `n_predict`; the text inside the fields is not read for special tokens."""
        errors = []
        prompt = body.get("prompt", "")
        if not isinstance(prompt, str):
            errors.append('"prompt" must be a string')
        for name in ("input_prefix", "input_suffix"):
            if not isinstance(body.get(name), str):
                errors.append(f'"{name}" is required')
        extra = body.get("input_extra", [])
        if not isinstance(extra, list):
            errors.append('"input_extra" must be an array of {"filename": string, "text": string}')
            extra = []
        for chunk in extra:
            if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
                errors.append('extra_context chunk must contain a "text" field with a string value')
            elif not isinstance(chunk.get("filename", ""), str):
                errors.append('extra_context chunk\'s "filename" field must be a string')
        if errors:
            raise BadRequest(" ".join(errors))
        fim = SIM_FIM_TEMPLATE.tokens  # prefix, suffix, middle
        extra_ids = [token_id(REPO_NAME_TOKEN), *_text_ids(INFILL_REPOSITORY)]
        for chunk in extra:
            filename = chunk.get("filename", "tmp")
            extra_ids += [
                token_id(FILE_SEPARATOR_TOKEN),
                *_text_ids(filename + "\n"),
                *_text_ids(chunk["text"]),
            ]
        extra_ids += [token_id(FILE_SEPARATOR_TOKEN), *_text_ids(INFILL_FILE)]
        prefix_ids = _text_ids(body["input_prefix"])
        suffix_ids = _text_ids(body["input_suffix"])
        prompt_ids = _text_ids(prompt)
        batch = self.params.max_num_batched_tokens
        n_predict = _int_field(body, "n_predict", None)
        if n_predict is None:
            n_predict = _int_field(body, "max_tokens", -1)
        assert n_predict is not None
        prefix_take = min(len(prefix_ids), 3 * (batch // 4))
        suffix_take = min(len(suffix_ids), max(0, batch // 4 - (2 + len(prompt_ids))))
        extra_take = min(max(0, self.params.context_limit - batch - 2 * n_predict), len(extra_ids))
        return [
            *extra_ids[len(extra_ids) - extra_take :],
            token_id(fim[0]),
            *prefix_ids[len(prefix_ids) - prefix_take :],
            *prompt_ids,
            token_id(fim[1]),
            *suffix_ids[:suffix_take],
            token_id(fim[2]),
        ]

    def _max_tokens(self, body: dict[str, object], kind: str, prompt_len: int) -> int:
        """llama-server takes any model name; a prompt must leave room in a slot's context, and
        generation stops when the slot is full (`length`), whatever `max_tokens` asked."""
        slot_context = self.params.context_limit
        if prompt_len >= slot_context:
            raise ContextExceeded(prompt_len, slot_context)
        room = slot_context - prompt_len
        requested = _int_field(body, "max_completion_tokens", None)
        if requested is None:
            requested = _int_field(body, "max_tokens", None)
        if requested is None:
            requested = _int_field(body, "n_predict", None)
        if requested is None or requested < 0:  # -1, its default: until the context is full
            return room
        if requested == 0:
            raise BadRequest("max_tokens: must be at least 1", "max_tokens")
        return min(requested, room)

    def _writer_class(self, kind: str) -> type[ResponseWriter]:
        return LlamaCppInfillWriter if kind == llamacpp_wire.INFILL else LlamaCppResponseWriter

    def _response_id(self, kind: str, request_id: str) -> str:
        return llamacpp_wire.RESPONSE_ID_PREFIX + request_id

    def _reply_headers(self, request_id: str) -> list[tuple[str, str]]:
        return list(llamacpp_wire.HEADERS)

    def error_body(self, status: int, message: str, param: str | None = None) -> bytes:
        return llamacpp_wire.error_body(status, message)


class LlamaCppResponseWriter(ResponseWriter):
    """Writes one answer as llama-server does: the role chunk with the first token, a finish chunk with
    an empty delta after the last, `timings` at the end, and the connection closed after a stream."""

    __slots__ = ("llama", "task_id", "timing")

    def __init__(self, server: SimServer, *args: Any) -> None:
        super().__init__(server, *args)
        assert isinstance(server, LlamaCppServer)
        self.llama = server
        self.task_id = server.requests
        self.timing: dict[str, object] = {}
        server.live_tasks[self.request_id] = self.task_id

    def _templates(self, kind: str, response_id: str, created: int, model: str) -> StreamTemplates:
        return llamacpp_wire.ChunkTemplates(kind, response_id, created, model)

    def _llama_templates(self) -> llamacpp_wire.ChunkTemplates:
        templates = self.templates
        assert isinstance(templates, llamacpp_wire.ChunkTemplates)
        return templates

    closes_after_stream = True

    def opening(self) -> bytes:
        return b""  # the headers only: the role chunk waits for the first token

    def on_token(self, seq: Sequence, now: float) -> None:
        if seq.output_count == 1:
            self.llama.slot_tasks[seq.slot] = self.task_id
            if self.stream and self.kind == CHAT:
                self.conn.write_chunk(self.templates.role_event())
        super().on_token(seq, now)

    def _last_close(self, finish_reason: str) -> bytes:
        return self.templates.close_running  # the finish reason comes in a chunk of its own

    def on_finish(self, seq: Sequence, now: float) -> None:
        if not self.ended:
            self.timing = self._add_timings(seq, now)
        super().on_finish(seq, now)

    def _add_timings(self, seq: Sequence, now: float) -> dict[str, object]:
        """This request's `timings`, added to the server's totals as llama-server does on release."""
        prompt_n = seq.prompt_len - seq.num_cached
        prompt_ms = predicted_ms = 0.0
        if seq.admitted_at is not None and seq.first_token_at is not None:
            prompt_ms = (seq.first_token_at - seq.admitted_at) * 1000.0
            predicted_ms = max(0.001, (now - seq.first_token_at) * 1000.0)
        totals = self.llama.totals
        if seq.admitted_at is not None:
            totals.prompt_tokens += prompt_n
            totals.cached_tokens += seq.num_cached
            totals.prompt_s += prompt_ms / 1000.0
            totals.predicted_tokens += seq.output_count
            totals.predicted_s += predicted_ms / 1000.0
            totals.tokens_max = max(totals.tokens_max, seq.prompt_len + seq.output_count)
        return llamacpp_wire.timings(seq.num_cached, prompt_n, prompt_ms, seq.output_count, predicted_ms)

    def _usage(self, seq: Sequence) -> dict[str, object]:
        return llamacpp_wire.usage_body(seq.prompt_len, seq.output_count, seq.num_cached)

    def stream_end(self, seq: Sequence) -> bytes:
        return self._llama_templates().end_events(
            seq.finish_reason or "stop", self._usage(seq), self.timing, self.include_usage
        )

    def whole_body(self, seq: Sequence, reasoning: str | None, content: str, call: ToolCall | None) -> bytes:
        if call is not None:  # a whole tool call is answered in vLLM's message shape
            return super().whole_body(seq, reasoning, content, call)
        reason = seq.finish_reason or "stop"
        server = self.server
        if self.kind == CHAT:
            body = llamacpp_wire.chat_response(
                self.response_id,
                server.created,
                server.model,
                content,
                reasoning,
                reason,
                self._usage(seq),
                self.timing,
            )
        else:
            body = llamacpp_wire.completion_response(
                self.response_id,
                server.created,
                server.model,
                (reasoning or "") + content,
                reason,
                self._usage(seq),
                self.timing,
            )
        return body

    def _release(self, seq: Sequence) -> None:
        self.llama.live_tasks.pop(self.request_id, None)
        super()._release(seq)


class LlamaCppInfillWriter(LlamaCppResponseWriter):
    """Writes one /infill answer in llama.cpp's own chunks: `content` and the counts per token, then a
    `stop: true` chunk with `timings`, and no `[DONE]` (or, not streamed, one object)."""

    __slots__ = ("slot",)

    def on_token(self, seq: Sequence, now: float) -> None:
        if seq.output_count == 1:
            self.slot = seq.slot  # the last chunk names it; the engine has freed it by then
        super().on_token(seq, now)

    def token_event(self, seq: Sequence, index: int) -> bytes:
        position = (seq.output_start + index) % VOCAB_SIZE
        return llamacpp_wire.infill_token_event(
            OUTPUT_JSON[position], OUTPUT_IDS[position], index + 1, seq.prompt_len
        )

    def _final(self, seq: Sequence, content: str) -> bytes:
        stop_type = "limit" if seq.finish_reason == "length" else "eos"
        final = llamacpp_wire.infill_final(
            content,
            getattr(self, "slot", -1),
            self.server.model,
            seq.output_count,
            seq.prompt_len,
            "\n" in output_text(seq.output_start, seq.output_count),
            stop_type,
            self.timing,
        )
        return llamacpp_wire.json_body(final)

    def stream_end(self, seq: Sequence) -> bytes:
        return b"data: " + self._final(seq, "") + b"\n\n"

    def whole_body(self, seq: Sequence, reasoning: str | None, content: str, call: ToolCall | None) -> bytes:
        return self._final(seq, (reasoning or "") + content)


def _text_ids(text: str) -> list[int]:
    """Token ids of text read as text (special tokens' spellings included), as /infill reads its fields."""
    return [token_id(token) for token in tokenize(text)]
