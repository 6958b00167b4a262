"""EngineClient with gevent's sockets, as under Locust: one alarm per request phase instead of a socket
timeout per read, and the same behaviour as with blocking sockets (the live and simulator tests are run
again in an interpreter that gevent has monkey-patched), plus the deadlines the other tests leave out:
the grace after `[DONE]`, a request that cannot be sent, the request id header."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from client_replay import load, split_pieces
from client_servers import Request, Server, backend

from grill_locust.client import EngineClient, _arrival, _engine, chat_payload
from grill_locust.record import measure

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PATH = "/v1/chat/completions"
PAYLOAD = chat_payload("devstral", [{"role": "user", "content": "hi"}])
PATCHED = "gevent.monkey" in sys.modules and sys.modules["gevent.monkey"].is_module_patched("socket")


def _run_patched(
    script: str, *args: str, timeout_s: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `script` in a fresh interpreter whose sockets gevent has patched first (as Locust does)."""
    prelude = "from gevent import monkey; monkey.patch_all()\nimport sys\nsys.path[:0] = sys.argv[1:3]\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script), str(HERE), str(REPO), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO,
        env=env,
    )


@pytest.mark.skipif(PATCHED, reason="already the gevent run")
@pytest.mark.parametrize("read_path", ["fast", "python"])
def test_live_and_simulator_tests_pass_with_gevent_sockets(read_path: str) -> None:
    """Both ways the poller reads a stamped socket: the C fast path (`_fastread`, where it was
    built) and the Python one it stands for."""
    files = ["test_client_live.py", "test_client_sim.py", "test_client_tls.py", "test_client_gevent.py"]
    script = """
        import pytest
        from grill_locust.client import _arrival
        print("read_event:", _arrival.read_event)
        sys.exit(pytest.main([*sys.argv[3:], "-q", "-x", "-p", "no:cacheprovider"]))
        """
    env = dict(os.environ)
    env.pop("GRILL_NO_EXTENSIONS", None)
    if read_path == "python":
        env["GRILL_NO_EXTENSIONS"] = "1"
    elif _arrival.read_event is None:
        pytest.skip("no C fast path here (not built, or not Linux)")
    done = _run_patched(script, *[str(HERE / name) for name in files], env=env)
    assert ("read_event: None" in done.stdout) == (read_path == "python"), done.stdout[:200]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " skipped" in done.stdout  # this test, inside: skipped


@pytest.mark.skipif(PATCHED, reason="already the gevent run")
def test_gevent_run_starts_a_few_timers_per_request_not_one_per_read() -> None:
    script = """
        import gevent, gevent.timeout
        from client_replay import load, split_pieces
        from client_servers import Server, backend, send_slowly
        from grill_locust.client import EngineClient, chat_payload

        made = []
        original = gevent.timeout.Timeout.__init__
        def counting(self, *args, **kwargs):
            made.append(gevent.getcurrent())  # the server's threads are greenlets too
            original(self, *args, **kwargs)
        gevent.timeout.Timeout.__init__ = counting

        pieces = split_pieces(load("vllm_chat"))
        def handler(conn, request, server):
            send_slowly(conn, pieces, 0.01, server)  # every piece its own read
            return True
        server = Server(handler)
        client = EngineClient(backend(server.url))
        client.stream("/v1/chat/completions", chat_payload("m", []))  # connects
        made.clear()
        result = client.stream("/v1/chat/completions", chat_payload("m", []))
        mine = sum(1 for where in made if where is gevent.getcurrent())
        print(result.raw.status, len(pieces), mine, client._sock.gettimeout())
        """
    done = _run_patched(script, timeout_s=60)
    assert done.returncode == 0, done.stderr[-2000:]
    status, pieces, timers, socket_timeout = done.stdout.split()
    # send, first token, the rest, after [DONE]: at most 4, whatever the number of reads
    assert status == "ok" and int(pieces) >= 8 and int(timers) <= 4 and socket_timeout == "None"


@pytest.mark.skipif(PATCHED, reason="already the gevent run")
def test_poller_reads_many_streams_per_wakeup_and_wakes_each_user_a_few_times() -> None:
    script = """
        import threading
        import gevent
        from client_replay import load, split_pieces
        from client_servers import Server, backend, send_slowly
        from grill_locust.client import EngineClient, _poller, chat_payload

        streams = 12
        pieces = split_pieces(load("vllm_chat"))
        everyone = threading.Barrier(streams)
        def handler(conn, request, server):
            everyone.wait(timeout=10)  # all streams then send their pieces on the same ticks
            send_slowly(conn, pieces, 0.02, server)
            return True
        server = Server(handler)
        waits = []
        original_wait = _poller.Watch.wait
        def counting_wait(self):
            waits.append(self)
            original_wait(self)
        _poller.Watch.wait = counting_wait
        clients = [EngineClient(backend(server.url)) for _ in range(streams)]
        jobs = [gevent.spawn(c.stream, "/v1/chat/completions", chat_payload("m", [])) for c in clients]
        gevent.joinall(jobs, timeout=30)
        poller = _poller.poller()
        statuses = {job.value.raw.status for job in jobs}
        watches = {id(w) for w in waits}
        print(",".join(sorted(statuses)), len(pieces), poller.reads, poller.wakeups, len(waits), len(watches))
        """
    done = _run_patched(script, timeout_s=60)
    assert done.returncode == 0, done.stderr[-2000:]
    statuses, pieces, reads, wakeups, waits, watches = done.stdout.split()
    assert statuses == "ok" and int(watches) == 12
    assert int(reads) >= 12 * int(pieces)  # every piece was its own read...
    assert int(reads) / int(wakeups) >= 4  # ...but streams sending together were read in one wake-up
    # each user slept through its stream: woken for the first output, [DONE] and the end, not per read
    assert int(waits) <= 3 * 12


@pytest.mark.skipif(PATCHED, reason="already the gevent run")
def test_a_parser_failure_reaches_the_user_not_the_hub() -> None:
    script = """
        import gevent
        from client_replay import load
        from client_servers import Server, backend
        from grill_locust.client import EngineClient, _reader, chat_payload

        server = Server(lambda conn, request, srv: conn.sendall(load("vllm_chat")) or True)
        original_feed = _reader.StreamReader.feed
        def broken(self, t, data):
            raise RuntimeError("parser bug")
        _reader.StreamReader.feed = broken
        client = EngineClient(backend(server.url))
        job = gevent.spawn(client.stream, "/v1/chat/completions", chat_payload("m", []))
        job.join(timeout=10)
        _reader.StreamReader.feed = original_feed
        after = client.stream("/v1/chat/completions", chat_payload("m", []))  # the hub still runs
        print(type(job.exception).__name__, job.exception, after.raw.status)
        """
    done = _run_patched(script, timeout_s=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["RuntimeError", "parser", "bug", "ok"]


@pytest.mark.skipif(PATCHED, reason="already the gevent run")
@pytest.mark.skipif(not _arrival.ANCILLARY_BYTES, reason="no kernel receive stamps on this system")
def test_events_arriving_while_the_process_is_busy_keep_their_arrival_times(tmp_path: Path) -> None:
    # Every 100 ms a greenlet holds the CPU for 35 ms (no yield: the hub cannot read), while the engine
    # sends an event every 50 ms. Events arriving during a hold are read up to 35 ms late but timed by
    # the kernel's receive stamp: they match the engine's own write times. (Events that pile up in
    # the socket longer than the gap between them share one read and its stamp: a saturated worker.)
    script = """
        import json, time
        import gevent
        from client_servers import backend
        from grill_locust.client import EngineClient, chat_payload
        from grill_locust.sim import SimProcess

        truth_path = sys.argv[3]
        args = ["--step-a-ms=50", "--step-b-ms=0", "--step-c-ms=0", "--step-d-ms=0", "--reasoning-tokens=0"]
        with SimProcess.start("vllm", served_model_name="m", truth_log=truth_path, extra_args=args) as sim:
            client = EngineClient(backend(sim.url))
            payload = chat_payload("m", [{"role": "user", "content": "hi"}])
            payload.update(max_tokens=40, ignore_eos=True)
            holding = True
            def hog():
                while holding:
                    gevent.sleep(0.065)
                    end = time.perf_counter() + 0.035
                    while time.perf_counter() < end:
                        pass
            hogger = gevent.spawn(hog)
            raw = client.stream("/v1/chat/completions", payload, request_id="busy-1").raw
            holding = False
            hogger.join()
        for _ in range(50):
            lines = [json.loads(line) for line in open(truth_path) if line.strip()]
            if lines:
                break
            time.sleep(0.1)
        truth = [line for line in lines if line["request_id"] == "busy-1"][0]["event_times"]
        measured = [raw.wall_start + (t - raw.t0) for t in raw.output_times]
        errors_ms = [1e3 * (m - t) for m, t in zip(measured, truth)]
        print(raw.status, len(measured), len(truth), max(errors_ms), min(errors_ms))
        """
    done = _run_patched(script, str(tmp_path / "truth.jsonl"), timeout_s=60)
    assert done.returncode == 0, done.stderr[-2000:]
    status, measured, truth, worst_ms, best_ms = done.stdout.split()
    assert status == "ok" and int(measured) == int(truth) == 40
    assert -1.0 < float(best_ms) and float(worst_ms) < 10.0  # read-time stamps: up to 35 ms late


@pytest.mark.skipif(PATCHED, reason="already the gevent run")
def test_users_busy_between_requests_do_not_starve_other_streams_of_reads(tmp_path: Path) -> None:
    # Twelve users finish short requests in the same engine step, then each spends 15 ms of CPU on its
    # record and next request before sending (as Locust users do, in turn, without yielding). Three
    # long streams get an event every 40 ms meanwhile. Each user lets the poller read before it sends,
    # so the long streams are read within ~15 ms: no two of their events share a read (and a stamp).
    # Without it the hub polls only after the whole burst (12 x 15 ms), and events pile up.
    script = """
        import time
        import gevent
        from client_servers import backend
        from grill_locust.client import EngineClient, chat_payload
        from grill_locust.sim import SimProcess

        args = ["--step-a-ms=40", "--step-b-ms=0", "--step-c-ms=0", "--step-d-ms=0", "--reasoning-tokens=0"]
        with SimProcess.start("vllm", served_model_name="m", extra_args=args) as sim:
            def run(tokens, rounds, work_s):
                client = EngineClient(backend(sim.url, total_s=60))
                payload = chat_payload("m", [{"role": "user", "content": "hi"}])
                payload.update(max_tokens=tokens, ignore_eos=True)
                results = []
                for _ in range(rounds):
                    results.append(client.stream("/v1/chat/completions", payload).raw)
                    end = time.perf_counter() + work_s
                    while time.perf_counter() < end:  # the record and the next request, no yield
                        pass
                return results
            long = [gevent.spawn(run, 50, 1, 0.0) for _ in range(3)]
            busy = [gevent.spawn(run, 1, 12, 0.015) for _ in range(12)]
            gevent.joinall(long + busy, timeout=120)
        raws = [raw for job in long for raw in job.value]
        shared = sum(1 for raw in raws for a, b in zip(raw.output_times, raw.output_times[1:]) if a == b)
        print(",".join(sorted({raw.status for raw in raws})), sum(len(raw.output_times) for raw in raws), shared)
        """
    done = _run_patched(script, timeout_s=180)
    assert done.returncode == 0, done.stderr[-2000:]
    status, events, shared = done.stdout.split()
    assert status == "ok" and int(events) == 150
    assert int(shared) <= 2, shared  # a stall of the whole machine may still merge a pair


# A server of one reply, in its own process: the first token 50 ms after the request, the second 40
# ms later, then the end; it prints when it wrote the first, and writes a byte on the pipe `argv[1]`
# when it has the request and when it has sent the second token.
TWO_TOKEN_SERVER = r"""
import os, socket, sys, time
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buffer = b""
while b"\r\n\r\n" not in buffer:
    buffer += conn.recv(65536)
os.write(int(sys.argv[1]), b"r")
def chunk(event):
    body = b"data: " + event + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(body), body)
delta = b'{"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}'
head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
time.sleep(0.05)
first = time.time()
conn.sendall(head + chunk(delta % b"a"))
time.sleep(0.04)
conn.sendall(chunk(delta % b"b"))
time.sleep(0.001)
os.write(int(sys.argv[1]), b"b")
time.sleep(0.05)
end = b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'
conn.sendall(chunk(end) + chunk(b"[DONE]") + b"0\r\n\r\n")
print(first, flush=True)
conn.close()
"""


@pytest.mark.skipif(PATCHED, reason="already the gevent run")
@pytest.mark.parametrize("read_path", ["fast", "python"])
def test_a_first_token_that_waited_for_the_second_is_the_self_checks_lag(read_path: str) -> None:
    # The worker holds its hub (a blocking read of a pipe) from its send until just after the second
    # token arrives: both tokens share one read, and its stamp is the second's, so the first token is
    # timed 40 ms late, while that read came only ~1 ms after its stamp. The self-check says how far
    # the first token may be off (>= the 40 ms it is), and flags the tier.
    script = """
        import subprocess, time
        import gevent, gevent.socket
        from client_servers import backend
        from grill_locust.client import EngineClient, chat_payload
        from grill_locust.run.selfcheck import SelfCheck

        import os
        signal_read, signal_write = os.pipe()
        server = subprocess.Popen(
            [sys.executable, "-c", sys.argv[3], str(signal_write)],
            stdout=subprocess.PIPE, text=True, pass_fds=[signal_write],
        )
        port = int(server.stdout.readline())
        check = SelfCheck()
        check.start()
        client = EngineClient(backend(f"http://127.0.0.1:{port}"))
        def hold():
            gevent.socket.wait_read(signal_read)  # the request is there
            os.read(signal_read, 1)
            os.read(signal_read, 1)  # not gevent's: the whole hub waits for the second token
        holder = gevent.spawn(hold)
        raw = client.stream("/v1/chat/completions", chat_payload("m", [{"role": "user", "content": "hi"}])).raw
        holder.join()
        written = float(server.stdout.readline())
        server.wait()
        late_ms = (raw.wall_start + raw.output_times[0] - raw.t0 - written) * 1e3
        print(raw.status, len(raw.output_times), raw.output_times[0] == raw.output_times[1], late_ms,
              check.read_lag_p99_ms, check.saturated)
        check.stop()
        """
    env = dict(os.environ)
    env.pop("GRILL_NO_EXTENSIONS", None)
    if read_path == "python":
        env["GRILL_NO_EXTENSIONS"] = "1"
    done = _run_patched(script, TWO_TOKEN_SERVER, timeout_s=30, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    status, events, shared, late_ms, lag_ms, saturated = done.stdout.split()
    assert status == "ok" and events == "2" and shared == "True"
    assert 30.0 < float(late_ms) < 60.0  # timed at the second token's arrival
    assert float(lag_ms) >= float(late_ms) - 1.0 and saturated == "True"


def test_body_never_ending_after_done_is_complete_and_the_connection_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_engine, "AFTER_DONE_GRACE_S", 0.3)
    pieces = split_pieces(load("vllm_chat"))

    def handler(conn: socket.socket, request: Request, server: Server) -> bool:
        conn.sendall(b"".join(pieces[:-1]))  # everything up to [DONE], never the last chunk
        time.sleep(2.0)
        return False

    server = Server(handler)
    client = EngineClient(backend(server.url))
    started = time.perf_counter()
    result = client.stream(PATH, PAYLOAD)
    m = measure(result.raw)
    assert m.status == "ok" and result.text == "def add(a, b):"
    assert time.perf_counter() - started < 1.5
    assert m.e2e_s is not None and m.e2e_s < 0.25  # E2E ends at [DONE], not when the grace ran out
    assert client._sock is None  # framing unfinished: the connection cannot carry another request
    server.close()


def test_request_that_cannot_be_sent_in_total_s_is_connect() -> None:
    # a server that accepts but never reads: the request fills the socket buffers and sendall blocks
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    payload = chat_payload("devstral", [{"role": "user", "content": "x" * (32 * 1024 * 1024)}])
    started = time.perf_counter()
    result = EngineClient(backend(url, total_s=0.5)).stream(PATH, payload)
    m = measure(result.raw)
    assert (m.status, m.error) == ("connect", "send failed: timed out")
    assert time.perf_counter() - started < 3.0
    listener.close()


def test_request_id_goes_out_as_x_request_id() -> None:
    server = Server(lambda conn, request, srv: conn.sendall(load("vllm_chat")) or True)
    client = EngineClient(backend(server.url))
    assert client.stream(PATH, PAYLOAD, request_id="r-7-u3-000042").raw.status == "ok"
    assert client.stream(PATH, PAYLOAD, request_id="bad\r\nX-Evil: 1").raw.status == "ok"
    assert client.stream(PATH, PAYLOAD).raw.status == "ok"
    seen = [request.headers.get("x-request-id") for request in server.requests]
    assert seen == ["r-7-u3-000042", "bad  X-Evil: 1", None]
    assert all("x-evil" not in request.headers for request in server.requests)
    server.close()
