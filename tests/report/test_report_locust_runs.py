"""`grill compare` of two real short runs: headless Locust against the simulated engine, two profiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grill_locust.report import load_run, summarize

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = ROOT / "locustfiles" / "coding.py"
RUN_TIMEOUT_S = 180

pytestmark = pytest.mark.slow


def short_scenario(profile: str) -> dict:
    conversation = {
        "name": "session",
        "kind": "multi-turn",
        "system_tokens": 120,
        "user_turns": 2,
        "turn_tokens": 20,
    }
    return {
        "name": f"report-{profile}",
        "backends": [{"name": "sim", "engine": "sim", "profile": profile}],
        "models": [{"name": "grill-sim", "max_tokens": 8, "ignore_eos": True}],
        "conversations": [conversation],
        "targets": [{"backend": "sim", "model": "grill-sim", "conversation": "session"}],
        "load": {"tiers": [1, 2], "iterations": 1, "pause_s": 0.2, "think_time_s": 0.05},
        "slo": {"ttft_p50_s": 2.0, "e2e_p50_s": 10.0, "success_rate": 0.99},
    }


def run_campaign(profile: str, workdir: Path) -> Path:
    scenario = workdir / f"{profile}.yaml"
    scenario.write_text(yaml.safe_dump(short_scenario(profile), sort_keys=False))
    results = workdir / f"results-{profile}"
    command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary"]
    command += ["--scenario", str(scenario), "--results-dir", str(results)]
    try:
        done = subprocess.run(
            command,
            cwd=workdir,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as timeout:
        stderr = (timeout.stderr or b"").decode(errors="replace") if isinstance(timeout.stderr, bytes) else ""
        pytest.fail(f"locust ({profile}) ran past {RUN_TIMEOUT_S} s; its log ends:\n{stderr[-3000:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    return run_dir


@pytest.fixture(scope="module")
def two_real_runs(tmp_path_factory) -> tuple[Path, Path]:
    workdir = tmp_path_factory.mktemp("locust")
    return run_campaign("vllm", workdir), run_campaign("llamacpp", workdir)


def test_a_real_run_leaves_a_summary_the_report_reads(two_real_runs):
    run_dir = two_real_runs[0]
    assert (run_dir / "summary.csv").is_file()  # written by summarize_run at the end of the run
    summary = summarize(load_run(run_dir))
    assert summary["tier_users"].tolist() == [1, 2]
    assert (summary["ok_requests"] > 0).all()
    assert (summary["ttft_p50_s"] > 0).all() and (summary["e2e_p50_s"] >= summary["ttft_p50_s"]).all()
    assert (summary["turns"] == 2).all()


def test_compare_of_two_real_runs_has_both_series(two_real_runs, tmp_path):
    from test_report_cli import grill

    vllm_run, llamacpp_run = two_real_runs
    out = tmp_path / "compare"
    assert (
        grill(
            "compare", "--label", f"vllm={vllm_run}", "--label", f"llamacpp={llamacpp_run}", "--out", str(out)
        )
        == 0
    )
    report = json.loads((out / "summary.json").read_text())
    series = {tier["series"] for tier in report["tiers"]}
    assert series == {"vllm/sim", "llamacpp/sim"}
    for name in series:
        tiers = [t for t in report["tiers"] if t["series"] == name]
        assert sorted(t["tier_users"] for t in tiers) == [1, 2]
        assert all(t["ok_requests"] > 0 for t in tiers)
    assert {c["series"] for c in report["capacity"]} == series
    page = (out / "report.html").read_text()
    assert "vllm/sim" in page and "llamacpp/sim" in page
