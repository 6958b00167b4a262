"""A small stdlib client for the simulated engine's tests: one streamed request, and a closed loop of users."""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grill_locust.sim import SimProcess


@dataclass(frozen=True)
class TruthSim:
    """A simulated engine started with a truth log, and where that log is."""

    process: SimProcess
    truth_path: Path

    @property
    def port(self) -> int:
        return self.process.port


def truth_of(sim: TruthSim, request_id: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """The simulator's truth-log record of one request (written in the gaps between steps: wait for it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in sim.truth_path.read_text().splitlines():
            record: dict[str, Any] = json.loads(line)
            if record["request_id"] == request_id:
                return record
        time.sleep(0.05)
    raise AssertionError(f"{request_id} not in the truth log")


@dataclass
class StreamResult:
    status: int
    headers: dict[str, str]
    t0: float  # time.time() just before sending
    payloads: list[str] = field(default_factory=list)  # each SSE `data:` payload, in order
    event_names: list[str] = field(default_factory=list)  # each SSE `event:` name (Anthropic's), in order
    arrivals: list[float] = field(default_factory=list)  # time.time() at each payload's arrival
    body: bytes = b""  # non-streamed (or error) body
    ended_cleanly: bool = False  # the chunked body ended with its terminator
    error: str = ""

    def chunks(self) -> list[dict[str, Any]]:
        return [json.loads(p) for p in self.payloads if p != "[DONE]"]

    def output_times(self) -> list[float]:
        """Arrival of every payload that carries generated output (an output event, as the client's timer counts it)."""
        times = []
        for payload, arrival in zip(self.payloads, self.arrivals, strict=True):
            if payload == "[DONE]":
                continue
            try:
                chunk = json.loads(payload)
            except ValueError:
                continue
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                if delta.get("content") or delta.get("reasoning_content") or choice.get("text"):
                    times.append(arrival)
                    break
        return times

    @property
    def ttft_s(self) -> float:
        return self.output_times()[0] - self.t0

    @property
    def e2e_s(self) -> float:
        return self.arrivals[-1] - self.t0

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    port: int,
    path: str,
    payload: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
    method: str = "POST",
    connection: http.client.HTTPConnection | None = None,
) -> StreamResult:
    """Send one request; read an SSE stream event by event, or the whole body otherwise."""
    conn = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    body = json.dumps(payload) if payload is not None else None
    all_headers = {"content-type": "application/json", **(headers or {})}
    t0 = time.time()
    try:
        conn.request(method, path, body=body, headers=all_headers)
        response = conn.getresponse()
    except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
        if connection is None:
            raise
        # the server closed the kept-alive connection after its last reply (llama.cpp does after a
        # stream): it never saw this request, so send it again on a new one
        conn.close()
        t0 = time.time()
        conn.request(method, path, body=body, headers=all_headers)
        response = conn.getresponse()
    result = StreamResult(response.status, {k.lower(): v for k, v in response.getheaders()}, t0)
    try:
        if not result.headers.get("content-type", "").startswith("text/event-stream"):
            result.body = response.read()
            result.ended_cleanly = True
            return result
        while True:
            line = response.readline()
            if not line:
                result.ended_cleanly = response.isclosed() and response.chunk_left is None
                break
            if line.startswith(b"event: "):
                result.event_names.append(line[7:].rstrip(b"\n").decode())
            elif line.startswith(b"data: "):
                result.payloads.append(line[6:].rstrip(b"\n").decode())
                result.arrivals.append(time.time())
    except (http.client.IncompleteRead, ConnectionError, TimeoutError, OSError) as error:
        result.error = type(error).__name__
    finally:
        if connection is None:
            conn.close()
    return result


def chat_payload(content: str, max_tokens: int = 8, **extra: Any) -> dict[str, Any]:
    return {
        "model": "grill-sim",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        **extra,
    }


@dataclass
class LoopResult:
    ttft_s: list[float]
    e2e_s: list[float]
    failures: int

    @property
    def ttft_p50_s(self) -> float:
        return statistics.median(self.ttft_s)

    @property
    def e2e_p50_s(self) -> float:
        return statistics.median(self.e2e_s)


def closed_loop(
    port: int,
    users: int,
    iterations: int,
    make_payload: Any,
    think_s: float = 0.0,
    deadline_s: float = 30.0,
) -> LoopResult:
    """`users` threads, each sending `iterations` requests back to back (bounded by `deadline_s`)."""
    ttfts: list[float] = []
    e2es: list[float] = []
    failures = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + deadline_s
    start = threading.Barrier(users)

    def user(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=deadline_s)
        start.wait()
        for iteration in range(iterations):
            if time.monotonic() > stop_at:
                break
            result = request(port, "/v1/chat/completions", make_payload(index, iteration), connection=conn)
            with lock:
                if result.status == 200 and result.output_times() and not result.error:
                    ttfts.append(result.ttft_s)
                    e2es.append(result.e2e_s)
                else:
                    failures[0] += 1
            if think_s:
                time.sleep(think_s)
        conn.close()

    threads = [threading.Thread(target=user, args=(i,), daemon=True) for i in range(users)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(deadline_s + 5)
    return LoopResult(ttfts, e2es, failures[0])
