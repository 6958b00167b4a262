"""Master and workers as separate processes on loopback: every record arrives once, labelled right."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from grill_locust.run import exit_codes
from tests.ports import free_port
from tests.run.conftest import (
    LOCUSTFILE,
    TRUTH_WAIT_S,
    only_run_dir,
    read_truth,
    run_locust,
    sim_scenario,
    truth_once_it_holds,
    write_scenario,
)

pytestmark = pytest.mark.slow

SHORT = {"name": "short", "kind": "short-baseline", "prompt_tokens": 40}


def locust(
    args: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`locust -f` the product's locustfile, its output in `log`; `env`: the process's whole environment."""
    return subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), *args],
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"} if env is None else env,
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
    )


def cluster_master_args(port: int, scenario: Path, results: Path, workers: int) -> list[str]:
    """A headless master on loopback that waits for `workers` workers."""
    return [
        "--master",
        "--headless",
        "--expect-workers",
        str(workers),
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(port),
        "--scenario",
        str(scenario),
        "--results-dir",
        str(results),
    ]


def cluster_worker_args(port: int) -> list[str]:
    return ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]


def start_cluster(
    tmp_path: Path, scenario: Path, workers: int, master_args: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], list[subprocess.Popen[bytes]]]:
    port = free_port()
    master = locust(
        [*cluster_master_args(port, scenario, tmp_path / "results", workers), *master_args],
        tmp_path,
        tmp_path / "master.log",
    )
    procs = [locust(cluster_worker_args(port), tmp_path, tmp_path / f"worker{i}.log") for i in range(workers)]
    return master, procs


def finish(
    master: subprocess.Popen[bytes], workers: list[subprocess.Popen[bytes]], timeout_s: float = 150
) -> int:
    try:
        return master.wait(timeout=timeout_s)
    finally:
        for proc in [master, *workers]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_master_and_two_workers_record_each_request_exactly_once(tmp_path: Path) -> None:
    scenario = write_scenario(
        tmp_path / "s.yaml", sim_scenario(conversation=SHORT, tiers=[2, 6], iterations=2)
    )
    master, workers = start_cluster(tmp_path, scenario, workers=2)
    code = finish(master, workers)
    log = (tmp_path / "master.log").read_text()
    assert code == 0, log[-3000:]
    records = pd.read_parquet(only_run_dir(tmp_path / "results") / "records.parquet")
    assert records["record_id"].is_unique
    assert records.groupby("tier_users").size().to_dict() == {2: 4, 6: 12}
    assert (records["status"] == "ok").all()
    # Locust spreads users evenly: each worker ran half of every tier
    per_worker = records.groupby(["tier_users", "worker_id"]).size()
    assert records["worker_id"].nunique() == 2
    assert sorted(per_worker.to_dict().values()) == [2, 2, 6, 6]
    assert (records.groupby("tier_users")["tier_index"].unique().map(list).to_dict()) == {2: [0], 6: [1]}


def test_processes_flag_runs_the_whole_campaign(tmp_path: Path) -> None:
    scenario = write_scenario(
        tmp_path / "s.yaml", sim_scenario(conversation=SHORT, tiers=[2, 4], iterations=1)
    )
    done = run_locust(
        ["--processes", "2", "--scenario", str(scenario), "--results-dir", str(tmp_path / "r")], tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet")
    assert records.groupby("tier_users").size().to_dict() == {2: 2, 4: 4}
    assert records["record_id"].is_unique


def _wait_for_records(run_root: Path, n: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        files = list(run_root.glob("*/records.jsonl"))
        if files and len(files[0].read_text().splitlines()) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} records after {timeout_s} s")


def test_worker_stopping_normally_mid_tier_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    data = sim_scenario(
        conversation=SHORT, tiers=[4], iterations=4, max_tokens=48, sim_args={"truth_log": str(truth)}
    )
    scenario = write_scenario(tmp_path / "s.yaml", data)
    master, workers = start_cluster(tmp_path, scenario, workers=2)
    _wait_for_records(tmp_path / "results", 3)
    workers[1].send_signal(signal.SIGTERM)  # a normal stop: its in-flight requests are recorded as cut
    code = finish(master, workers)
    assert code in (0, 1), (tmp_path / "master.log").read_text()[-3000:]
    run_dir = only_run_dir(tmp_path / "results")
    records = pd.read_parquet(run_dir / "records.parquet")
    assert records["record_id"].is_unique
    # every request the engine saw is one record, and no record lacks a request
    truth_ids = {t["request_id"] for t in truth_once_it_holds(truth, set(records["record_id"]))}
    assert set(records["record_id"]) == truth_ids
    phases = pd.read_csv(run_dir / "phases.csv")
    assert bool(phases["complete"].iloc[0])
    assert phases["iterations_done"].iloc[0] >= 16


def test_worker_killed_mid_tier_is_reported_and_the_tier_still_completes(tmp_path: Path) -> None:
    tier_users, iterations_per_user, workers_started = 4, 4, 2
    data = sim_scenario(conversation=SHORT, tiers=[tier_users], iterations=iterations_per_user, max_tokens=48)
    scenario = write_scenario(tmp_path / "s.yaml", data)
    master, workers = start_cluster(tmp_path, scenario, workers=workers_started)
    _wait_for_records(tmp_path / "results", 3)
    workers[1].kill()  # SIGKILL: no goodbye, no last flush
    code = finish(master, workers)
    log = (tmp_path / "master.log").read_text()
    assert code in (0, 1), log[-3000:]
    assert "lost during tier 1" in log
    run_dir = only_run_dir(tmp_path / "results")
    records = pd.read_parquet(run_dir / "records.parquet")
    assert records["worker_id"].nunique() == 2  # what the dead worker shipped stays
    phases = pd.read_csv(run_dir / "phases.csv")
    assert bool(phases["complete"].iloc[0]), phases.to_dict("records")
    # the dead worker's share was its users' iterations; each of its records (one request each) shipped
    # with the iteration it ended, so what it did not ship is exactly what the note counts as lost
    note = re.search(r"(\d+) iterations lost on worker (\S+)", phases["note"].iloc[0])
    assert note is not None, phases["note"].iloc[0]
    lost, dead_worker = int(note[1]), note[2]
    shipped = int((records["worker_id"] == dead_worker).sum())
    share = tier_users // workers_started * iterations_per_user
    assert 0 < shipped < share
    assert lost == share - shipped


def test_requests_in_flight_when_the_last_tier_hits_its_time_cap_reach_the_results(tmp_path: Path) -> None:
    # the workers give their users --stop-timeout to finish; the master must wait for those records
    truth = tmp_path / "truth.jsonl"
    config = sim_scenario(
        conversation=SHORT, tiers=[2], max_tokens=32, sim_args={"step_a_ms": 200, "truth_log": str(truth)}
    )
    config["load"].update(pause_s=0, think_time_s=0, tier_timeout_s=3)
    scenario = write_scenario(tmp_path / "s.yaml", config)
    args = [
        "--processes",
        "2",
        "--stop-timeout",
        "5",
        "--scenario",
        str(scenario),
        "--results-dir",
        str(tmp_path / "r"),
    ]
    done = run_locust(args, tmp_path)
    assert done.returncode == exit_codes.TIER_INCOMPLETE, done.stderr[-3000:]  # the cap cut the tier
    records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet")
    seen = {row["request_id"] for row in read_truth(truth)}
    assert len(seen) == 2 and set(records["record_id"]) == seen


def test_worker_killed_mid_rate_tier_its_share_is_taken_up_and_the_tier_keeps_its_rate(
    tmp_path: Path,
) -> None:
    rate, duration_s = 8.0, 12.0  # constant arrivals: each worker's gaps add up exactly
    truth = tmp_path / "truth.jsonl"
    data = sim_scenario(conversation=SHORT, tiers=[1], sim_args={"truth_log": str(truth)})
    data["load"] = {"rates": [rate], "arrival": "constant", "duration_s": duration_s, "pause_s": 0.2}
    master, workers = start_cluster(tmp_path, write_scenario(tmp_path / "s.yaml", data), workers=2)
    _wait_for_records(tmp_path / "results", 4)
    workers[1].kill()  # SIGKILL: no goodbye, no last flush
    code = finish(master, workers)
    log = (tmp_path / "master.log").read_text()
    assert code in (0, 1), log[-3000:]
    run_dir = only_run_dir(tmp_path / "results")
    phases = pd.read_csv(run_dir / "phases.csv")
    note = str(phases["note"].iloc[0])
    assert bool(phases["complete"].iloc[0]), note
    # the tier's sends: the survivor's, and those of the dead worker that its shipped records show
    assert phases["iterations_target"].iloc[0] == phases["iterations_done"].iloc[0]
    lost = re.search(
        r"worker (\S+) lost at [\d.]+ s: .* to ([\d.]+) s, then sent by the 1 remaining workers", note
    )
    assert lost is not None, note
    assert lost[0] in log  # the master's log says the same
    dead_worker, resplit_s = lost[1], float(lost[2])
    records = pd.read_parquet(run_dir / "records.parquet")
    assert records["record_id"].is_unique
    survivor = records[records["worker_id"] != dead_worker]
    assert survivor["worker_id"].nunique() == 1
    # every request the surviving worker sent is one record; the dead one's records are requests it sent
    # (the truth has more: those the dead worker never shipped)
    deadline = time.monotonic() + TRUTH_WAIT_S
    truth_ids = {t["request_id"] for t in read_truth(truth)}
    while not set(records["record_id"]) <= truth_ids and time.monotonic() < deadline:
        time.sleep(0.1)
        truth_ids = {t["request_id"] for t in read_truth(truth)}
    prefix = f"{survivor['worker_id'].iloc[0]}-"
    assert {i for i in truth_ids if i.startswith(prefix)} == set(survivor["record_id"])
    assert set(records["record_id"]) <= truth_ids
    # the survivor's tier starts one gap of its half share before its first send; from the re-split on
    # (that many seconds after its start) it sends at the whole rate: one send every 1/rate s
    scheduled = survivor["scheduled_wall"].sort_values()
    start_wall = scheduled.iloc[0] - 2 / rate
    taken_up = scheduled[scheduled >= start_wall + resplit_s]
    assert abs(len(taken_up) - rate * (duration_s - resplit_s)) <= 1.5, (len(taken_up), resplit_s)
    # the note rounds the re-split's time to 0.1 s: the first gap may join the old schedule's last send
    # (at half the rate) to the new schedule's first; every later one is the whole rate's
    gaps = taken_up.diff().dropna()
    assert (gaps.iloc[1:] - 1 / rate).abs().max() < 1e-3, gaps.iloc[:3]
    assert 1 / rate - 1e-3 < gaps.iloc[0] < 1 / rate + 0.05 + 1e-3, gaps.iloc[:3]
