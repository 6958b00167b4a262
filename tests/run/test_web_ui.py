"""The web UI: on the master it shows the campaign's progress across all workers; it shows no secret;
Start after a campaign ended (finished or stopped) begins a new one into a new results folder."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import requests

from tests.ports import free_port
from tests.reliability.reliability_servers import InfluxCatcher
from tests.run.conftest import LOCUSTFILE, only_run_dir, sim_scenario, write_scenario
from tests.run.test_distributed import SHORT, finish, locust

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


def web_ui_run(
    tmp_path: Path, scenario: Path, env: dict[str, str] | None = None, extra: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], str]:
    """A local run with the web UI, waiting for Start; its base URL once the UI answers."""
    web_port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(web_port),
            "--scenario",
            str(scenario),
            "--results-dir",
            str(tmp_path / "r"),
            "--telemetry-interval",
            "0",
            *extra,
        ],
        cwd=tmp_path,
        env={**(env or os.environ), "PYTHONUNBUFFERED": "1"},
        stdout=open(tmp_path / "ui.log", "wb"),
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{web_port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            requests.get(base, timeout=2)
            return process, base
        except requests.RequestException:
            time.sleep(0.2)
    process.kill()
    raise AssertionError(f"no web UI: {(tmp_path / 'ui.log').read_text()[-3000:]}")


def campaign_rows(base: str) -> tuple[str, list[dict[str, Any]]]:
    """Locust's state and the Campaign tab's rows."""
    stats = requests.get(f"{base}/stats/requests", timeout=5).json()
    tables = {t["key"]: t["data"] for t in stats.get("extended_stats", [])}
    return stats["state"], tables["grill-campaign"]


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def press_start(base: str) -> dict[str, Any]:
    answer = requests.post(f"{base}/swarm", data={}, timeout=30).json()
    assert answer["success"], answer
    return dict(answer)


def stop_web_ui(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def records_in(run_dir: Path) -> int:
    path = run_dir / "records.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def run_dirs(results: Path) -> list[Path]:
    return sorted(p for p in results.iterdir() if p.is_dir()) if results.exists() else []


# every page and JSON answer Locust's web UI serves (locust/web.py), with grill-locust's Campaign tab
# riding on /stats/requests
WEB_UI_PAGES = (
    "/",
    "/stats/requests",
    "/stats/report",
    "/stats/report?download=1",
    "/stats/requests/csv",
    "/stats/requests_full_history/csv",
    "/stats/failures/csv",
    "/exceptions",
    "/exceptions/csv",
    "/tasks",
    "/logs",
    "/worker-count",
    "/login",
)


def test_no_page_api_answer_or_log_line_of_the_web_ui_holds_a_secret(tmp_path: Path) -> None:
    key, token = f"grillKey{secrets.token_hex(12)}", f"grillTok{secrets.token_hex(12)}"
    data = sim_scenario(conversation=SHORT, tiers=[1, 2], max_tokens=16)
    data["backends"][0]["api_key"] = "${GRILL_TEST_UI_KEY}"  # the simulated engine answers 401 without it
    data["backends"][0]["sim_args"] = {"api_key": "${GRILL_TEST_UI_KEY}"}
    scenario = write_scenario(tmp_path / "s.yaml", data)
    influx = InfluxCatcher()
    env = {**os.environ, "GRILL_TEST_UI_KEY": key, "INFLUX_TOKEN": token}
    process, base = web_ui_run(
        tmp_path,
        scenario,
        env,
        ("--influx-url", influx.url, "--influx-bucket", "grill", "--loglevel", "DEBUG"),
    )
    answers: dict[str, bytes] = {}
    try:
        for page in WEB_UI_PAGES:
            answers[f"before {page}"] = requests.get(f"{base}{page}", timeout=10).content
        answers["POST /swarm"] = requests.post(f"{base}/swarm", data={}, timeout=30).content
        wait_for(lambda: all(r["state"] == "done" for r in campaign_rows(base)[1]), "the campaign done")
        for page in WEB_UI_PAGES:
            answers[f"after {page}"] = requests.get(f"{base}{page}", timeout=10).content
        answers["POST /stop"] = requests.post(f"{base}/stop", timeout=30).content
    finally:
        stop_web_ui(process)
        influx.close()
    log = (tmp_path / "ui.log").read_bytes()
    records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet")
    assert len(records) == 3 and (records["status"] == "ok").all(), log[-3000:]  # the key was in use
    assert set(influx.authorizations) == {f"Token {token}"}  # and so was the token
    assert b"grill-campaign" in answers["before /"] and b"results_dir" in answers["before /"]
    leaks = [
        (where, name)
        for where, body in [*answers.items(), ("the log", log)]
        for name, value in (("key", key), ("token", token))
        if value.encode() in body
    ]
    assert leaks == []


def test_start_after_a_finished_campaign_runs_a_new_one_into_a_new_results_folder(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "s.yaml", sim_scenario(conversation=SHORT, tiers=[1, 2]))
    process, base = web_ui_run(tmp_path, scenario)
    try:
        press_start(base)
        wait_for(lambda: campaign_rows(base)[0] == "stopped", "the first campaign's end")
        [first] = run_dirs(tmp_path / "r")
        assert records_in(first) == 3
        assert [r["state"] for r in campaign_rows(base)[1]] == ["done", "done"]
        press_start(base)
        wait_for(lambda: len(run_dirs(tmp_path / "r")) == 2, "a second results folder")
        second = next(p for p in run_dirs(tmp_path / "r") if p != first)
        wait_for(lambda: records_in(second) == 3, "the second campaign's records")
        wait_for(lambda: campaign_rows(base)[0] == "stopped", "the second campaign's end")
    finally:
        stop_web_ui(process)
    assert len(pd.read_parquet(first / "records.parquet")) == 3  # closed when the second began
    assert len(pd.read_parquet(second / "records.parquet")) == 3
    assert records_in(first) == 3  # nothing of the second campaign went into the first folder


def test_stop_ends_the_campaign_mid_tier_and_start_begins_a_new_one(tmp_path: Path) -> None:
    slow = sim_scenario(
        conversation=SHORT, tiers=[2, 2, 2], iterations=3, max_tokens=32, sim_args={"step_a_ms": 100}
    )
    scenario = write_scenario(tmp_path / "s.yaml", slow)
    process, base = web_ui_run(tmp_path, scenario)
    try:
        press_start(base)
        wait_for(lambda: campaign_rows(base)[1][0]["requests"] >= 1, "a record of the first tier")
        stopped = requests.post(f"{base}/stop", timeout=60).json()
        assert stopped["success"]
        wait_for(lambda: campaign_rows(base)[0] == "stopped", "Locust's stopped state")
        [first] = run_dirs(tmp_path / "r")
        time.sleep(3)  # a campaign that went on would start its next tier within the pause (0.2 s)
        state, rows = campaign_rows(base)
        assert state == "stopped"
        assert [r["state"] for r in rows] == ["incomplete", "waiting", "waiting"]
        phases = pd.read_csv(first / "phases.csv")
        assert phases["tier_index"].tolist() == [0] and phases["note"].iloc[-1] == "run stopped"
        assert not bool(phases["complete"].iloc[-1])
        press_start(base)
        wait_for(lambda: len(run_dirs(tmp_path / "r")) == 2, "a new results folder")
        second = next(p for p in run_dirs(tmp_path / "r") if p != first)
        wait_for(lambda: records_in(second) >= 1, "records of the new campaign")
    finally:
        stop_web_ui(process)
    assert pd.read_csv(second / "phases.csv")["tier_index"].iloc[0] == 0  # from the first tier again
