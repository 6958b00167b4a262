"""Trace replay in the run: a trace target runs once, at the trace's own times, as one open-loop tier
(its rows split over the workers' dispatchers), with no `load` section of its own. In real headless
Locust runs against one simulated engine shared by the module: prompt and output sizes exact, sends on
schedule, the trace's shared hash ids reaching the engine's prefix cache, two worker processes splitting
the rows; and what `grill validate` and a capacity search make of a trace target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from grill_locust.errors import GrillError
from grill_locust.run import estimate
from grill_locust.run.arrivals import trace_share
from grill_locust.run.phase import campaign_phases, trace_rate
from grill_locust.run.search import check_search_runnable
from grill_locust.scenario import load_scenario, parse_scenario
from grill_locust.sim import SimProcess
from grill_locust.sim.text import render_chat
from grill_locust.tokens import count_tokens
from grill_locust.workload.trace import BLOCK_TOKENS, TraceRow, read_trace
from tests.run.conftest import only_run_dir, run_locust, write_scenario
from tests.run.test_distributed import finish, start_cluster

TRACE = Path(__file__).with_name("traces") / "mooncake_40.jsonl"
ROWS = read_trace(str(TRACE), "mooncake")
SHORT = {"name": "short", "kind": "short-baseline", "prompt_tokens": 40}
# the simulator caches whole blocks of this many tokens
SIM_BLOCK_TOKENS = 16
# a row's blocks are in the engine's cache once the earlier row that holds them was prefilled: rows sent
# at least this long after it (the simulator prefills a 1,500-token prompt in milliseconds)
PREFILLED_AFTER_S = 0.2


def trace_scenario(url: str, conversations: tuple[dict[str, Any], ...] = (), **load: Any) -> dict[str, Any]:
    """The fixture trace as a target (with no load section unless `load` is given), and `conversations`."""
    replay = {"name": "replay", "kind": "trace", "format": "mooncake", "path": str(TRACE)}
    data: dict[str, Any] = {
        "name": "trace",
        "backends": [{"name": "sim", "engine": "sim", "url": url}],
        "models": [{"name": "grill-sim", "max_tokens": 8}],
        "conversations": [replay, *conversations],
        "targets": [{"backend": "sim", "conversation": c["name"]} for c in (replay, *conversations)],
    }
    if load:
        data["load"] = load
    return data


def common_blocks(row: TraceRow, earlier: TraceRow) -> int:
    """Leading hash ids the two rows have in common: the blocks of `row`'s prompt `earlier` began with."""
    common = 0
    for mine, theirs in zip(row.hash_ids or (), earlier.hash_ids or (), strict=False):
        if mine != theirs:
            break
        common += 1
    return common


def cached_blocks_bounds(rows: tuple[TraceRow, ...]) -> list[tuple[int, int]]:
    """Per row, the whole blocks of its prompt the engine must have cached (held whole by a row sent well
    before it: an earlier row's last block is cut) and the most it can have (begun by any earlier row)."""
    return [
        (
            max(
                (
                    min(common_blocks(row, e), e.input_tokens // BLOCK_TOKENS)
                    for e in rows
                    if e.at_s <= row.at_s - PREFILLED_AFTER_S
                ),
                default=0,
            ),
            max((common_blocks(row, e) for e in rows[:index]), default=0),
        )
        for index, row in enumerate(rows)
    ]


def assert_replayed(records: pd.DataFrame) -> None:
    """Every row sent once, ok, at its size; its output the row's length; its shared blocks cached."""
    assert (records["status"] == "ok").all(), records["error"].dropna().unique()
    assert records["record_id"].is_unique
    assert sorted(records["trace_line"]) == [row.line for row in ROWS]
    by_line = records.set_index("trace_line").sort_index()
    assert (by_line["iteration"] == list(range(len(ROWS)))).all()  # a row's send plays that row
    # the engine counts the row's input length: the chat template's tokens are taken off the prompt
    assert list(by_line["prompt_tokens"]) == [row.input_tokens for row in ROWS]
    template_tokens = count_tokens(render_chat([{"role": "user", "content": ""}]))
    assert list(by_line["output_tokens"]) == [row.output_tokens for row in ROWS]
    bounds = cached_blocks_bounds(ROWS)
    held = [low for low, _ in bounds]
    assert held.count(0) >= 3 and held.count(1) >= 3 and held.count(2) >= 3  # the fixture shares blocks
    for line, (low, high) in enumerate(bounds):
        # the chat template's tokens come first: cached in whole simulator blocks, up to the shared ones
        cached = int(by_line["cached_tokens"].iloc[line])
        assert low * BLOCK_TOKENS <= cached < high * BLOCK_TOKENS + template_tokens + SIM_BLOCK_TOKENS, (
            line,
            (low, high),
            cached,
        )
    assert (records["tier_users"] == 0).all() and (records["tier_index"] == 0).all()
    assert records["tier_rate"].unique().tolist() == [pytest.approx(trace_rate(ROWS))]


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimProcess.start(profile="vllm") as process:
        yield process


@pytest.mark.slow
def test_a_mooncake_trace_replays_once_at_its_times_with_its_sizes_and_prefix_sharing(
    sim: SimProcess, tmp_path: Path
) -> None:
    path = write_scenario(tmp_path / "s.yaml", trace_scenario(sim.url))  # no load section
    args = ["--scenario", str(path), "--results-dir", str(tmp_path / "results")]
    done = run_locust(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path / "results")
    records = pd.read_parquet(run_dir / "records.parquet")
    assert_replayed(records)
    sent = records.sort_values("trace_line")
    # each row scheduled at its own time from the replay's start, and sent then
    offsets = (sent["scheduled_wall"] - sent["scheduled_wall"].iloc[0]).to_numpy()
    assert offsets == pytest.approx([row.at_s for row in ROWS], abs=1e-3)
    assert (sent["wall_start"] - sent["scheduled_wall"] - sent["schedule_lag_s"]).abs().max() < 1e-6
    lags = sent["schedule_lag_s"]
    print(f"schedule lag p50 {lags.median() * 1000:.2f} ms, p99 {lags.quantile(0.99) * 1000:.2f} ms")
    assert lags.min() >= 0
    assert lags.median() < 0.020
    # within 20 ms of schedule (p99), or the tier says its load generator was late (a loaded machine):
    # the product flags a tier whose lag p99 (interpolated, as every percentile) passes 10 ms, and only such a tier
    ordered = np.sort(lags.to_numpy())
    p99_s = float(np.percentile(ordered, 99))
    note = str(pd.read_csv(run_dir / "phases.csv")["note"].astype("string").fillna("").iloc[0])
    assert ("LOAD-GENERATOR-BOUND" in note) == (p99_s > 0.010), (p99_s, note)
    assert p99_s < 0.020 or "LOAD-GENERATOR-BOUND" in note
    # the requests still running after the last row's time are cooldown, the ones ended well before not
    ended = sent["wall_start"] + sent["e2e_s"]
    replay_end = sent["scheduled_wall"].iloc[0] + ROWS[-1].at_s
    assert sent.loc[ended > replay_end + 0.01, "cooldown"].all()
    assert not sent.loc[ended < replay_end - 0.5, "cooldown"].any()
    phases = pd.read_csv(run_dir / "phases.csv")
    assert len(phases) == 1
    row = phases.iloc[0]
    assert bool(row["complete"]) and row["tier_users"] == 0
    assert row["tier_rate"] == pytest.approx(trace_rate(ROWS))
    assert row["iterations_target"] == row["iterations_done"] == len(ROWS)


@pytest.mark.slow
def test_two_workers_split_the_rows_and_together_send_the_trace(sim: SimProcess, tmp_path: Path) -> None:
    path = write_scenario(tmp_path / "s.yaml", trace_scenario(sim.url))
    master, workers = start_cluster(tmp_path, path, workers=2)
    code = finish(master, workers)
    assert code == 0, (tmp_path / "master.log").read_text()[-3000:]
    records = pd.read_parquet(only_run_dir(tmp_path / "results") / "records.parquet")
    # the sum is the trace, the rows' blocks shared across workers (one replay key for the phase): some
    # rows' blocks were sent before only by rows of the other worker
    even_rows_alone = cached_blocks_bounds(tuple(row for row in ROWS if row.line % 2 == 0))
    assert sum(low for low, _ in even_rows_alone) < sum(low for low, _ in cached_blocks_bounds(ROWS)[::2])
    assert_replayed(records)
    lines = [sorted(group["trace_line"]) for _, group in records.groupby("worker_id")]
    assert len(lines) == 2
    # row i on dispatcher i mod 2, each at its own time
    assert sorted(lines) == [list(range(0, len(ROWS), 2)), list(range(1, len(ROWS), 2))]


def test_a_trace_target_is_one_tier_beside_the_loads_tiers() -> None:
    """A `load` given applies to the other targets; the trace's tier is its replay, labelled by its mean
    rate, sending until its last row's time."""
    scenario = parse_scenario(
        trace_scenario("http://127.0.0.1:9", (SHORT,), rates=[2, 4], duration_s=5), source="test"
    )
    phases = campaign_phases(scenario, "run", "run.0")
    assert [(p.target.split("/")[-1], p.tier_index, p.tier_rate) for p in phases] == [
        ("replay", 0, trace_rate(ROWS)),
        ("short", 0, 2),
        ("short", 1, 4),
    ]
    replay = phases[0]
    assert replay.tier_users == 0 and replay.duration_s == ROWS[-1].at_s == pytest.approx(3.707)
    assert trace_rate(ROWS) == pytest.approx(len(ROWS) / 3.707)
    closed = parse_scenario(trace_scenario("http://127.0.0.1:9", (SHORT,), tiers=[1, 3]), source="test")
    assert [(p.tier_users, p.tier_rate) for p in campaign_phases(closed, "run")] == [
        (0, trace_rate(ROWS)),
        (1, None),
        (3, None),
    ]


def test_the_dispatchers_shares_of_a_trace_add_up_to_it() -> None:
    dispatchers = ("a", "b", "c")
    shares = [trace_share(ROWS, dispatcher, [(0.0, dispatchers)]) for dispatcher in dispatchers]
    assert [len(share) for share in shares] == [14, 13, 13]
    sends = sorted((send for share in shares for send in share), key=lambda send: send.iteration)
    assert [send.iteration for send in sends] == list(range(len(ROWS)))
    assert [send.at_s for send in sends] == [row.at_s for row in ROWS]
    assert all(send.iteration % 3 == place for place, share in enumerate(shares) for send in share)


def test_validate_shows_a_trace_as_one_replay_and_rate_tiers_by_their_rates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_scenario(
        tmp_path / "s.yaml",
        trace_scenario("http://127.0.0.1:9", (SHORT,), rates=[2, 4], duration_s=5, pause_s=1),
    )
    assert estimate.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "1 targets x 2 rate tiers of 5 s + 1 trace replay = 3 tiers to run" in out
    assert "rate tiers (req/s): 2, 4; poisson arrivals; 5 s of sends each;" in out
    assert "trace replay of sim/grill-sim/replay: 40 rows over 4 s, once, at the trace's own times" in out
    assert "tiers (users)" not in out
    # the trace's 40 rows, and 2 x 5 + 4 x 5 sends of the rate tiers
    assert "requests to send: ~70" in out
    table = [line for line in out.splitlines() if "replay [trace]" in line]
    assert table and table[0].split()[-1] == "40"


def test_a_search_with_a_trace_target_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = trace_scenario("http://127.0.0.1:9", (SHORT,), search={"rate": [1, 8]})
    path = write_scenario(tmp_path / "s.yaml", data)
    scenario = load_scenario(path)
    with pytest.raises(GrillError, match="target 'sim/grill-sim/replay' replays a trace"):
        check_search_runnable(scenario.load.search, resuming=False, targets=scenario.targets)
    check_search_runnable(scenario.load.search, resuming=False, targets=scenario.targets[1:])
    assert estimate.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "load.search: target 'sim/grill-sim/replay' replays a trace" in err


@pytest.mark.slow
def test_locust_refuses_a_search_with_a_trace_target_before_any_request(tmp_path: Path) -> None:
    data = trace_scenario("http://127.0.0.1:9", (SHORT,), search={"rate": [1, 8]})
    path = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(["--scenario", str(path), "--results-dir", str(tmp_path / "results")], tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "replays a trace, which runs at its own times" in done.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())
