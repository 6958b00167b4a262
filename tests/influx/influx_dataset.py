"""A known campaign for the InfluxDB tests: records (record.py columns), phases, tier rows and telemetry.

The agentic conversation's requests are steps of sessions, the autocomplete one's a typing developer's
completions, some abandoned (the tier rows of both are the master's summary of them, as a live run writes
them); the other conversations' are single requests.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from grill_locust.record import RECORD_COLUMNS, RequestRecord
from grill_locust.report import RunData, summarize
from grill_locust.run.messages import RecordsBatch

BACKENDS = ("vllm", "sglang")
AGENT_CONVERSATION = "agent-session"
AUTOCOMPLETE_CONVERSATION = "completions"
# name -> kind
CONVERSATIONS = {
    "multi-turn-session": "multi-turn",
    "shared-prefix": "shared-prefix",
    AGENT_CONVERSATION: "agentic",
    AUTOCOMPLETE_CONVERSATION: "autocomplete",
}
AUTOCOMPLETE_BUDGET_S = 0.3  # a completion that ended within it is shown in budget
AGENT_STEPS = 3  # an agent session's steps: each user runs two sessions per tier
KINDS = tuple(CONVERSATIONS.values())
TIERS = (1, 5, 10)
WORKERS = ("w1", "w2")
TIER_SPAN_S = 20.0


def make_record(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {name: None for name in RECORD_COLUMNS}
    values.update(
        record_id="r0",
        run_id="run-a",
        target="vllm/m/multi-turn-session",
        backend="vllm",
        engine="vllm",
        model="m",
        conversation="multi-turn-session",
        kind="multi-turn",
        tier_index=0,
        tier_users=1,
        iteration=0,
        user_id=0,
        worker_id="w1",
        conversation_id="c0",
        turn=0,
        wall_start=1_700_000_000.0,
        output_tokens=10,
        tokens_source="usage",
        status="ok",
        error="",
        retries=0,
    )
    values.update(overrides)
    return RequestRecord(**values).to_dict()


def records_of(rows: Iterable[dict[str, Any]]) -> list[RequestRecord]:
    """The records of record dicts (make_record's), as the users hand them to the sinks."""
    return [RequestRecord(**row) for row in rows]


def batch(worker: str, rows: Iterable[dict[str, Any]], iterations: dict[str, int]) -> RecordsBatch:
    """A worker's batch of these records, as the master receives it."""
    return RecordsBatch.from_wire(RecordsBatch(worker, records_of(rows), iterations).to_wire())


@dataclass
class Campaign:
    """Records per worker, phases, tier rows and telemetry samples, all inside [start_s, end_s]."""

    start_s: float
    end_s: float
    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # worker -> records
    phases: list[tuple[str, dict[str, Any], float]] = field(default_factory=list)  # (event, phase, at_s)
    tiers: list[dict[str, Any]] = field(default_factory=list)
    telemetry: list[dict[str, Any]] = field(default_factory=list)

    def all_records(self) -> list[dict[str, Any]]:
        return [record for records in self.records.values() for record in records]


def master_tier_row(
    campaign: Campaign, phase: dict[str, Any], start_s: float, end_s: float
) -> dict[str, Any]:
    """The summary row the master writes when a tier ends (run/campaign.py), from the tier's records."""
    records = [
        record
        for record in campaign.all_records()
        if record["target"] == phase["target"] and record["tier_index"] == phase["tier_index"]
    ]
    phase_row = {
        **phase,
        "engine": phase["backend"],
        "model": "m",
        "start_wall": start_s,
        "end_wall": end_s,
        "iterations_target": 2,
        "iterations_done": 2,
        "complete": True,
        "note": "",
    }
    run = RunData(pd.DataFrame(records, columns=list(RECORD_COLUMNS)), pd.DataFrame([phase_row]), None, {})
    (row,) = summarize(run).to_dict("records")
    return {**row, "end_wall": end_s}  # the master writes it at the tier's end: its point is stamped then


def make_campaign(start_s: float, seed: int = 7, run_id: str = "run-a") -> Campaign:
    """Every (conversation, backend, tier) for TIER_SPAN_S seconds each, requests from two workers.

    Start times are whole milliseconds; two requests (from different workers) share each start time.
    """
    rng = random.Random(seed)
    campaign = Campaign(start_s=start_s, end_s=start_s)
    for worker in WORKERS:
        campaign.records[worker] = []
    at_s = start_s
    record_number = 0
    for conversation, kind in CONVERSATIONS.items():
        for backend in BACKENDS:
            for tier_index, users in enumerate(TIERS):
                target = f"{backend}/m/{conversation}"
                phase = {
                    "run_id": run_id,
                    "target": target,
                    "backend": backend,
                    "conversation": conversation,
                    "kind": kind,
                    "tier_index": tier_index,
                    "tier_users": users,
                }
                campaign.phases.append(("start", phase, at_s))
                slow = 2.0 if backend == "sglang" else 1.0
                for index in range(users * 6):
                    worker = WORKERS[index % len(WORKERS)]
                    wall_start_ms = round(
                        (at_s + 0.5 + (index // 2) * (TIER_SPAN_S - 2) / (users * 3)) * 1000
                    )
                    status = "ok"
                    if index % 7 == 3:
                        status = "http_500" if index % 2 else "timeout"
                    labels: dict[str, Any] = {
                        "iteration": index // users,
                        "user_id": index % users,
                        "conversation_id": f"conv-{record_number}",
                        "prompt_tokens": 100 + index,
                        "cached_tokens": 50,
                    }
                    if kind == "agentic":  # session index // AGENT_STEPS, its steps on one worker
                        session, turn = divmod(index, AGENT_STEPS)
                        worker = WORKERS[session % len(WORKERS)]
                        labels = {
                            "iteration": session // users,
                            "user_id": session % users,
                            "conversation_id": f"agent-{backend}-{tier_index}-{session}",
                            "turn": turn,
                            "prompt_tokens": 8000 + 1000 * turn + 10 * session,
                            "cached_tokens": (8000 + 1000 * turn - 500 * (session % 3)) if turn else 0,
                        }
                    ttft = round(slow * users * 0.01 * (1 + rng.random()), 6)
                    output_tokens = rng.randint(5, 60)
                    e2e = round(ttft + output_tokens * 0.005 * slow * (1 + rng.random()), 6)
                    if kind == "autocomplete":  # every third request abandoned, with what came before
                        labels["turn"] = index // users
                        if status == "ok" and index % 3 == 1:
                            status = "abandoned"
                            e2e = round(e2e * rng.random(), 6)
                            output_tokens = int(output_tokens * e2e / (e2e + ttft)) if e2e > ttft else 0
                            ttft = ttft if output_tokens else None
                        elif status == "ok":
                            labels["shown_in_budget"] = e2e <= AUTOCOMPLETE_BUDGET_S
                    record = make_record(
                        record_id=f"rec-{record_number}",
                        run_id=run_id,
                        target=target,
                        backend=backend,
                        engine=backend,
                        conversation=conversation,
                        kind=kind,
                        tier_index=tier_index,
                        tier_users=users,
                        worker_id=worker,
                        wall_start=wall_start_ms / 1000.0,
                        ttft_s=ttft,
                        ttfo_s=ttft,
                        e2e_s=e2e,
                        tpot_s=round((e2e - ttft) / (output_tokens - 1), 6) if status == "ok" else None,
                        itl_mean_s=0.005,
                        output_tokens=output_tokens,
                        tokens_per_s=round(output_tokens / e2e, 6) if e2e else None,
                        finish_reason="stop" if status == "ok" else None,
                        status=status,
                        http_status=500 if status == "http_500" else (200 if status == "ok" else None),
                        worker_lag_p99_ms=1.5,
                        worker_cpu=20.0,
                        **labels,
                    )
                    campaign.records[worker].append(record)
                    record_number += 1
                end_s = at_s + TIER_SPAN_S
                campaign.phases.append(("end", phase, end_s))
                if kind in ("agentic", "autocomplete"):
                    campaign.tiers.append(master_tier_row(campaign, phase, at_s, end_s))
                else:
                    campaign.tiers.append(
                        {
                            **phase,
                            "engine": backend,
                            "model": "m",
                            "end_wall": end_s,
                            "requests": users * 6,
                            "success_rate": 0.75 + 0.01 * users,
                            "output_tokens_per_s": 100.0 * users / slow,
                            "ttft_p50_s": 0.1,
                            "complete": True,
                            "note": "",
                        }
                    )
                at_s = end_s + 1.0
    campaign.end_s = at_s
    sample_s = start_s
    while sample_s < at_s:
        for backend in BACKENDS:
            campaign.telemetry.append(
                {
                    "wall_time": sample_s,
                    "kind": "engine",
                    "source": backend,
                    "backend": backend,
                    "host": "gpu-node-1",
                    "gpu_index": None,
                    "gpu_uuid": None,
                    "gpu_name": None,
                    "requests_running": 4.0,
                    "requests_waiting": 1.0 if backend == "vllm" else 3.0,
                    "kv_cache_usage": 0.25 if backend == "vllm" else 0.5,
                    "prefix_cache_hit_rate": 0.8 if backend == "vllm" else 0.6,
                    "generation_tokens_total": (sample_s - start_s) * (100.0 if backend == "vllm" else 50.0),
                }
            )
        for gpu_index in (0, 1):
            campaign.telemetry.append(
                {
                    "wall_time": sample_s,
                    "kind": "gpu",
                    "source": "gpu-node-1:9400",
                    "backend": "",
                    "host": "gpu-node-1",
                    "gpu_index": gpu_index,
                    "gpu_uuid": f"GPU-{gpu_index}",
                    "gpu_name": "H100",
                    "gpu_util_pct": 50.0 + 10 * gpu_index,
                    "mem_used_bytes": 40e9 + 1e9 * gpu_index,
                    "power_w": 300.0 + gpu_index,
                }
            )
        sample_s += 5.0
    return campaign
