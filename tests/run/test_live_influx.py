"""A campaign with the live sink on: requests, tier starts/ends, one summary row per finished tier and the
engine's telemetry reach an Influx-protocol store (VictoriaMetrics on loopback) while the run goes on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.influx.influx_servers import VictoriaMetrics
from tests.run.conftest import only_run_dir, run_locust, sim_scenario, write_scenario

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("victoria-metrics") is None, reason="apt-get install victoria-metrics"),
]


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
