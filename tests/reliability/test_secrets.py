"""Secrets stay secret: a campaign with API keys and an Influx token (sink on, VictoriaMetrics on
loopback) leaves them in no results file, no log line, no Influx point and no Grafana file; each key
goes only to its own backend."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from reliability_servers import CannedEngine

from tests.influx.influx_servers import VictoriaMetrics
from tests.run.conftest import only_run_dir, run_locust, write_scenario

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PER_TARGET = 2  # tier [2], one iteration of a one-turn conversation


@dataclass(frozen=True)
class Secrets:
    key_a: str  # backend rec-a's api_key
    key_b: str  # backend rec-b's api_key and x-api-key header
    key_c: str  # backend rec-c's api_key, sent as Anthropic's x-api-key too (api: messages)
    key_sim: str  # the simulated engine's api_key (it answers 401 without it)
    influx_cli: str  # --influx-token
    influx_file: str  # the scenario's sinks.influx.token (overridden by the option, still a secret)

    def named(self) -> dict[str, str]:
        return dict(vars(self))


@dataclass(frozen=True)
class Campaign:
    secrets: Secrets
    done: subprocess.CompletedProcess[str]
    run_dir: Path
    engine: CannedEngine
    elsewhere: CannedEngine  # another server that rec-a's tokenizer and /metrics URLs point to
    points: str  # every series VictoriaMetrics holds, as exported JSON lines


def _secret(tag: str) -> str:
    # shaped unlike any key pattern a scrubber might know: only an exact search finds a leak
    return f"grill{tag}{secrets.token_hex(12)}"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    tmp_path = tmp_path_factory.mktemp("secrets")
    found = Secrets(*(_secret(tag) for tag in ("KeyA", "KeyB", "KeyC", "KeySim", "InfluxCli", "InfluxFile")))
    env = {
        "GRILL_TEST_KEY_A": found.key_a,
        "GRILL_TEST_KEY_B": found.key_b,
        "GRILL_TEST_KEY_C": found.key_c,
        "GRILL_TEST_KEY_SIM": found.key_sim,
        "GRILL_TEST_INFLUX_TOKEN": found.influx_file,
    }
    victoria = VictoriaMetrics(tmp_path)
    victoria.start()
    try:
        with CannedEngine() as engine, CannedEngine() as elsewhere:
            data = {
                "name": "secrets",
                "backends": [
                    {
                        "name": "rec-a",
                        "engine": "openai",
                        "url": f"{engine.url}/ok-a",
                        "api_key": "${GRILL_TEST_KEY_A}",
                        "tokenize_url": f"{elsewhere.url}/tokenize",
                        "metrics_url": f"{elsewhere.url}/metrics",
                    },
                    {
                        "name": "rec-b",
                        "engine": "openai",
                        "url": f"{engine.url}/ok-b",
                        "api_key": "${GRILL_TEST_KEY_B}",
                        "headers": {"x-api-key": "${GRILL_TEST_KEY_B}"},
                    },
                    {
                        "name": "rec-c",
                        "engine": "litellm",
                        "api": "messages",
                        "url": f"{engine.url}/ok-c",
                        "api_key": "${GRILL_TEST_KEY_C}",
                    },
                    {
                        "name": "sim",
                        "engine": "sim",
                        "api_key": "${GRILL_TEST_KEY_SIM}",
                        "sim_args": {"api_key": "${GRILL_TEST_KEY_SIM}"},
                    },
                ],
                "models": [{"name": "grill-sim", "max_tokens": 8, "ignore_eos": True}],
                "conversations": [{"name": "sb", "kind": "short-baseline", "prompt_tokens": 20}],
                "targets": [
                    {"backend": name, "model": "grill-sim", "conversation": "sb"}
                    for name in ("rec-a", "rec-b", "rec-c", "sim")
                ],
                "load": {"tiers": [PER_TARGET], "iterations": 1, "pause_s": 0.1, "think_time_s": 0.0},
                "sinks": {
                    "influx": {
                        "url": victoria.url,
                        "org": "grill",
                        "bucket": "grill",
                        "token": "${GRILL_TEST_INFLUX_TOKEN}",
                    }
                },
            }
            scenario = write_scenario(tmp_path / "s.yaml", data)
            os.environ.update(env)
            try:
                done = run_locust(
                    [
                        "--scenario",
                        str(scenario),
                        "--results-dir",
                        str(tmp_path / "r"),
                        "--telemetry-interval",
                        "0.5",
                        "--influx-url",
                        victoria.url,
                        "--influx-token",
                        found.influx_cli,
                        "--loglevel",
                        "DEBUG",
                    ],
                    tmp_path,
                    timeout_s=120,
                )
            finally:
                for name in env:
                    os.environ.pop(name, None)
            points = "\n".join(str(series) for series in victoria.export('{__name__=~".+"}'))
            yield Campaign(found, done, only_run_dir(tmp_path / "r"), engine, elsewhere, points)
    finally:
        victoria.stop()


def leaks_in(text: str | bytes, named: dict[str, str]) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [name for name, value in named.items() if value.encode() in data]


def test_the_campaign_ran_with_every_key_accepted(campaign: Campaign) -> None:
    assert campaign.done.returncode == 0, campaign.done.stderr[-3000:]
    records = pd.read_parquet(campaign.run_dir / "records.parquet")
    assert records.groupby("backend").size().to_dict() == {"rec-a": 2, "rec-b": 2, "rec-c": 2, "sim": 2}
    assert (records["status"] == "ok").all()  # the simulated engine answers 401 to a missing or wrong key
    assert "grill_request" in campaign.points  # the Influx sink was on


@pytest.mark.parametrize(
    "secret",
    [
        "key_a",
        "key_b",
        "key_c",
        "key_sim",
        "influx_cli",
        "influx_file",
    ],
)
def test_no_results_file_holds_a_secret(campaign: Campaign, secret: str) -> None:
    named = {secret: campaign.secrets.named()[secret]}
    files = [p for p in campaign.run_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"records.parquet", "config.yaml", "run.json", "phases.csv"}
    leaks = [str(p.relative_to(campaign.run_dir)) for p in files if leaks_in(p.read_bytes(), named)]
    assert leaks == []


def test_config_copy_shows_secrets_redacted(campaign: Campaign) -> None:
    config = (campaign.run_dir / "config.yaml").read_text()
    assert config.count("***") >= 4  # three api keys and the Influx token at least


def test_no_log_line_holds_a_secret(campaign: Campaign) -> None:
    named = campaign.secrets.named()
    assert leaks_in(campaign.done.stdout, named) == []
    assert leaks_in(campaign.done.stderr, named) == []


def test_no_influx_point_holds_a_secret(campaign: Campaign) -> None:
    assert leaks_in(campaign.points, campaign.secrets.named()) == []


def test_no_grafana_file_holds_a_secret(campaign: Campaign) -> None:
    named = campaign.secrets.named()
    files = [p for p in (ROOT / "grafana").rglob("*") if p.is_file()]
    assert files
    assert [str(p) for p in files if leaks_in(p.read_bytes(), named)] == []


def test_each_key_goes_only_to_its_own_backend(campaign: Campaign) -> None:
    named = campaign.secrets.named()
    own = {"ok-a": {"key_a"}, "ok-b": {"key_b"}, "ok-c": {"key_c"}}
    for prefix, mine in own.items():
        seen = campaign.engine.requests_under(prefix)
        assert len([r for r in seen if r.method == "POST" and not r.calibrating]) == PER_TARGET
        for request in seen:
            found = set(leaks_in(repr(sorted(request.headers.items())) + request.path, named))
            assert found == mine, (prefix, request.path, found)
            assert request.headers["authorization"] == f"Bearer {named[next(iter(mine))]}"
    assert campaign.engine.requests_under("ok-b")[0].headers["x-api-key"] == campaign.secrets.key_b
    messages_requests = [r for r in campaign.engine.requests_under("ok-c") if r.method == "POST"]
    assert {r.path for r in messages_requests} == {"/ok-c/v1/messages"}
    assert {r.headers["x-api-key"] for r in messages_requests} == {campaign.secrets.key_c}
    assert {r.headers["anthropic-version"] for r in messages_requests} == {"2023-06-01"}


def test_no_key_goes_to_a_tokenizer_or_metrics_url_on_another_server(campaign: Campaign) -> None:
    seen = campaign.elsewhere.seen
    assert seen  # the run did calibrate and scrape there
    named = campaign.secrets.named()
    assert [r.path for r in seen if leaks_in(repr(sorted(r.headers.items())) + r.path, named)] == []
