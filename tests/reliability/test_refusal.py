"""A refusal is not an outage: a tier whose requests the engine refuses as sent (a 4xx, a 501, or one
server error message on every request while it answers its probe) is marked `refused: <message>`, never
held nor run again; the target's other tiers are skipped, the other targets run, and the run exits
ENGINE_REFUSED naming the backend and what to change. Too few failures to tell are no outage either."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from grill_locust.run import exit_codes
from grill_locust.sim import SimProcess
from tests.reliability.ledger import ledger
from tests.run.conftest import only_run_dir, read_truth, run_locust, write_scenario

pytestmark = pytest.mark.slow

SHORT = {"name": "sb", "kind": "short-baseline", "prompt_tokens": 20}
TIERS = [2, 3]
ITERATIONS = 2
NOT_IMPLEMENTED = "This engine does not implement this request (simulated)"
SERVER_ERROR = "Internal server error (simulated)"


def refusal_scenario(url: str, faults: dict[str, str | None]) -> dict[str, Any]:
    """One backend per fault header on one simulated engine, a target each, in order; the outage hold on
    (engine_wait_s 60), so that a refusal taken for an outage would be held and sent again."""
    backends = []
    for name, fault in faults.items():
        backend: dict[str, Any] = {"name": name, "engine": "vllm", "url": url}
        if fault is not None:
            backend["headers"] = {"x-grill-fault": fault}
        backends.append(backend)
    return {
        "name": "refusal",
        "backends": backends,
        "models": [{"name": "grill-sim", "max_tokens": 8, "ignore_eos": True}],
        "conversations": [SHORT],
        "targets": [{"backend": name, "model": "grill-sim", "conversation": "sb"} for name in faults],
        "load": {
            "tiers": TIERS,
            "iterations": ITERATIONS,
            "pause_s": 0.1,
            "think_time_s": 0.0,
            "engine_wait_s": 60,
        },
    }


def run(tmp_path: Path, data: dict[str, Any]) -> tuple[Any, Path]:
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(
        ["--scenario", str(scenario), "--results-dir", str(tmp_path / "r"), "--telemetry-interval", "0"],
        tmp_path,
        timeout_s=120,
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done, only_run_dir(tmp_path / "r")


def test_a_refused_tier_is_sent_once_skips_its_targets_other_tiers_and_exits_naming_the_backend(
    tmp_path: Path,
) -> None:
    truth_path = tmp_path / "truth.jsonl"
    # 501 and 400 are refusals by their status; one 500 message on every request, the engine answering
    # its model list, is one too; the healthy target after them still runs
    faults = {"no_infill": "501", "bad_field": "400", "one_error": "500", "healthy": None}
    with SimProcess.start("vllm", truth_log=str(truth_path)) as sim:
        done, run_dir = run(tmp_path, refusal_scenario(sim.url, faults))
    assert done.returncode == exit_codes.ENGINE_REFUSED, done.stderr[-3000:]
    assert "holding at 0 users" not in done.stderr  # no outage hold

    planned = TIERS[0] * ITERATIONS  # the refused tier's requests, each sent once
    records = pd.read_parquet(run_dir / "records.parquet")
    counts = records.groupby("backend").size().to_dict()
    assert counts == {"no_infill": planned, "bad_field": planned, "one_error": planned, "healthy": 10}
    assert set(records.loc[records.backend == "no_infill", "status"]) == {"http_501"}
    assert (records["attempt"] == 0).all()

    phases = pd.read_csv(run_dir / "phases.csv", keep_default_na=False)
    rows = {(r["backend"], r["tier_index"]): r for r in phases.to_dict("records")}
    assert sorted(rows) == [
        ("bad_field", 0),
        ("healthy", 0),
        ("healthy", 1),
        ("no_infill", 0),
        ("one_error", 0),
    ]
    messages = {"no_infill": NOT_IMPLEMENTED, "one_error": SERVER_ERROR}
    for backend, message in messages.items():
        row = rows[(backend, 0)]
        assert not row["complete"] and row["note"].startswith(f"refused: {message}"), row
    assert rows[("bad_field", 0)]["note"].startswith("refused: ")
    assert rows[("healthy", 0)]["complete"] and rows[("healthy", 1)]["complete"]

    meta = json.loads((run_dir / "run.json").read_text())
    refused = {entry["backend"]: entry for entry in meta["refused"]}
    assert set(refused) == {"no_infill", "bad_field", "one_error"}
    assert refused["no_infill"]["message"] == NOT_IMPLEMENTED
    assert refused["no_infill"]["skipped_tiers"] == [1] and refused["no_infill"]["status"] == "http_501"

    # the run's last lines: each refusal, its backend, what to change
    last = done.stdout.strip().splitlines()[-3:]
    assert last[0].startswith("backend no_infill: the engine refused 4 of 4 requests of tier 1/"), last
    assert f"{NOT_IMPLEMENTED!r} — change the engine's settings" in last[0], last
    assert last[2].startswith("backend one_error: "), last

    accounts = ledger("refusals", records, read_truth(truth_path), phases)
    assert accounts.clean, accounts


def test_one_failed_request_is_no_outage_while_the_engine_answers(tmp_path: Path) -> None:
    """A 1-request tier whose request failed (a 503: no refusal) is not held nor run again: one failure
    says nothing of the engine, which answers its probe; the tier is complete, its failure recorded."""
    with SimProcess.start("vllm") as sim:
        data = refusal_scenario(sim.url, {"flaky": "503"})
        data["load"].update(tiers=[1], iterations=1)
        done, run_dir = run(tmp_path, data)
    assert done.returncode == 1, done.stderr[-3000:]  # Locust's own: a request failed
    assert "holding at 0 users" not in done.stderr
    records = pd.read_parquet(run_dir / "records.parquet")
    assert list(records["status"]) == ["http_503"]
    phases = pd.read_csv(run_dir / "phases.csv", keep_default_na=False)
    assert len(phases) == 1 and bool(phases["complete"].iloc[0]), phases.to_dict("records")
    assert "1 of 1 requests failed: too few to call an outage" in phases["note"].iloc[0]
