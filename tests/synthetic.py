"""Synthetic results folders: realistic records (RECORD_COLUMNS) for tests, benchmarks and demos.

Engines are drawn with the shapes of the seed study (llama.cpp's TTFT collapses with users, vLLM and
SGLang stay flat), not with anyone's absolute numbers. Generation is vectorised: a million records
take a second or two.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from grill_locust.record import (
    ADDED_LABEL_COLUMNS,
    RECORD_COLUMN_TYPES,
    RECORD_COLUMNS,
    RENAMED_COLUMNS,
    STATUS_ABANDONED,
    STATUS_OK,
)
from grill_locust.report.load import phases_from_records
from grill_locust.sinks.results import PHASE_COLUMNS
from grill_locust.workload.kinds import KIND_AUTOCOMPLETE

START_WALL = 1_767_225_600.0  # 2026-01-01 00:00 UTC: synthetic runs start here
TIER_PAUSE_S = 30.0
MULTI_TURN = "multi-turn-session"  # drawn as multi-turn; any other conversation as short-baseline


@dataclass(frozen=True)
class EngineShape:
    """How one engine's latencies grow with concurrent users (a rough model, good enough for plots)."""

    engine: str
    ttft_base_s: float
    ttft_per_user_s: float  # queueing: added TTFT per concurrent user
    tpot_base_s: float
    tpot_per_user_s: float
    cache_hit: float  # fraction of a repeated prefix that is served from cache
    error_rate: float = 0.0


ENGINE_SHAPES: dict[str, EngineShape] = {
    "vllm": EngineShape("vllm", 0.25, 0.004, 0.016, 0.00005, 0.9),
    "vllm-no-prefix-cache": EngineShape("vllm", 0.30, 0.012, 0.016, 0.00010, 0.0),
    "sglang": EngineShape("sglang", 0.28, 0.006, 0.017, 0.00007, 0.85),
    "llamacpp": EngineShape("llamacpp", 1.00, 1.500, 0.026, 0.0, 0.5, error_rate=0.002),
}


def make_record(**values: Any) -> dict[str, Any]:
    """One record dict with every RECORD_COLUMNS key; plausible defaults, overridden by `values`."""
    record: dict[str, Any] = {
        "record_id": "r0",
        "run_id": "run",
        "target": "sim/grill-sim/short-baseline",
        "backend": "sim",
        "engine": "sim",
        "model": "grill-sim",
        "conversation": "short-baseline",
        "kind": "short-baseline",
        "tier_index": 0,
        "tier_users": 1,
        "iteration": 0,
        "user_id": 0,
        "worker_id": "local",
        "conversation_id": "c0",
        "turn": 0,
        "wall_start": START_WALL,
        "ttft_s": 0.1,
        "ttfo_s": 0.1,
        "tpot_s": 0.01,
        "e2e_s": 1.09,
        "itl_mean_s": 0.01,
        "itl_p50_s": 0.01,
        "itl_p99_s": 0.02,
        "itl_max_s": 0.03,
        "prompt_tokens": 100,
        "cached_tokens": 0,
        "output_tokens": 100,
        "reasoning_tokens": 0,
        "tokens_source": "usage",
        "tokens_per_s": 100 / 1.09,
        "visible_tokens_per_s": 99 / (1.09 - 0.1),
        "finish_reason": "length",
        "status": STATUS_OK,
        "http_status": 200,
        "error": "",
        "worker_lag_p99_ms": 0.5,
        "worker_read_lag_p99_ms": None,  # some reads unstamped: the event-loop lag judges
        "worker_cpu": 10.0,
        "retries": 0,
    }
    unknown = set(values) - set(RECORD_COLUMNS)
    if unknown:
        raise KeyError(f"not record columns: {sorted(unknown)}")
    record.update(values)
    return record


def synthetic_records(
    n_records: int,
    backends: Sequence[str] = ("vllm", "llamacpp"),
    conversations: Sequence[str] = (MULTI_TURN, "short-baseline"),
    tiers: Sequence[int] = (1, 5, 10, 20),
    run_id: str = "synthetic",
    model: str = "devstral-small",
    turns: int = 4,
    seed: int = 0,
    shapes: dict[str, EngineShape] | None = None,
) -> pd.DataFrame:
    """About `n_records` records over backends x conversations x tiers (more for larger tiers), RECORD_COLUMNS.

    Each backend is drawn with `shapes[backend]`, else ENGINE_SHAPES[backend], else vLLM's shape.
    """
    rng = np.random.default_rng(seed)
    groups = [
        (b, c, t_index, users) for b in backends for c in conversations for t_index, users in enumerate(tiers)
    ]
    weights = np.array([users for *_, users in groups], dtype=float)
    counts = np.maximum(np.round(weights / weights.sum() * n_records).astype(int), 1)
    group_of = np.repeat(np.arange(len(groups)), counts)
    n = len(group_of)
    position = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)

    backend = np.array([g[0] for g in groups], dtype=object)[group_of]
    conversation = np.array([g[1] for g in groups], dtype=object)[group_of]
    tier_index = np.array([g[2] for g in groups])[group_of]
    users = np.array([g[3] for g in groups], dtype=float)[group_of]
    known = {**ENGINE_SHAPES, **(shapes or {})}
    shape_of_backend = {b: known.get(b, ENGINE_SHAPES["vllm"]) for b in backends}

    def per_record(attribute: str) -> np.ndarray:
        table = np.array([getattr(shape_of_backend[g[0]], attribute) for g in groups], dtype=float)
        return table[group_of]

    multi = conversation == MULTI_TURN
    turn = np.where(multi, position % turns, 0)
    prompt_tokens = np.where(multi, 600 + turn * 900, rng.integers(40, 120, n)).astype(float)
    cached_tokens = np.floor(np.where(turn > 0, (prompt_tokens - 900) * per_record("cache_hit"), 0.0))
    output_tokens = rng.integers(120, 320, n).astype(float)
    prefill_factor = prompt_tokens / 1000.0
    ttft = (
        per_record("ttft_base_s") * (0.5 + prefill_factor) + per_record("ttft_per_user_s") * (users - 1)
    ) * (rng.lognormal(0.0, 0.25, n))
    tpot = (per_record("tpot_base_s") + per_record("tpot_per_user_s") * users) * rng.lognormal(0.0, 0.08, n)
    e2e = ttft + tpot * (output_tokens - 1)
    failed = rng.random(n) < per_record("error_rate")

    tier_span = np.array([60.0 + 2.0 * g[3] for g in groups])
    tier_start = START_WALL + np.concatenate([[0.0], np.cumsum(tier_span + TIER_PAUSE_S)[:-1]])
    wall_start = tier_start[group_of] + rng.random(n) * (tier_span[group_of] - e2e).clip(min=1.0)

    status = np.where(failed, "http_503", STATUS_OK).astype(object)
    target = np.char.add(np.char.add(backend.astype(str), f"/{model}/"), conversation.astype(str))
    frame = pd.DataFrame(
        {
            "record_id": np.char.add("r", np.arange(n).astype(str)),
            "run_id": run_id,
            "target": target,
            "backend": backend,
            "engine": _map(backend, shape_of_backend),
            "model": model,
            "conversation": conversation,
            "kind": np.where(multi, "multi-turn", "short-baseline"),
            "tier_index": tier_index,
            "tier_users": users.astype(int),
            "iteration": position % 5,
            "user_id": (position // np.where(multi, turns, 1)) % users.astype(int),
            "worker_id": "local",
            "conversation_id": np.char.add("c", (position // np.where(multi, turns, 1)).astype(str)),
            "turn": turn,
            "wall_start": wall_start,
            "ttft_s": np.where(failed, np.nan, ttft),
            "ttfo_s": np.where(failed, np.nan, ttft),
            "tpot_s": np.where(failed, np.nan, tpot),
            "e2e_s": np.where(failed, ttft, e2e),
            "itl_mean_s": np.where(failed, np.nan, tpot),
            "itl_p50_s": np.where(failed, np.nan, tpot * 0.95),
            "itl_p99_s": np.where(failed, np.nan, tpot * 2.5),
            "itl_max_s": np.where(failed, np.nan, tpot * 4.0),
            "prompt_tokens": prompt_tokens,
            "cached_tokens": cached_tokens,
            "output_tokens": np.where(failed, 0, output_tokens).astype(int),
            "reasoning_tokens": 0,
            "tokens_source": "usage",
            "tokens_per_s": np.where(failed, np.nan, output_tokens / e2e),
            "visible_tokens_per_s": np.where(failed, np.nan, 1.0 / tpot),  # no reasoning: the decode rate
            "finish_reason": pd.Series("length", index=range(n)).where(~failed, None),
            "status": status,
            "http_status": np.where(failed, 503, 200),
            "error": np.where(failed, "service unavailable", ""),
            "worker_lag_p99_ms": rng.gamma(2.0, 0.4, n),
            "worker_read_lag_p99_ms": rng.gamma(2.0, 0.1, n),
            "worker_cpu": 20.0 + users * 0.2,
            "retries": 0,
            "session": f"{run_id}.0",
            "attempt": 0,
            "developer": (position // np.where(multi, turns, 1)) % users.astype(int),
            "shown_in_budget": None,
            "tier_rate": None,
            "scheduled_wall": None,
            "schedule_lag_s": None,
            "trace_line": None,
            "warmup": None,
            "cooldown": None,
            "slo_met": None,
            "repeat": 0,
        }
    )
    return frame[list(RECORD_COLUMNS)]


AGENT_CONVERSATION = "agent-session"
AGENT_SYSTEM_TOKENS = 8000
AGENT_PREFILL_S_PER_TOKEN = 0.00004  # a new token's prefill: a cache miss costs this per token


def synthetic_agent_records(
    backends: Sequence[str] = ("vllm", "vllm-no-prefix-cache"),
    tiers: Sequence[int] = (1, 4),
    sessions_per_user: int = 2,
    steps: tuple[int, int] = (4, 8),
    run_id: str = "synthetic-agent",
    model: str = "devstral-small",
    seed: int = 0,
) -> pd.DataFrame:
    """Agent sessions (kind `agentic`), RECORD_COLUMNS: each step resends the context, grown by a tool
    result; the engine's cache_hit share of the previous context is cached and the rest is prefilled,
    so a caching engine's TTFT stays flat as the context grows and a non-caching one's climbs."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    wall = START_WALL
    for backend in backends:
        shape = ENGINE_SHAPES.get(backend, ENGINE_SHAPES["vllm"])
        for tier_index, users in enumerate(tiers):
            for user in range(users):
                for iteration in range(sessions_per_user):
                    conversation_id = f"{AGENT_CONVERSATION}:{backend}-t{tier_index}-u{user}:{iteration}"
                    context, previous, at = AGENT_SYSTEM_TOKENS, 0, wall + rng.random()
                    for step in range(int(rng.integers(steps[0], steps[1] + 1))):
                        cached = int(previous * shape.cache_hit) // 16 * 16
                        ttft = (
                            shape.ttft_base_s
                            + shape.ttft_per_user_s * (users - 1)
                            + AGENT_PREFILL_S_PER_TOKEN * (context - cached)
                        ) * rng.lognormal(0.0, 0.1)
                        output_tokens = int(rng.integers(30, 200))
                        tpot = shape.tpot_base_s + shape.tpot_per_user_s * users
                        e2e = ttft + tpot * (output_tokens - 1)
                        rows.append(
                            make_record(
                                record_id=f"{conversation_id}#{step}",
                                run_id=run_id,
                                target=f"{backend}/{model}/{AGENT_CONVERSATION}",
                                backend=backend,
                                engine=shape.engine,
                                model=model,
                                conversation=AGENT_CONVERSATION,
                                kind="agentic",
                                tier_index=tier_index,
                                tier_users=users,
                                iteration=iteration,
                                user_id=user,
                                conversation_id=conversation_id,
                                turn=step,
                                wall_start=at,
                                ttft_s=ttft,
                                ttfo_s=ttft,
                                tpot_s=tpot,
                                e2e_s=e2e,
                                itl_mean_s=tpot,
                                prompt_tokens=context,
                                cached_tokens=cached,
                                output_tokens=output_tokens,
                                tokens_per_s=output_tokens / e2e,
                                finish_reason="tool_calls",
                            )
                        )
                        at += e2e
                        previous = context
                        context += output_tokens + int(rng.lognormal(np.log(600), 0.8))
            wall += 600.0 + TIER_PAUSE_S
    return pd.DataFrame(rows, columns=list(RECORD_COLUMNS))


AUTOCOMPLETE_CONVERSATION = "completions"
AUTOCOMPLETE_BUDGET_MS = 400.0
AUTOCOMPLETE_PREFIX_TOKENS = 1500
KEYSTROKE_GAP_MEAN_S = 1.5  # mean time from a send to the developer's next keystroke


def synthetic_autocomplete_records(
    backends: Sequence[str] = ("vllm", "llamacpp"),
    tiers: Sequence[int] = (1, 4, 16),
    requests_per_user: int = 20,
    run_id: str = "synthetic-autocomplete",
    model: str = "qwen2.5-coder",
    budget_ms: float = AUTOCOMPLETE_BUDGET_MS,
    seed: int = 0,
) -> pd.DataFrame:
    """A typing developer's FIM requests (kind `autocomplete`), RECORD_COLUMNS: after each send the next
    keystroke comes a drawn gap later; a request still streaming then is `abandoned` (E2E = its time in
    flight, the tokens it received by then), a finished one is `ok` and shown in budget when it ended
    within `budget_ms`. Latency grows with users by the engine's shape, so abandonment does too."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    wall = START_WALL
    for backend in backends:
        shape = ENGINE_SHAPES.get(backend, ENGINE_SHAPES["vllm"])
        for tier_index, users in enumerate(tiers):
            for user in range(users):
                at = wall + rng.random()
                for turn in range(requests_per_user):
                    ttft = (shape.ttft_base_s * 0.4 + shape.ttft_per_user_s * (users - 1)) * rng.lognormal(
                        0, 0.3
                    )
                    tpot = (shape.tpot_base_s + shape.tpot_per_user_s * users) * 0.5  # a small coder model
                    output_tokens = int(rng.integers(16, 65))
                    e2e = ttft + tpot * (output_tokens - 1)
                    next_keystroke_s = rng.exponential(KEYSTROKE_GAP_MEAN_S)
                    values: dict[str, Any] = {}
                    if rng.random() < shape.error_rate:
                        values = {
                            "status": "http_503",
                            "http_status": 503,
                            "error": "service unavailable",
                            "ttft_s": None,
                            "ttfo_s": None,
                            "tpot_s": None,
                            "e2e_s": ttft,
                            "output_tokens": 0,
                            "tokens_per_s": None,
                            "finish_reason": None,
                        }
                    elif next_keystroke_s < e2e:
                        received = (
                            int((next_keystroke_s - ttft) / tpot) + 1 if next_keystroke_s >= ttft else 0
                        )
                        values = {
                            "status": STATUS_ABANDONED,
                            "e2e_s": next_keystroke_s,
                            "output_tokens": received,
                            "ttft_s": ttft if received else None,
                            "ttfo_s": ttft if received else None,
                            "tpot_s": None,
                            "tokens_per_s": received / next_keystroke_s,
                            "finish_reason": None,
                        }
                    else:
                        values = {
                            "e2e_s": e2e,
                            "ttft_s": ttft,
                            "ttfo_s": ttft,
                            "tpot_s": tpot,
                            "output_tokens": output_tokens,
                            "tokens_per_s": output_tokens / e2e,
                            "shown_in_budget": e2e * 1000.0 <= budget_ms,
                        }
                    rows.append(
                        make_record(
                            record_id=f"ac:{backend}-t{tier_index}-u{user}#{turn}",
                            run_id=run_id,
                            target=f"{backend}/{model}/{AUTOCOMPLETE_CONVERSATION}",
                            backend=backend,
                            engine=shape.engine,
                            model=model,
                            conversation=AUTOCOMPLETE_CONVERSATION,
                            kind=KIND_AUTOCOMPLETE,
                            tier_index=tier_index,
                            tier_users=users,
                            user_id=user,
                            developer=user,
                            conversation_id=f"ac:{backend}-t{tier_index}-u{user}",
                            turn=turn,
                            wall_start=at,
                            prompt_tokens=AUTOCOMPLETE_PREFIX_TOKENS,
                            itl_mean_s=tpot,
                            **values,
                        )
                    )
                    at += max(next_keystroke_s, values["e2e_s"] or 0.0) + 0.5  # typing, then a pause
            wall += 600.0 + TIER_PAUSE_S
    return pd.DataFrame(rows, columns=list(RECORD_COLUMNS))


def _map(values: np.ndarray, shapes: dict[str, EngineShape]) -> np.ndarray:
    return pd.Series(values).map({name: shape.engine for name, shape in shapes.items()}).to_numpy()


def write_results_folder(
    run_dir: str | Path,
    records: pd.DataFrame | Iterable[dict[str, Any]],
    phases: pd.DataFrame | Iterable[dict[str, Any]] | None = None,
    meta: dict[str, Any] | None = None,
    records_format: str = "parquet",
) -> Path:
    """Write a results folder as the run writes one: records (parquet or jsonl), phases.csv, run.json.

    `phases=None` derives complete phases from the records' time spans; pass `[]` to write none.
    """
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    frame = records if isinstance(records, pd.DataFrame) else pd.DataFrame.from_records(list(records))
    frame = frame.reindex(columns=list(RECORD_COLUMNS))
    if records_format == "parquet":
        frame.to_parquet(folder / "records.parquet", index=False)
    elif records_format == "jsonl":
        # integers as the run writes them (a float column's 50.0 is no record's token count)
        integers = {n: "Int64" for n, t in RECORD_COLUMN_TYPES.items() if t is int and n in frame}
        frame.astype(integers).to_json(folder / "records.jsonl", orient="records", lines=True)
    else:
        raise ValueError(f"records_format must be parquet or jsonl, not {records_format!r}")
    if phases is None:
        from grill_locust.report.load import normalize_records

        phase_frame = phases_from_records(normalize_records(frame)).assign(note="")
    else:
        phase_frame = phases if isinstance(phases, pd.DataFrame) else pd.DataFrame.from_records(list(phases))
    if len(phase_frame):
        phase_frame.reindex(columns=list(PHASE_COLUMNS)).to_csv(folder / "phases.csv", index=False)
    run_id = str(frame["run_id"].iloc[0]) if len(frame) else folder.name
    run_meta = {"run_id": run_id, "scenario": "synthetic", "argv": []}
    run_meta.update(meta or {})
    (folder / "run.json").write_text(json.dumps(run_meta, indent=2), encoding="utf-8")
    return folder


def to_older_column_names(run_dir: str | Path) -> None:
    """Rewrite a results folder as one written before RENAMED_COLUMNS and ADDED_LABEL_COLUMNS: records
    (jsonl and parquet, whichever are there) and phases.csv under the old names, without the added labels."""
    folder = Path(run_dir)
    older = {new: old for old, new in RENAMED_COLUMNS.items()}

    def older_row(row: dict[str, Any]) -> dict[str, Any]:
        return {
            older.get(name, name): value for name, value in row.items() if name not in ADDED_LABEL_COLUMNS
        }

    jsonl = folder / "records.jsonl"
    if jsonl.is_file():
        rows = [
            older_row(json.loads(line)) for line in jsonl.read_text(encoding="utf-8").splitlines() if line
        ]
        jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    parquet = folder / "records.parquet"
    if parquet.is_file():
        frame = pd.read_parquet(parquet)
        frame.drop(columns=list(ADDED_LABEL_COLUMNS)).rename(columns=older).to_parquet(parquet, index=False)
    phases = folder / "phases.csv"
    if phases.is_file():
        with phases.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = [
                older.get(name, name) for name in reader.fieldnames or () if name not in ADDED_LABEL_COLUMNS
            ]
            phase_rows = [older_row(row) for row in reader]
        with phases.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=header)
            writer.writeheader()
            writer.writerows(phase_rows)
