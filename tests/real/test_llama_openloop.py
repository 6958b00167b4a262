"""An open-loop rate tier against a real llama.cpp `llama-server`: a short Poisson tier of short requests
through headless Locust, every send recorded with its intended time and its lateness, labelled by rate."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.real.campaigns import CONVERSATIONS, campaign_scenario, llama_backend
from tests.real.conftest import SERVED_MODEL, ServerProcess, run_campaign

pytestmark = pytest.mark.real

RATE = 2.0
DURATION_S = 5.0
MAX_TOKENS = 8


def test_a_poisson_tier_on_llama_server_records_every_send_on_schedule(
    llama_server: ServerProcess, tmp_path
) -> None:
    scenario = campaign_scenario(
        llama_backend(llama_server), SERVED_MODEL, [1], kinds=["short-baseline"], max_tokens=MAX_TOKENS
    )
    load = scenario["load"]
    del load["tiers"]
    load.update({"rates": [RATE], "arrival": "poisson", "duration_s": DURATION_S, "engine_wait_s": 0})
    run = run_campaign(scenario, tmp_path)
    records = pd.read_parquet(run.run_dir / "records.parquet")
    assert len(records) >= 2, "a Poisson tier of 2/s for 5 s sends about 10 requests"
    assert (records["status"] == "ok").all(), records.loc[records.status != "ok", ["status", "error"]]
    assert (records["conversation"] == CONVERSATIONS["short-baseline"]["name"]).all()
    assert (records["tier_rate"] == RATE).all() and (records["tier_users"] == 0).all()
    assert records["scheduled_wall"].notna().all() and records["schedule_lag_s"].notna().all()
    assert (records["schedule_lag_s"] >= 0).all()
    # each request left at its intended time plus its recorded lag, and within the tier's sending time
    assert (records["wall_start"] - records["scheduled_wall"] - records["schedule_lag_s"]).abs().max() < 1e-6
    assert records["scheduled_wall"].max() - records["scheduled_wall"].min() < DURATION_S
    assert (records["output_tokens"] == MAX_TOKENS).all()
    summary = pd.read_csv(run.run_dir / "summary.csv")
    assert list(summary["tier_rate"]) == [RATE]
