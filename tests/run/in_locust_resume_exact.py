"""Resume is exact: a killed master leaves no worker sending load, a resumed campaign takes records of its
own session only, refuses a folder made from another scenario, and numbers tiers against the campaign."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from locust.env import Environment
from locust.event import Events

from grill_locust.run.campaign import Campaign
from grill_locust.run.worker import MASTER_SILENCE_S
from grill_locust.scenario import parse_scenario
from grill_locust.sim import SimProcess
from grill_locust.sinks.results import ResultsWriter
from tests.influx.influx_dataset import make_record
from tests.ports import free_port
from tests.run.conftest import LOCUSTFILE, only_run_dir, read_truth, run_locust, sim_scenario, write_scenario
from tests.run.test_distributed import start_cluster

SHORT = {"name": "short", "kind": "short-baseline", "prompt_tokens": 40}


def long_tier_on(url: str, tiers: list[int] | None = None) -> dict[str, Any]:
    """A tier far longer than the tests wait, on an engine the test runs (it outlives the load generator)."""
    return {
        "name": "long",
        "backends": [{"name": "engine", "engine": "vllm", "url": url}],
        "models": [{"name": "grill-sim", "max_tokens": 48, "ignore_eos": True}],
        "conversations": [SHORT],
        "targets": [{"backend": "engine", "model": "grill-sim", "conversation": "short"}],
        "load": {"tiers": tiers or [4], "iterations": 200, "pause_s": 0.2, "think_time_s": 0.05},
    }


def wait_for_records(results: Path, n: int, timeout_s: float = 90) -> None:
    """Until the run has recorded n requests (the simulator writes its truth log only when idle)."""
    deadline = time.monotonic() + timeout_s
    while True:
        files = list(results.glob("*/records.jsonl"))
        if files and len(files[0].read_text().splitlines()) >= n:
            return
        assert time.monotonic() < deadline, f"fewer than {n} records after {timeout_s} s"
        time.sleep(0.1)


def requests_started_after(truth: Path, wall: float) -> list[dict[str, Any]]:
    """The engine's requests that arrived after `wall` (read once the load is gone: the engine, idle,
    has written its truth log)."""
    return [t for t in read_truth(truth) if t["arrival"] > wall]


@pytest.mark.slow
def test_the_forked_workers_of_a_killed_processes_parent_die_with_it(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    with SimProcess.start("vllm", truth_log=str(truth)) as sim:
        scenario = write_scenario(tmp_path / "s.yaml", long_tier_on(sim.url))
        port = free_port()
        parent = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--processes", "2"]
            # the forked workers connect to --master-port: ours, not another run's on Locust's default
            + ["--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), "--master-port", str(port)]
            + ["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")],
            cwd=tmp_path,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=open(tmp_path / "out.log", "wb"),
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_records(tmp_path / "results", 8)
            children = psutil.Process(parent.pid).children()
            assert len(children) == 2
            parent.kill()  # kill -9: no handler of ours runs in the parent
            parent.wait(timeout=10)
            killed_at = time.time()
            _, alive = psutil.wait_procs(children, timeout=10)
            assert not alive, [c.pid for c in alive]
            time.sleep(2)
            # in-flight requests end with their process; no new one starts after it
            assert not requests_started_after(truth, killed_at + 0.5)
        finally:
            for child in psutil.Process().children(recursive=True):
                if child.pid != sim.process.pid:
                    child.kill()


@pytest.mark.slow
def test_workers_of_a_killed_master_stop_their_load_within_the_silence_bound(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    with SimProcess.start("vllm", truth_log=str(truth)) as sim:
        scenario = write_scenario(tmp_path / "s.yaml", long_tier_on(sim.url))
        master, workers = start_cluster(tmp_path, scenario, workers=2)
        try:
            wait_for_records(tmp_path / "results", 8)
            master.kill()
            master.wait(timeout=10)
            killed_at = time.time()
            for worker in workers:
                worker.wait(timeout=MASTER_SILENCE_S + 20)  # Locust alone would keep on for 60 s
            quiet_from = time.time()
            time.sleep(1)
            assert not requests_started_after(truth, quiet_from)
            assert time.time() - killed_at < MASTER_SILENCE_S + 20
            assert "no heartbeat from the master" in (tmp_path / "worker0.log").read_text()
        finally:
            for proc in (master, *workers):
                proc.kill()


def campaign_of_a_resumed_folder(tmp_path: Path) -> Campaign:
    environment = Environment(user_classes=[], events=Events())
    environment.create_local_runner()
    data = sim_scenario(conversation=SHORT, tiers=[2])
    scenario = parse_scenario(data, source="test")
    meta = {"run_id": "run-1", "resumed_wall": [1.0]}  # resumed once: this is session run-1.1
    results = ResultsWriter(tmp_path / "run", meta, scenario.redacted())
    return Campaign(environment, scenario, results, "run-1")


def test_a_resumed_campaign_neither_writes_nor_counts_records_of_an_earlier_session(tmp_path: Path) -> None:
    campaign = campaign_of_a_resumed_folder(tmp_path)
    assert campaign.session == "run-1.1"
    assert campaign.tick() is not None  # the tier starts
    phase = campaign.phases[0]
    labels = {"run_id": "run-1", "target": phase.target, "tier_index": 0, "tier_users": 2}
    earlier = [make_record(record_id=f"old{i}", session="run-1.0", **labels) for i in range(3)]
    # a worker of the killed master still finishing its conversations: its records and iterations
    campaign.on_records("w-old", earlier, {f"run-1.0/{phase.phase_id}/0": 2})
    assert campaign.results.record_count == 0 and campaign.foreign_records == 3
    assert campaign.current is not None and campaign.current.iterations_done == 0
    own = [make_record(record_id=f"new{i}", session="run-1.1", **labels) for i in range(2)]
    campaign.on_records("w-new", own, {phase.key: 2})
    assert campaign.results.record_count == 2 and campaign.current.records == 2
    campaign.close()
    written = (tmp_path / "run" / "records.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["record_id"] for line in written) == ["new0", "new1"]


def finished_run(tmp_path: Path, data: dict[str, Any]) -> tuple[Path, Path]:
    scenario = write_scenario(tmp_path / "s.yaml", data)
    first = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    return scenario, only_run_dir(tmp_path / "results")


@pytest.mark.slow
def test_resume_refuses_a_folder_of_another_scenario_or_other_tiers_unless_forced(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    data = sim_scenario(conversation=SHORT, tiers=[1], max_tokens=8, sim_args={"truth_log": str(truth)})
    scenario, run_dir = finished_run(tmp_path, data)
    sent = len(read_truth(truth))
    lines = (run_dir / "records.jsonl").read_text()
    results = ["--results-dir", str(tmp_path / "results"), "--resume", str(run_dir)]

    other_tiers = run_locust(["--scenario", str(scenario), "--tiers", "1,2", *results], tmp_path)
    data["models"][0]["max_tokens"] = 9
    other = write_scenario(tmp_path / "other.yaml", data)
    other_scenario = run_locust(["--scenario", str(other), *results], tmp_path)
    for refused, where in ((other_tiers, "load.tiers"), (other_scenario, "models[0].max_tokens")):
        assert refused.returncode == 2, refused.stderr[-3000:]
        error = [line for line in refused.stderr.splitlines() if line.startswith("grill: ")]
        assert len(error) == 1 and f"--resume {run_dir}" in error[0] and where in error[0], error
        assert "--force-resume" in error[0] and "Traceback" not in refused.stderr
    # before any request: the engine saw nothing new, the folder is as it was
    assert len(read_truth(truth)) == sent and (run_dir / "records.jsonl").read_text() == lines

    forced = run_locust(["--scenario", str(scenario), "--tiers", "1,2", "--force-resume", *results], tmp_path)
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert "tier 2/2 start" in forced.stderr  # numbered against the whole campaign, not "2/1"


@pytest.mark.slow
def test_resume_with_the_same_scenario_is_accepted_and_runs_nothing_done(tmp_path: Path) -> None:
    data = sim_scenario(conversation=SHORT, tiers=[1], max_tokens=8)
    scenario, run_dir = finished_run(tmp_path, data)
    again = run_locust(
        ["--scenario", str(scenario), "--results-dir", str(tmp_path / "results"), "--resume", str(run_dir)],
        tmp_path,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "1 tiers already complete are skipped" in again.stderr


def test_resume_compares_only_what_the_folder_recorded_and_names_the_difference(tmp_path: Path) -> None:
    """A key added to the schema since the folder was written is not a difference; a changed value is."""
    from grill_locust.errors import GrillError
    from grill_locust.run.listeners import check_resumable

    scenario = parse_scenario(sim_scenario(conversation=SHORT, tiers=[1, 2]), source="test")
    saved = scenario.redacted()
    del saved["load"]["engine_wait_s"]  # a folder from before engine_wait_s
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    check_resumable(tmp_path, scenario)
    with pytest.raises(GrillError, match=r"load\.tiers\[1\]: 2 in the folder, 3 now"):
        check_resumable(tmp_path, scenario.with_overrides(tiers=[1, 3]))
