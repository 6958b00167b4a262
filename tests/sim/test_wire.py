"""The simulated engine speaks vLLM's OpenAI wire format, chunk by chunk, with exact usage numbers."""

from __future__ import annotations

import json
import time

from sim_driver import chat_payload, request

from grill_locust.sim import SimProcess

CHUNK_KEYS = ["id", "object", "created", "model", "choices"]


def test_chat_stream_chunks_follow_vllm(vllm_sim):
    result = request(vllm_sim.port, "/v1/chat/completions", chat_payload("def add(a, b):", max_tokens=4))
    assert result.status == 200
    assert result.headers["content-type"].startswith("text/event-stream")
    assert result.ended_cleanly
    assert result.payloads[-1] == "[DONE]"
    chunks = result.chunks()
    role, *content, final, usage = chunks
    for chunk in chunks:
        assert list(chunk) == CHUNK_KEYS + (["usage"] if chunk is usage else [])
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["id"].startswith("chatcmpl-") and chunk["id"] == role["id"]
        assert chunk["model"] == "grill-sim"
    assert role["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    ]
    assert len(content) == 3
    for chunk in content:
        (choice,) = chunk["choices"]
        assert list(choice) == ["index", "delta", "logprobs", "finish_reason"]
        assert list(choice["delta"]) == ["content"] and choice["delta"]["content"]
        assert choice["finish_reason"] is None
    (last,) = final["choices"]
    assert last["finish_reason"] == "length" and last["stop_reason"] is None and last["delta"]["content"]
    assert usage["choices"] == []
    assert set(usage["usage"]) == {
        "prompt_tokens",
        "total_tokens",
        "completion_tokens",
        "prompt_tokens_details",
    }
    assert usage["usage"]["completion_tokens"] == 4
    assert result.headers["x-request-id"] in role["id"]


def test_completions_stream_chunks_follow_vllm(vllm_sim):
    payload = {
        "model": "grill-sim",
        "prompt": "import os\n",
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    result = request(vllm_sim.port, "/v1/completions", payload)
    chunks = result.chunks()
    assert result.payloads[-1] == "[DONE]" and len(chunks) == 4  # three tokens, then usage
    for chunk in chunks[:3]:
        assert chunk["object"] == "text_completion" and chunk["id"].startswith("cmpl-")
        (choice,) = chunk["choices"]
        assert list(choice) == ["index", "text", "logprobs", "finish_reason", "stop_reason"]
        assert choice["text"]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:3]] == [None, None, "length"]
    assert chunks[3]["choices"] == [] and chunks[3]["usage"]["completion_tokens"] == 3


def test_stream_without_include_usage_has_no_usage_chunk(vllm_sim):
    payload = chat_payload("hello", max_tokens=2)
    del payload["stream_options"]
    chunks = request(vllm_sim.port, "/v1/chat/completions", payload).chunks()
    assert all("usage" not in c for c in chunks) and len(chunks) == 3


def test_non_streamed_chat_and_completion(vllm_sim):
    payload = chat_payload("hello there", max_tokens=5, stream=False)
    result = request(vllm_sim.port, "/v1/chat/completions", payload)
    body = result.json()
    assert result.status == 200 and body["object"] == "chat.completion"
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 5
    completion = request(vllm_sim.port, "/v1/completions", {"prompt": "x = ", "max_tokens": 2}).json()
    assert completion["object"] == "text_completion" and completion["usage"]["completion_tokens"] == 2


def test_usage_prompt_tokens_equal_tokenize_count(vllm_sim):
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "for i in range(10):"},
    ]
    count = request(vllm_sim.port, "/tokenize", {"messages": messages}).json()
    payload = {
        "messages": messages,
        "max_tokens": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    usage = request(vllm_sim.port, "/v1/chat/completions", payload).chunks()[-1]["usage"]
    assert usage["prompt_tokens"] == count["count"] == len(count["tokens"])
    assert count["max_model_len"] == 131072
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    prompt = request(vllm_sim.port, "/tokenize", {"prompt": "abc def"}).json()
    assert prompt["count"] == 2


def test_fill_in_the_middle_suffix_adds_prompt_tokens(vllm_sim):
    base = {"prompt": "def f(x):\n    ", "max_tokens": 1}
    plain = request(vllm_sim.port, "/v1/completions", base).json()["usage"]["prompt_tokens"]
    fim = request(vllm_sim.port, "/v1/completions", {**base, "suffix": "\n    return y\n"}).json()
    assert fim["usage"]["prompt_tokens"] > plain


def test_repeated_prompt_reports_cached_tokens_on_vllm(vllm_sim):
    payload = chat_payload("repeat me " * 60, max_tokens=2)
    first = request(vllm_sim.port, "/v1/chat/completions", payload).chunks()[-1]["usage"]
    second = request(vllm_sim.port, "/v1/chat/completions", payload).chunks()[-1]["usage"]
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["prompt_tokens_details"]["cached_tokens"] >= second["prompt_tokens"] - 16


def test_repeated_prompt_reports_no_cached_tokens_without_prefix_caching():
    with SimProcess.start("vllm-no-prefix-cache") as sim:
        payload = chat_payload("repeat me " * 60, max_tokens=2)
        for _ in range(2):
            usage = request(sim.port, "/v1/chat/completions", payload).chunks()[-1]["usage"]
            assert usage["prompt_tokens_details"]["cached_tokens"] == 0


def test_bad_requests_get_openai_errors(vllm_sim):
    missing = request(vllm_sim.port, "/v1/chat/completions", {"model": "grill-sim", "max_tokens": 2})
    assert missing.status == 400
    error = missing.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == 400
    unknown = request(vllm_sim.port, "/v1/chat/completions", chat_payload("hi", model="nope"))
    assert unknown.status == 404 and "does not exist" in unknown.json()["error"]["message"]
    too_long = request(vllm_sim.port, "/v1/chat/completions", chat_payload("word " * 140000, max_tokens=10))
    assert too_long.status == 400 and "maximum context length" in too_long.json()["error"]["message"]
    conn_result = request(vllm_sim.port, "/v1/chat/completions", None)
    assert conn_result.status == 400
    assert request(vllm_sim.port, "/nowhere", method="GET").status == 404


def test_models_health_and_metrics(vllm_sim):
    assert request(vllm_sim.port, "/health", method="GET").status == 200
    models = request(vllm_sim.port, "/v1/models", method="GET").json()
    assert [m["id"] for m in models["data"]] == ["grill-sim"]
    text = request(vllm_sim.port, "/metrics", method="GET").body.decode()
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
    ):
        assert f'{name}{{model_name="grill-sim"}} ' in text
    assert 'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="grill-sim"}' in text
    assert 'vllm:time_to_first_token_seconds_count{model_name="grill-sim"}' in text


def test_output_is_deterministic_by_seed(vllm_sim):
    def text(seed: int) -> str:
        chunks = request(
            vllm_sim.port, "/v1/chat/completions", chat_payload("s", max_tokens=6, seed=seed)
        ).chunks()
        return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])

    assert text(1) == text(1)
    assert text(1) != text(2)


def test_answer_stops_by_itself_unless_ignore_eos():
    with SimProcess.start("vllm", extra_args=["--natural-output-tokens", "4"]) as sim:
        natural = chat_payload("stop soon", max_tokens=50, ignore_eos=False)
        usage_chunks = request(sim.port, "/v1/chat/completions", natural).chunks()
        assert usage_chunks[-2]["choices"][0]["finish_reason"] == "stop"
        assert usage_chunks[-1]["usage"]["completion_tokens"] < 50
        at_least = request(sim.port, "/v1/chat/completions", {**natural, "min_tokens": 20}).chunks()
        assert at_least[-1]["usage"]["completion_tokens"] >= 20
        forced = request(sim.port, "/v1/chat/completions", {**natural, "ignore_eos": True}).chunks()
        assert forced[-1]["usage"]["completion_tokens"] == 50
        assert forced[-2]["choices"][0]["finish_reason"] == "length"


def test_reasoning_tokens_stream_as_reasoning_content():
    with SimProcess.start("vllm", extra_args=["--reasoning-tokens", "3"]) as sim:
        chunks = request(sim.port, "/v1/chat/completions", chat_payload("think", max_tokens=5)).chunks()
        deltas = [c["choices"][0]["delta"] for c in chunks[1:-1]]
        assert [list(d) for d in deltas] == [["reasoning_content"]] * 3 + [["content"]] * 2


def test_api_key_is_required_when_set():
    with SimProcess.start("vllm", extra_args=["--api-key", "sekrit"]) as sim:
        denied = request(sim.port, "/v1/chat/completions", chat_payload("hi"))
        assert denied.status == 401 and denied.json()["error"]["code"] == 401
        allowed = request(
            sim.port, "/v1/chat/completions", chat_payload("hi"), headers={"authorization": "Bearer sekrit"}
        )
        assert allowed.status == 200
        assert request(sim.port, "/health", method="GET").status == 200


def test_truth_log_matches_what_the_client_saw(vllm_sim):
    result = request(vllm_sim.port, "/v1/chat/completions", chat_payload("truth please", max_tokens=6))
    request_id = result.headers["x-request-id"]
    record = None
    deadline = time.monotonic() + 5
    while record is None and time.monotonic() < deadline:
        time.sleep(0.1)  # flushed when the engine goes idle
        for line in vllm_sim.truth_path.read_text().splitlines():
            candidate = json.loads(line)
            if candidate["request_id"] == request_id:
                record = candidate
    assert record is not None
    assert record["output_tokens"] == 6 and record["finish_reason"] == "length" and record["fault"] is None
    assert record["prompt_tokens"] == result.chunks()[-1]["usage"]["prompt_tokens"]
    client_times = result.output_times()
    assert len(record["event_times"]) == len(client_times) == 6
    assert record["first_token"] == record["event_times"][0]
    assert result.t0 <= record["arrival"] <= record["first_token"] <= record["end"]
    for emitted, arrived in zip(record["event_times"], client_times, strict=True):
        assert -0.001 <= arrived - emitted < 0.25  # same clock (to clock-offset precision), loopback delivery


def test_keep_alive_serves_many_requests_on_one_connection(vllm_sim):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", vllm_sim.port, timeout=10)
    for _ in range(3):
        result = request(
            vllm_sim.port, "/v1/chat/completions", chat_payload("again", max_tokens=2), connection=conn
        )
        assert result.status == 200 and result.payloads[-1] == "[DONE]"
    assert request(vllm_sim.port, "/v1/models", method="GET", connection=conn).status == 200
    conn.close()


def test_llamacpp_tokenize_shape_is_answered_too(vllm_sim):
    answer = request(vllm_sim.port, "/tokenize", {"content": "abc def"}).json()
    assert answer == {"tokens": request(vllm_sim.port, "/tokenize", {"prompt": "abc def"}).json()["tokens"]}


def test_client_leaving_mid_stream_frees_its_place(vllm_sim):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", vllm_sim.port, timeout=10)
    conn.request("POST", "/v1/chat/completions", json.dumps(chat_payload("leave early", max_tokens=5000)))
    response = conn.getresponse()
    for _ in range(3):
        assert response.readline()
    conn.close()
    deadline = time.monotonic() + 5
    running = None
    while time.monotonic() < deadline:
        metrics = request(vllm_sim.port, "/metrics", method="GET").body.decode()
        running = next(x for x in metrics.splitlines() if x.startswith("vllm:num_requests_running{"))
        if running.endswith(" 0.0"):
            break
        time.sleep(0.05)
    assert running is not None and running.endswith(" 0.0")
