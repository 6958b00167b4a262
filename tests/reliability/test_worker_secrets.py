"""Secrets never cross the master's port: a stranger that connects to it as a worker receives the
scenario and Locust's spawn messages but no key and no token; real workers expand the scenario's
`${VAR}` secrets from their own environment, and one that lacks a variable refuses, naming it, and the
master ends the campaign saying so (log, phases.csv, exit code 2)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.ports import free_port
from tests.reliability.reliability_servers import InfluxCatcher
from tests.run.conftest import only_run_dir, run_locust, sim_scenario, write_scenario
from tests.run.test_distributed import cluster_master_args, cluster_worker_args, finish, locust

pytestmark = pytest.mark.slow

KEY_VARIABLE = "GRILL_TEST_WORKER_KEY"
SHORT = {"name": "short", "kind": "short-baseline", "prompt_tokens": 40}
TIER_USERS, ITERATIONS = 2, 2

# Speaks Locust's master/worker protocol (msgpack over a ZeroMQ DEALER socket) as any process on the
# network could: says it is a worker, asks grill-locust's hello, then keeps every frame it receives
# until the master says quit. It sends no heartbeat, so the master soon counts it lost.
STRANGER = """
import sys, time, msgpack, zmq
port, out_path, identity = int(sys.argv[1]), sys.argv[2], sys.argv[3]
socket = zmq.Context().socket(zmq.DEALER)
socket.setsockopt(zmq.IDENTITY, identity.encode())
socket.connect(f"tcp://127.0.0.1:{port}")
import locust
for kind, data in (("client_ready", locust.__version__), ("grill_hello", {})):
    socket.send(msgpack.dumps((kind, data, identity)))
deadline = time.monotonic() + float(sys.argv[4])
with open(out_path, "wb") as out:
    while time.monotonic() < deadline:
        if not socket.poll(200):
            continue
        frame = socket.recv()
        out.write(len(frame).to_bytes(4, "big") + frame)
        out.flush()
        if msgpack.loads(frame, strict_map_key=False)[0] == "quit":
            break
"""


@pytest.fixture
def influx() -> Iterator[InfluxCatcher]:
    catcher = InfluxCatcher()
    yield catcher
    catcher.close()


def keyed_scenario(path: Path, influx_url: str | None = None) -> Path:
    """The simulated engine answers 401 without the key: a request made without it is not `ok`."""
    data = sim_scenario(conversation=SHORT, tiers=[TIER_USERS], iterations=ITERATIONS)
    data["backends"][0]["api_key"] = f"${{{KEY_VARIABLE}}}"
    data["backends"][0]["sim_args"] = {"api_key": f"${{{KEY_VARIABLE}}}"}
    if influx_url:
        data["sinks"] = {"influx": {"url": influx_url, "org": "grill", "bucket": "grill"}}
    return write_scenario(path, data)


def process_env(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (KEY_VARIABLE, "INFLUX_TOKEN")}
    return {**env, "PYTHONUNBUFFERED": "1", **variables}


def master_args(port: int, scenario: Path, results: Path, workers: int) -> list[str]:
    return [*cluster_master_args(port, scenario, results, workers), "--telemetry-interval", "0"]


def frames(path: Path) -> list[tuple[str, Any]]:
    import msgpack

    data, found = path.read_bytes(), []
    while data:
        size = int.from_bytes(data[:4], "big")
        kind, body, _ = msgpack.loads(data[4 : 4 + size], strict_map_key=False)
        found.append((kind, body))
        data = data[4 + size :]
    return found


def test_a_stranger_on_the_master_port_receives_no_secret_while_real_workers_run(
    tmp_path: Path, influx: InfluxCatcher
) -> None:
    key, token = f"grillKey{secrets.token_hex(12)}", f"grillTok{secrets.token_hex(12)}"
    scenario = keyed_scenario(tmp_path / "s.yaml", influx.url)
    port = free_port()
    env = process_env(**{KEY_VARIABLE: key, "INFLUX_TOKEN": token})
    master = locust(
        [*master_args(port, scenario, tmp_path / "r", workers=2), "--influx-url", influx.url],
        tmp_path,
        tmp_path / "master.log",
        env,
    )
    worker = locust(cluster_worker_args(port), tmp_path, tmp_path / "worker.log", env)
    received = tmp_path / "stranger.bin"
    stranger = subprocess.Popen(
        [sys.executable, "-c", STRANGER, str(port), str(received), "stranger-0001", "150"],
        env=process_env(),
    )
    try:
        code = finish(master, [worker], timeout_s=150)
    finally:
        try:
            stranger.wait(timeout=20)
        except subprocess.TimeoutExpired:
            stranger.kill()
            stranger.wait()
    log = (tmp_path / "master.log").read_text()
    assert code in (0, 1), log[-3000:]  # 1 only for the stranger counted as a lost worker
    # the real worker ran the campaign with the key of its own environment
    records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet")
    assert len(records) == TIER_USERS * ITERATIONS and (records["status"] == "ok").all()
    # its points went to InfluxDB with its own token
    assert any(b"grill_request" in body for body in influx.bodies)
    assert set(influx.authorizations) == {f"Token {token}"}
    # the stranger was answered like a worker: the scenario and Locust's spawn message with the options
    kinds = [kind for kind, _ in frames(received)]
    assert "grill_phase" in kinds and "spawn" in kinds, kinds
    raw = received.read_bytes()
    assert [name for name, value in (("key", key), ("token", token)) if value.encode() in raw] == []
    scenario_sent = next(body["scenario"] for kind, body in frames(received) if kind == "grill_phase")
    assert f"${{{KEY_VARIABLE}}}" in json.dumps(scenario_sent)  # the reference, for a worker to expand


def test_a_worker_without_the_secrets_variable_refuses_and_the_master_reports_it(tmp_path: Path) -> None:
    key = f"grillKey{secrets.token_hex(12)}"
    scenario = keyed_scenario(tmp_path / "s.yaml")
    port = free_port()
    master = locust(
        master_args(port, scenario, tmp_path / "r", workers=1),
        tmp_path,
        tmp_path / "master.log",
        process_env(**{KEY_VARIABLE: key}),
    )
    worker = locust(cluster_worker_args(port), tmp_path, tmp_path / "worker.log", process_env())
    code = finish(master, [worker], timeout_s=120)
    master_log = (tmp_path / "master.log").read_text()
    worker_log = (tmp_path / "worker.log").read_text()
    assert code == 2, master_log[-3000:]
    refusal = f"environment variable {KEY_VARIABLE} is not set on this worker"
    [line] = [line for line in worker_log.splitlines() if refusal in line]
    assert f"backends[0].api_key: {refusal}" in line
    assert "refused the campaign" in master_log and refusal in master_log
    run_dir = only_run_dir(tmp_path / "r")
    phases = pd.read_csv(run_dir / "phases.csv")
    assert not bool(phases["complete"].iloc[0])
    assert refusal in phases["note"].iloc[0]
    records = run_dir / "records.parquet"
    assert not records.exists() or pd.read_parquet(records).empty  # nothing measured, nothing claimed
    assert key not in master_log + worker_log


def test_processes_children_take_the_secrets_from_the_inherited_environment(tmp_path: Path) -> None:
    key = f"grillKey{secrets.token_hex(12)}"
    scenario = keyed_scenario(tmp_path / "s.yaml")
    os.environ[KEY_VARIABLE] = key
    try:
        done = run_locust(
            ["--processes", "2", "--scenario", str(scenario), "--results-dir", str(tmp_path / "r")], tmp_path
        )
    finally:
        os.environ.pop(KEY_VARIABLE)
    assert done.returncode == 0, done.stderr[-3000:]
    records = pd.read_parquet(only_run_dir(tmp_path / "r") / "records.parquet")
    assert len(records) == TIER_USERS * ITERATIONS and (records["status"] == "ok").all()
    assert records["worker_id"].nunique() == 2  # both children ran users with the key
    assert key not in done.stdout + done.stderr
