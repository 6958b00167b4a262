"""Engine replies that are not OpenAI-shaped become records with a kind, and the run goes on."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from reliability_servers import CannedEngine

from grill_locust.run import exit_codes
from tests.reliability.ledger import ledger
from tests.run.conftest import only_run_dir, run_locust, write_scenario

pytestmark = pytest.mark.slow

# the canned server's route -> the status and a piece of the error each request must be recorded with
EXPECTED = {
    "ok": ("ok", None),
    "html": ("http_502", "502 Bad Gateway"),
    "html200": ("bad_event", "Sign in"),
    "empty": ("empty", "empty"),
    "nochoices": ("bad_event", "without choices"),
    "whole": ("bad_event", "non-streaming"),
    "sse_nochoices": ("empty", None),
    "sse_text": ("bad_event", "unparseable"),
    "gzip": ("bad_event", "gzip-encoded"),  # compressed although the request asked for identity
}
TIER_USERS = 2
ITERATIONS = 2  # 4 requests a tier: enough failures to call an outage (OUTAGE_MIN_FAILED)


def replies_scenario(url: str) -> dict:
    # "ok" first and last: the run goes on after every broken reply
    routes = ["ok", *[r for r in EXPECTED if r != "ok"], "ok"]
    backends = [{"name": r, "url": f"{url}/{r}", "engine": "openai"} for r in dict.fromkeys(routes)]
    conversation = {"name": "sb", "kind": "short-baseline", "prompt_tokens": 20}
    targets = [
        {"backend": r, "model": "m", "conversation": "sb", "name": f"{r}-{i}"} for i, r in enumerate(routes)
    ]
    return {
        "name": "replies",
        "backends": backends,
        "models": [{"name": "m", "max_tokens": 8}],
        "conversations": [conversation],
        "targets": targets,
        # every reply is broken on purpose: no outage hold or re-run
        "load": {
            "tiers": [TIER_USERS],
            "iterations": ITERATIONS,
            "pause_s": 0.1,
            "think_time_s": 0.0,
            "engine_wait_s": 0,
        },
    }


def test_replies_that_are_not_openai_shaped_are_recorded_with_a_kind(tmp_path: Path) -> None:
    with CannedEngine() as engine:
        data = replies_scenario(engine.url)
        scenario = write_scenario(tmp_path / "s.yaml", data)
        done = run_locust(
            ["--scenario", str(scenario), "--results-dir", str(tmp_path / "r"), "--telemetry-interval", "0"],
            tmp_path,
            timeout_s=120,
        )
        # the usage fit's requests (no tokenize endpoint) are no load, and no record by design
        posts = [r for r in engine.seen if r.method == "POST" and not r.calibrating]
        truth = engine.truth()
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # the all-failed tiers are incomplete (TIER_INCOMPLETE): outages, not run again (engine_wait_s 0)
    assert done.returncode == exit_codes.TIER_INCOMPLETE, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "r")
    records = pd.read_parquet(run_dir / "records.parquet")

    per_target = TIER_USERS * ITERATIONS
    assert records.groupby("target").size().to_dict() == {t["name"]: per_target for t in data["targets"]}
    assert len(records) == len(posts)  # one record per request the server saw, none counted twice
    assert records["record_id"].is_unique
    for route, (status, error_part) in EXPECTED.items():
        rows = records[records.backend == route]
        assert set(rows["status"]) == {status}, (route, rows[["status", "error"]].to_dict("records"))
        if error_part is not None:
            assert all(error_part in e for e in rows["error"]), (route, list(rows["error"]))
        if status != "ok":
            assert rows["e2e_s"].notna().all()  # a failed request keeps its timings so far
    assert (records.loc[records.status == "ok", "output_tokens"] == 4).all()
    assert set(records.loc[records.backend == "html", "http_status"]) == {502}
    phases = pd.read_csv(run_dir / "phases.csv")
    assert len(phases) == len(data["targets"])
    # a tier whose every request failed measured an outage, not the engine: marked incomplete, not re-run
    all_failed = records.groupby("target")["status"].apply(lambda status: bool((status != "ok").all()))
    assert dict(zip(phases["target"], ~phases["complete"], strict=True)) == all_failed.to_dict()
    # each request the server received is one record, labelled with the phase it arrived in
    accounts = ledger("canned replies", records, truth, phases)
    assert accounts.clean, accounts
