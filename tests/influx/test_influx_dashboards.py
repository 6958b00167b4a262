"""Every InfluxQL query of every Grafana board, macros expanded as Grafana does, against a real influxd 1.x.

The dataset is a known campaign turned into line protocol by the sink's own functions and written through
influxd's /write; the numbers each panel returns are checked against the same campaign computed here.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from influx_dataset import (
    AGENT_CONVERSATION,
    AUTOCOMPLETE_CONVERSATION,
    BACKENDS,
    CONVERSATIONS,
    KINDS,
    TIERS,
    WORKERS,
    Campaign,
    make_campaign,
)
from influx_servers import InfluxD

from grill_locust.record import RequestRecord
from grill_locust.sinks.influx import _SeriesClock
from grill_locust.sinks.line_protocol import phase_point, request_point, telemetry_point, tier_point

REPO = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = REPO / "grafana" / "dashboards"
EXPECTED_UIDS = {
    "engine-comparison.json": "grill-engine-comparison",
    "live-run.json": "grill-live-run",
    "gpus-engines.json": "grill-gpus-engines",
}
INTERVAL_S = 10
CAMPAIGN_START_S = 1_700_000_000.0  # fixed: buckets and expectations do not depend on the clock


@pytest.fixture(scope="module")
def campaign() -> Campaign:
    return make_campaign(start_s=CAMPAIGN_START_S)


@pytest.fixture(scope="module")
def loaded(influxd: InfluxD, campaign: Campaign) -> InfluxD:
    lines: list[str] = []
    for worker, records in campaign.records.items():
        clock = _SeriesClock()  # one per sink, as each worker has its own
        for record in records:
            point = request_point(RequestRecord(**record), worker)
            assert point is not None
            lines.append(clock.place(point).line())
    for event, phase, at_s in campaign.phases:
        point = phase_point(event, phase, "master", at_s)
        assert point is not None
        lines.append(point.line())
    for row in campaign.tiers:
        point = tier_point(row, "master")
        assert point is not None
        lines.append(point.line())
    for sample in campaign.telemetry:
        point = telemetry_point(sample, "run-a")
        assert point is not None
        lines.append(point.line())
    for start in range(0, len(lines), 2000):
        influxd.write_lines(lines[start : start + 2000])
    return influxd


def load_dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in sorted(DASHBOARD_DIR.glob("*.json"))}


def regex_value(values: list[str]) -> str:
    """Grafana's InfluxDB interpolation of a multi-value variable inside /^$var$/."""
    escaped = [re.escape(value).replace("/", r"\/") for value in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def expand(query: str, campaign: Campaign, selection: dict[str, list[str]]) -> str:
    time_filter = (
        f"time >= {int((campaign.start_s - 60) * 1000)}ms and time <= {int((campaign.end_s + 60) * 1000)}ms"
    )
    text = query.replace("$timeFilter", time_filter)
    text = text.replace("$__interval_ms", str(INTERVAL_S * 1000)).replace("$__interval", f"{INTERVAL_S}s")
    for name, values in selection.items():
        text = text.replace(f"${name}", regex_value(values))
    assert not re.search(r"\$\w", text), f"unexpanded macro in: {text}"
    return text


ALL = {
    "run_id": ["run-a"],
    "backend": list(BACKENDS),
    "kind": list(KINDS),
    "conversation": list(CONVERSATIONS),
    "host": ["gpu-node-1"],
}


def all_queries(board: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, query) for every panel target, template variable and annotation of a board."""
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["query"]
    for variable in board["templating"]["list"]:
        yield f"variable {variable['name']}", variable["query"]
    for annotation in board["annotations"]["list"]:
        yield f"annotation {annotation['name']}", annotation["target"]["query"]


def panel_query(board: dict[str, Any], title_start: str, ref_id: str = "A") -> str:
    for panel in board["panels"]:
        if panel["title"].startswith(title_start):
            return next(t["query"] for t in panel["targets"] if t["refId"] == ref_id)
    raise AssertionError(f"no panel titled {title_start!r}")


def by_tags(series: list[dict[str, Any]], column: str) -> dict[tuple[str, ...], list[tuple[int, Any]]]:
    """{tag values in key order: [(time_ms, value of column)]}."""
    result = {}
    for one in series:
        tags = one.get("tags", {})
        index = one["columns"].index(column)
        result[tuple(tags[key] for key in sorted(tags))] = [(row[0], row[index]) for row in one["values"]]
    return result


def ok_records(campaign: Campaign, **labels: Any) -> list[dict[str, Any]]:
    return [
        record
        for record in campaign.all_records()
        if record["status"] == "ok" and all(record[key] == value for key, value in labels.items())
    ]


def bucket_ms(wall_s: float) -> int:
    """InfluxQL's GROUP BY time(10s): buckets aligned to the epoch."""
    ms = round(wall_s * 1000)
    return ms - ms % (INTERVAL_S * 1000)


def influx_percentile(values: list[float], q: float) -> float:
    """InfluxQL percentile(): nearest rank."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, int(math.floor(len(ordered) * q / 100.0 + 0.5)) - 1))
    return ordered[index]


# ---------------------------------------------------------------- the files themselves


def test_committed_dashboards_are_what_the_builder_writes() -> None:
    spec = importlib.util.spec_from_file_location(
        "build_dashboards", REPO / "grafana" / "build_dashboards.py"
    )
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    for name in builder.DASHBOARDS:
        assert (DASHBOARD_DIR / name).read_text() == builder.render(name), (
            f"run grafana/build_dashboards.py ({name})"
        )


def test_boards_have_stable_uids_and_the_shared_variables() -> None:
    boards = load_dashboards()
    assert {name: board["uid"] for name, board in boards.items()} == EXPECTED_UIDS
    for name, board in boards.items():
        variables = {variable["name"] for variable in board["templating"]["list"]}
        expected = (
            {"run_id", "backend", "host"}
            if name == "gpus-engines.json"
            else {"run_id", "backend", "kind", "conversation"}
        )
        assert variables == expected, name
        for _, query in all_queries(board):
            assert query.lstrip().upper().startswith(("SELECT", "SHOW")), "InfluxQL only"
        ids = [panel["id"] for panel in board["panels"]]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"


# ---------------------------------------------------------------- every query runs


@pytest.mark.parametrize("name", sorted(EXPECTED_UIDS))
def test_every_query_runs_and_answers(loaded: InfluxD, campaign: Campaign, name: str) -> None:
    board = load_dashboards()[name]
    selections = [
        ALL,
        {**ALL, "backend": ["sglang"], "conversation": ["shared-prefix"]},
        {**ALL, "kind": ["multi-turn"], "conversation": ["multi-turn-session"]},
        {**ALL, "backend": ["vllm"], "kind": ["agentic"], "conversation": [AGENT_CONVERSATION]},
    ]
    for selection in selections:
        for where, query in all_queries(board):
            series = loaded.query(expand(query, campaign, selection))
            # the agent panels answer for agent sessions only: other conversations have none; likewise
            # the autocomplete panels
            if where.startswith("panel 'Agent:") and AGENT_CONVERSATION not in selection["conversation"]:
                assert not series, f"{name} {where}: data for {selection}"
            elif (
                where.startswith("panel 'Autocomplete:")
                and AUTOCOMPLETE_CONVERSATION not in selection["conversation"]
            ):
                assert not series, f"{name} {where}: data for {selection}"
            elif where.startswith("panel 'Open loop:"):  # a campaign of user tiers: no rate to plot
                assert not series, f"{name} {where}: data for {selection}"
            else:
                assert series, f"{name} {where}: no data for {selection}"


def test_variables_list_the_campaign_labels(loaded: InfluxD, campaign: Campaign) -> None:
    board = load_dashboards()["engine-comparison.json"]
    expected = {
        "run_id": ["run-a"],
        "backend": sorted(BACKENDS),
        "kind": sorted(KINDS),
        "conversation": sorted(CONVERSATIONS),
    }
    for variable in board["templating"]["list"]:
        series = loaded.query(expand(variable["query"], campaign, ALL))
        values = sorted(row[1] for one in series for row in one["values"])
        assert values == expected[variable["name"]]


# ---------------------------------------------------------------- right numbers


@pytest.mark.parametrize(
    ("title", "field"),
    [
        ("TTFT p50", "ttft_s"),
        ("TPOT p50", "tpot_s"),
        ("Tokens/s per request p50", "tokens_per_s"),
        ("E2E p50", "e2e_s"),
    ],
)
def test_engine_comparison_p50_per_backend_and_tier(
    loaded: InfluxD, campaign: Campaign, title: str, field: str
) -> None:
    board = load_dashboards()["engine-comparison.json"]
    query = panel_query(board, title)
    column = query.split(' AS "', 1)[1].split('"', 1)[0]
    for conversation in CONVERSATIONS:  # the row repeats per conversation: one conversation per panel
        series = loaded.query(expand(query, campaign, {**ALL, "conversation": [conversation]}))
        got = {key: values[0][1] for key, values in by_tags(series, column).items()}
        expected = {  # one series per run, backend and model (tags in key order), never pooled
            (backend, "m", "run-a", str(users)): statistics.median(
                r[field]
                for r in ok_records(campaign, conversation=conversation, backend=backend, tier_users=users)
            )
            for backend in BACKENDS
            for users in TIERS
        }
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=1e-9), (conversation, key)


def test_engine_comparison_tier_panels_read_the_master_summary(loaded: InfluxD, campaign: Campaign) -> None:
    board = load_dashboards()["engine-comparison.json"]
    query = panel_query(board, "Success rate")
    series = loaded.query(expand(query, campaign, {**ALL, "conversation": ["shared-prefix"]}))
    got = {key: values[0][1] for key, values in by_tags(series, "success_rate").items()}
    expected = {
        (row["backend"], row["model"], row["run_id"], str(row["tier_users"])): row["success_rate"]
        for row in campaign.tiers
        if row["conversation"] == "shared-prefix"
    }
    assert got == pytest.approx(expected)


def test_live_requests_per_second_per_interval(loaded: InfluxD, campaign: Campaign) -> None:
    board = load_dashboards()["live-run.json"]
    series = loaded.query(expand(panel_query(board, "Requests/s"), campaign, ALL))
    got = by_tags(series, "requests_per_s")
    for backend in BACKENDS:
        counts: dict[int, int] = defaultdict(int)
        for record in campaign.all_records():
            if record["backend"] == backend:
                counts[bucket_ms(record["wall_start"])] += 1
        answered = {time_ms: value for time_ms, value in got[(backend,)] if value}
        assert answered == {time_ms: count / INTERVAL_S for time_ms, count in counts.items()}


def test_the_kind_variable_narrows_conversations_and_requests(loaded: InfluxD, campaign: Campaign) -> None:
    board = load_dashboards()["live-run.json"]
    conversations = next(v for v in board["templating"]["list"] if v["name"] == "conversation")
    series = loaded.query(expand(conversations["query"], campaign, {**ALL, "kind": ["multi-turn"]}))
    assert [row[1] for one in series for row in one["values"]] == ["multi-turn-session"]
    query = panel_query(board, "Requests/s")
    series = loaded.query(expand(query, campaign, {**ALL, "kind": ["shared-prefix"]}))
    for backend in BACKENDS:
        answered = sum(value for _, value in by_tags(series, "requests_per_s")[(backend,)] if value)
        of_kind = [
            r for r in campaign.all_records() if r["backend"] == backend and r["kind"] == "shared-prefix"
        ]
        assert of_kind and answered * INTERVAL_S == pytest.approx(len(of_kind))  # the other kind left out


def test_live_errors_by_kind(loaded: InfluxD, campaign: Campaign) -> None:
    board = load_dashboards()["live-run.json"]
    series = loaded.query(expand(panel_query(board, "Errors by kind"), campaign, ALL))
    got = {key: sum(value or 0 for _, value in values) for key, values in by_tags(series, "errors").items()}
    expected: dict[tuple[str, str], int] = defaultdict(int)
    for record in campaign.all_records():
        if record["status"] not in ("ok", "abandoned"):  # typing's cancels are no failures
            expected[(record["backend"], record["status"])] += 1
    assert got == expected
    assert {status for _, status in got} == {"http_500", "timeout"}


def test_live_ttft_percentiles_over_time(loaded: InfluxD, campaign: Campaign) -> None:
    board = load_dashboards()["live-run.json"]
    series = loaded.query(expand(panel_query(board, "TTFT percentiles"), campaign, ALL))
    for column, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        got = by_tags(series, column)
        for backend in BACKENDS:
            buckets: dict[int, list[float]] = defaultdict(list)
            for record in ok_records(campaign, backend=backend):
                buckets[bucket_ms(record["wall_start"])].append(record["ttft_s"])
            answered = {time_ms: value for time_ms, value in got[(backend,)] if value is not None}
            assert answered == {time_ms: influx_percentile(values, q) for time_ms, values in buckets.items()}


def test_live_active_users(loaded: InfluxD, campaign: Campaign) -> None:
    board = load_dashboards()["live-run.json"]
    series = loaded.query(expand(panel_query(board, "Active users", "A"), campaign, ALL))
    got = by_tags(series, "users_seen")
    for backend in BACKENDS:
        users: dict[int, set[tuple[str, int]]] = defaultdict(set)
        for worker in WORKERS:
            for record in campaign.records[worker]:
                if record["backend"] == backend:
                    users[bucket_ms(record["wall_start"])].add((worker, record["user_id"]))
        answered = {time_ms: value for time_ms, value in got[(backend,)] if value is not None}
        assert answered == {time_ms: len(seen) for time_ms, seen in users.items()}
    tier = loaded.query(expand(panel_query(board, "Active users", "B"), campaign, ALL))
    levels = {value for one in tier for _, value in one["values"] if value is not None}
    assert levels == {0.0, *(float(users) for users in TIERS)}


def test_tier_annotations(loaded: InfluxD, campaign: Campaign) -> None:
    board = load_dashboards()["live-run.json"]
    annotation = board["annotations"]["list"][0]
    series = loaded.query(expand(annotation["target"]["query"], campaign, ALL))
    rows = [dict(zip(one["columns"], row, strict=True)) for one in series for row in one["values"]]
    assert len(rows) == len(campaign.phases)
    for column in [annotation["textColumn"], *annotation["tagsColumn"].split(",")]:
        assert all(row[column] not in (None, "") for row in rows), column
    assert sorted(row["time"] for row in rows) == sorted(round(at_s * 1000) for _, _, at_s in campaign.phases)


def test_gpu_and_engine_panels(loaded: InfluxD, campaign: Campaign) -> None:
    board = load_dashboards()["gpus-engines.json"]
    checks = [
        ("GPU utilisation", "gpu_util_pct", {("0", "gpu-node-1"): 50.0, ("1", "gpu-node-1"): 60.0}),
        ("VRAM used", "mem_used_bytes", {("0", "gpu-node-1"): 40e9, ("1", "gpu-node-1"): 41e9}),
        ("Power", "power_w", {("0", "gpu-node-1"): 300.0, ("1", "gpu-node-1"): 301.0}),
        ("KV-cache use", "kv_cache_usage", {("vllm",): 0.25, ("sglang",): 0.5}),
        ("Prefix-cache hit rate", "prefix_cache_hit_rate", {("vllm",): 0.8, ("sglang",): 0.6}),
        ("Queue", "requests_waiting", {("vllm",): 1.0, ("sglang",): 3.0}),
    ]
    for title, column, expected in checks:
        got = by_tags(loaded.query(expand(panel_query(board, title), campaign, ALL)), column)
        assert {key: {value for _, value in values if value is not None} for key, values in got.items()} == {
            key: {value} for key, value in expected.items()
        }, title
    got = by_tags(
        loaded.query(expand(panel_query(board, "Engine output tokens/s"), campaign, ALL)), "tokens_per_s"
    )
    # the last bucket holds one sample (5 s after the previous bucket's last) over a 10 s interval: leave it out
    rates = {
        key: {round(value, 6) for _, value in values[:-1] if value is not None} for key, values in got.items()
    }
    assert rates == {("vllm",): {100.0}, ("sglang",): {50.0}}


def agent_panel(loaded: InfluxD, campaign: Campaign, title: str, column: str) -> dict[tuple[str, ...], Any]:
    board = load_dashboards()["engine-comparison.json"]
    selection = {**ALL, "conversation": [AGENT_CONVERSATION]}
    series = loaded.query(expand(panel_query(board, title), campaign, selection))
    return {key: values[0][1] for key, values in by_tags(series, column).items()}


def agent_steps(campaign: Campaign) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """Ok agent requests by the panels' tags in key order: (backend, model, run_id, step, tier_users)."""
    steps: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for record in ok_records(campaign, conversation=AGENT_CONVERSATION):
        key = (record["backend"], "m", "run-a", str(record["turn"]), str(record["tier_users"]))
        steps[key].append(record)
    return steps


def test_agent_ttft_against_context_per_step(loaded: InfluxD, campaign: Campaign) -> None:
    steps = agent_steps(campaign)
    assert len(steps) == len(BACKENDS) * len(TIERS) * 3  # every step of every tier of both backends
    columns = {
        "context_tokens_p50": lambda rs: statistics.median(r["prompt_tokens"] for r in rs),
        "ttft_p50_s": lambda rs: statistics.median(r["ttft_s"] for r in rs),
        "ttft_p90_s": lambda rs: influx_percentile([r["ttft_s"] for r in rs], 90),
    }
    for column, expected in columns.items():
        got = agent_panel(loaded, campaign, "Agent: TTFT vs context", column)
        assert got == pytest.approx({key: expected(records) for key, records in steps.items()}), column


def test_agent_cached_ratio_per_step(loaded: InfluxD, campaign: Campaign) -> None:
    steps = agent_steps(campaign)
    ratios = {key: [r["cached_tokens"] / r["prompt_tokens"] for r in rs] for key, rs in steps.items()}
    got = agent_panel(loaded, campaign, "Agent: cached ratio", "cached_ratio_mean")
    assert got == pytest.approx({key: statistics.mean(values) for key, values in ratios.items()})
    got = agent_panel(loaded, campaign, "Agent: cached ratio", "cached_ratio_p10")
    # InfluxQL's nearest rank has no p10 of fewer than 5 values (the rank would be 0): null, not a guess
    assert {key for key, value in got.items() if value is None} == {
        k for k, v in ratios.items() if len(v) < 5
    }
    got = {key: value for key, value in got.items() if value is not None}
    assert got and got == pytest.approx(
        {key: influx_percentile(values, 10) for key, values in ratios.items() if len(values) >= 5}
    )
    assert {value for key, value in got.items() if key[3] == "0"} == {0.0}  # the first step has no cache


def test_agent_session_wait_per_tier_is_the_masters_summary_of_its_sessions(
    loaded: InfluxD, campaign: Campaign
) -> None:
    sessions: dict[tuple[str, ...], dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for record in campaign.all_records():
        if record["conversation"] == AGENT_CONVERSATION:
            key = (record["backend"], "m", "run-a", str(record["tier_users"]))
            sessions[key][record["conversation_id"]].append(record)
    waits = {  # Σ E2E of each session whose every step is ok; a failed session is not in the percentiles
        key: [
            sum(r["e2e_s"] for r in steps)
            for steps in by_id.values()
            if all(r["status"] == "ok" for r in steps)
        ]
        for key, by_id in sessions.items()
    }
    assert any(len(w) < len(sessions[key]) for key, w in waits.items())  # some sessions failed
    for column, q in (("session_wait_p50_s", 50), ("session_wait_p90_s", 90)):
        got = agent_panel(loaded, campaign, "Agent: session wait", column)
        assert got == pytest.approx({key: float(np.percentile(w, q)) for key, w in waits.items()}), column


def test_live_ttft_p90_per_conversation_keeps_a_mix_s_personas_apart(
    loaded: InfluxD, campaign: Campaign
) -> None:
    board = load_dashboards()["live-run.json"]
    query = panel_query(board, "TTFT p90 per conversation (a mix's personas apart)")
    got = by_tags(loaded.query(expand(query, campaign, ALL)), "ttft_p90_s")
    assert len(CONVERSATIONS) > 1  # several conversations on one backend, as a mix's personas are
    expected_series = {(backend, conversation) for backend in BACKENDS for conversation in CONVERSATIONS}
    assert set(got) == expected_series
    for backend, conversation in expected_series:
        buckets: dict[int, list[float]] = defaultdict(list)
        for record in ok_records(campaign, backend=backend, conversation=conversation):
            buckets[bucket_ms(record["wall_start"])].append(record["ttft_s"])
        answered = {time_ms: value for time_ms, value in got[(backend, conversation)] if value is not None}
        assert answered == {time_ms: influx_percentile(values, 90) for time_ms, values in buckets.items()}


def autocomplete_panel(
    loaded: InfluxD, campaign: Campaign, title: str, column: str
) -> dict[tuple[str, ...], Any]:
    board = load_dashboards()["engine-comparison.json"]
    selection = {**ALL, "conversation": [AUTOCOMPLETE_CONVERSATION]}
    series = loaded.query(expand(panel_query(board, title), campaign, selection))
    return {key: values[0][1] for key, values in by_tags(series, column).items()}


def test_autocomplete_abandoned_shown_and_wasted_tokens_per_tier(loaded: InfluxD, campaign: Campaign) -> None:
    rows = [row for row in campaign.tiers if row["conversation"] == AUTOCOMPLETE_CONVERSATION]
    assert len(rows) == len(BACKENDS) * len(TIERS)
    for title, column in (
        ("Autocomplete: abandoned", "abandoned_pct"),
        ("Autocomplete: abandoned", "shown_in_budget_pct"),
        ("Autocomplete: wasted", "abandoned_output_tokens"),
    ):
        got = autocomplete_panel(loaded, campaign, title, column)
        expected = {}
        for row in rows:
            mine = [
                r
                for r in campaign.all_records()
                if r["conversation"] == AUTOCOMPLETE_CONVERSATION
                and r["backend"] == row["backend"]
                and r["tier_users"] == row["tier_users"]
            ]
            abandoned = [r for r in mine if r["status"] == "abandoned"]
            by_hand = {
                "abandoned_pct": 100 * len(abandoned) / len(mine),
                "shown_in_budget_pct": 100 * sum(r["shown_in_budget"] is True for r in mine) / len(mine),
                "abandoned_output_tokens": sum(r["output_tokens"] for r in abandoned),
            }
            expected[(row["backend"], "m", "run-a", str(row["tier_users"]))] = by_hand[column]
        assert got == pytest.approx(expected), column
        assert any(value > 0 for value in got.values()), column


def test_autocomplete_ttft_p90_is_of_completions_only(loaded: InfluxD, campaign: Campaign) -> None:
    got = autocomplete_panel(loaded, campaign, "Autocomplete: TTFT p90", "ttft_p90_s")
    expected = {
        (backend, "m", "run-a", str(users)): influx_percentile(
            [
                r["ttft_s"]
                for r in ok_records(
                    campaign, conversation=AUTOCOMPLETE_CONVERSATION, backend=backend, tier_users=users
                )
            ],
            90,
        )
        for backend in BACKENDS
        for users in TIERS
    }
    assert got == pytest.approx(expected)


def test_shown_in_budget_is_a_field_of_completed_autocomplete_requests(
    loaded: InfluxD, campaign: Campaign
) -> None:
    query = (
        'SELECT mean("shown_in_budget") AS "shown" FROM "grill_request" WHERE "kind" = \'autocomplete\' '
        "AND \"backend\" = 'vllm' AND \"status\" = 'ok' AND $timeFilter"
    )
    (series,) = loaded.query(expand(query, campaign, {}))
    completed = ok_records(campaign, conversation=AUTOCOMPLETE_CONVERSATION, backend="vllm")
    assert series["values"][0][1] == pytest.approx(
        sum(r["shown_in_budget"] for r in completed) / len(completed)
    )
