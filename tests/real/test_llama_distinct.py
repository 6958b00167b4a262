"""Distinct prompts stay distinct on a real llama-server: a short-baseline tier (calibrated through its
/tokenize, so ids are measured words) finds nothing in the cache beyond the chat template's opening."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import requests

from tests.real.campaigns import campaign_scenario, llama_backend
from tests.real.conftest import SERVED_MODEL, ServerProcess, run_campaign

pytestmark = pytest.mark.real

USERS = 2
ITERATIONS = 10
CONTENT_MARK = "MARK"  # stands for the message in the rendered template


def template_opening_tokens(server: ServerProcess) -> int:
    """Tokens of the rendered chat template before a user message (BOS included, as a request has it)."""
    rendered = requests.post(
        f"{server.url}/apply-template",
        json={"messages": [{"role": "user", "content": CONTENT_MARK}]},
        timeout=30,
    ).json()["prompt"]
    opening = rendered.split(CONTENT_MARK)[0]
    tokens = requests.post(
        f"{server.url}/tokenize", json={"content": opening, "add_special": True}, timeout=30
    ).json()["tokens"]
    return len(tokens)


def cached_tokens(server: ServerProcess, content: str) -> int:
    reply = requests.post(
        f"{server.url}/v1/chat/completions",
        json={"model": SERVED_MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 1},
        timeout=60,
    ).json()
    return int(reply["usage"]["prompt_tokens_details"]["cached_tokens"])


def test_short_baseline_prompts_hit_no_cache_beyond_the_template_opening(
    llama_server: ServerProcess, tmp_path: Path
) -> None:
    opening = template_opening_tokens(llama_server)
    assert 0 < opening < 10  # gemma: <bos><start_of_turn>user\n
    # the check can fail: a prompt sent again is served from the slot's cache, past the opening
    repeated = "Explain what `json.loads` does with a trailing comma, in two sentences."
    cached_tokens(llama_server, repeated)
    assert cached_tokens(llama_server, repeated) > opening

    scenario = campaign_scenario(
        llama_backend(llama_server), SERVED_MODEL, [USERS], kinds=["short-baseline"], iterations=ITERATIONS
    )
    run = run_campaign(scenario, tmp_path)
    records = pd.read_parquet(run.run_dir / "records.parquet")
    assert len(records) == USERS * ITERATIONS and (records["status"] == "ok").all()
    assert records["cached_tokens"].notna().all()
    assert (records["cached_tokens"] <= opening).all(), records[["user_id", "iteration", "cached_tokens"]]
    print(
        f"short-baseline tier: {len(records)} requests in {run.wall_s:.1f} s, template opening {opening} tokens"
    )
