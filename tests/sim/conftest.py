"""Simulated engines shared by the tests of this folder (one process per profile and module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sim_driver import TruthSim

from grill_locust.sim import SimProcess


@pytest.fixture(scope="module")
def vllm_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TruthSim]:
    truth = tmp_path_factory.mktemp("truth") / "truth.jsonl"
    with SimProcess.start("vllm", truth_log=str(truth), extra_args=["--reasoning-tokens", "0"]) as sim:
        yield TruthSim(sim, truth)
