"""A workload kind needs no change to the package: this file alone defines one, registers it through the
public registry, and runs a campaign of it on the simulated engine (Locust loads this file too, as a
second locustfile, so its workers know the kind)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pandas as pd
import pytest
from pydantic import Field

from grill_locust.run.estimate import estimate_campaign
from grill_locust.scenario import load_scenario
from grill_locust.workload.generators import ConversationScript, unique_id
from grill_locust.workload.kinds import ChatKind, ConversationBase, register, unregister
from tests.run.conftest import LOCUSTFILE, only_run_dir, run_locust, sim_scenario, write_scenario

if TYPE_CHECKING:
    from grill_locust.workload.generators import Workload
    from grill_locust.workload.seeding import ShapeKey

REGISTER_ENV = "GRILL_TEST_REGISTERS_ECHO_KIND"  # set for the Locust run, which imports this file
USERS = 2
ITERATIONS = 3
TURNS = 2


class EchoConversation(ConversationBase):
    """An `echo-turns` conversation's keys."""

    kind: Literal["echo-turns"]
    """Short questions in a row, each answered by repeating a word."""
    user_turns: int = Field(default=1, ge=1)
    """Questions per iteration."""


@dataclass(frozen=True)
class EchoTurns(ChatKind):
    """`user_turns` short questions in a row, each its own: a kind the package does not have."""

    def requests_per_iteration(self, conversation: ConversationBase) -> float:
        assert isinstance(conversation, EchoConversation)
        return conversation.user_turns

    def build_script(
        self,
        workload: Workload,
        conversation_id: str,
        user_key: str,
        iteration: int,
        rng: random.Random,
        shape: ShapeKey,
    ) -> ConversationScript:
        assert isinstance(workload.conversation, EchoConversation)
        turns = [f"Say the word {unique_id(rng)} back." for _ in range(workload.conversation.user_turns)]
        return ConversationScript(conversation_id, None, turns)


ECHO = EchoTurns(EchoConversation, rate_unit="sessions/s")

if os.environ.get(REGISTER_ENV) == "1":
    register(ECHO)


@pytest.fixture
def echo_kind() -> Iterator[None]:
    register(ECHO)
    try:
        yield
    finally:
        unregister(ECHO.name)


def _scenario(path: Path) -> Path:
    conversation = {"name": "echo", "kind": ECHO.name, "user_turns": TURNS}
    return write_scenario(path, sim_scenario(conversation=conversation, tiers=[USERS], iterations=ITERATIONS))


def test_a_kind_registered_from_outside_is_loaded_and_estimated(tmp_path: Path, echo_kind: None) -> None:
    scenario = load_scenario(_scenario(tmp_path / "s.yaml"))
    assert scenario.targets[0].conversation.workload_kind is ECHO
    assert estimate_campaign(scenario).requests == USERS * ITERATIONS * TURNS


@pytest.mark.slow
def test_a_kind_defined_in_a_test_runs_a_campaign_on_the_simulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = _scenario(tmp_path / "s.yaml")
    monkeypatch.setenv(REGISTER_ENV, "1")
    # this file imports `tests.`: the run, which imports it from its own folder, needs the repository on its path
    repository = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [repository, os.environ.get("PYTHONPATH")]))
    )
    done = run_locust(
        [
            "-f",
            f"{LOCUSTFILE},{Path(__file__).resolve()}",
            "--scenario",
            str(scenario),
            "--results-dir",
            "results",
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = pd.read_parquet(only_run_dir(tmp_path / "results") / "records.parquet")
    assert set(records["kind"]) == {ECHO.name}
    assert (records["status"] == "ok").all()
    assert len(records) == USERS * ITERATIONS * TURNS
    assert sorted(records.groupby("conversation_id")["turn"].max().unique()) == [TURNS - 1]
