"""CPU cost of the client's parse + timing path, in µs per output event, on a recorded stream.

Replays a vLLM-shaped chat stream (chunked HTTP, one SSE event per chunk, usage at the end)
through `StreamReader` (HTTP parser -> SSE parser -> StreamTimer), the exact code `EngineClient`
runs for each `recv`. Two arrivals: one event per recv (a lightly loaded engine, the costly case)
and 64 KiB recvs (a client that fell behind). Target: <= 15 µs per output event.

    python bench/client_overhead.py [--events 4000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import time

from grill_locust.client import StreamReader, StreamTimer
from grill_locust.record import RawTiming, measure

TARGET_US_PER_EVENT = 15.0
HEAD = (
    b"HTTP/1.1 200 OK\r\ndate: Tue, 03 Jun 2025 10:00:00 GMT\r\nserver: uvicorn\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
)
WORDS = [
    "def",
    " parse",
    "(self",
    ",",
    " data",
    ":",
    " bytes",
    ")",
    " ->",
    " None",
    ":\n",
    "        ",
    "return",
]


def chunk(event: dict | str) -> bytes:
    text = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
    data = f"data: {text}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(data), data)


def recorded_stream(n_events: int) -> list[bytes]:
    """The wire, one element per HTTP chunk (as the server wrote them)."""
    base = {
        "id": "chatcmpl-9f2c",
        "object": "chat.completion.chunk",
        "created": 1748944800,
        "model": "devstral",
    }
    role = {
        **base,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }
    pieces = [HEAD, chunk(role)]
    for i in range(n_events):
        delta = {"content": WORDS[i % len(WORDS)]}
        pieces.append(
            chunk(
                {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
            )
        )
    final = {
        **base,
        "choices": [{"index": 0, "delta": {"content": ""}, "logprobs": None, "finish_reason": "length"}],
    }
    usage = {
        **base,
        "choices": [],
        "usage": {
            "prompt_tokens": 1500,
            "total_tokens": 1500 + n_events,
            "completion_tokens": n_events,
            "prompt_tokens_details": {"cached_tokens": 1488},
        },
    }
    pieces += [chunk(final), chunk(usage), chunk("[DONE]"), b"0\r\n\r\n"]
    return pieces


def run_once(recvs: list[bytes], n_events: int) -> float:
    """CPU seconds to parse and time one stream arriving as `recvs`."""
    clock = time.perf_counter
    start = time.process_time()
    timer = StreamTimer(RawTiming(t0=clock(), wall_start=time.time()))
    reader = StreamReader(timer)
    for data in recvs:
        reader.feed(clock(), data)  # the client stamps each recv with perf_counter, as here
    measure(timer.raw)
    elapsed = time.process_time() - start
    assert timer.raw.status == "ok" and len(timer.raw.output_times) == n_events, timer.raw
    return elapsed


def coalesce(pieces: list[bytes], size: int) -> list[bytes]:
    wire = b"".join(pieces)
    return [wire[i : i + size] for i in range(0, len(wire), size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    pieces = recorded_stream(args.events)
    bare_json = [p.split(b"data: ", 1)[1].split(b"\n\n", 1)[0].decode() for p in pieces[2 : 2 + args.events]]
    start = time.process_time()
    for _ in range(args.repeats):
        for text in bare_json:
            json.loads(text)
    bare_us = (time.process_time() - start) / args.repeats / args.events * 1e6
    print(f"output events per stream: {args.events}, best of {args.repeats} runs, CPU time")
    print(f"  bare json.loads of each chunk:        {bare_us:6.2f} µs/event")
    worst = 0.0
    for label, recvs in (("one event per recv", pieces), ("64 KiB recvs", coalesce(pieces, 65536))):
        best = min(run_once(recvs, args.events) for _ in range(args.repeats))
        us = best / args.events * 1e6
        worst = max(worst, us)
        print(f"  parse + timing, {label:20s} {us:6.2f} µs/event")
    verdict = "OK" if worst <= TARGET_US_PER_EVENT else "OVER TARGET"
    print(f"target <= {TARGET_US_PER_EVENT:g} µs/event: {verdict}")


if __name__ == "__main__":
    main()
