"""Open-loop rate tiers in real headless Locust runs against one simulated engine shared by the module:
sends at the arrival process's times (Poisson, constant, gamma), sessions at a session rate, a
max_in_flight cap reached and flagged, and a rate split over two worker processes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from grill_locust.sim import SimProcess
from tests.run.conftest import only_run_dir, run_locust, write_scenario
from tests.run.test_distributed import finish, start_cluster

pytestmark = pytest.mark.slow

SHORT = {"name": "short", "kind": "short-baseline", "prompt_tokens": 40}
CHAT = {"name": "chat", "kind": "multi-turn", "system_tokens": 200, "user_turns": 3, "turn_tokens": 30}


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimProcess.start(profile="vllm") as process:
        yield process


def scenario(sim: SimProcess, conversations: list[dict[str, Any]], load: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "openloop",
        "backends": [{"name": "sim", "engine": "sim", "url": sim.url}],
        "models": [{"name": "grill-sim", "max_tokens": 8, "ignore_eos": True}],
        "conversations": conversations,
        "targets": [{"backend": "sim", "conversation": c["name"]} for c in conversations],
        "load": {"pause_s": 0.2, "think_time_s": 0.02, "engine_wait_s": 0, **load},
    }


def run(tmp_path: Path, data: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    path = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(["--scenario", str(path), "--results-dir", str(tmp_path / "results")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "results")
    return pd.read_parquet(run_dir / "records.parquet"), pd.read_csv(run_dir / "phases.csv")


def sends(records: pd.DataFrame) -> pd.DataFrame:
    """One row per send: its conversation's first request (the one the arrival sent)."""
    return records[records["schedule_lag_s"].notna()].sort_values("scheduled_wall")


def gaps_cv(scheduled_wall: pd.Series) -> float:
    gaps = scheduled_wall.sort_values().diff().dropna()
    return float(gaps.std(ddof=0) / gaps.mean())


def assert_count_within_bounds(count: int, expected: float, gaps_cv: float = 1.0) -> None:
    """Within 4 standard deviations of a renewal process's count: variance expected x CV^2 (Poisson: 1)."""
    assert abs(count - expected) < 4 * gaps_cv * math.sqrt(expected), (count, expected)


def test_a_poisson_tier_sends_at_its_rate_on_time_and_records_every_send(
    sim: SimProcess, tmp_path: Path
) -> None:
    rate, duration_s = 25.0, 4.0
    records, phases = run(tmp_path, scenario(sim, [SHORT], {"rates": [rate], "duration_s": duration_s}))
    assert (records["status"] == "ok").all()
    assert (records["tier_rate"] == rate).all() and (records["tier_users"] == 0).all()
    sent = sends(records)
    assert len(sent) == len(records)  # one request per send
    assert_count_within_bounds(len(sent), rate * duration_s)
    assert 0.6 < gaps_cv(sent["scheduled_wall"]) < 1.4  # exponential gaps: CV 1 (std error ~0.1 here)
    # each send left when scheduled: its wall_start is the intended time plus its lag
    assert (sent["wall_start"] - sent["scheduled_wall"] - sent["schedule_lag_s"]).abs().max() < 1e-6
    assert sent["schedule_lag_s"].min() >= 0
    assert sent["schedule_lag_s"].median() < 0.020
    # a tier whose lag p99 (interpolated, as every percentile) passes 10 ms says so, and only such a tier (a loaded machine)
    ordered = np.sort(sent["schedule_lag_s"].to_numpy())
    p99_s = float(np.percentile(ordered, 99))
    assert ("LOAD-GENERATOR-BOUND" in str(phases["note"].astype("string").fillna("").iloc[0])) == (
        p99_s > 0.010
    ), p99_s
    start = sent["scheduled_wall"].min()
    assert sent["scheduled_wall"].max() - start < duration_s
    # the requests that ended after the tier's sending time are cooldown, the others not
    ended = records["wall_start"] + records["e2e_s"]
    tier_end = phases["start_wall"].iloc[0] + duration_s
    assert not records.loc[ended < tier_end - 0.5, "cooldown"].any()
    row = phases.iloc[0]
    assert bool(row["complete"]) and row["tier_rate"] == rate and row["tier_users"] == 0
    assert row["iterations_target"] == row["iterations_done"] == len(sent)


def test_a_constant_rate_spaces_sends_evenly_and_sessions_play_their_turns_closed_loop(
    sim: SimProcess, tmp_path: Path
) -> None:
    rate, duration_s = 8.0, 3.0  # gaps of 1/8 s add up exactly
    records, phases = run(
        tmp_path,
        scenario(sim, [SHORT, CHAT], {"rates": [rate], "duration_s": duration_s, "arrival": "constant"}),
    )
    assert (records["status"] == "ok").all()
    for target, tier in records.groupby("target"):
        sent = sends(tier)
        # one worker, no seed to its schedule: rate x duration sends, evenly spaced
        assert len(sent) == rate * duration_s - 1, target
        assert gaps_cv(sent["scheduled_wall"]) < 0.05, target
    chat = records[records["kind"] == "multi-turn"]
    sessions = chat.groupby("conversation_id")
    assert sessions.ngroups == rate * duration_s - 1  # the rate counts sessions
    for _, session in sessions:
        ordered = session.sort_values("turn")
        assert list(ordered["turn"]) == [0, 1, 2]
        # later turns carry the session's scheduled time, no lag of their own, and follow the reply
        assert ordered["scheduled_wall"].nunique() == 1
        assert ordered["schedule_lag_s"].isna().tolist() == [False, True, True]
        ends = (ordered["wall_start"] + ordered["e2e_s"]).iloc[:-1].to_numpy()
        assert (ordered["wall_start"].iloc[1:].to_numpy() >= ends).all()
    assert phases["complete"].all()


def test_gamma_arrivals_are_bursty_and_max_in_flight_reached_is_flagged_not_dropped(
    sim: SimProcess, tmp_path: Path
) -> None:
    rate, duration_s, burstiness = 25.0, 4.0, 0.25
    load = {
        "rates": [rate],
        "duration_s": duration_s,
        "arrival": "gamma",
        "burstiness": burstiness,
        "max_in_flight": 1,
    }
    records, phases = run(tmp_path, scenario(sim, [SHORT], load))
    sent = sends(records)
    assert (records["status"] == "ok").all()
    # scheduled times, whatever the cap did: gamma gaps of CV 1/sqrt(0.25) = 2 (Poisson's would be 1)
    assert gaps_cv(sent["scheduled_wall"]) > 1.3
    assert_count_within_bounds(len(sent), rate * duration_s, gaps_cv=burstiness**-0.5)
    # one request at a time: none overlaps the next, and the sends held back show it in their lag
    ordered = sent.sort_values("wall_start")
    ends = (ordered["wall_start"] + ordered["e2e_s"]).iloc[:-1].to_numpy()
    assert (ordered["wall_start"].iloc[1:].to_numpy() >= ends - 0.002).all()
    assert sent["schedule_lag_s"].max() > 0.1
    note = phases["note"].iloc[0]
    waited = int(note.split("max_in_flight 1 reached: ")[1].split(" sends waited")[0])
    assert 0 < waited < len(sent)
    assert phases["iterations_done"].iloc[0] == len(sent)  # every send recorded


def test_two_workers_split_the_rate_and_their_sum_has_it(sim: SimProcess, tmp_path: Path) -> None:
    rate, duration_s = 30.0, 4.0
    data = scenario(sim, [SHORT], {"rates": [rate], "duration_s": duration_s})
    master, workers = start_cluster(tmp_path, write_scenario(tmp_path / "s.yaml", data), workers=2)
    code = finish(master, workers)
    assert code == 0, (tmp_path / "master.log").read_text()[-3000:]
    run_dir = only_run_dir(tmp_path / "results")
    records = pd.read_parquet(run_dir / "records.parquet")
    assert (records["status"] == "ok").all() and records["record_id"].is_unique
    sent = sends(records)
    assert_count_within_bounds(len(sent), rate * duration_s)
    per_worker = sent.groupby("worker_id").size()
    assert len(per_worker) == 2
    for count in per_worker:  # each its half, from its own seed
        assert_count_within_bounds(int(count), rate / 2 * duration_s)
    first, second = (
        set(group["scheduled_wall"] - group["scheduled_wall"].min()) for _, group in sent.groupby("worker_id")
    )
    assert first != second
    phases = pd.read_csv(run_dir / "phases.csv")
    assert bool(phases["complete"].iloc[0]) and phases["iterations_done"].iloc[0] == len(sent)
