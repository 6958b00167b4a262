"""EngineClient abandoning a request at a given time (an editor's next keystroke): the connection is
closed at once, the record is `abandoned` with the time it was in flight and the output received
before, the engine sees the client go; an answer complete in time is not abandoned. Received means
by the kernel's stamps: with the process busy past the keystroke, what arrived before it counts
though unread when the keystroke's timer fires, what arrived after never. Under gevent's sockets (as
Locust runs), in a fresh interpreter, against one simulator and scripted servers."""

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
BUSY_PAST_KEYSTROKE_S = 0.05  # how long after the keystroke the busy process lets the hub run again

SCRIPT = """
    from gevent import monkey; monkey.patch_all()
    import fcntl, json, sys, termios, time
    sys.path[:0] = sys.argv[1:3]
    from client_replay import load, split_pieces
    from client_servers import Server, backend
    from grill_locust.client import EngineClient, chat_payload
    from grill_locust.record import measure
    from grill_locust.sim import SimProcess

    truth_path, step_ms, busy_past_keystroke_s = sys.argv[3], sys.argv[4], float(sys.argv[5])
    args = [f"--step-a-ms={step_ms}", "--step-b-ms=0", "--step-c-ms=0", "--step-d-ms=0", "--reasoning-tokens=0"]
    out = {}
    keystroke = {}  # the keystroke of the request in progress (perf_counter), for the scripted servers

    def run(client, name, max_tokens, abandon_after_s):
        payload = chat_payload("m", [{"role": "user", "content": "hi " + name}])
        payload.update(max_tokens=max_tokens, ignore_eos=True)
        at = keystroke["at"] = time.perf_counter() + abandon_after_s
        raw = client.stream("/v1/chat/completions", payload, request_id=name, abandon_at=at).raw
        returned = time.perf_counter()
        m = measure(raw)
        out[name] = {
            "status": m.status, "error": m.error, "ttft_s": m.ttft_s, "e2e_s": m.e2e_s,
            "output_tokens": m.output_tokens, "tokens_source": m.tokens_source,
            "lateness_s": raw.end_time - at, "connected": client._sock is not None,
            "in_flight_s": at - raw.t0, "returned_s": returned - at,
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

    # The whole process busy past the keystroke (a blocking sleep: the hub neither reads nor fires timers)
    blocking_sleep = monkey.get_original("time", "sleep")
    def busy_past_keystroke():
        blocking_sleep(keystroke["at"] + busy_past_keystroke_s - time.perf_counter())

    # a reply longer than one read (64 KiB), all in the client's socket before the keystroke: the poller
    # reads the first 64 KiB, then the keystroke's timer fires with the rest (and [DONE]) unread
    long_reply = b"".join(pieces[:2]) + pieces[2] * 360 + b"".join(pieces[-4:])
    def unsent_bytes(conn):  # the server's send queue: empty once all is in the client's receive queue
        return int.from_bytes(fcntl.ioctl(conn.fileno(), termios.TIOCOUTQ, bytes(4)), sys.byteorder)
    def long_reply_then_busy(conn, request, server):
        conn.sendall(long_reply)
        for _ in range(100):
            if not unsent_bytes(conn):
                break
            blocking_sleep(0.001)
        out["long_reply"] = {"bytes": len(long_reply), "unsent_bytes": unsent_bytes(conn)}
        busy_past_keystroke()
        return True
    server = Server(long_reply_then_busy)
    run(EngineClient(backend(server.url)), "arrived-unread", 16, 0.2)

    # output events in time, then the process busy while the keystroke passes, and the end written after
    # it: read by the poller as soon as the hub runs, before the keystroke's timer fires
    def end_after_keystroke(conn, request, server):
        conn.sendall(b"".join(pieces[:3]))
        time.sleep(keystroke["at"] - busy_past_keystroke_s - time.perf_counter())  # read as they come
        busy_past_keystroke()
        conn.sendall(b"".join(pieces[3:]))
        return True
    server = Server(end_after_keystroke)
    run(EngineClient(backend(server.url)), "end-after-keystroke", 16, 0.2)
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def abandons(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    truth = tmp_path_factory.mktemp("abandon") / "truth.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(SCRIPT),
            str(HERE),
            str(REPO),
            str(truth),
            str(STEP_MS),
            str(BUSY_PAST_KEYSTROKE_S),
        ],
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
    # ended at the keystroke (its time in flight from the send), the connection closed at once
    assert cut["lateness_s"] == 0 and cut["e2e_s"] == pytest.approx(cut["in_flight_s"])
    assert 0.29 < cut["in_flight_s"] <= 0.3 and 0 <= cut["returned_s"] < 0.05
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
    assert early["e2e_s"] == pytest.approx(early["in_flight_s"]) and 0 <= early["returned_s"] < 0.05
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


def test_a_reply_that_arrived_before_the_keystroke_is_complete_though_unread_when_it_came(
    abandons: tuple[dict[str, Any], dict[str, dict[str, Any]]],
) -> None:
    results, _ = abandons
    # the premise: the whole reply, longer than one read, sat in the client's socket before the keystroke
    assert results["long_reply"]["unsent_bytes"] == 0 and results["long_reply"]["bytes"] > 65536
    unread = results["arrived-unread"]
    assert (unread["status"], unread["error"]) == ("ok", "")
    assert unread["lateness_s"] < 0 and unread["e2e_s"] < 0.2  # timed at its [DONE], by the kernel's stamp
    assert unread["connected"]  # read to its end: the connection carries the next request


def test_an_end_that_arrived_after_the_keystroke_never_counts(
    abandons: tuple[dict[str, Any], dict[str, dict[str, Any]]],
) -> None:
    results, _ = abandons
    late = results["end-after-keystroke"]
    assert (late["status"], late["error"]) == ("abandoned", "")
    # abandoned at the keystroke, though the process came to it later; with the output that came before
    assert late["lateness_s"] == 0 and late["e2e_s"] == pytest.approx(late["in_flight_s"])
    assert late["returned_s"] >= BUSY_PAST_KEYSTROKE_S  # the process came to it that much later
    assert late["ttft_s"] is not None and late["output_tokens"] == 1 and late["tokens_source"] == "events"
