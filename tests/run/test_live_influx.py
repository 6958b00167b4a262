"""A campaign with the live sink on: requests, tier starts/ends, one summary row per finished tier and the
engine's telemetry reach an Influx-protocol store (VictoriaMetrics on loopback) while the run goes on."""

from __future__ import annotations

import signal
from pathlib import Path

import pandas as pd
import pytest

from tests.influx.influx_servers import VictoriaMetrics
from tests.run.conftest import only_run_dir, run_locust, sim_scenario, write_scenario
from tests.run.test_distributed import _wait_for_records, finish, start_cluster

pytestmark = pytest.mark.slow  # VictoriaMetrics gates on its binary


def test_live_points_match_the_results_folder(tmp_path: Path) -> None:
    victoria = VictoriaMetrics(tmp_path)
    victoria.start()
    try:
        data = sim_scenario(
            conversation={"name": "short", "kind": "short-baseline", "prompt_tokens": 40},
            tiers=[1, 3],
            iterations=2,
            max_tokens=16,
        )
        scenario = write_scenario(tmp_path / "s.yaml", data)
        done = run_locust(
            [
                "--scenario",
                str(scenario),
                "--results-dir",
                str(tmp_path / "r"),
                "--influx-url",
                victoria.url,
                "--influx-org",
                "o",
                "--influx-bucket",
                "b",
                "--influx-token",
                "t0ken-123456",
                "--telemetry-interval",
                "0.5",
            ],
            tmp_path,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet")

        def samples(name: str) -> list[dict]:
            return victoria.export(f'{{__name__="{name}"}}')

        e2e = samples("grill_request_e2e_s")
        assert sum(len(s["values"]) for s in e2e) == len(records) == 8
        tiers = samples("grill_tier_requests")
        assert sorted((s["metric"]["tier_users"], s["values"]) for s in tiers) == [("1", [2]), ("3", [6])]
        events = sorted(
            (s["metric"]["tier_users"], s["metric"]["event"], len(s["values"]))
            for s in samples("grill_phase_users")
        )
        assert events == [("1", "end", 1), ("1", "start", 1), ("3", "end", 1), ("3", "start", 1)]
        assert victoria.export('{__name__=~"grill_engine_.*"}')
        assert "t0ken-123456" not in done.stdout + done.stderr
    finally:
        victoria.stop()


def test_workers_started_on_their_own_send_every_record_with_the_masters_influx_options(
    tmp_path: Path,
) -> None:
    # the options reach a worker with the first spawn, after the first tier's phase message
    victoria = VictoriaMetrics(tmp_path)
    victoria.start()
    try:
        data = sim_scenario(
            conversation={"name": "short", "kind": "short-baseline", "prompt_tokens": 40}, tiers=[2, 4]
        )
        scenario = write_scenario(tmp_path / "s.yaml", data)
        influx = ("--influx-url", victoria.url, "--influx-org", "o", "--influx-bucket", "b")
        master, workers = start_cluster(tmp_path, scenario, 2, master_args=influx)
        assert finish(master, workers) == 0, (tmp_path / "master.log").read_text()[-3000:]
        records = pd.read_parquet(only_run_dir(tmp_path / "results") / "records.parquet")
        e2e = victoria.export('{__name__="grill_request_e2e_s"}')
        by_tier: dict[str, int] = {}
        for series in e2e:
            tier = series["metric"]["tier_users"]
            by_tier[tier] = by_tier.get(tier, 0) + len(series["values"])
        assert by_tier == {"2": 2, "4": 4} and len(records) == 6
    finally:
        victoria.stop()


def test_a_worker_stopped_by_sigterm_sends_its_last_records_before_its_sink_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victoria = VictoriaMetrics(tmp_path)
    victoria.start()
    try:
        for name, value in (("INFLUX_URL", victoria.url), ("INFLUX_ORG", "o"), ("INFLUX_BUCKET", "b")):
            monkeypatch.setenv(name, value)  # every process, as compose and k8s set it
        data = sim_scenario(
            conversation={"name": "short", "kind": "short-baseline", "prompt_tokens": 40},
            tiers=[4],
            iterations=4,
            max_tokens=48,
        )
        scenario = write_scenario(tmp_path / "s.yaml", data)
        master, workers = start_cluster(tmp_path, scenario, 2)
        _wait_for_records(tmp_path / "results", 3)
        workers[1].send_signal(signal.SIGTERM)  # its requests in flight are recorded as cut
        assert finish(master, workers) in (0, 1), (tmp_path / "master.log").read_text()[-3000:]
        records = pd.read_parquet(only_run_dir(tmp_path / "results") / "records.parquet")
        assert (records["error"] == "cancelled").any()
        e2e = victoria.export('{__name__="grill_request_e2e_s"}')
        by_status: dict[str, int] = {}
        for series in e2e:
            status = series["metric"]["status"]
            by_status[status] = by_status.get(status, 0) + len(series["values"])
        assert by_status == records["status"].value_counts().to_dict()
    finally:
        victoria.stop()
