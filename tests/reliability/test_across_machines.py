"""Master, two workers and the simulated engine on four machines (network namespaces, tests/reliability/netns.py):
a slow link to the engine shows in TTFT and E2E only, and a worker cut off from the master loses and
duplicates no record. Every count is checked against the simulator's truth log (each record's id is its
request's X-Request-Id).

The machines: worker1, worker2 and the engine on one LAN (the load network; the engine joins it through
a delay line), the master on a point-to-point link to each worker (the control links), as a campaign
across machines keeps the master's port off the load network.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
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
class Cluster:
    """One headless campaign: the master on `master`, a worker on each of worker1 and worker2."""

    net: Network
    folder: Path
    master: subprocess.Popen[str] | None = None
    workers: list[subprocess.Popen[str]] = field(default_factory=list)

    def start(self, scenario: dict[str, Any]) -> Cluster:
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
        cluster = Cluster(network, tmp_path / name).start(scenario)
        assert cluster.finish(timeout_s=120) == 0, cluster.log()[-3000:]
        runs[name] = cluster.records()
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


LOST_NOTE = re.compile(r"(\d+) iterations lost on worker (\S+)")
LOST_LOG = re.compile(r"worker (\S+) lost during tier (\d+)")


def _machine_of(record_id: str) -> str:
    """The machine a record comes from: its id starts with its worker's id, which starts with the
    hostname (`<machine>-w<index>-<client>-<8 hex>-<sequence>`)."""
    return record_id.split("-", 1)[0]


@dataclass
class Accounting:
    """The truth log against records.jsonl and phases.csv."""

    served: set[str]  # request ids in the truth log
    written: Counter[str]  # record ids in records.jsonl, with how often each is there
    records: pd.DataFrame
    phases: pd.DataFrame

    @classmethod
    def of(cls, cluster: Cluster, truth: list[dict[str, Any]]) -> Accounting:
        lines = (cluster.run_dir / "records.jsonl").read_text().splitlines()
        return cls(
            served={t["request_id"] for t in truth},
            written=Counter(json.loads(line)["record_id"] for line in lines),
            records=cluster.records(),
            phases=pd.read_csv(cluster.run_dir / "phases.csv"),
        )

    @property
    def doubled(self) -> list[str]:
        return sorted(r for r, n in self.written.items() if n > 1)

    @property
    def missing(self) -> list[str]:
        """Requests the engine served that no record tells of."""
        return sorted(self.served - set(self.written))

    @property
    def unserved(self) -> list[str]:
        """Records of requests the engine never saw (none here: every request reaches the engine)."""
        return sorted(set(self.written) - self.served)

    def lost_in_phases(self) -> dict[tuple[int, str], int]:
        """Iterations phases.csv counts as lost: by tier index and machine."""
        lost: dict[tuple[int, str], int] = {}
        for tier, note in zip(
            self.phases["tier_index"], self.phases["note"].astype("string").fillna(""), strict=True
        ):
            for count, worker in LOST_NOTE.findall(note):
                lost[(int(tier), _machine_of(worker))] = int(count)
        return lost

    def table_row(self, fault: str) -> str:
        return (
            f"{fault}: served {len(self.served)}, written {len(self.written)}, missing {len(self.missing)}, "
            f"doubled {len(self.doubled)}, counted lost {self.lost_in_phases()}"
        )

    def assert_nothing_lost_or_doubled(self) -> None:
        assert self.doubled == [] and self.unserved == [], (self.doubled[:5], self.unserved[:5])
        # a request with no record must be counted lost, with its worker named, in its tier
        missing_by_machine = Counter(_machine_of(r) for r in self.missing)
        lost_by_machine = Counter[str]()
        for (_, machine), count in self.lost_in_phases().items():
            lost_by_machine[machine] += count
        for machine, count in missing_by_machine.items():
            assert lost_by_machine[machine] >= count, (machine, count, self.lost_in_phases())

    def assert_no_delivered_iteration_counted_lost(self, tier_users: int, iterations: int) -> None:
        """What a worker lost of a tier is its share (half the users' iterations) less what it
        delivered: iterations that reached the master late were not lost."""
        for (tier, machine), lost in self.lost_in_phases().items():
            rows = self.records[
                (self.records["tier_index"] == tier) & (self.records["worker_id"].str.startswith(machine))
            ]
            share = tier_users // 2 * iterations
            assert lost <= max(0, share - len(rows)), (tier, machine, lost, share, len(rows))


TIER_USERS = 4


def _cut(net: Network, machine: str, seconds: float) -> tuple[float, float]:
    """Take `machine`'s link to the master down for `seconds`; returns when it went down and came up."""
    net.set_link("master", machine, up=False)
    down = time.time()
    try:
        time.sleep(seconds)
    finally:
        net.set_link("master", machine, up=True)
    return down, time.time()


@pytest.mark.timeout(300)
def test_a_worker_cut_off_from_the_master_for_20_s_mid_tier_loses_and_doubles_no_record(
    network: Network, tmp_path: Path
) -> None:
    # Requests of ~0.65 s: a tier of 4 users x 40 iterations lasts ~30 s, long enough for the 20 s cut
    # to begin and end inside it. The worker goes on sending load while cut off (the engine is on
    # another network) and holds its records; Locust reports it missing after ~4 s.
    iterations = 40
    engine = Engine(network, tmp_path).start("--step-a-ms", "20")
    scenario = sim_scenario(
        conversation=SHORT, tiers=[TIER_USERS, TIER_USERS], iterations=iterations, max_tokens=32
    )
    scenario["backends"] = [{"name": "sim", "engine": "vllm", "url": engine.url}]
    cluster = Cluster(network, tmp_path / "run").start(scenario)
    cluster.wait_for_records(12, timeout_s=60)
    down, up = _cut(network, "worker2", 20.0)
    code = cluster.finish(timeout_s=200)
    log = cluster.log()
    assert code == 0, log[-3000:]
    seen = Accounting.of(cluster, engine.truth())
    print(seen.table_row("worker2 cut off from the master for 20 s mid-tier"))
    assert [(m.group(1).split("-")[0], m.group(2)) for m in LOST_LOG.finditer(log)] == [("worker2", "1")]
    held = seen.records[
        seen.records["worker_id"].str.startswith("worker2")
        & seen.records["wall_start"].between(down + 1, up - 1)
    ]
    assert len(held) > 0  # it worked on while cut off, and what it held reached the results
    seen.assert_nothing_lost_or_doubled()
    seen.assert_no_delivered_iteration_counted_lost(TIER_USERS, iterations)


@pytest.mark.timeout(300)
def test_a_worker_cut_off_past_the_heartbeat_timeout_is_reported_lost_and_its_late_records_count_once(
    network: Network, tmp_path: Path
) -> None:
    # Locust calls a worker missing after ~4 s without a heartbeat. A 15 s cut outlasts the first tier
    # (4 users x 12 iterations, ~9 s): the other worker takes all its users and ends it; the cut worker
    # comes back in a later tier with records of the first, made while it was cut off.
    iterations = 12
    engine = Engine(network, tmp_path).start("--step-a-ms", "20")
    scenario = sim_scenario(conversation=SHORT, tiers=[TIER_USERS] * 4, iterations=iterations, max_tokens=32)
    scenario["backends"] = [{"name": "sim", "engine": "vllm", "url": engine.url}]
    cluster = Cluster(network, tmp_path / "run").start(scenario)
    cluster.wait_for_records(6, timeout_s=60)
    down, up = _cut(network, "worker2", 15.0)
    code = cluster.finish(timeout_s=200)
    log = cluster.log()
    assert code == 0, log[-3000:]
    seen = Accounting.of(cluster, engine.truth())
    print(seen.table_row("worker2 cut off from the master for 15 s, past its tier's end"))
    # reported lost during the first tier
    assert [(m.group(1).split("-")[0], m.group(2)) for m in LOST_LOG.finditer(log)] == [("worker2", "1")]
    records = seen.records
    first = records[records["tier_index"] == 0]
    phases = seen.phases.set_index("tier_index")
    first_ended = float(phases.loc[0, "end_wall"])
    assert down < first_ended < up, (down, first_ended, up)
    # its users respread: worker1 ran all the tier's users while worker2 was cut off
    respread = first[
        first["worker_id"].str.startswith("worker1") & first["wall_start"].between(down + 5, first_ended)
    ]
    assert respread["user_id"].nunique() == TIER_USERS, respread["user_id"].unique()
    # what worker2 made while cut off reached the results once, in the tier it was made for
    late = first[first["worker_id"].str.startswith("worker2") & (first["wall_start"] > down + 1)]
    assert len(late) > 0
    seen.assert_nothing_lost_or_doubled()
    seen.assert_no_delivered_iteration_counted_lost(TIER_USERS, iterations)
