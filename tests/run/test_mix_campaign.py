"""A team in one tier: a 3-persona mix against one simulator, on one worker and on two. Developer k
plays the same persona at every tier, developers are numbered 0..N-1 in each tier whatever the workers,
and the report shows each persona beside the whole tier."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from grill_locust.report import summarize
from grill_locust.report.load import load_run
from grill_locust.run.web_ui import personas_cell
from grill_locust.scenario import load_scenario
from tests.run.conftest import only_run_dir, run_locust, write_scenario
from tests.run.test_distributed import finish, start_cluster

pytestmark = pytest.mark.slow

TIERS = [3, 7]
MIX = [
    {"conversation": "complete", "weight": 70},
    {"conversation": "chat", "weight": 25},
    {"conversation": "bulk", "weight": 5},
]
# developer k's persona in a 70/25/5 mix (Tijdeman's order), and each persona's requests per iteration
PERSONA_OF_DEVELOPER = ["complete", "complete", "chat", "complete", "complete", "chat", "complete"]
AUTOCOMPLETE_REQUESTS = 3
REQUESTS_PER_ITERATION = {"complete": AUTOCOMPLETE_REQUESTS, "chat": 2, "bulk": 1}


def mix_scenario() -> dict[str, Any]:
    return {
        "name": "team",
        "backends": [{"name": "sim", "engine": "sim", "profile": "vllm"}],
        "models": [{"name": "grill-sim", "max_tokens": 8, "ignore_eos": True}],
        "conversations": [
            {
                "name": "complete",
                "kind": "autocomplete",
                "prefix_tokens": 200,
                "suffix_tokens": 50,
                "requests": AUTOCOMPLETE_REQUESTS,
                "typing_cps": 8,
                "max_tokens": 8,
            },
            {"name": "chat", "kind": "multi-turn", "system_tokens": 40, "user_turns": 2, "turn_tokens": 20},
            {"name": "bulk", "kind": "unique-prompts", "prompt_tokens": 60},
        ],
        "targets": [{"backend": "sim", "model": "grill-sim", "mix": MIX}],
        "load": {"tiers": TIERS, "iterations": 1, "pause_s": 0.2, "think_time_s": 0.05},
    }


def assert_each_developer_plays_its_persona(records: pd.DataFrame) -> None:
    assert set(records["status"]) <= {"ok", "abandoned"}  # a typist abandons some completions
    for users in TIERS:
        tier = records[records["tier_users"] == users]
        assert sorted(tier["developer"].unique()) == list(range(users))
        persona = tier.groupby("developer")["conversation"].unique().map(list).to_dict()
        assert persona == {k: [PERSONA_OF_DEVELOPER[k]] for k in range(users)}
        # every developer ran one iteration of its persona: its requests, no more, no fewer
        expected = sum(REQUESTS_PER_ITERATION[PERSONA_OF_DEVELOPER[k]] for k in range(users))
        assert len(tier) == expected
        kinds = tier.groupby("conversation")["kind"].unique().map(list).to_dict()
        assert kinds == {
            name: [kind] for name, kind in {"complete": "autocomplete", "chat": "multi-turn"}.items()
        }


def test_a_mix_gives_each_developer_its_persona_and_the_report_shows_each_beside_the_whole_tier(
    tmp_path: Path,
) -> None:
    scenario = write_scenario(tmp_path / "s.yaml", mix_scenario())
    done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "r")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "r")
    records = pd.read_parquet(run_dir / "records.parquet")
    assert_each_developer_plays_its_persona(records)

    summary = summarize(load_run(run_dir))
    whole_label = "whole tier: complete 70, chat 25, bulk 5"
    rows = {(row.tier_users, row.conversation): row for row in summary.itertuples()}
    assert set(rows) == {
        (3, "complete"),
        (3, "chat"),
        (3, whole_label),
        (7, "complete"),
        (7, "chat"),
        (7, whole_label),
    }
    complete, chat, whole = rows[(7, "complete")], rows[(7, "chat")], rows[(7, whole_label)]
    assert (complete.developers, complete.requests) == (5, 5 * AUTOCOMPLETE_REQUESTS)  # abandoned ones too
    assert (chat.developers, chat.requests) == (2, 4)
    assert (whole.developers, whole.requests) == (7, 5 * AUTOCOMPLETE_REQUESTS + 4)
    assert whole.kind == "mix" and chat.kind == "multi-turn" and complete.kind == "autocomplete"
    assert set(summary["mix"]) == {whole_label}


def test_developer_indices_are_the_tier_s_whatever_the_workers(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "s.yaml", mix_scenario())
    master, workers = start_cluster(tmp_path, scenario, workers=2)
    code = finish(master, workers)
    assert code == 0, (tmp_path / "master.log").read_text()[-3000:]
    records = pd.read_parquet(only_run_dir(tmp_path / "results") / "records.parquet")
    assert records.groupby("tier_users")["worker_id"].nunique().to_dict() == {3: 2, 7: 2}
    assert_each_developer_plays_its_persona(records)


def test_the_campaign_tab_shows_a_mix_s_personas_apart(tmp_path: Path) -> None:
    scenario = load_scenario(write_scenario(tmp_path / "s.yaml", mix_scenario()))
    records, errors = Counter({"complete": 5, "chat": 3}), Counter({"chat": 1})
    cell = personas_cell(scenario.targets[0], 7, records, errors)
    assert cell == "complete: 5 dev, 5 req, 0 err; chat: 2 dev, 3 req, 1 err; bulk: 0 dev, 0 req, 0 err"
