"""grill-locust end to end against a real llama.cpp `llama-server`: the lead's own headless run
(`locust -f locustfiles/coding.py --headless --scenario FILE --results-dir DIR`), checked record by record."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import requests

from tests.real.campaigns import CONVERSATIONS, REQUESTS_PER_ITERATION, campaign_scenario, llama_backend
from tests.real.conftest import SERVED_MODEL, CampaignRun, ServerProcess, run_campaign

pytestmark = pytest.mark.real

TIERS = [1, 4]
CALIBRATION_TOLERANCE = 0.02
TELEMETRY_INTERVAL_S = "0.5"


@pytest.fixture(scope="module")
def campaign(llama_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> CampaignRun:
    scenario = campaign_scenario(llama_backend(llama_server), SERVED_MODEL, TIERS)
    folder = tmp_path_factory.mktemp("llama-campaign")
    run = run_campaign(scenario, folder, ["--telemetry-interval", TELEMETRY_INTERVAL_S])
    print(f"llama-server campaign: {run.wall_s:.1f} s")
    return run


@pytest.fixture(scope="module")
def records(campaign: CampaignRun) -> pd.DataFrame:
    return pd.read_parquet(campaign.run_dir / "records.parquet")


def test_every_request_of_every_tier_is_recorded_ok(records: pd.DataFrame) -> None:
    assert (records["status"] == "ok").all(), records.loc[
        records.status != "ok", ["conversation", "status", "error"]
    ]
    counts = records.groupby(["conversation", "tier_users"]).size().to_dict()
    expected = {(name, users): users * per for name, per in REQUESTS_PER_ITERATION.items() for users in TIERS}
    assert counts == expected
    assert records["record_id"].is_unique
    assert (records["engine"] == "llamacpp").all() and (records["model"] == SERVED_MODEL).all()


def test_output_tokens_come_from_the_engines_usage(records: pd.DataFrame) -> None:
    assert (records["tokens_source"] == "usage").all()
    assert (records["output_tokens"] == 16).all()
    assert (records["finish_reason"] == "length").all()


def test_ttft_is_positive_and_below_e2e(records: pd.DataFrame) -> None:
    assert (records["ttft_s"] > 0).all()
    assert (records["ttft_s"] < records["e2e_s"]).all()
    assert records["tpot_s"].notna().all() and (records["tpot_s"] > 0).all()


def test_multi_turn_history_is_served_from_the_slot_cache(records: pd.DataFrame) -> None:
    multi_turn = records[records.conversation == CONVERSATIONS["multi-turn"]["name"]]
    later = multi_turn[multi_turn.turn >= 1]  # turn is 0-based: the second and later turns
    assert len(later) == 2 * sum(TIERS)
    assert (later["cached_tokens"] > 0).all(), later[["turn", "prompt_tokens", "cached_tokens"]]
    by_turn = multi_turn.groupby("turn")["prompt_tokens"].median()
    assert by_turn.is_monotonic_increasing and by_turn.iloc[-1] > by_turn.iloc[0]


def test_prompt_sizes_hit_their_targets_through_the_chat_template(
    records: pd.DataFrame, llama_server: ServerProcess
) -> None:
    """usage.prompt_tokens = template tokens + message tokens: measure the template once, then the
    calibrated messages must land within +-2 % of their targets."""
    content = "Explain what `mean` does."
    reply = requests.post(
        f"{llama_server.url}/v1/chat/completions",
        json={"model": SERVED_MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 1},
        timeout=60,
    ).json()
    tokenized = requests.post(f"{llama_server.url}/tokenize", json={"content": content}, timeout=30).json()
    template_tokens = reply["usage"]["prompt_tokens"] - len(tokenized["tokens"])
    assert 0 < template_tokens < 20

    unique = records[records.conversation == CONVERSATIONS["unique-prompts"]["name"]]
    target = CONVERSATIONS["unique-prompts"]["prompt_tokens"]
    message_tokens = unique["prompt_tokens"] - template_tokens
    assert (abs(message_tokens - target) <= CALIBRATION_TOLERANCE * target).all(), list(message_tokens)


def test_engine_metrics_were_scraped_during_the_run(campaign: CampaignRun) -> None:
    telemetry = pd.read_parquet(campaign.run_dir / "telemetry.parquet")
    engine = telemetry[telemetry.kind == "engine"]
    assert len(engine) >= 3
    assert (engine["backend"] == "llamacpp").all()
    assert engine["requests_running"].max() >= 1
    assert engine["prompt_tokens_total"].is_monotonic_increasing


def test_results_folder_is_complete(campaign: CampaignRun) -> None:
    for name in ("records.parquet", "records.jsonl", "phases.csv", "summary.csv", "config.yaml", "run.json"):
        assert (campaign.run_dir / name).exists(), name
    phases = pd.read_csv(campaign.run_dir / "phases.csv")
    assert phases["complete"].all()


def test_eight_users_on_four_slots_are_seen_deferred_in_telemetry(
    llama_server: ServerProcess, tmp_path: Path
) -> None:
    """8 users at once on 4 slots: 4 requests wait for a slot during the whole first wave, long enough
    for several scrapes to see `llamacpp:requests_deferred` > 0."""
    scenario = campaign_scenario(llama_backend(llama_server), SERVED_MODEL, [8], kinds=["unique-prompts"])
    scenario["conversations"][0] = {**scenario["conversations"][0], "prompt_tokens": 100}
    run = run_campaign(scenario, tmp_path, ["--telemetry-interval", "0.25"])
    records = pd.read_parquet(run.run_dir / "records.parquet")
    assert len(records) == 8 and (records["status"] == "ok").all()
    telemetry = pd.read_parquet(run.run_dir / "telemetry.parquet")
    engine = telemetry[telemetry.kind == "engine"]
    assert engine["requests_waiting"].max() > 0, engine[["wall_time", "requests_running", "requests_waiting"]]
    assert engine["requests_running"].max() <= 4  # never more than the slots
    # the deferred half waited for the first wave: its TTFT is at least one first-wave E2E longer
    ttft_sorted = records["ttft_s"].sort_values().to_numpy()
    assert ttft_sorted[4:].min() > records["e2e_s"].min()
