"""CPU cost of the client, in µs per output event: the sans-IO parse + timing path, and the live I/O path.

Sans-IO (default): replays a vLLM-shaped chat stream (chunked HTTP, one SSE event per chunk, usage
at the end) through `StreamReader` (HTTP parser -> SSE parser -> StreamTimer), the exact code
`EngineClient` runs for each `recv`. Two arrivals: one event per recv (a lightly loaded engine, the
costly case) and 64 KiB recvs (a client that fell behind).

Live (`--live N`): N gevent greenlets, each an `EngineClient` streaming requests back to back from a
simulated engine (`grill sim`, another process), as Locust users do but without Locust, workload or
records: the cost of `EngineClient.stream` itself (I/O, scheduling, parse, timing), measured as this
process's CPU time over a steady window divided by the output events received in it.
Target: <= 15 µs per output event.

    python bench/client_overhead.py [--events 4000] [--repeats 5]
    python bench/client_overhead.py --live 200 [--window-s 8] [--max-tokens 200]
    GRILL_NO_EXTENSIONS=1 python bench/client_overhead.py --live 200   # without the C read
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # as Locust does on import: the live mode's sockets must be gevent's

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402

from grill_locust.client import CHAT_PATH, EngineClient, StreamReader, StreamTimer, chat_payload  # noqa: E402
from grill_locust.client._arrival import read_event  # noqa: E402
from grill_locust.client._poller import poller  # noqa: E402
from grill_locust.config import Backend, Model  # noqa: E402
from grill_locust.record import RawTiming, measure  # noqa: E402

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


# --- live: EngineClient against the simulated engine -------------------------------------------

LIVE_STEP_A_MS = 10.0  # the simulated engine's step: a + b * running streams (as bench/capacity.py)
LIVE_STEP_B_MS = 0.03
LIVE_PROMPT = "Write a Python function that parses a CSV line. " * 8
WARMUP_S = 3.0  # after the last stream started, before the window opens


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_live(
    streams: int,
    window_s: float,
    max_tokens: int,
    messages: list[dict] | None = None,
    max_model_len: int = 32768,
) -> None:
    """Without `messages`, each stream sends LIVE_PROMPT (short); with them, every stream sends those
    (bench/agentic.py: long agent contexts)."""
    from grill_locust.sim import SimProcess

    prompt_tokens = 0 if messages is None else max_model_len  # KV room for each stream's prompt
    kv_blocks = max(streams * (max_tokens + 200 + prompt_tokens) // 16 + 4096, max_model_len // 16)
    step_args = [
        f"--step-a-ms={LIVE_STEP_A_MS}", f"--step-b-ms={LIVE_STEP_B_MS}", "--step-c-ms=0.001",
        "--step-d-ms=0", "--reasoning-tokens=0", "--spin-ms=0", f"--max-num-seqs={streams + 8}",
        f"--kv-blocks={kv_blocks}", f"--max-model-len={max_model_len}",
    ]  # fmt: skip
    model = Model(name="grill-sim", max_tokens=max_tokens, ignore_eos=True)
    with SimProcess.start("vllm", served_model_name="grill-sim", extra_args=step_args) as sim:
        timeouts = {"connect_s": 10.0, "first_token_s": 60.0, "total_s": 120.0}
        backend = Backend(name="sim", url=sim.url, engine="openai", timeouts=timeouts)
        results: list[RawTiming] = []
        stop = False

        def user(index: int) -> None:
            client = EngineClient(backend)
            sent = messages or [{"role": "user", "content": f"{index} {LIVE_PROMPT}"}]
            payload = chat_payload(model, sent)
            try:
                while not stop:
                    results.append(client.stream(CHAT_PATH, payload).raw)
            finally:
                client.close()

        greenlets = []
        for index in range(streams):
            greenlets.append(gevent.spawn(user, index))
            gevent.sleep(1.0 / streams)  # spread the starts over one second
        gevent.sleep(WARMUP_S)
        counters = poller()
        start, cpu_start = time.perf_counter(), _cpu_s()
        wakeups, reads = counters.wakeups, counters.reads
        gevent.sleep(window_s)
        end, cpu_end = time.perf_counter(), _cpu_s()
        wakeups, reads = counters.wakeups - wakeups, counters.reads - reads
        stop = True
        gevent.joinall(greenlets, timeout=max_tokens * (LIVE_STEP_A_MS + LIVE_STEP_B_MS * streams) / 250)
        gevent.killall(greenlets, timeout=5)
    events = sum(1 for raw in results for t in raw.output_times if start <= t < end)
    requests = sum(1 for raw in results if raw.end_time is not None and start <= raw.end_time < end)
    failed = sum(1 for raw in results if raw.status != "ok")
    cpu_s = cpu_end - cpu_start
    print(
        f"live: {streams} streams, {max_tokens} output events per request, {window_s:g} s window, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"  {events / window_s:8.0f} events/s  CPU {100 * cpu_s / window_s:5.1f} %  "
        f"{cpu_s / max(events, 1) * 1e6:6.2f} µs/event  {events / max(cpu_s, 1e-9):8.0f} events per CPU-s  "
        f"{requests} requests ended  {failed} failed"
    )
    path = "the C read (_fastread)" if read_event is not None else "the Python read"
    print(f"  {reads} reads in {wakeups} poller wake-ups ({reads / max(wakeups, 1):.1f} each), {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--live", type=int, default=0, metavar="STREAMS", help="the live I/O path")
    parser.add_argument("--window-s", type=float, default=8.0)
    parser.add_argument("--max-tokens", type=int, default=200)
    args = parser.parse_args()
    if args.live:
        run_live(args.live, args.window_s, args.max_tokens)
        return
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
