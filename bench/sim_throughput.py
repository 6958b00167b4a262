"""How many streamed events per second the simulated engine sustains, and how late its steps run.

Starts `grill sim` (one process, so one core at most), opens N concurrent streams from separate client
processes (raw asyncio sockets, counting events without parsing them), and for each step time asked
of the engine prints the event rate (server-side count), the step jitter (how late each step ends,
p50/p99/max) and the server's CPU use.

    python bench/sim_throughput.py --streams 500 --step-ms 8 6 --duration-s 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import time
import urllib.request

from grill_locust.sim import SimProcess

REQUEST_PATH = "/v1/chat/completions"


def _client_process(
    port: int, streams: int, duration_s: float, max_tokens: int, counts: multiprocessing.Queue
) -> None:
    asyncio.run(_client(port, streams, duration_s, max_tokens, counts))


async def _client(
    port: int, streams: int, duration_s: float, max_tokens: int, counts: multiprocessing.Queue
) -> None:
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + duration_s
    total = [0, 0]  # events, finished requests

    async def stream(index: int) -> None:
        body = json.dumps(
            {
                "model": "grill-sim",
                "messages": [{"role": "user", "content": f"stream {os.getpid()}-{index}: write code"}],
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode()
        request = (
            b"POST %s HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            % (REQUEST_PATH.encode(), len(body))
            + body
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while loop.time() < stop_at:
                writer.write(request)
                tail = b""
                while loop.time() < stop_at:
                    data = await reader.read(65536)
                    if not data:
                        return
                    total[0] += data.count(b"data: ")
                    if (tail + data).endswith(b"\r\n0\r\n\r\n"):
                        total[1] += 1
                        break
                    tail = data[-8:]
        finally:
            writer.close()

    async def guarded(index: int) -> None:
        try:
            await asyncio.wait_for(stream(index), duration_s + 5)
        except (OSError, TimeoutError):
            pass

    await asyncio.gather(*(guarded(i) for i in range(streams)))
    counts.put(tuple(total))


def _get_json(url: str, method: str = "GET") -> dict:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    step_ms: float, streams: int, duration_s: float, warmup_s: float, client_procs: int, truth: bool
) -> dict:
    max_tokens = 4000
    kv_blocks = streams * (max_tokens + 64) // 16 + 1024  # room for every stream: no preemption
    engine_args = [
        "--max-num-seqs", str(max(streams, 1)),
        "--kv-blocks", str(kv_blocks), "--max-model-len", "32768",
        "--step-a-ms", str(step_ms),
        "--step-b-ms", "0", "--step-c-ms", "0", "--step-d-ms", "0",
    ]  # fmt: skip
    truth_path = f"/tmp/grill-sim-bench-truth-{os.getpid()}.jsonl" if truth else None
    with SimProcess.start("vllm", truth_log=truth_path, extra_args=engine_args) as sim:
        counts: multiprocessing.Queue = multiprocessing.Queue()
        per_proc = [
            streams // client_procs + (1 if i < streams % client_procs else 0) for i in range(client_procs)
        ]
        clients = [
            multiprocessing.Process(
                target=_client_process, args=(sim.port, n, warmup_s + duration_s + 2, max_tokens, counts)
            )
            for n in per_proc
            if n
        ]
        for client in clients:
            client.start()
        time.sleep(warmup_s)
        _get_json(sim.url + "/sim/stats/reset", "POST")
        before = _get_json(sim.url + "/sim/stats")
        cpu_before = _cpu_seconds(sim.process.pid)
        started = time.monotonic()
        time.sleep(duration_s)
        after = _get_json(sim.url + "/sim/stats")
        elapsed = time.monotonic() - started
        cpu = (_cpu_seconds(sim.process.pid) - cpu_before) / elapsed
        for client in clients:
            client.join(duration_s + 30)
        client_events = sum(counts.get(timeout=5)[0] for _ in clients)
    if truth_path:
        os.unlink(truth_path)
    return {
        "truth_log": truth,
        "step_ms": step_ms,
        "streams": streams,
        "running": after["running"],
        "events_per_s": (after["events"] - before["events"]) / elapsed,
        "steps_per_s": (after["steps"] - before["steps"]) / elapsed,
        "running_before": before["running"],
        "ideal_events_per_s": streams * 1000.0 / step_ms,
        "jitter_p50_ms": after["jitter_p50_ms"],
        "jitter_p99_ms": after["jitter_p99_ms"],
        "jitter_max_ms": after["jitter_max_ms"],
        "server_cpu": cpu,
        "client_events_total": client_events,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--step-ms", type=float, nargs="+", default=[8.0, 6.0])
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--client-procs", type=int, default=max(1, min(4, (os.cpu_count() or 2) - 1)))
    parser.add_argument("--truth", action="store_true", help="also write the truth log (measures its cost)")
    parser.add_argument("--json", action="store_true", help="print one JSON line per step time as well")
    args = parser.parse_args()
    print(
        f"grill sim throughput: {args.streams} streams, {args.client_procs} client processes, "
        f"cpus={os.cpu_count()}, truth log {'on' if args.truth else 'off'}"
    )
    print(
        f"{'step_ms':>8} {'events/s':>10} {'ideal':>10} {'steps/s':>8} {'running':>8} "
        f"{'jit p50':>8} {'jit p99':>8} {'jit max':>8} {'cpu':>6}"
    )
    for step_ms in args.step_ms:
        row = measure(step_ms, args.streams, args.duration_s, args.warmup_s, args.client_procs, args.truth)
        print(
            f"{row['step_ms']:>8.1f} {row['events_per_s']:>10.0f} {row['ideal_events_per_s']:>10.0f} "
            f"{row['steps_per_s']:>8.1f} {row['running_before']:>8} "
            f"{row['jitter_p50_ms']:>8.3f} {row['jitter_p99_ms']:>8.3f} {row['jitter_max_ms']:>8.3f} {row['server_cpu']:>6.0%}",
            flush=True,
        )
        if args.json:
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
