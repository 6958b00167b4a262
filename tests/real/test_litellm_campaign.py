"""The same campaign through a real LiteLLM proxy routing a model alias to llama-server, as the seed's
gateway did: every record ok, and the master key (read from the environment) written nowhere."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.real.campaigns import REQUESTS_PER_ITERATION, agent_scenario, campaign_scenario
from tests.real.conftest import (
    AGENT_PROXY_MODEL,
    MASTER_KEY_ENV,
    PROXY_MODEL,
    CampaignRun,
    ServerProcess,
    run_campaign,
)

pytestmark = pytest.mark.real

TIERS = [1, 4]
AGENT_STEPS = 4  # the proxy adds its own CPU to the engine's on the 2 cores: a short session


@pytest.fixture(scope="module")
def campaign(
    litellm_proxy: ServerProcess, master_key: str, tmp_path_factory: pytest.TempPathFactory
) -> CampaignRun:
    backend = {
        "name": "gateway",
        "engine": "litellm",
        "url": litellm_proxy.url,
        "api_key": "${" + MASTER_KEY_ENV + "}",  # expanded by the run from its environment
        "timeouts": {"connect_s": 10, "first_token_s": 300, "total_s": 600},
    }
    scenario = campaign_scenario(backend, PROXY_MODEL, TIERS)
    folder = tmp_path_factory.mktemp("litellm-campaign")
    run = run_campaign(scenario, folder, env={MASTER_KEY_ENV: master_key})
    print(f"LiteLLM campaign: {run.wall_s:.1f} s")
    return run


def test_every_request_through_the_proxy_is_recorded_ok(campaign: CampaignRun) -> None:
    records = pd.read_parquet(campaign.run_dir / "records.parquet")
    assert (records["status"] == "ok").all(), records.loc[
        records.status != "ok", ["conversation", "status", "error"]
    ]
    counts = records.groupby(["conversation", "tier_users"]).size().to_dict()
    assert counts == {
        (name, users): users * per for name, per in REQUESTS_PER_ITERATION.items() for users in TIERS
    }
    assert (records["engine"] == "litellm").all() and (records["model"] == PROXY_MODEL).all()
    assert (records["tokens_source"] == "usage").all()
    assert (records["ttft_s"] > 0).all() and (records["ttft_s"] < records["e2e_s"]).all()
    # LiteLLM passes llama-server's cached_tokens through: the multi-turn history hits the slot cache
    later_turns = records[(records.conversation == "mt") & (records.turn >= 1)]
    assert (later_turns["cached_tokens"] > 0).all(), later_turns[["turn", "prompt_tokens", "cached_tokens"]]


def test_master_key_appears_in_no_result_file_and_no_log_line(campaign: CampaignRun, master_key: str) -> None:
    files = [path for path in campaign.results_dir.rglob("*") if path.is_file()]
    assert len(files) >= 5
    for path in files:
        assert master_key.encode() not in path.read_bytes(), f"master key written to {path}"
    assert master_key not in campaign.output
    config = (campaign.run_dir / "config.yaml").read_text()
    assert "***" in config  # redacted, not dropped


@pytest.fixture(scope="module")
def agent_records(
    litellm_proxy: ServerProcess, master_key: str, tmp_path_factory: pytest.TempPathFactory
) -> pd.DataFrame:
    """An agent session through the proxy to the --jinja llama-server over each API LiteLLM serves: its
    pinned version serves /v1/messages too (translated to a chat request upstream). Shorter than the
    direct test's sessions (test_llama_agent.py), which check their shape."""
    backends = [
        {
            "name": api,
            "engine": "litellm",
            "api": api,
            "url": litellm_proxy.url,
            "api_key": "${" + MASTER_KEY_ENV + "}",
            "timeouts": {"connect_s": 10, "first_token_s": 300, "total_s": 600},
        }
        for api in ("chat", "messages")
    ]
    folder = tmp_path_factory.mktemp("litellm-agent")
    scenario = agent_scenario(backends, AGENT_PROXY_MODEL, steps=AGENT_STEPS, tool_result_tokens=100)
    run = run_campaign(scenario, folder, env={MASTER_KEY_ENV: master_key})
    print(f"LiteLLM agent campaign: {run.wall_s:.1f} s")
    records = pd.read_parquet(run.run_dir / "records.parquet").sort_values(["target", "turn"])
    print(records[["target", "turn", "prompt_tokens", "cached_tokens", "output_tokens", "e2e_s"]])
    return records


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_an_agent_session_through_the_proxy_is_ok_and_served_from_the_cache(
    agent_records: pd.DataFrame, api: str
) -> None:
    session = agent_records[agent_records.target == api]
    assert (session["status"] == "ok").all(), session[["turn", "status", "error"]]
    assert list(session["turn"]) == list(range(AGENT_STEPS))
    prompt = session["prompt_tokens"].to_numpy()
    assert (prompt[1:] > prompt[:-1]).all(), list(prompt)
    # LiteLLM passes llama-server's cached tokens through (cache_read_input_tokens over messages)
    assert (session["cached_tokens"].iloc[1:] > 0).all(), list(session["cached_tokens"])
