"""Typing developers against the real llama-server (gemma3-270m, which has no FIM tokens): FIM requests
over `template` and `suffix` with the next keystroke abandoning them, `/infill` refused with the engine's
message, and how soon a stream the client closes gives its slot back."""

from __future__ import annotations

import json
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import requests

from grill_locust.client import COMPLETIONS_PATH, fim_request
from grill_locust.record import STATUS_ABANDONED, STATUS_OK, TOKENS_FROM_EVENTS, TOKENS_FROM_USAGE
from grill_locust.run.exit_codes import ENGINE_REFUSED
from grill_locust.scenario import load_scenario
from grill_locust.telemetry.engine_metrics import parse_samples
from grill_locust.workload import backend_token_counter, build_workload
from grill_locust.workload.autocomplete import AutocompletePlan, AutocompleteSession
from tests.real.campaigns import (
    FAST_TYPIST,
    FIM_BUDGET_MS,
    FIM_MAX_TOKENS,
    SLOW_TYPIST,
    autocomplete_conversation,
    autocomplete_scenario,
    llama_backend,
    mix_scenario,
)
from tests.real.conftest import (
    LLAMA_SLOTS,
    SCENARIO_FILE,
    SERVED_MODEL,
    CampaignRun,
    ServerProcess,
    run_campaign,
)

pytestmark = pytest.mark.real

USERS = 2
ITERATIONS = 2
TRANSPORTS = ("template", "suffix")
# the slow typists first: the fast ones' abandoned requests leave prefills behind them (see below)
TYPING_CONVERSATIONS = [
    autocomplete_conversation(f"{fim}-{pace}", fim, typist)
    for pace, typist in (("slow", SLOW_TYPIST), ("fast", FAST_TYPIST))
    for fim in TRANSPORTS
]
REQUESTS = {c["name"]: c["requests"] for c in TYPING_CONVERSATIONS}
IDLE_TIMEOUT_S = 120.0  # abandoned requests' prefills still running after a campaign, on a loaded machine
POLL_S = 0.02
# a team of two typists to one multi-turn chat: a tier of 1 is developer 0 alone, one of 3 all three; the
# chat waits behind the typists' abandoned prefills, so it is short
TEAM_TYPIST_WEIGHT = 2
TEAM_CHAT_WEIGHT = 1
TEAM_TIERS = [1, 3]
TEAM_CHAT: dict[str, Any] = {
    "name": "chat",
    "kind": "multi-turn",
    "system_tokens": 100,
    "user_turns": 2,
    "turn_tokens": 30,
}
TEAM_CHAT_MAX_TOKENS = 8
INFILL_REFUSAL = "Infill is not supported by this model"

# How soon a closed stream frees its slot. llama-server notices a closed connection only when a write
# to it fails: while generating, at the first token or two after the close; while prefilling (or still
# waiting for a slot), not before the whole prompt is prefilled and its first token written.
DECODE_NOTICE_S = 1.0  # beyond the token writes themselves (one step of a loaded machine, the poll)
DECODE_TOKEN_WRITES = 4
PREFILL_NOTICE_S = 2.0  # after the prefill the server timed: its first two token steps on a loaded machine
PREFILL_TOKENS_BEFORE_NOTICE = 2  # the first write to a closed socket succeeds (its reset comes back)
PREFILL_CLOSE_AFTER_S = 0.2
PREFILL_PROMPT_CHARS = 2400  # ~600 tokens: a prefill of seconds on 2 CPUs, well past the close
SHARED_START_TOKENS = 4  # of a salted prompt, what a slot may hold from another's start (not prefilled)
WAITING = 2  # streams beyond the slots, closed while they wait for one
WAITING_PROMPT_CHARS = 800  # ~200 tokens each
DECODE_MAX_TOKENS = 512  # ~15 s of generation on 2 CPUs: only the abort ends it early


# ---- the server's own view --------------------------------------------------------------------


def engine_counters(server: ServerProcess) -> dict[str, float]:
    """llama-server's /metrics, by name without the `llamacpp:` prefix."""
    text = requests.get(f"{server.url}/metrics", timeout=30).text
    return {name.removeprefix("llamacpp:"): series[0][1] for name, series in parse_samples(text).items()}


def engine_tokens(server: ServerProcess, prompt: str) -> int:
    """The prompt's size as the engine counts it in usage (its BOS token included)."""
    answer = requests.post(
        f"{server.url}/tokenize", json={"content": prompt, "add_special": True}, timeout=30
    )
    return len(answer.json()["tokens"])


def slots_busy(server: ServerProcess) -> bool:
    slots = requests.get(f"{server.url}/slots", timeout=30).json()
    return any(slot["is_processing"] for slot in slots)


def wait_idle(server: ServerProcess, timeout_s: float = IDLE_TIMEOUT_S) -> float:
    """Seconds until no slot is processing and no request waits for one."""
    started = time.monotonic()
    while True:
        counters = engine_counters(server)
        if not slots_busy(server) and counters["requests_deferred"] == counters["requests_processing"] == 0:
            return time.monotonic() - started
        assert time.monotonic() - started < timeout_s, f"llama-server still busy after {timeout_s:g} s"
        time.sleep(POLL_S)


# ---- the campaign -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def typing_campaign(llama_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> CampaignRun:
    scenario = autocomplete_scenario(
        llama_backend(llama_server), SERVED_MODEL, TYPING_CONVERSATIONS, USERS, ITERATIONS
    )
    run = run_campaign(scenario, tmp_path_factory.mktemp("llama-autocomplete"))
    drained_s = wait_idle(llama_server)  # the next test finds the shared server idle
    print(f"autocomplete campaign: {run.wall_s:.1f} s, server idle {drained_s:.1f} s later")
    return run


@pytest.fixture(scope="module")
def typing_records(typing_campaign: CampaignRun) -> pd.DataFrame:
    records = pd.read_parquet(typing_campaign.run_dir / "records.parquet")
    print(records.groupby(["conversation", "status"]).size().to_dict())
    return records


def test_every_planned_request_is_one_record_abandoned_or_completed(typing_records: pd.DataFrame) -> None:
    records = typing_records
    assert (records["kind"] == "autocomplete").all() and records["record_id"].is_unique
    counts = records.groupby("conversation").size().to_dict()
    assert counts == {name: USERS * ITERATIONS * requests for name, requests in REQUESTS.items()}
    for (name, _), developer in records.groupby(["conversation", "conversation_id"]):
        assert sorted(developer["turn"]) == list(range(REQUESTS[str(name)]))
    assert set(records["status"]) <= {STATUS_OK, STATUS_ABANDONED}
    assert (records["error"] == "").all()
    statuses = records.groupby("conversation")["status"].agg(set).to_dict()
    for fim in TRANSPORTS:
        assert STATUS_ABANDONED in statuses[f"{fim}-fast"], statuses  # cut mid-prefill by the next key
        assert STATUS_OK in statuses[f"{fim}-slow"], statuses  # arrived before the next key


def test_abandoned_requests_keep_their_time_in_flight_and_what_arrived(typing_records: pd.DataFrame) -> None:
    abandoned = typing_records[typing_records["status"] == STATUS_ABANDONED]
    assert len(abandoned) > 0
    assert abandoned["shown_in_budget"].isna().all()
    assert (abandoned["e2e_s"] > 0).all()
    assert abandoned["prompt_tokens"].isna().all()  # no usage came
    assert (abandoned["tokens_source"] == TOKENS_FROM_EVENTS).all()
    assert (abandoned["ttft_s"].isna() == (abandoned["output_tokens"] == 0)).all()
    assert (abandoned["output_tokens"] < FIM_MAX_TOKENS).all()


def test_completions_say_whether_they_were_shown_in_budget(typing_records: pd.DataFrame) -> None:
    completed = typing_records[typing_records["status"] == STATUS_OK]
    assert len(completed) > 0
    assert (completed["tokens_source"] == TOKENS_FROM_USAGE).all()
    assert (completed["output_tokens"] == FIM_MAX_TOKENS).all()
    assert (completed["finish_reason"] == "length").all()
    assert (completed["ttft_s"] > 0).all() and (completed["ttft_s"] < completed["e2e_s"]).all()
    # a completion is ok only when it arrived before the next keystroke: then only the budget decides
    in_budget = completed["e2e_s"] <= FIM_BUDGET_MS / 1000.0
    assert (completed["shown_in_budget"].astype(bool) == in_budget).all(), completed[
        ["conversation", "e2e_s", "shown_in_budget"]
    ]


def test_each_completion_was_prompted_with_what_its_transport_sends(
    typing_campaign: CampaignRun, typing_records: pd.DataFrame, llama_server: ServerProcess
) -> None:
    """The plan each developer played, rebuilt from its conversation id and the record's turn (what was
    typed up to it), gives the body the client sent; the engine's prompt size is then `template`'s whole
    text (prefix, suffix, the family's FIM tokens as text) or `suffix`'s prefix alone: llama-server takes
    the field without a word and leaves it out. A fast typist's later request completes too where a pause
    was long or the engine quick; it is rebuilt unless an earlier completion was accepted (its text is
    not in the records)."""
    targets = {
        target.name: target
        for target in load_scenario(typing_campaign.results_dir.parent / SCENARIO_FILE).targets
    }
    ok = typing_records["status"] == STATUS_OK
    completed_turns = typing_records[ok].groupby("conversation_id")["turn"].agg(set)
    rebuilt = 0
    for _, record in typing_records[ok].iterrows():
        target = targets[record["target"]]
        workload = build_workload(target.conversation, target.model, backend_token_counter(target.backend))
        _, user_key, iteration = record["conversation_id"].split(":")
        plan = workload.script(user_key, int(iteration), int(record["developer"]))
        turn = int(record["turn"])
        assert isinstance(plan, AutocompletePlan) and turn < len(plan.requests)
        earlier = completed_turns[record["conversation_id"]]
        if any(plan.requests[t].accept for t in earlier if t < turn):
            continue
        session = AutocompleteSession(plan)
        for planned in plan.requests[: turn + 1]:
            session.insert(planned.typed)
        _, body = fim_request(
            target.backend, target.model, target.conversation, session.prefix, session.suffix
        )
        assert ("suffix" in body) == (target.conversation.fim == "suffix")
        assert record["prompt_tokens"] == engine_tokens(llama_server, body["prompt"]), target.name
        rebuilt += 1
    # every slow typist's one request completes; each is rebuilt
    assert rebuilt >= (ok & (typing_records["turn"] == 0)).sum() > 0


def test_llama_server_takes_a_suffix_field_and_leaves_it_out_of_the_prompt(
    llama_server: ServerProcess,
) -> None:
    body = {"model": SERVED_MODEL, "prompt": "def add(a, b):\n    ", "max_tokens": 1}
    with_suffix = {**body, "suffix": "\n\nprint(add(1, 2))  # a suffix of some twenty tokens\n"}
    usages = [
        requests.post(f"{llama_server.url}{COMPLETIONS_PATH}", json=sent, timeout=60).json()["usage"]
        for sent in (body, with_suffix)
    ]
    assert usages[0]["prompt_tokens"] == usages[1]["prompt_tokens"] > 0


def test_infill_is_refused_with_the_engines_message_once_per_planned_request(
    llama_server: ServerProcess, tmp_path: Path
) -> None:
    conversation = autocomplete_conversation("infill-fast", "infill", FAST_TYPIST)
    scenario = autocomplete_scenario(
        llama_backend(llama_server), SERVED_MODEL, [conversation], USERS, iterations=1
    )
    run = run_campaign(scenario, tmp_path, returncodes=(ENGINE_REFUSED,))
    print(f"infill campaign: {run.wall_s:.1f} s")
    records = pd.read_parquet(run.run_dir / "records.parquet")
    # one request per planned send, none retried: the engine refused them, the tier is not run again
    assert len(records) == USERS * FAST_TYPIST["requests"]
    for _, developer in records.groupby("conversation_id"):
        assert sorted(developer["turn"]) == list(range(FAST_TYPIST["requests"]))
    # refused at once; a keystroke within those milliseconds abandons the request first
    assert set(records["status"]) <= {"http_501", STATUS_ABANDONED}
    refused = records[records["status"] == "http_501"]
    assert len(refused) > 0 and (refused["http_status"] == 501).all()
    assert refused["error"].str.contains(INFILL_REFUSAL).all(), set(refused["error"])
    assert (records["retries"] == 0).all()
    assert records["shown_in_budget"].isna().all()


# ---- a closed stream and its slot -------------------------------------------------------------


@dataclass
class OpenStream:
    """A streaming completion on a raw socket, so that it can be closed at any moment (even before
    the response's head, which llama-server sends with the first token)."""

    sock: socket.socket
    sent_at: float

    @classmethod
    def send(cls, server: ServerProcess, prompt: str, max_tokens: int) -> OpenStream:
        body = json.dumps(
            {
                "model": SERVED_MODEL,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "stream": True,
            }
        ).encode()
        head = (
            f"POST {COMPLETIONS_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
        sock.sendall(head + body)
        return cls(sock, time.monotonic())

    def read_events(self, count: int) -> list[float]:
        """Arrival times of the first `count` SSE events."""
        received, arrivals = b"", []
        while len(arrivals) < count:
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the stream"
            received += chunk
            arrivals += [time.monotonic()] * (received.count(b"data: ") - len(arrivals))
        return arrivals[:count]

    def close(self) -> float:
        self.sock.close()
        return time.monotonic()


def seconds_until_free(server: ServerProcess, closed_at: float) -> float:
    while slots_busy(server):
        time.sleep(POLL_S)
    return time.monotonic() - closed_at


def test_a_stream_closed_while_generating_frees_its_slot_at_the_next_token_writes(
    llama_server: ServerProcess,
) -> None:
    wait_idle(llama_server)
    before = engine_counters(llama_server)
    stream = OpenStream.send(llama_server, f"# {secrets.token_hex(8)}\ndef add(a, b):\n", DECODE_MAX_TOKENS)
    arrivals = stream.read_events(5)
    token_interval_s = (arrivals[-1] - arrivals[0]) / (len(arrivals) - 1)
    assert slots_busy(llama_server)
    free_s = seconds_until_free(llama_server, stream.close())
    after = engine_counters(llama_server)
    bound_s = DECODE_NOTICE_S + DECODE_TOKEN_WRITES * token_interval_s
    print(f"closed while generating: slot free {free_s:.3f} s later (tokens {token_interval_s:.3f} s apart)")
    assert free_s <= bound_s, f"slot busy {free_s:.2f} s after the close (bound {bound_s:.2f} s)"
    # the tokens generated for it count in the engine's total, those nobody read among them
    generated = after["tokens_predicted_total"] - before["tokens_predicted_total"]
    assert len(arrivals) <= generated < DECODE_MAX_TOKENS


def test_a_stream_closed_while_prefilling_holds_its_slot_until_its_prompt_is_prefilled(
    llama_server: ServerProcess,
) -> None:
    source = (Path(__file__).parents[2] / "grill_locust" / "workload" / "autocomplete.py").read_text()
    prompt = f"# {secrets.token_hex(8)}\n" + source[:PREFILL_PROMPT_CHARS]  # no slot holds its prefix
    prompt_tokens = len(
        requests.post(f"{llama_server.url}/tokenize", json={"content": prompt}, timeout=30).json()["tokens"]
    )
    wait_idle(llama_server)
    before = engine_counters(llama_server)
    stream = OpenStream.send(llama_server, prompt, FIM_MAX_TOKENS)
    time.sleep(PREFILL_CLOSE_AFTER_S)
    closed_at = stream.close()
    free_s = seconds_until_free(llama_server, closed_at)
    after = engine_counters(llama_server)
    prefill_s = after["prompt_seconds_total"] - before["prompt_seconds_total"]
    generating_s = after["tokens_predicted_seconds_total"] - before["tokens_predicted_seconds_total"]
    print(
        f"closed {PREFILL_CLOSE_AFTER_S:g} s into a {prompt_tokens}-token prefill of {prefill_s:.2f} s: "
        f"slot free {free_s:.3f} s later ({generating_s:.2f} s generating)"
    )
    assert prefill_s > 2 * PREFILL_CLOSE_AFTER_S  # it was closed early in the prefill
    # the whole prompt was prefilled for nobody, and the slot freed at its first tokens
    assert after["prompt_tokens_total"] - before["prompt_tokens_total"] >= prompt_tokens - SHARED_START_TOKENS
    assert after["tokens_predicted_total"] - before["tokens_predicted_total"] <= PREFILL_TOKENS_BEFORE_NOTICE
    assert free_s <= prefill_s - PREFILL_CLOSE_AFTER_S + generating_s + PREFILL_NOTICE_S


def test_streams_closed_while_waiting_for_a_slot_are_prefilled_all_the_same(
    llama_server: ServerProcess,
) -> None:
    source = (Path(__file__).parents[2] / "grill_locust" / "workload" / "autocomplete.py").read_text()
    prompts = [
        f"# {secrets.token_hex(8)}\n" + source[:WAITING_PROMPT_CHARS] for _ in range(LLAMA_SLOTS + WAITING)
    ]
    wait_idle(llama_server)
    before = engine_counters(llama_server)
    streams = [OpenStream.send(llama_server, prompt, FIM_MAX_TOKENS) for prompt in prompts]
    while engine_counters(llama_server)["requests_deferred"] < WAITING:
        assert time.monotonic() - streams[0].sent_at < IDLE_TIMEOUT_S, "no request waited for a slot"
        time.sleep(POLL_S)
    for stream in streams:
        stream.close()
    idle_s = wait_idle(llama_server)
    after = engine_counters(llama_server)
    prompt_tokens = sum(
        len(requests.post(f"{llama_server.url}/tokenize", json={"content": p}, timeout=30).json()["tokens"])
        for p in prompts
    )
    print(f"{len(prompts)} streams closed, {WAITING} of them waiting: server idle {idle_s:.2f} s later")
    prefilled = after["prompt_tokens_total"] - before["prompt_tokens_total"]
    assert prefilled >= prompt_tokens - SHARED_START_TOKENS * len(prompts)


# ---- a team: typists and a chat in one tier ---------------------------------------------------


def test_a_mixed_tier_accounts_for_every_request_of_every_persona(
    llama_server: ServerProcess, tmp_path: Path
) -> None:
    """Two typists to one multi-turn chat: developer k plays the same persona at every tier, the
    developers of a tier are 0..N-1, and each persona's records are exactly its developers' plan."""
    typist = autocomplete_conversation("completions", "template", FAST_TYPIST)
    mix = [(typist, TEAM_TYPIST_WEIGHT), (TEAM_CHAT, TEAM_CHAT_WEIGHT)]
    scenario = mix_scenario(llama_backend(llama_server), SERVED_MODEL, mix, TEAM_TIERS, TEAM_CHAT_MAX_TOKENS)
    run = run_campaign(scenario, tmp_path)
    drained_s = wait_idle(llama_server)
    records = pd.read_parquet(run.run_dir / "records.parquet")
    print(f"mixed tier campaign: {run.wall_s:.1f} s, server idle {drained_s:.1f} s later")
    print(records.groupby(["tier_users", "conversation", "status"]).size().to_dict())
    (team,) = load_scenario(run.results_dir.parent / SCENARIO_FILE).targets
    assert set(records["status"]) <= {STATUS_OK, STATUS_ABANDONED}
    assert (records.loc[records["kind"] == "multi-turn", "status"] == STATUS_OK).all()
    for users in TEAM_TIERS:
        tier = records[records["tier_users"] == users]
        assert sorted(tier["developer"].unique()) == list(range(users))
        plays = tier.groupby("developer")["conversation"].unique().map(list).to_dict()
        assert plays == {k: [team.persona_of(k).name] for k in range(users)}
        for developer, sent in tier.groupby("developer"):
            persona = team.persona_of(int(developer))
            assert len(sent) == persona.requests_per_iteration, (users, developer)
            assert (sent["kind"] == persona.kind).all()
        conversations = {persona.conversation.name: persona.conversation for persona in team.personas}
        counts = tier.groupby("conversation").size().to_dict()
        assert counts == {
            name: developers * conversations[name].requests_per_iteration
            for name, developers in team.persona_counts(users).items()
            if developers
        }
