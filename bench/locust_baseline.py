"""Bare Locust: the streaming loop a Locust user writes without grill, as a second baseline.

One `locust.clients.HttpSession` per stream (what `HttpUser.client` is: requests, gevent), `post(...,
stream=True)`, `for line in response.iter_lines()`, then the same per-line timing and `json.loads`
as the aiohttp baseline (`LineTimer`). Locust's own request event fires once per request. This is
the "bare Locust readline + json.loads" of issue 8, measured in the same run as grill so that the
ratio, not this machine's speed of the hour, is the figure.

    python bench/locust_baseline.py --url http://127.0.0.1:8000 --streams 100 --requests 2 \\
        --prompts prompts.json --max-tokens 200 --out results.jsonl
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # as Locust does on import

import time  # noqa: E402

import gevent  # noqa: E402
from aiohttp_baseline import CHAT_PATH, BaselineResult, LineTimer, arg_parser, payloads, write_results  # noqa: E402
from locust import events  # noqa: E402
from locust.clients import HttpSession  # noqa: E402


def one_request(session: HttpSession, payload: dict, request_id: str) -> BaselineResult:
    result = BaselineResult(request_id=request_id, wall_start=time.time())
    timer = LineTimer(result, time.perf_counter())
    try:
        response = session.post(CHAT_PATH, json=payload, headers={"x-request-id": request_id}, stream=True)
        try:
            if response.status_code != 200:
                result.error = f"http_{response.status_code}"
                return result
            for line in response.iter_lines():
                timer.feed(line)
            timer.finish()
        finally:
            response.close()
    except (OSError, ValueError) as error:
        result.error = type(error).__name__
    return result


def main() -> None:
    args = arg_parser(__doc__.splitlines()[0]).parse_args()
    bodies = payloads(args)
    results: list[BaselineResult] = []

    def stream(index: int) -> None:
        gevent.sleep(args.ramp_s * index / max(args.streams, 1))
        session = HttpSession(args.url.rstrip("/"), events.request, user=None)
        for iteration in range(args.requests):
            payload = bodies[(index * args.requests + iteration) % len(bodies)]
            results.append(one_request(session, payload, f"loc-{index}-{iteration}"))

    greenlets = [gevent.spawn(stream, index) for index in range(args.streams)]
    gevent.joinall(greenlets, timeout=args.timeout_s)
    gevent.killall(greenlets, timeout=5)
    write_results(args.out, results, "locust")


if __name__ == "__main__":
    main()
