"""Agentic sessions: what long, growing contexts cost the load generator itself.

    python bench/agentic.py plan     # one 100-step session to 128k tokens: CPU ms to plan it and build
                                     # every request's messages (and, beside, to encode every body)
    python bench/agentic.py hold     # a Locust worker holding 200 open sessions of 64k tokens: its RSS
    python bench/agentic.py client   # the client's CPU per output event on 128k-token requests against
                                     # the simulator, alternating with short prompts (client_overhead.py)

Each figure is printed beside the machine's floor measured in the same run: for planning, tokenizing
the final context once (the least a token-exact generator does); for memory, the bytes of the contexts'
text; for the client, the same streams with short prompts. Sizes are on the approximate tokenizer (as
against `grill sim`).
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # client mode streams through gevent sockets, as Locust's users do

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # client_overhead's live method

from grill_locust.client import request_for  # noqa: E402
from grill_locust.config import Backend, Model  # noqa: E402
from grill_locust.scenario import Conversation, validate_conversation  # noqa: E402
from grill_locust.tokens import count_tokens  # noqa: E402
from grill_locust.workload import build_workload  # noqa: E402
from grill_locust.workload.agentic import AgenticPlan, AgenticSession, AgentReply, tools_tokens  # noqa: E402
from grill_locust.workload.tools import TOOLS  # noqa: E402

LOCUSTFILE = ROOT / "locustfiles" / "coding.py"
SYSTEM_TOKENS = 8000  # the agentic kind's default
REPLY_TOKENS = 30  # a scripted call (name and arguments) with its message's markup, about
MIB = 1024 * 1024
SAMPLE_INTERVAL_S = 0.5


def agent_conversation(steps: int, context_tokens: int) -> Conversation:
    """Sessions of exactly `steps` model calls whose last request holds about `context_tokens`."""
    per_step = round((context_tokens - SYSTEM_TOKENS) / (steps - 1)) - REPLY_TOKENS
    return validate_conversation(
        {
            "name": "bench-agent",
            "kind": "agentic",
            "steps": steps,
            "system_tokens": SYSTEM_TOKENS,
            "tool_result_tokens": per_step,
        }
    )


def context_tokens(messages: list[dict[str, Any]], plan: AgenticPlan) -> int:
    """The request's tokens as counted for its text: contents, calls' names and arguments, the tools."""
    tokens = tools_tokens(plan.workload)
    for message in messages:
        tokens += count_tokens(message.get("content") or "")
        for call in message.get("tool_calls") or ():
            tokens += count_tokens(call["function"]["name"]) + count_tokens(call["function"]["arguments"])
    return tokens


def play(plan: AgenticPlan) -> list[list[dict[str, Any]]]:
    """Every request's messages of one session, the engine answering nothing (the script's calls)."""
    session = AgenticSession(plan)
    sent = []
    while (request := session.next_request()) is not None:
        sent.append(request.messages)
        session.on_reply(AgentReply(""))
    return sent


# ---- (a) planning ---------------------------------------------------------------------------------


def run_plan(steps: int, tokens: int, repeats: int) -> None:
    workload = build_workload(agent_conversation(steps, tokens))
    play(workload.script("warm-up", 0))  # type: ignore[arg-type]
    backend = Backend(name="sim", url="http://127.0.0.1:1", engine="vllm")
    model = Model(name="grill-sim", max_tokens=256)
    plan_ms, play_ms, encode_ms, floor_ms = [], [], [], []
    last: list[dict[str, Any]] = []
    for repeat in range(repeats):
        start = time.process_time()
        plan = workload.script(f"bench-{repeat}", repeat)
        planned = time.process_time()
        requests = play(plan)  # type: ignore[arg-type]
        played = time.process_time()
        for messages in requests:
            _, payload = request_for(backend, model, messages, tools=TOOLS)
            json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()  # as EngineClient
        encoded = time.process_time()
        last = requests[-1]
        count_tokens("".join(message.get("content") or "" for message in last))
        floor_ms.append((time.process_time() - encoded) * 1000)
        plan_ms.append((planned - start) * 1000)
        play_ms.append((played - planned) * 1000)
        encode_ms.append((encoded - played) * 1000)
    assert isinstance(plan, AgenticPlan) and len(requests) == steps
    final = context_tokens(last, plan)
    text_bytes = sum(len(json.dumps(message)) for message in last)
    print(
        f"plan: one session of {steps} model calls, system {SYSTEM_TOKENS} tokens (tools included), "
        f"last request {final:,} tokens ({text_bytes / MIB:.2f} MiB of JSON); CPU ms, "
        f"median of {repeats} sessions (min-max), load {os.getloadavg()[0]:.1f}"
    )
    rows = [
        ("plan (Workload.script)", plan_ms),
        (f"every request's messages ({steps}, tool results rendered)", play_ms),
        ("plan + messages, the whole session", [a + b for a, b in zip(plan_ms, play_ms, strict=True)]),
        (f"beside: every request's body encoded as sent ({steps})", encode_ms),
        ("floor: tokenizing the last request's text once", floor_ms),
    ]
    for label, values in rows:
        print(f"  {label:<58} {statistics.median(values):9.1f} ms  ({min(values):.1f}-{max(values):.1f})")


# ---- (b) a worker holding open sessions --------------------------------------------------------------


def hold_scenario(url: str, sessions: int, tokens: int, hold_s: float) -> dict[str, Any]:
    """Sessions of 3 calls (8k, then ~36k, then `tokens`); the last one's answer takes long."""
    conversation = agent_conversation(3, tokens).model_dump(exclude_none=True, mode="json")
    conversation["final_max_tokens"] = 4096  # the engine's step makes this last answer outlast the tier
    return {
        "name": "agentic-hold",
        "backends": [
            {"name": "sim", "engine": "vllm", "url": url, "timeouts": {"first_token_s": 600, "total_s": 900}}
        ],
        "models": [{"name": "grill-sim", "temperature": 0.0}],
        "conversations": [conversation],
        "targets": [{"backend": "sim", "model": "grill-sim", "conversation": "bench-agent"}],
        "load": {"tiers": [sessions], "iterations": 1, "pause_s": 0, "tier_timeout_s": hold_s},
    }


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        import psutil

        self.process = psutil.Process(pid)
        self.samples: list[tuple[float, int]] = []  # (wall time, RSS bytes)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.samples.append((time.time(), self.process.memory_info().rss))
            except Exception:  # the process ended
                return
            self.stop.wait(SAMPLE_INTERVAL_S)


def run_hold(sessions: int, tokens: int, step_ms: float, hold_s: float) -> None:
    from grill_locust.sim import SimProcess

    kv_blocks = sessions * (tokens + 8192) // 16 + 4096
    sim_args = [
        f"--step-a-ms={step_ms}", "--step-b-ms=0", "--step-c-ms=0", "--step-d-ms=0", "--spin-ms=0",
        "--reasoning-tokens=0", "--natural-output-tokens=4000", f"--max-num-seqs={sessions + 8}", "--max-num-batched-tokens=50000000",
        f"--kv-blocks={kv_blocks}", "--max-model-len=131072",
    ]  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="agentic-hold-") as folder,
        SimProcess.start("vllm", served_model_name="grill-sim", extra_args=sim_args) as sim,
    ):
        scenario = Path(folder) / "scenario.yaml"
        scenario.write_text(json.dumps(hold_scenario(sim.url, sessions, tokens, hold_s)))
        command = [
            sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--scenario", str(scenario),
            "--results-dir", str(Path(folder) / "results"), "--loglevel", "WARNING",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        locust = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        sampler = RssSampler(locust.pid)
        sampler.start()
        _, stderr = locust.communicate(timeout=hold_s + 300)
        sampler.stop.set()
        records = [
            json.loads(line) for path in Path(folder).glob("results/*/records.jsonl") for line in open(path)
        ]
    if locust.returncode not in (0, 1) or not records:
        print(stderr[-3000:])
        raise SystemExit(f"hold: locust exited {locust.returncode} with {len(records)} records")
    last_turn = max(record["turn"] for record in records)
    final_sent = sorted(record["wall_start"] for record in records if record["turn"] == last_turn)
    ok_before = sum(1 for record in records if record["turn"] < last_turn and record["status"] == "ok")
    all_open = final_sent[-1] if len(final_sent) == sessions else None
    samples = sampler.samples
    launch = samples[0][1]
    first_sent = min(record["wall_start"] for record in records)
    before_users = [rss for wall, rss in samples if wall <= first_sent][-1]
    tier_end = first_sent + hold_s  # the time cap stops the users, whose last answers are still coming
    held = [rss for wall, rss in samples if all_open is not None and all_open + 1.0 <= wall <= tier_end - 1.0]
    prompts = [
        statistics.median(r["prompt_tokens"] for r in records if r["turn"] == turn and r["status"] == "ok")
        for turn in range(last_turn)
    ]
    workload = build_workload(agent_conversation(3, tokens))
    one_context = play(workload.script("size", 0))[-1]  # type: ignore[arg-type]
    text_mib = sum(len(message.get("content") or "") for message in one_context) / MIB
    print(
        f"hold: {sessions} agent sessions of 3 calls to {tokens:,} tokens, the last answer held open by a "
        f"{step_ms:g} ms engine step; one Locust process (local runner), load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"  requests ok before the last step: {ok_before} (prompt p50 by step: "
        f"{', '.join(f'{p:,.0f}' for p in prompts)} tokens); last-step requests sent: {len(final_sent)}"
    )
    print(
        f"  worker RSS: {launch / MIB:.1f} MiB at launch, {before_users / MIB:.1f} MiB when the first request went"
    )
    if held:
        plateau = statistics.median(held)
        per_session = (plateau - before_users) / sessions
        print(
            f"  all {sessions} sessions open at {tokens // 1000}k tokens ({len(held)} samples over "
            f"{tier_end - all_open - 2.0:.0f} s): RSS median {plateau / MIB:.1f} MiB, "
            f"peak {max(held) / MIB:.1f} MiB; {per_session / 1024:.0f} KiB per session"
        )
    else:
        print(f"  not every session reached its last step before the tier ended: {len(final_sent)} did")
    print(f"  peak RSS over the run: {max(rss for _, rss in samples) / MIB:.1f} MiB")
    print(
        f"  floor: one {tokens // 1000}k context's text is {text_mib * 1024:.0f} KiB "
        f"({text_mib * sessions:.1f} MiB for {sessions})"
    )


# ---- (c) the client on long prompts ---------------------------------------------------------------


def run_client(streams: int, tokens: int, window_s: float, max_tokens: int, rounds: int) -> None:
    import client_overhead

    workload = build_workload(agent_conversation(30, tokens))
    plan = workload.script("client", 0)
    assert isinstance(plan, AgenticPlan)
    long_messages = play(plan)[-1]
    size = context_tokens(long_messages, plan) - tools_tokens(workload)  # sent without the tools
    print(
        f"client: {streams} streams of {max_tokens}-event replies, short prompts (client_overhead.py's) and "
        f"{size:,}-token agent contexts, alternating, {rounds} rounds"
    )
    for round_index in range(rounds):
        for label, messages in (("short", None), (f"{size // 1000}k", long_messages)):
            print(f"round {round_index + 1}, {label} prompts:")
            client_overhead.run_live(streams, window_s, max_tokens, messages=messages, max_model_len=131072)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("plan", "hold", "client"))
    parser.add_argument("--steps", type=int, default=100, help="plan: model calls of the session")
    parser.add_argument(
        "--tokens", type=int, default=0, help="context tokens (plan, client 128000; hold 64000)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="plan: sessions measured")
    parser.add_argument("--sessions", type=int, default=200, help="hold: open sessions")
    parser.add_argument("--step-ms", type=float, default=100.0, help="hold: the simulated engine's step")
    parser.add_argument("--hold-s", type=float, default=90.0, help="hold: the tier's time cap")
    parser.add_argument("--streams", type=int, default=16, help="client: concurrent streams")
    parser.add_argument("--window-s", type=float, default=8.0, help="client: measuring window")
    parser.add_argument("--max-tokens", type=int, default=200, help="client: output events per request")
    parser.add_argument("--rounds", type=int, default=2, help="client: short/long pairs")
    args = parser.parse_args()
    if args.part == "plan":
        run_plan(args.steps, args.tokens or 128_000, args.repeats)
    elif args.part == "hold":
        run_hold(args.sessions, args.tokens or 64_000, args.step_ms, args.hold_s)
    else:
        run_client(args.streams, args.tokens or 128_000, args.window_s, args.max_tokens, args.rounds)


if __name__ == "__main__":
    main()
