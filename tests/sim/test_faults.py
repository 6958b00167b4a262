"""Every fault the simulated engine can inject, by header and by seeded rate."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from sim_driver import TruthSim, chat_payload, request, truth_of

from grill_locust.client import EngineClient
from grill_locust.config import Backend
from grill_locust.record import measure
from grill_locust.sim import SimProcess
from grill_locust.sim.faults import FAULT_HEADER


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TruthSim]:
    truth = tmp_path_factory.mktemp("faults") / "truth.jsonl"
    with SimProcess.start("vllm", truth_log=str(truth), extra_args=["--fault-trickle-ms", "150"]) as process:
        yield TruthSim(process, truth)


def faulty(sim: TruthSim, fault: str, max_tokens: int = 8, timeout_s: float = 10.0, **extra):
    payload = chat_payload("fault please", max_tokens=max_tokens, **extra)
    return request(
        sim.port, "/v1/chat/completions", payload, headers={"x-grill-fault": fault}, timeout_s=timeout_s
    )


@pytest.mark.parametrize("status", [500, 503])
def test_server_errors(sim, status):
    result = faulty(sim, str(status))
    assert result.status == status
    assert result.json()["error"]["code"] == status


def test_rate_limit_has_retry_after(sim):
    result = faulty(sim, "429")
    assert result.status == 429 and result.headers["retry-after"] == "1"
    assert result.json()["error"]["type"] == "RateLimitError"


def test_stall_accepts_then_sends_nothing(sim):
    started = time.monotonic()
    result = faulty(sim, "stall", timeout_s=0.6)
    assert result.status == 200
    assert result.error == "TimeoutError"
    assert result.output_times() == []
    assert time.monotonic() - started >= 0.5


def test_cut_stream_has_no_finish_and_no_done(sim):
    result = faulty(sim, "cut", max_tokens=8)
    assert result.status == 200 and not result.ended_cleanly
    assert "[DONE]" not in result.payloads
    chunks = result.chunks()
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks if c["choices"])
    assert 1 <= len(result.output_times()) < 8
    truth = truth_of(sim, result.headers["x-request-id"])  # the truth counts what was written
    assert truth["output_tokens"] == len(truth["event_times"]) == len(result.output_times())


def test_stall_mid_sends_the_first_token_then_nothing(sim):
    result = faulty(sim, "stall_mid", max_tokens=8, timeout_s=0.8)
    assert result.status == 200 and result.error == "TimeoutError"
    assert len(result.output_times()) == 1
    truth = truth_of(sim, result.headers["x-request-id"])
    assert (truth["fault"], truth["outcome"], truth["output_tokens"]) == ("stall_mid", "stalled", 1)


def test_error_mid_sends_some_tokens_then_an_error_chunk_and_done(sim):
    result = faulty(sim, "error_mid", max_tokens=8)
    assert result.status == 200 and result.ended_cleanly and result.payloads[-1] == "[DONE]"
    *tokens, error = result.chunks()[1:]  # after the role chunk
    assert 1 <= len(tokens) < 8 and all(c["choices"][0]["delta"]["content"] for c in tokens)
    assert error == {
        "error": {
            "message": error["error"]["message"],
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
    }
    truth = truth_of(sim, result.headers["x-request-id"])
    assert (truth["fault"], truth["outcome"], truth["output_tokens"]) == (
        "error_mid",
        "error_mid",
        len(tokens),
    )
    faulty_backend = {
        "name": "sim",
        "url": sim.process.url,
        "engine": "vllm",
        "headers": {FAULT_HEADER: "error_mid"},
    }
    client = EngineClient(Backend.model_validate(faulty_backend))
    measured = measure(client.stream("/v1/chat/completions", chat_payload("fault please", max_tokens=8)).raw)
    assert measured.status == "http_500" and len(measured.error) > 0


def test_error_mid_not_streamed_is_a_500(sim):
    result = faulty(sim, "error_mid", max_tokens=8, stream=False)
    assert result.status == 500 and result.json()["error"]["code"] == 500
    truth = truth_of(sim, result.headers["x-request-id"])
    assert (truth["status"], truth["outcome"]) == (500, "error_mid")


def test_bad_json_event_then_the_stream_goes_on(sim):
    result = faulty(sim, "bad_json", max_tokens=6)
    broken = []
    for payload in result.payloads[:-1]:  # the last one is [DONE]
        try:
            json.loads(payload)
        except ValueError:
            broken.append(payload)
    assert len(broken) == 1
    assert result.payloads[-1] == "[DONE]" and len(result.output_times()) == 6


def test_trickle_spaces_the_tokens(sim):
    result = faulty(sim, "trickle", max_tokens=4)
    times = result.output_times()
    assert len(times) == 4 and result.payloads[-1] == "[DONE]"
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert min(gaps) >= 0.13


def test_unknown_fault_is_a_bad_request(sim):
    assert faulty(sim, "meteor").status == 400


def test_server_still_healthy_after_faults_and_truth_names_them(sim):
    results = [faulty(sim, kind, max_tokens=2) for kind in ("500", "cut", "bad_json")]
    assert request(sim.port, "/v1/chat/completions", chat_payload("fine", max_tokens=2)).status == 200
    wanted = {
        r.headers["x-request-id"]: kind for r, kind in zip(results, ("500", "cut", "bad_json"), strict=True)
    }
    found: dict[str, dict] = {}
    deadline = time.monotonic() + 5
    while len(found) < len(wanted) and time.monotonic() < deadline:
        time.sleep(0.1)
        for line in sim.truth_path.read_text().splitlines():
            record = json.loads(line)
            if record["request_id"] in wanted:
                found[record["request_id"]] = record
    assert {rid: r["fault"] for rid, r in found.items()} == wanted
    statuses = {r["fault"]: (r["status"], r["outcome"]) for r in found.values()}
    assert statuses == {"500": (500, "error"), "cut": (200, "cut"), "bad_json": (200, "ok")}


def test_mix_by_rate_is_seeded_and_repeatable():
    def outcomes() -> list[tuple[int, bool]]:
        args = ["--fault-rate", "1", "--fault-kinds", "500,429,cut", "--fault-seed", "42"]
        with SimProcess.start("vllm", extra_args=args) as sim:
            runs = []
            for _ in range(8):
                result = request(sim.port, "/v1/chat/completions", chat_payload("mix", max_tokens=4))
                runs.append((result.status, "[DONE]" in result.payloads))
            return runs

    first = outcomes()
    assert first == outcomes()
    assert len({status for status, _ in first}) >= 2
    assert all(not done for _, done in first)  # every request got one of the three faults


def test_mix_header_draws_a_fault(sim):
    seen = set()
    for _ in range(12):
        result = faulty(sim, "mix", max_tokens=2, timeout_s=0.5)
        seen.add((result.status, result.error, "[DONE]" in result.payloads))
    assert len(seen) >= 2


def test_a_request_that_fits_no_llamacpp_slot_is_refused_and_the_queue_moves_on():
    # 8 slots of 131072 / 8 = 16384 tokens, under max_model_len 131072: llama.cpp refuses a prompt a slot
    # cannot hold (it looped, preempting others, and blocked every request behind it), and stops an
    # answer when its slot is full
    with SimProcess.start("llamacpp", extra_args=["--max-num-seqs", "8", "--kv-blocks", "8192"]) as sim:
        prompt = {"prompt": list(range(16384)), "max_tokens": 4, "stream": True}
        too_big = request(sim.port, "/v1/completions", prompt, timeout_s=10)
        assert too_big.status == 400 and "(16384 tokens)" in too_big.json()["error"]["message"]
        fits = request(sim.port, "/v1/chat/completions", chat_payload("y", max_tokens=4), timeout_s=10)
        assert fits.status == 200 and len(fits.output_times()) == 4
        filling = {"prompt": list(range(16380)), "max_tokens": 17000, "stream": True}
        cut = request(sim.port, "/v1/completions", filling, timeout_s=30)
        assert cut.status == 200 and len(cut.output_times()) == 4
        assert cut.chunks()[-1]["choices"][0]["finish_reason"] == "length"
