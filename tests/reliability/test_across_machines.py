"""Master, two workers and the simulated engine on four machines (network namespaces, tests/reliability/netns.py):
a slow link to the engine shows in TTFT and E2E only, and a worker cut off from the master loses and
duplicates no record. Every count is checked against the simulator's truth log (each record's id is its
request's X-Request-Id).

The machines: worker1, worker2 and the engine on one LAN (the load network; the engine joins it through
a delay line), the master on a point-to-point link to each worker (the control links), as a campaign
across machines keeps the master's port off the load network.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from netns import Network, stop

from tests.run.conftest import LOCUSTFILE, only_run_dir, read_truth, sim_scenario, write_scenario

pytestmark = pytest.mark.slow

ENGINE_PORT = 8000
MASTER_PORT = 5557
START_TIMEOUT_S = 30.0
SHORT = {"name": "short", "kind": "short-baseline", "prompt_tokens": 40}
DELAY_MS = 50.0


@pytest.fixture
def network() -> Iterator[Network]:
    with Network(["master", "worker1", "worker2", "engine"]) as net:
        net.lan("load", ["worker1", "worker2", "engine"], delayed=["engine"])
        net.link("master", "worker1")
        net.link("master", "worker2")
        yield net


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def _wait_for_line(log: Path, text: str, process: subprocess.Popen[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in log.read_text():
            return
        if process.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"{log.name}: no {text!r} within {timeout_s} s:\n{log.read_text()[-3000:]}")


@dataclass
class Engine:
    """The simulated engine on the `engine` machine, its truth log beside the test's files."""

    net: Network
    folder: Path
    process: subprocess.Popen[str] | None = None
    truth_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.truth_path = self.folder / "truth.jsonl"

    @property
    def url(self) -> str:
        return f"http://{self.net.address('engine', 'load')}:{ENGINE_PORT}"

    def start(self, *extra: str) -> Engine:
        log = self.folder / "engine.log"
        command = [sys.executable, "-m", "grill_locust.sim", "--profile", "vllm"]
        command += ["--host", self.net.address("engine", "load"), "--port", str(ENGINE_PORT)]
        command += ["--served-model-name", "grill-sim", "--truth-log", str(self.truth_path), *extra]
        self.process = self.net.popen("engine", command, log, env=_env())
        _wait_for_line(log, "listening on http://", self.process, START_TIMEOUT_S)
        return self

    def truth(self) -> list[dict[str, Any]]:
        """Stops the engine (which writes out its truth log) and reads the log."""
        assert self.process is not None
        assert stop(self.process) == 0, (self.folder / "engine.log").read_text()[-3000:]
        return read_truth(self.truth_path)


@dataclass
class Campaign:
    """One headless campaign: the master on `master`, a worker on each of worker1 and worker2."""

    net: Network
    folder: Path
    master: subprocess.Popen[str] | None = None
    workers: list[subprocess.Popen[str]] = field(default_factory=list)

    def start(self, scenario: dict[str, Any]) -> Campaign:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = write_scenario(self.folder / "scenario.yaml", scenario)
        locust = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
        self.master = self.net.popen(
            "master",
            [
                *locust,
                "--master",
                "--headless",
                "--expect-workers",
                "2",
                "--master-bind-port",
                str(MASTER_PORT),
                "--scenario",
                str(path),
                "--results-dir",
                str(self.folder / "results"),
                "--telemetry-interval",
                "0",  # the master speaks to the workers only
            ],
            self.folder / "master.log",
            env=_env(),
        )
        for worker in ("worker1", "worker2"):
            master_host = self.net.address("master", worker)
            args = ["--worker", "--master-host", master_host, "--master-port", str(MASTER_PORT)]
            self.workers.append(
                self.net.popen(worker, [*locust, *args], self.folder / f"{worker}.log", env=_env())
            )
        return self

    def log(self, name: str = "master") -> str:
        return (self.folder / f"{name}.log").read_text()

    def finish(self, timeout_s: float) -> int:
        assert self.master is not None
        try:
            code = self.master.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the campaign did not end in {timeout_s} s:\n{self.log()[-3000:]}"
            ) from None
        for worker in self.workers:
            stop(worker)
        return code

    @property
    def run_dir(self) -> Path:
        return only_run_dir(self.folder / "results")

    def records(self) -> pd.DataFrame:
        return pd.read_parquet(self.run_dir / "records.parquet")

    def wait_for_records(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            files = list((self.folder / "results").glob("*/records.jsonl"))
            if files and len(files[0].read_text().splitlines()) >= count:
                return
            time.sleep(0.2)
        raise AssertionError(f"fewer than {count} records after {timeout_s} s:\n{self.log()[-3000:]}")


def _joined(records: pd.DataFrame, truth: list[dict[str, Any]]) -> pd.DataFrame:
    """Each record beside what the engine knows of its request: arrival, first token, end (wall clock)."""
    seen = pd.DataFrame(truth).set_index("request_id")[["arrival", "first_token", "end"]]
    return records.join(seen, on="record_id", how="inner")


@pytest.mark.timeout(240)
def test_a_slow_link_to_the_engine_shifts_ttft_and_e2e_by_its_delay_and_nothing_else(
    network: Network, tmp_path: Path
) -> None:
    # The delay line holds back every frame the engine sends by DELAY_MS, one way (engine -> workers).
    # On a connection already open (each user keeps one), the first token and the end of the stream
    # arrive DELAY_MS later: TTFT and E2E shift by DELAY_MS. A user's first request also waits for the
    # engine's SYN-ACK, DELAY_MS more: per request the shift is DELAY_MS, or 2 x DELAY_MS on a new
    # connection, which the median over 6 requests a user leaves out. Gaps between tokens do not change.
    engine = Engine(network, tmp_path).start()
    scenario = sim_scenario(conversation=SHORT, tiers=[4], iterations=6, max_tokens=24)
    scenario["backends"] = [{"name": "sim", "engine": "vllm", "url": engine.url}]
    runs = {}
    for name, delay_ms in (("direct", 0.0), ("delayed", DELAY_MS)):
        network.set_delay("engine", "load", sent_ms=delay_ms)
        campaign = Campaign(network, tmp_path / name).start(scenario)
        assert campaign.finish(timeout_s=120) == 0, campaign.log()[-3000:]
        runs[name] = campaign.records()
    truth = engine.truth()
    assert sorted(pd.concat(runs.values())["record_id"]) == sorted(t["request_id"] for t in truth)

    medians = {}
    for name, records in runs.items():
        assert len(records) == 24 and (records["status"] == "ok").all(), records["error"].unique()
        joined = _joined(records, truth)
        # the part of each latency spent outside the engine: the network and the client
        joined["ttft_outside_s"] = joined["ttft_s"] - (joined["first_token"] - joined["arrival"])
        joined["e2e_outside_s"] = joined["e2e_s"] - (joined["end"] - joined["arrival"])
        medians[name] = joined[
            ["ttft_s", "e2e_s", "tpot_s", "itl_p50_s", "ttft_outside_s", "e2e_outside_s"]
        ].median()
    shift_ms = (medians["delayed"] - medians["direct"]) * 1000
    print(f"median shift with {DELAY_MS:g} ms engine -> workers (ms):\n{shift_ms.round(1).to_string()}")
    # outside the engine, exactly the delay (within the noise of a loaded machine's scheduling)
    assert DELAY_MS - 10 <= shift_ms["ttft_outside_s"] <= DELAY_MS + 15, shift_ms
    assert DELAY_MS - 10 <= shift_ms["e2e_outside_s"] <= DELAY_MS + 15, shift_ms
    # as the client sees it: the engine's own TTFT moves a little with the load's timing
    assert DELAY_MS - 15 <= shift_ms["ttft_s"] <= DELAY_MS + 25, shift_ms
    assert abs(shift_ms["e2e_s"] - shift_ms["ttft_s"]) <= 15, shift_ms
    # gaps between tokens keep their length
    assert abs(shift_ms["tpot_s"]) <= 3 and abs(shift_ms["itl_p50_s"]) <= 3, shift_ms
