"""Helpers for tests that run real Locust headless against the simulated engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = ROOT / "locustfiles" / "coding.py"
TRUTH_WAIT_S = 10.0  # a loaded machine can take seconds to let the stopped simulator finish its log


def write_scenario(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sim_scenario(
    *,
    conversation: dict[str, Any],
    tiers: list[int],
    iterations: int = 1,
    profile: str = "vllm",
    sim_args: dict[str, Any] | None = None,
    max_tokens: int = 16,
) -> dict[str, Any]:
    return {
        "name": "test",
        "backends": [{"name": "sim", "engine": "sim", "profile": profile, "sim_args": sim_args or {}}],
        "models": [{"name": "grill-sim", "max_tokens": max_tokens, "ignore_eos": True}],
        "conversations": [conversation],
        "targets": [{"backend": "sim", "model": "grill-sim", "conversation": conversation["name"]}],
        "load": {"tiers": tiers, "iterations": iterations, "pause_s": 0.2, "think_time_s": 0.05},
    }


def run_locust(args: list[str], cwd: Path, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if "--processes" in args and "--master-bind-port" not in args:  # not Locust's 5557: runs may overlap
        port = str(free_port())
        args = [*args, "--master-bind-host", "127.0.0.1", "--master-bind-port", port, "--master-port", port]
    return subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def only_run_dir(results: Path) -> Path:
    runs = [p for p in results.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def read_truth(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def truth_once_it_holds(
    path: Path, request_ids: set[str], timeout_s: float = TRUTH_WAIT_S
) -> list[dict[str, Any]]:
    """The truth log once its requests are `request_ids`, or as it is at the deadline (for the caller's
    assertion to show the difference): the simulator, stopped with the run, may still be writing it."""
    deadline = time.monotonic() + timeout_s
    while True:
        truth = read_truth(path) if path.exists() else []
        if {t["request_id"] for t in truth} == request_ids or time.monotonic() >= deadline:
            return truth
        time.sleep(0.1)


@pytest.fixture
def records_of():
    def read(run_dir: Path) -> pd.DataFrame:
        return pd.read_parquet(run_dir / "records.parquet")

    return read
