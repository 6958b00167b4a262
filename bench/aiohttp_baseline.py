"""A minimal asyncio + aiohttp streaming client of the kind `vllm bench serve` uses: the baseline.

One shared `aiohttp.ClientSession` (keep-alive connector, no limit), `async for line in
response.content`, strip, drop the `data: ` prefix, `json.loads`, `time.perf_counter()` per line,
as vLLM's `benchmarks/backend_request_func.py` does. One deliberate difference: TTFT starts at the
first event that carries output (non-empty `content`), as grill's contract says, not at the
role-only first chunk, so that the two clients' errors against the simulator's truth compare
measurement noise, not definitions. Each request sends an `x-request-id`, so the benchmark can match
it with the simulator's truth log exactly.

    python bench/aiohttp_baseline.py --url http://127.0.0.1:8000 --streams 100 --requests 2 \\
        --prompts prompts.json --max-tokens 200 --out results.jsonl

`bench/capacity.py` runs it side by side with grill's user path against the same simulated engine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp

CHAT_PATH = "/v1/chat/completions"
DATA_PREFIX = "data: "
DONE = "[DONE]"


@dataclass(slots=True)
class BaselineResult:
    """One request as the baseline saw it (perf_counter deltas, wall clock at the start)."""

    request_id: str
    wall_start: float
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_events: int = 0
    completion_tokens: int | None = None
    itl_s: list[float] = field(default_factory=list)
    ok: bool = False
    error: str = ""


class LineTimer:
    """Times one response's lines the way `vllm bench serve` does: strip, drop `data: `,
    `time.perf_counter()`, `json.loads`; TTFT at the first line with content."""

    def __init__(self, result: BaselineResult, start: float) -> None:
        self.result = result
        self.start = start
        self.most_recent = start

    def feed(self, chunk_bytes: bytes) -> None:
        chunk_bytes = chunk_bytes.strip()
        if not chunk_bytes:
            return
        chunk = chunk_bytes.decode("utf-8").removeprefix(DATA_PREFIX)
        timestamp = time.perf_counter()
        result = self.result
        if chunk == DONE:
            result.e2e_s = timestamp - self.start
            return
        data = json.loads(chunk)
        if choices := data.get("choices"):
            content = choices[0]["delta"].get("content")
            if content:
                if result.ttft_s is None:
                    result.ttft_s = timestamp - self.start
                else:
                    result.itl_s.append(timestamp - self.most_recent)
                self.most_recent = timestamp
                result.output_events += 1
        elif usage := data.get("usage"):
            result.completion_tokens = usage.get("completion_tokens")

    def finish(self) -> None:
        self.result.ok = self.result.e2e_s is not None and self.result.ttft_s is not None


async def one_request(
    session: aiohttp.ClientSession, url: str, payload: dict, request_id: str
) -> BaselineResult:
    """One streamed chat completion, timed the way `vllm bench serve` times it."""
    result = BaselineResult(request_id=request_id, wall_start=time.time())
    timer = LineTimer(result, time.perf_counter())
    try:
        async with session.post(url, json=payload, headers={"x-request-id": request_id}) as response:
            if response.status != 200:
                result.error = f"http_{response.status}"
                return result
            async for chunk_bytes in response.content:
                timer.feed(chunk_bytes)
            timer.finish()
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as error:
        result.error = type(error).__name__
    return result


async def run_clients(
    url: str,
    streams: int,
    requests_per_stream: int,
    payloads: list[dict],
    ramp_s: float,
    timeout_s: float,
) -> list[BaselineResult]:
    """`streams` concurrent loops, each sending `requests_per_stream` requests back to back."""
    results: list[BaselineResult] = []
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def stream(index: int) -> None:
            await asyncio.sleep(ramp_s * index / max(streams, 1))
            for iteration in range(requests_per_stream):
                payload = payloads[(index * requests_per_stream + iteration) % len(payloads)]
                results.append(await one_request(session, url, payload, f"aio-{index}-{iteration}"))

        await asyncio.gather(*(stream(i) for i in range(streams)))
    return results


def arg_parser(description: str) -> argparse.ArgumentParser:
    """The command line every baseline client takes (`bench/capacity.py` runs them the same way)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", required=True, help="engine base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--streams", type=int, default=50, help="concurrent streams")
    parser.add_argument("--requests", type=int, default=2, help="requests per stream, back to back")
    parser.add_argument("--prompts", required=True, help="JSON file: a list of chat message lists")
    parser.add_argument("--model", default="grill-sim")
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--ramp-s", type=float, default=2.0, help="streams start spread over this time")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--out", required=True, help="write one JSON line per request here")
    return parser


def payloads(args: argparse.Namespace) -> list[dict]:
    return [
        {
            "model": args.model,
            "messages": messages,
            "max_tokens": args.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        for messages in json.loads(Path(args.prompts).read_text())
    ]


def write_results(path: str, results: list[BaselineResult], client: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for result in results:
            out.write(json.dumps(asdict(result)) + "\n")
    ok = sum(1 for r in results if r.ok)
    print(
        f"{client} baseline: {ok}/{len(results)} requests ok, {sum(r.output_events for r in results)} events"
    )


def main() -> None:
    args = arg_parser(__doc__.splitlines()[0]).parse_args()
    url = args.url.rstrip("/") + CHAT_PATH
    results = asyncio.run(
        run_clients(url, args.streams, args.requests, payloads(args), args.ramp_s, args.timeout_s)
    )
    write_results(args.out, results, "aiohttp")


if __name__ == "__main__":
    main()
