"""The web UI on the master shows the campaign's progress across all workers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from tests.run.conftest import sim_scenario, write_scenario
from tests.run.test_distributed import finish, free_port, locust

pytestmark = pytest.mark.slow


def test_master_web_ui_has_a_campaign_tab_with_progress_of_every_tier(tmp_path: Path) -> None:
    data = sim_scenario(
        conversation={"name": "short", "kind": "short-baseline", "prompt_tokens": 40},
        tiers=[2, 4],
        iterations=3,
        max_tokens=32,
    )
    scenario = write_scenario(tmp_path / "s.yaml", data)
    port, web_port = free_port(), free_port()
    master = locust(
        [
            "--master",
            "--autostart",
            "--autoquit",
            "1",
            "--expect-workers",
            "1",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(web_port),
            "--scenario",
            str(scenario),
            "--results-dir",
            str(tmp_path / "r"),
        ],
        tmp_path,
        tmp_path / "master.log",
    )
    worker = locust(
        ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)], tmp_path, tmp_path / "w.log"
    )
    try:
        base = f"http://127.0.0.1:{web_port}"
        deadline = time.monotonic() + 90
        seen_states: set[str] = set()
        rows: list[dict] = []
        while time.monotonic() < deadline and master.poll() is None:
            try:
                stats = requests.get(f"{base}/stats/requests", timeout=2).json()
                index = requests.get(base, timeout=2).text
            except requests.RequestException:
                time.sleep(0.2)
                continue
            assert "grill-campaign" in index  # the tab is declared to the page
            tables = {t["key"]: t["data"] for t in stats.get("extended_stats", [])}
            rows = tables["grill-campaign"]
            seen_states |= {r["state"] for r in rows}
            if "running" in seen_states and all(r["state"] == "done" for r in rows):
                break
            time.sleep(0.3)
        assert [r["target"] for r in rows] == ["sim/grill-sim/short"] * 2
        assert [r["users"] for r in rows] == [2, 4]
        assert "running" in seen_states
        assert [r["iterations"] for r in rows] == ["6/6", "12/12"]
        assert [r["requests"] for r in rows] == [6, 12]
    finally:
        finish(master, [worker], timeout_s=60)
