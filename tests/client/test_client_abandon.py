"""EngineClient abandoning a request at a given time (an editor's next keystroke): the connection is
closed at once, the record is `abandoned` with the time it was in flight and the output received
before, the engine sees the client go; an answer complete in time is not abandoned. Under gevent's
sockets (as Locust runs), in a fresh interpreter, against one simulator and one scripted server."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PATCHED = "gevent.monkey" in sys.modules and sys.modules["gevent.monkey"].is_module_patched("socket")
STEP_MS = 20  # the simulator's step: one output token per stream every 20 ms

SCRIPT = """
    from gevent import monkey; monkey.patch_all()
    import json, sys, time
    sys.path[:0] = sys.argv[1:3]
    from client_replay import load, split_pieces
    from client_servers import Server, backend
    from grill_locust.client import EngineClient, chat_payload
    from grill_locust.record import measure
    from grill_locust.sim import SimProcess

    truth_path, step_ms = sys.argv[3], sys.argv[4]
    args = [f"--step-a-ms={step_ms}", "--step-b-ms=0", "--step-c-ms=0", "--step-d-ms=0", "--reasoning-tokens=0"]
    out = {}

    def run(client, name, max_tokens, abandon_after_s):
        payload = chat_payload("m", [{"role": "user", "content": "hi " + name}])
        payload.update(max_tokens=max_tokens, ignore_eos=True)
        t0 = time.perf_counter()
        raw = client.stream("/v1/chat/completions", payload, request_id=name, abandon_at=t0 + abandon_after_s).raw
        m = measure(raw)
        out[name] = {
            "status": m.status, "error": m.error, "ttft_s": m.ttft_s, "e2e_s": m.e2e_s,
            "output_tokens": m.output_tokens, "tokens_source": m.tokens_source,
            "lateness_s": raw.end_time - (t0 + abandon_after_s), "connected": client._sock is not None,
        }

    with SimProcess.start("vllm", served_model_name="m", truth_log=truth_path, extra_args=args) as sim:
        client = EngineClient(backend(sim.url))
        run(client, "mid-stream", 100, 0.3)  # 2 s of output: cut after 0.3 s
        run(client, "before-output", 100, 0.005)  # cut before the first step ends
        run(client, "in-time", 3, 5.0)  # done long before its keystroke
        run(client, "after-abandons", 3, 5.0)  # the client goes on, on a new connection
        out["connections_opened"] = client.connections_opened

    # [DONE] arrives, then the server holds the body open: the keystroke during the grace after it
    pieces = split_pieces(load("vllm_chat"))
    def hold_after_done(conn, request, server):
        conn.sendall(b"".join(pieces[:-1]))  # all but the chunked terminator
        time.sleep(1.0)
        return False
    server = Server(hold_after_done)
    run(EngineClient(backend(server.url)), "done-then-held", 16, 0.3)
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def abandons(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    truth = tmp_path_factory.mktemp("abandon") / "truth.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), str(HERE), str(REPO), str(truth), str(STEP_MS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    lines = [json.loads(line) for line in truth.read_text().splitlines() if line.strip()]
    return results, {line["request_id"]: line for line in lines}


pytestmark = [pytest.mark.slow, pytest.mark.skipif(PATCHED, reason="runs its own gevent interpreter")]


def test_abandoned_mid_stream_keeps_its_output_and_the_time_in_flight(
    abandons: tuple[dict[str, Any], dict[str, dict[str, Any]]],
) -> None:
    results, truth = abandons
    cut = results["mid-stream"]
    assert (cut["status"], cut["error"]) == ("abandoned", "")
    assert 0.3 <= cut["e2e_s"] < 0.35 and 0 <= cut["lateness_s"] < 0.05  # closed at the keystroke
    assert cut["ttft_s"] is not None and cut["ttft_s"] < cut["e2e_s"]
    # the tokens that arrived in 0.3 s at one a step, counted from the events (no usage came)
    assert cut["tokens_source"] == "events" and 5 <= cut["output_tokens"] <= 0.3 * 1000 / STEP_MS
    # the engine saw the client go, after it had written at least what the client read
    engine = truth["mid-stream"]
    assert engine["outcome"] == "client_closed" and engine["finish_reason"] is None
    assert cut["output_tokens"] <= engine["output_tokens"] < 100


def test_abandoned_before_any_output_has_no_ttft(
    abandons: tuple[dict[str, Any], dict[str, dict[str, Any]]],
) -> None:
    results, truth = abandons
    early = results["before-output"]
    assert early["status"] == "abandoned" and early["output_tokens"] == 0 and early["ttft_s"] is None
    assert 0.005 <= early["e2e_s"] < 0.05
    assert truth["before-output"]["outcome"] == "client_closed"


def test_a_completion_in_time_is_ok_and_the_client_goes_on_after_an_abandon(
    abandons: tuple[dict[str, Any], dict[str, dict[str, Any]]],
) -> None:
    results, truth = abandons
    for name in ("in-time", "after-abandons"):
        assert results[name]["status"] == "ok" and results[name]["output_tokens"] == 3
        assert results[name]["e2e_s"] < 1.0 and truth[name]["outcome"] == "ok"
    # the two abandoned connections were closed, and never reused
    assert results["connections_opened"] == 3


def test_a_keystroke_after_done_leaves_the_answer_complete(
    abandons: tuple[dict[str, Any], dict[str, dict[str, Any]]],
) -> None:
    results, _ = abandons
    held = results["done-then-held"]
    assert held["status"] == "ok" and held["output_tokens"] > 0
    assert held["e2e_s"] < 0.3 and not held["connected"]  # timed at [DONE]; the held connection dropped
