"""Real-shaped transcripts of vLLM, SGLang, llama.cpp, TGI, Ollama, LiteLLM and OpenAI's API, replayed
on a fake clock through the client's sans-IO reader: each metric of the contract (docs/metrics.md) is pinned.
Every engine of the engine table has at least one (`<engine>_<what>.http`); `<engine>_messages*` are
Anthropic Messages streams, read by `MessagesTimer`."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from client_replay import load, piece_time, replay, split_pieces, timer_class_for, transcript_names

from grill_locust.engines import ENGINE_NAMES
from grill_locust.record import measure

# The simulated engine is no transcript: its replies are checked live, against the times it logged
# for every event it sent (tests/client/test_client_sim.py, tests/sim/).
LIVE_ONLY_ENGINES = ("sim",)


@dataclass(frozen=True)
class Expected:
    status: str
    output_pieces: tuple[int, ...]  # pieces (see split_pieces) that carry an output event
    visible_piece: int | None  # first non-reasoning output
    end_piece: int  # [DONE], the failure, or the close
    finish_reason: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    output_tokens: int
    tokens_source: str
    text: str
    reasoning: str = ""
    error_contains: str = ""
    tool_calls: tuple[tuple[str, str, str], ...] = ()  # (id, name, arguments), assembled from the pieces
    reasoning_tokens: int = 0
    finish_piece: int | None = None  # the first token's event where no event carried output (the finish)


VLLM_CHAT = Expected("ok", (2, 3, 4, 5, 6), 2, 9, "stop", 1534, 1520, 5, "usage", "def add(a, b):")
EXPECTED: dict[str, Expected] = {
    "vllm_chat": VLLM_CHAT,
    "litellm_crlf": VLLM_CHAT,
    # a model that stops at its first token: a reply of one token, not an `empty` failure
    "vllm_first_token_stop": Expected("ok", (), None, 4, "stop", 1534, None, 1, "usage", "", finish_piece=2),
    # usage without completion_tokens_details (vLLM before it reported them): reasoning counted from events
    "vllm_reasoning": Expected(
        "ok",
        (2, 3, 4, 5),
        4,
        7,
        "length",
        40,
        None,
        4,
        "usage+reasoning_events",
        "Use sorted",
        "The user",
        reasoning_tokens=2,
    ),
    "vllm_error_midstream": Expected(
        "http_500", (2, 3), 2, 4, None, None, None, 2, "events", "import os", error_contains="EngineCore"
    ),
    "vllm_completions": Expected("ok", (1, 2, 3), 1, 5, "stop", 12, None, 4, "usage", "    return a + b"),
    "sglang_chat": Expected(
        "ok",
        (2, 3, 4, 5),
        4,
        8,
        "stop",
        4120,
        4096,
        4,
        "usage+reasoning_events",
        "return x",
        "Okay,",
        reasoning_tokens=2,
    ),
    # llama.cpp: cached tokens come from `timings.cache_n` (its usage has no prompt_tokens_details)
    "llamacpp_chat": Expected("ok", (2, 3, 4), 2, 6, "stop", 1085, 1024, 3, "usage", "for i in"),
    # no usage at all: prompt and completion tokens from `timings`
    "llamacpp_completions_no_usage": Expected("ok", (1, 2), 1, 4, "length", 48, 0, 2, "usage", "x ="),
    # llama.cpp's own stream (/infill): `content` chunks, counts and `timings` on the `stop` chunk, no [DONE]
    "llamacpp_infill": Expected("ok", (1, 2, 3, 4), 1, 6, "stop", 1534, 1520, 4, "usage", "    return a + b"),
    "llamacpp_error_midstream": Expected(
        "http_500", (2,), 2, 3, None, None, None, 1, "events", "def", error_contains="tool call arguments"
    ),
    # `data:` without a space, role in every delta, a `:` keep-alive comment as piece 2
    "tgi_chat": Expected("ok", (1, 3, 4), 1, 6, "stop", 52, None, 3, "usage", "while True:"),
    "tgi_error_midstream": Expected(
        "stream_cut", (1,), 1, 2, None, None, None, 1, "events", "while", error_contains="CUDA out of memory"
    ),
    "ollama_chat": Expected(
        "ok",
        (1, 2, 3),
        2,
        6,
        "stop",
        26,
        None,
        3,
        "usage+reasoning_events",
        "print(1)",
        "Hmm",
        reasoning_tokens=1,
    ),
    # tool_calls deltas are output, and visible (not reasoning)
    "litellm_tool_calls": Expected(
        "ok",
        (2, 3),
        2,
        6,
        "tool_calls",
        310,
        256,
        11,
        "usage",
        "",
        tool_calls=(("call_1", "read_file", '{"path": "a.py"}'),),
    ),
    "litellm_error_midstream": Expected(
        "http_500", (1,), 1, 2, None, None, None, 1, "events", "class", error_contains="Connection reset"
    ),
    # `usage: null` in every chunk, usage with details last; the role chunk's empty content is no output
    "openai_chat": Expected("ok", (2, 3, 4), 2, 7, "stop", 1100, 1024, 3, "usage", "def add():"),
    # Anthropic's Messages API: E2E ends at message_stop; prompt tokens are input + cache-read
    # (+ cache-creation) input tokens, cached tokens the cache-read ones; stop reasons in its words
    "llamacpp_messages": Expected("ok", (3, 4, 5), 3, 8, "end_turn", 1085, 1024, 3, "usage", "for i in"),
    # thinking deltas are output (TTFT) but not visible (TTFO waits for the text); signature_delta is none
    # Anthropic's usage has no reasoning count: the thinking deltas are counted
    "vllm_messages_thinking": Expected(
        "ok",
        (3, 4, 8, 9),
        8,
        12,
        "max_tokens",
        40,
        None,
        4,
        "usage+reasoning_events",
        "Use sorted",
        "The user",
        reasoning_tokens=2,
    ),
    # the tool_use block's start is output; its input arrives as pieces; the ping is nothing
    "litellm_messages_tool_use": Expected(
        "ok",
        (4, 6, 8, 9),
        4,
        12,
        "tool_use",
        310,
        256,
        21,
        "usage",
        "Reading it.",
        tool_calls=(("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "read_file", '{"path": "a.py"}'),),
    ),
    # Anthropic's overloaded_error is its HTTP 529; message_start's output_tokens is a placeholder
    "litellm_messages_overloaded": Expected(
        "http_529", (4,), 4, 5, None, 310, 256, 1, "events", "class", error_contains="Overloaded"
    ),
    # a delta for a block never started fails the request where it arrives, and its text is kept
    "vllm_messages_out_of_order": Expected(
        "bad_event",
        (2, 3),
        2,
        2,
        "end_turn",
        40,
        None,
        2,
        "usage",
        "def f",
        error_contains="content_block_delta for block 0, never started",
    ),
}


def test_every_transcript_has_expectations() -> None:
    assert sorted(EXPECTED) == transcript_names()


def test_every_engine_of_the_table_has_a_replayed_transcript() -> None:
    """Adding an engine is one entry in the engine table plus a transcript of its stream here."""
    engines_replayed = {name.split("_")[0] for name in EXPECTED}
    missing = [engine for engine in ENGINE_NAMES if engine not in engines_replayed]
    assert missing == list(LIVE_ONLY_ENGINES)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_transcript_metrics_follow_the_contract(name: str) -> None:
    expected = EXPECTED[name]
    timer, reader = replay(split_pieces(load(name)), timer_class=timer_class_for(name))
    raw = timer.raw
    m = measure(raw)
    assert reader.finished
    assert m.status == expected.status, raw.error
    assert expected.error_contains in raw.error
    assert raw.http_status == 200
    assert raw.output_times == [piece_time(k) for k in expected.output_pieces]
    first = piece_time(expected.output_pieces[0] if expected.output_pieces else expected.finish_piece)
    assert m.ttft_s == pytest.approx(first)
    visible = expected.visible_piece
    assert m.ttfo_s == (pytest.approx(piece_time(visible)) if visible is not None else None)
    assert m.e2e_s == pytest.approx(piece_time(expected.end_piece))
    assert m.finish_reason == expected.finish_reason
    assert (m.prompt_tokens, m.cached_tokens) == (expected.prompt_tokens, expected.cached_tokens)
    assert (m.output_tokens, m.tokens_source) == (expected.output_tokens, expected.tokens_source)
    assert m.reasoning_tokens == expected.reasoning_tokens
    if m.output_tokens >= 2:
        assert m.tpot_s == pytest.approx((m.e2e_s - m.ttft_s) / (m.output_tokens - 1))
    else:
        assert m.tpot_s is None
    assert timer.text == expected.text
    assert timer.reasoning == expected.reasoning
    assert tuple((c.id, c.name, c.arguments) for c in timer.tool_calls) == expected.tool_calls


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_transcript_in_one_recv_and_byte_by_byte_gives_the_same_record(name: str) -> None:
    wire = load(name)
    timer_class = timer_class_for(name)
    by_piece, _ = replay(split_pieces(wire), timer_class=timer_class)
    whole, _ = replay([wire], timer_class=timer_class)
    tiny, _ = replay([wire[i : i + 1] for i in range(len(wire))], timer_class=timer_class)
    for timer in (whole, tiny):
        assert timer.raw.status == by_piece.raw.status
        assert len(timer.raw.output_times) == len(by_piece.raw.output_times)
        assert timer.text == by_piece.text and timer.reasoning == by_piece.reasoning
        assert timer.tool_calls == by_piece.tool_calls
        assert timer.raw.completion_tokens == by_piece.raw.completion_tokens
        assert timer.raw.cached_tokens == by_piece.raw.cached_tokens
    # all events of one recv share its arrival time
    assert set(whole.raw.output_times) == ({piece_time(0)} if by_piece.raw.output_times else set())
    assert whole.raw.finish_time == (piece_time(0) if by_piece.raw.finish_time is not None else None)


def test_itl_statistics_are_gaps_between_output_events() -> None:
    pieces = split_pieces(load("vllm_chat"))
    timer, _ = replay(pieces)
    m = measure(timer.raw)
    assert m.itl_mean_s == pytest.approx(0.1)
    assert m.itl_p50_s == pytest.approx(0.1)
    assert m.itl_max_s == pytest.approx(0.1)


def test_two_events_in_one_http_chunk_share_its_arrival() -> None:
    # Ollama's second HTTP chunk holds two events; cut the wire at HTTP chunk boundaries instead
    wire = load("ollama_chat")
    head_end = wire.index(b"\r\n\r\n") + 4
    pieces, body = [wire[:head_end]], wire[head_end:]
    while body:
        size_end = body.index(b"\r\n")
        size = int(body[:size_end], 16)
        end = size_end + 2 + size + 2
        pieces.append(body[:end])
        body = body[end:]
    timer, _ = replay(pieces)
    assert timer.raw.output_times == [piece_time(1), piece_time(2), piece_time(2)]


def test_a_reply_of_held_back_tokens_cut_at_max_tokens_stays_empty() -> None:
    """One token, no text, finish `length`: the engine held the token back (a tool call's markup), so the
    developer got nothing: `empty`, unlike the model's own stop at its first token."""
    timer, _ = replay(split_pieces(load("vllm_first_token_stop")), timer_class=timer_class_for("vllm_chat"))
    assert measure(timer.raw).status == "ok"
    timer.raw.finish_reason = "length"
    cut = measure(timer.raw)
    assert (cut.status, cut.ttft_s, cut.output_tokens) == ("empty", None, 1)
