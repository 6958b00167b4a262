"""What typing does to an engine, in one real headless Locust campaign against simulated engines: faster
typing abandons more completions; an engine that keeps computing after the client closes (a long
`abort_delay_ms`) wastes more under the same typing, and there faster typing wastes more too, each
abandon costing about the same. An engine that drops a closed stream at its next step wastes, per
abandon, what it generated while the request was in flight: faster typing cuts requests sooner, so
each abandon wastes less, and its total need not rise with the typing speed.

The same developers type at 2 and at 6 characters a second on two simulators alike but for the abort
delay; each request's wasted tokens come from the simulator's truth log (whose sum is its /sim/stats
`wasted_tokens`). Below 1/debounce (6.7 cps) faster typing sends more requests mid-word, each cut short
by the next keystroke; far above it requests go out only at pauses and abandoned % falls again, so 2
and 6 lie on the same side of that peak."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from grill_locust.client.backend_http import request_once
from grill_locust.sim import SimProcess
from tests.run.conftest import TRUTH_WAIT_S, only_run_dir, read_truth, run_locust, write_scenario

pytestmark = pytest.mark.slow

USERS = 3
REQUESTS = 10
SLOW_CPS, FAST_CPS = 2, 6
ABORT_DELAY_MS = 1000
# a completion of 24 tokens takes ~0.3 s on the simulator's vLLM (12 ms steps): typing at 2 cps leaves
# it ~0.35 s after the debounce, typing at 6 cps a few tens of milliseconds
CONVERSATION: dict[str, Any] = {
    "kind": "autocomplete",
    "prefix_tokens": 600,
    "suffix_tokens": 200,
    "requests": REQUESTS,
    "max_tokens": 24,
    "budget_ms": 400,
}
ENGINES = {"prompt": [], "late": [f"--abort-delay-ms={ABORT_DELAY_MS}"]}  # the abort delay apart


def target_name(engine: str, cps: int) -> str:
    return f"{engine}-{cps}cps"


class Typed:
    """The campaign's records, each with the tokens its engine wasted on it."""

    def __init__(self, records: pd.DataFrame) -> None:
        self.records = records

    def _of(self, engine: str, cps: int) -> pd.DataFrame:
        records = self.records[self.records["target"] == target_name(engine, cps)]
        assert len(records) == USERS * REQUESTS, (engine, cps)
        return records

    def abandoned_pct(self, engine: str, cps: int) -> float:
        return 100.0 * float((self._of(engine, cps)["status"] == "abandoned").mean())

    def wasted_tokens(self, engine: str, cps: int) -> int:
        return int(self._of(engine, cps)["wasted_tokens"].sum())

    def wasted_per_abandon(self, engine: str, cps: int) -> float:
        records = self._of(engine, cps)
        return float(records.loc[records["status"] == "abandoned", "wasted_tokens"].mean())


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Typed]:
    tmp_path = tmp_path_factory.mktemp("typing")
    with ExitStack() as stack:
        sims = {
            engine: stack.enter_context(
                SimProcess.start("vllm", truth_log=str(tmp_path / f"{engine}.jsonl"), extra_args=extra)
            )
            for engine, extra in ENGINES.items()
        }
        data: dict[str, Any] = {
            "name": "typing",
            "backends": [{"name": engine, "engine": "sim", "url": sim.url} for engine, sim in sims.items()],
            "models": [{"name": "grill-sim", "max_tokens": 256, "ignore_eos": True}],
            "conversations": [
                {**CONVERSATION, "name": f"typing-{cps}cps", "typing_cps": cps}
                for cps in (SLOW_CPS, FAST_CPS)
            ],
            "targets": [
                {"name": target_name(engine, cps), "backend": engine, "conversation": f"typing-{cps}cps"}
                for engine in ENGINES
                for cps in (SLOW_CPS, FAST_CPS)
            ],
            "load": {
                "tiers": [USERS],
                "iterations": 1,
                "pause_s": 0.2,
                "think_time_s": 0,
                "engine_wait_s": 0,
            },
        }
        scenario = write_scenario(tmp_path / "s.yaml", data)
        done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")], tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        records = pd.read_parquet(only_run_dir(tmp_path / "results") / "records.parquet")
        wasted: dict[str, int] = {}
        for engine, sim in sims.items():
            truth = settled_truth(sim.url, tmp_path / f"{engine}.jsonl")
            # a request closed before the engine read it has no line: it cost the engine nothing
            assert {line["request_id"] for line in truth} <= set(records["record_id"]), engine
            wasted.update({line["request_id"]: line.get("wasted_tokens", 0) for line in truth})
    typed = Typed(records.assign(wasted_tokens=records["record_id"].map(wasted).fillna(0)))
    for engine in ENGINES:
        for cps in (SLOW_CPS, FAST_CPS):
            print(
                f"{engine} abort, {cps} cps: abandoned {typed.abandoned_pct(engine, cps):.0f} %, wasted "
                f"{typed.wasted_tokens(engine, cps)} tokens ({typed.wasted_per_abandon(engine, cps):.1f} an abandon)"
            )
    yield typed


def settled_truth(url: str, path: Path) -> list[dict[str, Any]]:
    """The simulator's truth log once every request is in it, its wasted tokens (on the lines of
    abandoned requests) those of /sim/stats."""
    deadline = time.monotonic() + TRUTH_WAIT_S
    while True:
        stats = json.loads(request_once(url + "/sim/stats", timeout_s=5.0).body)
        truth = read_truth(path) if path.exists() else []
        wasted = sum(line.get("wasted_tokens", 0) for line in truth)
        if (stats["truth_pending"] == 0 and wasted == stats["wasted_tokens"]) or time.monotonic() > deadline:
            assert wasted == stats["wasted_tokens"], (path, wasted, stats)
            return truth
        time.sleep(0.1)


# margins far inside the figures measured (docs/benchmarks.md), so that a loaded machine keeps them


def test_faster_typing_abandons_more_completions(typed: Typed) -> None:
    for engine in ENGINES:
        assert typed.abandoned_pct(engine, FAST_CPS) > typed.abandoned_pct(engine, SLOW_CPS) + 20, engine


def test_an_engine_that_keeps_computing_after_the_close_wastes_more_under_the_same_typing(
    typed: Typed,
) -> None:
    # at 6 cps requests are abandoned a few tokens in: the late engine runs each on to max_tokens
    assert typed.wasted_tokens("late", FAST_CPS) > 2.5 * typed.wasted_tokens("prompt", FAST_CPS)


def test_faster_typing_wastes_more_where_each_abandon_costs_the_same(typed: Typed) -> None:
    assert typed.wasted_tokens("late", FAST_CPS) > 1.3 * typed.wasted_tokens("late", SLOW_CPS)


def test_an_engine_that_stops_at_once_wastes_less_per_abandon_the_sooner_the_keystroke(typed: Typed) -> None:
    assert typed.wasted_per_abandon("prompt", SLOW_CPS) > 1.5 * typed.wasted_per_abandon("prompt", FAST_CPS)
