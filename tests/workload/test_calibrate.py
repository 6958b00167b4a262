"""Prompt sizes through a backend's own tokenizer: `backend_token_counter` against real servers."""

from __future__ import annotations

import http.server
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from grill_locust.config import Backend
from grill_locust.scenario import Conversation, validate_conversation
from grill_locust.sim import SimProcess
from grill_locust.tokens import count_tokens
from grill_locust.workload import backend_token_counter, build_workload
from grill_locust.workload.calibrate import clear_cache
from tests.ports import free_port
from tests.real.conftest import ServerProcess

TOLERANCE = 0.02  # sizes within ±2 % on the backend's tokenizer
TINY_TARGET_SLACK_TOKENS = 1  # below 50 tokens, 2 % is less than a token
ID_CHECKS = 50  # random request ids tokenized by the backend
CALIBRATION_BUDGET_S = 20.0  # two /tokenize calls, ~3 s on a loaded 2-core machine
# the four workloads at their default sizes (issue 3): every message is measured
DEFAULT_WORKLOADS = ("multi-turn-session", "shared-prefix", "short-baseline", "unique-prompts")


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


def backend(**fields: Any) -> Backend:
    return Backend.model_validate({"name": "b", **fields})


def sized_messages(conversation: Conversation, script: Any) -> list[tuple[str, int, str]]:
    """(part, target tokens, text) for every sized message of one script."""
    parts: list[tuple[str, int, str]] = []

    def size(*keys: str) -> int:  # the first of these sizes the conversation's kind has
        return next((getattr(conversation, key) for key in keys if hasattr(conversation, key)), 0)

    if script.system is not None:
        parts.append(("system", size("system_tokens", "prefix_tokens"), script.system))
    asked = size("turn_tokens", "question_tokens", "prompt_tokens")
    name = {"multi-turn": "turn", "shared-prefix": "question"}.get(conversation.kind, "prompt")
    parts += [(f"{name} {index}", asked, text) for index, text in enumerate(script.user_turns)]
    return parts


def sizes_on_backend(
    counter: Any, kinds: dict[str, dict[str, int]] | None = None, users: int = 3
) -> list[tuple[str, int, int]]:
    """(workload and part, asked, measured by the backend) for every message of a few scripts of each kind."""
    found = []
    for name, sizes in (kinds or {name: {} for name in DEFAULT_WORKLOADS}).items():
        conversation = validate_conversation({"name": name, **sizes})
        workload = build_workload(conversation, token_counter=counter)
        for user in range(users):
            for part, asked, text in sized_messages(conversation, workload.script(f"u{user}", 0)):
                found.append((f"{name} {part}", asked, counter.remote_count(text)))
    return found


def allowed_error(target: int) -> float:
    return max(TOLERANCE * target, TINY_TARGET_SLACK_TOKENS)


def test_calibration_against_the_simulated_engine() -> None:
    with SimProcess.start(profile="vllm") as process:
        target = backend(engine="sim", url=process.url)
        counter = backend_token_counter(target)
        assert counter is not None
        assert counter.model == "grill-sim"  # found at /v1/models
        # the simulated engine tokenizes with the approximate tokenizer: the scale is exactly 1
        assert counter.backend_tokens_per_approx_token == pytest.approx(1.0)
        assert backend_token_counter(target) is counter  # cached per backend
        assert counter.measured is None  # counts only, no pieces: one scale
        for _, asked, measured in sizes_on_backend(counter, users=2):
            assert measured == asked


def test_no_tokenize_endpoint_means_approximate_sizes() -> None:
    assert backend_token_counter(backend(engine="openai", url="http://127.0.0.1:9")) is None


def test_a_failing_tokenize_endpoint_falls_back_once(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    target = backend(engine="vllm", url=f"http://127.0.0.1:{closed_port}", api_key="sk-do-not-log")
    with caplog.at_level(logging.WARNING):
        assert backend_token_counter(target) is None
        start = time.monotonic()
        assert backend_token_counter(target) is None  # cached: no second attempt
        assert time.monotonic() - start < 0.5
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "approximate tokenizer" in warnings[0]
    assert "sk-do-not-log" not in caplog.text


@pytest.mark.slow
def test_calibration_on_a_real_llama_server_measures_token_pieces(llama_server: ServerProcess) -> None:
    """llama.cpp's request shape works; calibration is bounded, cached, and measures the pieces."""
    start = time.monotonic()
    counter = backend_token_counter(backend(engine="llamacpp", url=llama_server.url))
    assert time.monotonic() - start < CALIBRATION_BUDGET_S
    assert counter is not None and counter.engine == "llamacpp"
    assert 0.5 < counter.backend_tokens_per_approx_token < 2.0
    measured = counter.measured
    assert measured is not None, "llama.cpp answers with_pieces: sizes should be measured, not scaled"
    assert len(measured.definitions) > 200 and len(measured.id_words) > 1000
    assert backend_token_counter(backend(engine="llamacpp", url=llama_server.url)) is counter  # cached
    # the code between two token starts is exactly that many tokens on the backend
    for start_token, n_tokens in ((measured.definitions[0].token_index, 37), (1000, 500)):
        assert counter.remote_count(measured.code(start_token, n_tokens)) == n_tokens
    # ids of words drawn at random are one token a word on the backend, the colon after them one more
    workload = build_workload(
        validate_conversation({"name": "c", "kind": "short-baseline", "prompt_tokens": 50}),
        token_counter=counter,
    )
    for user in range(ID_CHECKS):
        request_id = workload.script(f"u{user}", 0).user_turns[0].split(":")[0]
        assert counter.remote_count(f"{request_id}: x") == measured.id_tokens(request_id) + 2, request_id


@pytest.mark.slow
def test_sizes_within_two_percent_on_a_real_llama_server(llama_server: ServerProcess) -> None:
    """Every message of the four workloads at their default sizes, and at small and odd sizes, measured
    by the server's own /tokenize: within ±2 % of its target (±1 token below 50)."""
    counter = backend_token_counter(backend(engine="llamacpp", url=llama_server.url))
    found = sizes_on_backend(counter)
    found += sizes_on_backend(
        counter,
        {
            "multi-turn-session": {"system_tokens": 333, "turn_tokens": 17, "user_turns": 2},
            "shared-prefix": {"prefix_tokens": 777, "question_tokens": 41},
            "short-baseline": {"prompt_tokens": 5},
            "unique-prompts": {"prompt_tokens": 1234},
        },
        users=2,
    )
    kinds = {part.split()[0] for part, _, _ in found}
    assert kinds == set(DEFAULT_WORKLOADS)
    errors = [
        f"{part}: {measured} for {asked}"
        for part, asked, measured in found
        if abs(measured - asked) > allowed_error(asked)
    ]
    worst = max(abs(measured - asked) / asked for _, asked, measured in found)
    print(f"{len(found)} messages, worst error {worst:.2%}", file=sys.stderr)
    assert not errors, f"outside ±2 % of {len(found)} messages: {errors}"


class _Tokenizer(http.server.BaseHTTPRequestHandler):
    """A loopback /tokenize endpoint: the text it was sent, and a JSON answer (or a bare status)."""

    def _text(self, key: str) -> str:
        length = int(self.headers.get("Content-Length", "0"))
        return str(json.loads(self.rfile.read(length)).get(key, ""))

    def _answer(self, status: int, payload: Any = None) -> None:
        body = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        if payload is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _RecordingTokenizer(_Tokenizer):
    """A tokenize endpoint on another server: answers counts and remembers the headers it got."""

    seen: list[dict[str, str]] = []

    def do_POST(self) -> None:  # noqa: N802 (the handler's API)
        text = self._text("prompt")
        type(self).seen.append(dict(self.headers.items()))
        self._answer(200, {"count": count_tokens(text), "tokens": [], "token_strs": None})


def test_the_key_goes_to_a_tokenizer_on_the_backends_own_server_only() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RecordingTokenizer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    elsewhere = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for url, key_sent in ((f"http://127.0.0.1:{free_port()}", False), (elsewhere, True)):
            _RecordingTokenizer.seen.clear()
            clear_cache()
            target = backend(
                engine="vllm",
                url=url,
                api_key="sk-only-for-the-backend",
                tokenize_url=f"{elsewhere}/tokenize",
            )
            counter = backend_token_counter(target, model="m")
            assert counter is not None and counter.backend_tokens_per_approx_token == pytest.approx(1.0)
            sent = {headers.get("Authorization") for headers in _RecordingTokenizer.seen}
            assert sent == ({"Bearer sk-only-for-the-backend"} if key_sent else {None})
    finally:
        server.shutdown()
        server.server_close()


class _TokenizerFailingAfterOneCall(_Tokenizer):
    """llama.cpp's /tokenize with pieces for the first call (the calibration stream), then HTTP 503."""

    calls = 0

    def do_POST(self) -> None:  # noqa: N802 (the handler's API)
        text = self._text("content")
        type(self).calls += 1
        if type(self).calls > 1:
            self._answer(503)
            return
        pieces = [text[i : i + 3] for i in range(0, len(text), 3)]  # 3 characters a token
        self._answer(200, {"tokens": [{"id": i, "piece": p} for i, p in enumerate(pieces)]})


def test_a_failure_after_the_stream_was_measured_keeps_its_ratio(caplog: pytest.LogCaptureFixture) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _TokenizerFailingAfterOneCall)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        clear_cache()
        with caplog.at_level(logging.WARNING):
            counter = backend_token_counter(backend(engine="llamacpp", url=url))
        # the stream, the spans, the turn whose template tokens are measured: 503, so none are taken off
        assert counter is not None and counter.measured is None and _TokenizerFailingAfterOneCall.calls == 3
        assert counter.backend_tokens_per_approx_token > 1.0  # 3-character tokens: more than the estimate's
        assert (
            counter.turn_overhead_tokens == 0 and "chat template's tokens cannot be measured" in caplog.text
        )
        assert "measured ratio" in caplog.text and "approximate tokenizer" not in caplog.text
    finally:
        server.shutdown()
        clear_cache()


class _TokenizerCountingNothing(_Tokenizer):
    """A tokenizer that reads another body shape than the one sent: no tokens for any text."""

    def do_POST(self) -> None:  # noqa: N802 (the handler's API)
        self._answer(200, {"tokens": []})


def test_a_tokenizer_counting_no_tokens_falls_back_with_a_clear_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _TokenizerCountingNothing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        clear_cache()
        with caplog.at_level(logging.WARNING):
            assert backend_token_counter(backend(engine="llamacpp", url=url)) is None
        assert "counted no tokens" in caplog.text and "approximate tokenizer" in caplog.text
    finally:
        server.shutdown()
        clear_cache()
