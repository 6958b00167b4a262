"""A stream's memory with the bounds in place: an endless, fast delta stream from a tiny local server,
read by grill's own client with `total_s` at 2, 4 and 8 s. Before the bounds the client kept every
piece until `total_s` (860 MB at 8 s, 1.28 GB at 16 s); now the reply fails as `bad_event` at what a
record keeps (client/_timer.py MAX_REPLY_CHARS, MAX_OUTPUT_EVENTS; client/_sse.py MAX_EVENT_CHARS), so
the peak must not grow with the time allowed.

    python bench/stream_memory.py [--total-s 2 4 8]

Prints, per stream shape and total_s: how the reply ended, after how long, its output events, the peak
memory the client allocated (tracemalloc) and the process's resident size after it (VmRSS).
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
import tracemalloc
from pathlib import Path

import orjson

from grill_locust.client import EngineClient, chat_payload
from grill_locust.config import Backend
from grill_locust.record import measure

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
MIB = 1024 * 1024


def chunk(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(body), body)


def delta_events(content: str, count: int) -> bytes:
    event = b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": content}}]}) + b"\n\n"
    return chunk(event * count)


# name -> (what follows the head, the block sent again and again)
SHAPES = {
    "2 KiB deltas": (b"", delta_events("x" * 2048, 16)),
    "1-char deltas": (b"", delta_events("x", 512)),
    "a line that never ends": (chunk(b"data: "), chunk(b"x" * 65536)),
}


class EndlessServer:
    """A loopback server that answers each connection with `opening`, then `block` until the client goes."""

    def __init__(self, opening: bytes, block: bytes) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.opening, self.block = opening, block
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)  # the request (small: one read holds it)
                conn.sendall(HEAD + self.opening)
                while True:
                    conn.sendall(self.block)
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_stream(shape: str, total_s: float) -> str:
    opening, block = SHAPES[shape]
    server = EndlessServer(opening, block)
    timeouts = {"connect_s": 2.0, "first_token_s": total_s, "total_s": total_s, "idle_s": total_s}
    backend = Backend.model_validate(
        {"name": "bench", "url": server.url, "engine": "openai", "timeouts": timeouts}
    )
    client = EngineClient(backend)
    payload = chat_payload("m", [{"role": "user", "content": "hi"}])
    tracemalloc.start()
    try:
        started = time.perf_counter()
        result = client.stream("/v1/chat/completions", payload)
        elapsed_s = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        server.close()
    m = measure(result.raw)
    ended = m.status + (f" ({m.error.split(':')[0]})" if m.error else "")
    return (
        f"{shape:<24} {total_s:>7g} {elapsed_s:>9.2f} {m.output_tokens:>9,} {peak / MIB:>11.1f} "
        f"{rss_mib():>8.0f}  {ended}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-s", type=float, nargs="+", default=[2.0, 4.0, 8.0])
    args = parser.parse_args()
    print(
        f"{'stream':<24} {'total_s':>7} {'ended at':>9} {'events':>9} {'peak MiB':>11} {'RSS MiB':>8}  ended as"
    )
    for shape in SHAPES:
        for total_s in args.total_s:
            print(one_stream(shape, total_s), flush=True)


if __name__ == "__main__":
    main()
