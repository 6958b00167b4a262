"""Writes grafana/dashboards/*.json: the three grill-locust boards, every query in InfluxQL.

The JSON files are committed (Grafana provisions them as they are); this script is the one place they are
made, so the three boards share their variables and filters. They are built with Grafana's own
grafana-foundation-sdk (pinned in pyproject's [test] extra to the Grafana of docker-compose.yml), so their JSON
follows Grafana's dashboard schema; tests/deploy/test_grafana_boards.py names the few keys outside it. Run
`python grafana/build_dashboards.py` after changing it; tests/influx check that the committed files match and
run every query against influxd.
Measurements and fields: grill_locust/sinks/influx.py and grill_locust/telemetry/samples.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard as dashboard_builder
from grafana_foundation_sdk.builders import timeseries as timeseries_builder
from grafana_foundation_sdk.builders import xychart as xychart_builder
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common, xychart
from grafana_foundation_sdk.models import dashboard as model

DASHBOARD_DIR = Path(__file__).resolve().parent / "dashboards"
DATASOURCE = model.DataSourceRef(type_val="influxdb", uid="grill-influxdb")

RUN_FILTER = '"run_id" =~ /^$run_id$/'
# one comparison series per run, backend and model (a gateway may serve two models)
SERIES_TAGS = ("run_id", "backend", "model")
SERIES_GROUP = ", ".join(f'"{tag}"' for tag in SERIES_TAGS)
KIND_FILTER = '"kind" =~ /^$kind$/'
REQUEST_FILTER = (
    f'{RUN_FILTER} AND "backend" =~ /^$backend$/ AND {KIND_FILTER} AND "conversation" =~ /^$conversation$/ '
    "AND $timeFilter"
)
OK_REQUEST_FILTER = f"\"status\" = 'ok' AND {REQUEST_FILTER}"
# agent sessions' steps carry a `step` tag (grill_locust/sinks/line_protocol.py)
OK_AGENT_STEP_FILTER = f"\"kind\" = 'agentic' AND {OK_REQUEST_FILTER}"
TIER_FILTER = REQUEST_FILTER
# autocomplete: completions are the ok requests; its tier shares come from the master's summary
OK_AUTOCOMPLETE_FILTER = f"\"kind\" = 'autocomplete' AND {OK_REQUEST_FILTER}"
AUTOCOMPLETE_TIER_FILTER = f"\"kind\" = 'autocomplete' AND {TIER_FILTER}"
# a request the developer's typing cancelled is neither a success nor a failure
FAILED_REQUEST_FILTER = f"\"status\" != 'ok' AND \"status\" != 'abandoned' AND {REQUEST_FILTER}"
ENGINE_FILTER = '"backend" =~ /^$backend$/ AND $timeFilter'
GPU_FILTER = '"host" =~ /^$host$/ AND $timeFilter'


def variable(name: str, query: str, label: str) -> dashboard_builder.QueryVariable:
    """A multi-value query variable with "All", answered by SHOW TAG VALUES."""
    return (
        dashboard_builder.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .current(model.VariableOption(selected=True, text=["All"], value=["$__all"]))
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .hide(model.VariableHide.DONT_HIDE)
        .options([])
    )


def run_variable() -> dashboard_builder.QueryVariable:
    return variable("run_id", 'SHOW TAG VALUES FROM "grill_request" WITH KEY = "run_id"', "run")


def backend_variable(measurement: str = "grill_request") -> dashboard_builder.QueryVariable:
    query = f'SHOW TAG VALUES FROM "{measurement}" WITH KEY = "backend"'
    if measurement == "grill_request":
        query += f" WHERE {RUN_FILTER}"
    return variable("backend", query, "backend")


def kind_variable() -> dashboard_builder.QueryVariable:
    return variable(
        "kind", f'SHOW TAG VALUES FROM "grill_request" WITH KEY = "kind" WHERE {RUN_FILTER}', "workload kind"
    )


def conversation_variable() -> dashboard_builder.QueryVariable:
    """The conversations of the selected runs and workload kinds."""
    return variable(
        "conversation",
        f'SHOW TAG VALUES FROM "grill_request" WITH KEY = "conversation" WHERE {RUN_FILTER} AND {KIND_FILTER}',
        "conversation",
    )


def request_variables() -> list[dashboard_builder.QueryVariable]:
    """The variables of the boards that read grill_request and grill_tier."""
    return [run_variable(), backend_variable(), kind_variable(), conversation_variable()]


class InfluxQLQuery(variants.Dataquery, Builder[variants.Dataquery]):
    """A raw InfluxQL target as Grafana's InfluxDB datasource reads it: the SDK has no InfluxDB query type,
    so this is one made the way its own are (a `Dataquery` with `to_json`, built by itself)."""

    def __init__(
        self, query: str, ref_id: str = "A", alias: str = "", result_format: str = "time_series"
    ) -> None:
        self.query = query
        self.ref_id = ref_id
        self.alias = alias
        self.result_format = result_format

    def build(self) -> InfluxQLQuery:
        return self

    def to_json(self) -> dict[str, object]:
        return {
            "refId": self.ref_id,
            "datasource": DATASOURCE,
            "rawQuery": True,
            "query": self.query,
            "resultFormat": self.result_format,
            "alias": self.alias,
        }


def grid(x: int, y: int, w: int = 12, h: int = 8) -> model.GridPos:
    return model.GridPos(x=x, y=y, w=w, h=h)


def timeseries(
    panel_id: int,
    title: str,
    targets: list[InfluxQLQuery],
    position: model.GridPos,
    unit: str,
    description: str,
    draw_style: common.GraphDrawStyle = common.GraphDrawStyle.LINE,
) -> timeseries_builder.Panel:
    return (
        timeseries_builder.Panel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .grid_pos(position)
        .targets(list(targets))
        .unit(unit)
        .draw_style(draw_style)
        .span_nulls(True)
        .show_points(common.VisibilityMode.AUTO)
        .line_width(1)
        .overrides([])
        .legend(
            common_builder.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(
            common_builder.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )


def versus_users(
    panel_id: int, title: str, query: str, position: model.GridPos, unit: str, description: str
) -> xychart_builder.Panel:
    """A metric against tier users, one series per run, backend and model (the query groups by those
    and tier_users): runs and models are never pooled, whatever the variables select. The seed's
    "metric vs concurrent users" lines."""
    return xy_chart(panel_id, title, query, position, unit, description, "tier_users", SERIES_TAGS)


class XYChartOptions(xychart.Options):
    """The XY chart's options with its x field also written the way Grafana 11's XY chart reads it
    (`mapping` and `series[].x.matcher`), which the SDK's model of the panel (`dims`, `seriesMapping`)
    does not hold; tests/influx checks every other key against the SDK's models."""

    def to_json(self) -> dict[str, object]:
        x_matcher = {"id": "byName", "options": self.dims.x}
        return {"mapping": "auto", **super().to_json(), "series": [{"x": {"matcher": x_matcher}}]}


class XYChartPanel(xychart_builder.Panel):
    """The SDK's XY chart builder, its options written as `XYChartOptions`."""

    def build(self) -> model.Panel:
        panel = super().build()
        if isinstance(panel.options, xychart.Options):
            options = panel.options
            panel.options = XYChartOptions(dims=options.dims, legend=options.legend, tooltip=options.tooltip)
        return panel


def xy_chart(
    panel_id: int,
    title: str,
    query: str,
    position: model.GridPos,
    unit: str,
    description: str,
    x_field: str,
    line_tags: tuple[str, ...],
) -> xychart_builder.Panel:
    """Lines of a metric against `x_field` (a column of the query: a field, or a tag it groups by),
    one line per value of `line_tags` (tags the query groups by).

    The table result (Time, the tags, the values) is turned into one frame per line with x as a number,
    sorted by x, so the XY chart draws lines.
    """
    return (
        XYChartPanel()
        .id(panel_id)
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .grid_pos(position)
        .targets([InfluxQLQuery(query, result_format="table")])
        .transformations(
            [
                transformation("organize", {"excludeByName": {"Time": True}}),
                transformation(
                    "convertFieldType",
                    {"conversions": [{"targetField": x_field, "destinationType": "number"}]},
                ),
                transformation("partitionByValues", {"fields": list(line_tags), "keepFields": False}),
                transformation("sortBy", {"sort": [{"field": x_field, "desc": False}]}),
            ]
        )
        .unit(unit)
        .show(xychart.ScatterShow.POINTS_AND_LINES)
        .line_width(2)
        .point_size(common_builder.ScaleDimensionConfig().fixed(6))
        .override_by_name(x_field, [model.DynamicConfigValue(id_val="unit", value="none")])
        .dims(xychart_builder.XYDimensionConfig().x(x_field))
        .legend(
            common_builder.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_builder.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.NONE)
        )
    )


def transformation(transformer: str, options: dict[str, object]) -> model.DataTransformerConfig:
    return model.DataTransformerConfig(id_val=transformer, options=options)


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: Sequence[dashboard_builder.QueryVariable],
    panels: Sequence[Builder[model.Panel] | dashboard_builder.Row],
    time_from: str,
    refresh: str,
) -> model.Dashboard:
    board = (
        dashboard_builder.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["grill-locust"])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .version(1)
        .time(time_from, "now")
        .refresh(refresh)
        .timezone("")
        .variables(list(variables))
        .annotation(PhaseAnnotation())
        .link(
            dashboard_builder.DashboardLink("grill-locust")
            .type(model.DashboardLinkType.DASHBOARDS)
            .tags(["grill-locust"])
            .as_dropdown(False)
        )
    )
    for panel in panels:
        if isinstance(panel, dashboard_builder.Row):
            board.with_row(panel)
        else:
            board.with_panel(panel)
    return board.build()


class PhaseAnnotation(model.AnnotationQuery, Builder[model.AnnotationQuery]):
    """Tier starts and ends, from grill_phase (written by the master). An InfluxDB annotation takes its
    query and its columns beside the SDK's fields, which hold only Grafana's built-in annotation target."""

    QUERY = f'SELECT "users", "event", "target", "tier_users" FROM "grill_phase" WHERE {RUN_FILTER} AND $timeFilter'

    def __init__(self) -> None:
        super().__init__(
            name="Tiers", datasource=DATASOURCE, enable=True, icon_color="rgba(255, 176, 0, 0.8)"
        )

    def build(self) -> PhaseAnnotation:
        return self

    def to_json(self) -> dict[str, object]:
        return {
            **super().to_json(),
            "query": self.QUERY,
            "target": {"refId": "Anno", "query": self.QUERY, "rawQuery": True, "resultFormat": "table"},
            "textColumn": "target",
            "tagsColumn": "event,tier_users",
            "titleColumn": "",
        }


# ---------------------------------------------------------------- (a) Engine comparison

COMPARISON_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("TTFT p50", 'median("ttft_s") AS "ttft_p50_s"', "s", "Median time to first output token, ok requests"),
    ("TPOT p50", 'median("tpot_s") AS "tpot_p50_s"', "s", "Median time per output token after the first"),
    (
        "Tokens/s per request p50",
        'median("tokens_per_s") AS "tokens_per_s_p50"',
        "none",
        "Median of output_tokens / E2E per request",
    ),
    ("E2E p50", 'median("e2e_s") AS "e2e_p50_s"', "s", "Median end-to-end latency, ok requests"),
)
TIER_METRICS: tuple[tuple[str, str, str, str], ...] = (
    (
        "Throughput (output tokens/s, whole tier)",
        'last("output_tokens_per_s") AS "output_tokens_per_s"',
        "none",
        "Sum of output tokens / tier span, from the master's tier summary (grill_tier)",
    ),
    (
        "Success rate",
        'last("success_rate") AS "success_rate"',
        "percentunit",
        "ok requests / all requests of the tier, from grill_tier",
    ),
)


def engine_comparison() -> model.Dashboard:
    panels: list[Builder[model.Panel] | dashboard_builder.Row] = [
        dashboard_builder.Row("Conversation $conversation")
        .id(1)
        .repeat("conversation")
        .collapsed(False)
        .grid_pos(grid(0, 0, 24, 1))
    ]
    panel_id = 2
    for index, (title, select, unit, description) in enumerate(COMPARISON_METRICS):
        query = f'SELECT {select} FROM "grill_request" WHERE {OK_REQUEST_FILTER} GROUP BY {SERIES_GROUP}, "tier_users"'
        position = grid((index % 3) * 8, 1 + (index // 3) * 8, 8, 8)
        panels.append(
            versus_users(panel_id, f"{title} vs users — $conversation", query, position, unit, description)
        )
        panel_id += 1
    for offset, (title, select, unit, description) in enumerate(TIER_METRICS, start=len(COMPARISON_METRICS)):
        query = f'SELECT {select} FROM "grill_tier" WHERE {TIER_FILTER} GROUP BY {SERIES_GROUP}, "tier_users"'
        position = grid((offset % 3) * 8, 1 + (offset // 3) * 8, 8, 8)
        panels.append(versus_users(panel_id, f"{title} — $conversation", query, position, unit, description))
        panel_id += 1
    agent_y = 1 + 8 * math.ceil((len(COMPARISON_METRICS) + len(TIER_METRICS)) / 3)
    panels += agent_panels(panel_id, agent_y)
    panels += autocomplete_panels(panel_id + 3, agent_y + 8)
    panels += open_loop_panels(panel_id + 6, agent_y + 16)
    return dashboard(
        "grill-engine-comparison",
        "grill-locust — Engine comparison",
        "Per conversation: TTFT, TPOT, tokens/s and E2E p50 against concurrent users, one line per run, backend "
        "and model; agent sessions: TTFT against context per step, the session wait, the cached ratio per step; "
        "autocomplete: abandoned and shown-in-budget %, TTFT p90 of completions, wasted tokens.",
        request_variables(),
        panels,
        "now-24h",
        "30s",
    )


def agent_panels(first_id: int, y: int) -> list[Builder[model.Panel]]:
    """The agent-session panels of a conversation's row (empty for conversations of other kinds)."""
    step_group = f'GROUP BY {SERIES_GROUP}, "tier_users", "step"'
    ttft_by_context = (
        'SELECT median("prompt_tokens") AS "context_tokens_p50", median("ttft_s") AS "ttft_p50_s", '
        f'percentile("ttft_s", 90) AS "ttft_p90_s" FROM "grill_request" WHERE {OK_AGENT_STEP_FILTER} {step_group}'
    )
    session_wait = (
        'SELECT last("session_wait_p50_s") AS "session_wait_p50_s", last("session_wait_p90_s") AS '
        f'"session_wait_p90_s" FROM "grill_tier" WHERE {TIER_FILTER} GROUP BY {SERIES_GROUP}, "tier_users"'
    )
    cached_by_step = (
        'SELECT mean("cached_ratio") AS "cached_ratio_mean", percentile("cached_ratio", 10) AS "cached_ratio_p10" '
        'FROM (SELECT "cached_tokens" / "prompt_tokens" AS "cached_ratio" FROM "grill_request" '
        f"WHERE {OK_AGENT_STEP_FILTER} {step_group}) WHERE $timeFilter {step_group}"
    )
    per_step_lines = (*SERIES_TAGS, "tier_users")
    return [
        xy_chart(
            first_id,
            "Agent: TTFT vs context per step — $conversation",
            ttft_by_context,
            grid(0, y, 8, 8),
            "s",
            "Agent sessions, ok requests: TTFT p50 and p90 at each step against the step's median context "
            "(prompt tokens), one line per run, backend, model and tier",
            "context_tokens_p50",
            per_step_lines,
        ),
        versus_users(
            first_id + 1,
            "Agent: session wait vs users — $conversation",
            session_wait,
            grid(8, y, 8, 8),
            "s",
            "The developer's wait per agent session (Σ E2E; of parallel sub-sessions the longest), p50 and "
            "p90 over ok sessions, from the master's tier summary (grill_tier)",
        ),
        xy_chart(
            first_id + 2,
            "Agent: cached ratio per step — $conversation",
            cached_by_step,
            grid(16, y, 8, 8),
            "percentunit",
            "Agent sessions, ok requests: cached / prompt tokens at each step, mean and p10 (nearest rank: "
            "none at a step with fewer than 5 requests)",
            "step",
            per_step_lines,
        ),
    ]


def open_loop_panels(first_id: int, y: int) -> list[Builder[model.Panel]]:
    """The comparison metrics against an open-loop tier's rate (req/s, or sessions/s for session kinds):
    empty for runs of user tiers, whose points carry no tier_rate."""
    panels: list[Builder[model.Panel]] = []
    for index, (title, select, unit, description) in enumerate(COMPARISON_METRICS):
        query = (
            f'SELECT {select} FROM "grill_request" WHERE {OK_REQUEST_FILTER} AND "tier_rate" != \'\' '
            f'GROUP BY {SERIES_GROUP}, "tier_rate"'
        )
        position = grid((index % 3) * 8, y + (index // 3) * 8, 8, 8)
        title = f"Open loop: {title} vs rate — $conversation"
        panels.append(
            xy_chart(first_id + index, title, query, position, unit, description, "tier_rate", SERIES_TAGS)
        )
    return panels


def autocomplete_panels(first_id: int, y: int) -> list[Builder[model.Panel]]:
    """The autocomplete panels of a conversation's row (empty for conversations of other kinds)."""
    by_tier = f'GROUP BY {SERIES_GROUP}, "tier_users"'
    shares = (
        'SELECT last("abandoned_pct") AS "abandoned_pct", last("shown_in_budget_pct") AS "shown_in_budget_pct" '
        f'FROM "grill_tier" WHERE {AUTOCOMPLETE_TIER_FILTER} {by_tier}'
    )
    completion_ttft = (
        f'SELECT percentile("ttft_s", 90) AS "ttft_p90_s" FROM "grill_request" WHERE {OK_AUTOCOMPLETE_FILTER} '
        f"{by_tier}"
    )
    wasted = (
        'SELECT last("abandoned_output_tokens") AS "abandoned_output_tokens", last("engine_aborted_tokens") AS '
        f'"engine_aborted_tokens" FROM "grill_tier" WHERE {AUTOCOMPLETE_TIER_FILTER} {by_tier}'
    )
    return [
        versus_users(
            first_id,
            "Autocomplete: abandoned and shown in budget vs users — $conversation",
            shares,
            grid(0, y, 8, 8),
            "percent",
            "Of all the tier's autocomplete requests: abandoned by the developer's next keystroke, and shown "
            "within the conversation's budget_ms before it; from the master's tier summary (grill_tier)",
        ),
        versus_users(
            first_id + 1,
            "Autocomplete: TTFT p90 of completions vs users — $conversation",
            completion_ttft,
            grid(8, y, 8, 8),
            "s",
            "Time to first token, p90 over completed (ok) autocomplete requests: abandoned ones are not in it "
            "(nearest rank)",
        ),
        versus_users(
            first_id + 2,
            "Autocomplete: wasted tokens vs users — $conversation",
            wasted,
            grid(16, y, 8, 8),
            "none",
            "Output tokens the client received before its cancels (a lower bound of the wasted work) and the "
            "tokens the engine says it generated for aborted requests (where its /metrics count them)",
        ),
    ]


# ---------------------------------------------------------------- (b) Live run


def live_run() -> model.Dashboard:
    per_s = "* 1000 / $__interval_ms"
    users_seen = (
        'SELECT sum("users") AS "users_seen" FROM (SELECT count(distinct("user_id")) AS "users" '
        f'FROM "grill_request" WHERE {REQUEST_FILTER} GROUP BY time($__interval), "worker", "backend") '
        'WHERE $timeFilter GROUP BY time($__interval), "backend" fill(null)'
    )
    tier_users = (
        f'SELECT last("users") AS "tier_users" FROM "grill_phase" WHERE {RUN_FILTER} AND $timeFilter '
        'GROUP BY time($__interval), "target" fill(previous)'
    )

    def percentiles(field: str) -> str:
        columns = ", ".join(f'percentile("{field}", {q}) AS "p{q}"' for q in (50, 90, 99))
        return (
            f'SELECT {columns} FROM "grill_request" WHERE {OK_REQUEST_FILTER} '
            'GROUP BY time($__interval), "backend" fill(null)'
        )

    panels = [
        timeseries(
            1,
            "Requests/s (by start time)",
            [
                InfluxQLQuery(
                    f'SELECT count("output_tokens") {per_s} AS "requests_per_s" FROM "grill_request" '
                    f'WHERE {REQUEST_FILTER} GROUP BY time($__interval), "backend" fill(0)',
                    alias="$tag_backend",
                )
            ],
            grid(0, 0),
            "reqps",
            "Requests started per second, all statuses",
        ),
        timeseries(
            2,
            "Active users",
            [
                InfluxQLQuery(users_seen, "A", alias="seen $tag_backend"),
                InfluxQLQuery(tier_users, "B", alias="tier $tag_target"),
            ],
            grid(12, 0),
            "none",
            "Users seen sending requests (distinct user ids per worker, summed) and the tier's target users",
        ),
        timeseries(
            3,
            "TTFT percentiles",
            [InfluxQLQuery(percentiles("ttft_s"), alias="$tag_backend $col")],
            grid(0, 8),
            "s",
            "Time to first output token of ok requests, p50 / p90 / p99 per interval",
        ),
        timeseries(
            4,
            "E2E percentiles",
            [InfluxQLQuery(percentiles("e2e_s"), alias="$tag_backend $col")],
            grid(12, 8),
            "s",
            "End-to-end latency of ok requests, p50 / p90 / p99 per interval",
        ),
        timeseries(
            5,
            "Errors by kind",
            [
                InfluxQLQuery(
                    f'SELECT count("output_tokens") AS "errors" FROM "grill_request" WHERE {FAILED_REQUEST_FILTER} '
                    'GROUP BY time($__interval), "backend", "status" fill(null)',
                    alias="$tag_backend $tag_status",
                )
            ],
            grid(0, 16),
            "none",
            "Failed requests per interval by status (http_<code>, timeout, connect, stream_cut, bad_event, empty); "
            "autocomplete requests abandoned by typing are no failures",
            draw_style=common.GraphDrawStyle.BARS,
        ),
        timeseries(
            6,
            "Output tokens/s (by start time)",
            [
                InfluxQLQuery(
                    f'SELECT sum("output_tokens") {per_s} AS "tokens_per_s" FROM "grill_request" '
                    f'WHERE {REQUEST_FILTER} GROUP BY time($__interval), "backend" fill(0)',
                    alias="$tag_backend",
                )
            ],
            grid(12, 16),
            "none",
            "Output tokens of the requests started in each interval, per second",
        ),
        timeseries(
            7,
            "Load generator health (event-loop lag p99)",
            [
                InfluxQLQuery(
                    f'SELECT max("worker_lag_p99_ms") AS "lag_p99_ms" FROM "grill_request" WHERE {REQUEST_FILTER} '
                    'GROUP BY time($__interval), "worker" fill(null)',
                    alias="$tag_worker",
                )
            ],
            grid(0, 24, 24, 6),
            "ms",
            "A worker whose lag climbs inflates TTFT itself: add workers",
        ),
        timeseries(
            8,
            "TTFT p90 per conversation (a mix's personas apart)",
            [
                InfluxQLQuery(
                    f'SELECT percentile("ttft_s", 90) AS "ttft_p90_s" FROM "grill_request" WHERE {OK_REQUEST_FILTER} '
                    'GROUP BY time($__interval), "backend", "conversation" fill(null)',
                    alias="$tag_backend $tag_conversation",
                )
            ],
            grid(0, 30, 24, 8),
            "s",
            "Time to first output token of ok requests, p90 per interval, one line per backend and conversation: "
            "a team's personas (autocomplete beside chat and agents) on the same engine, each against its own SLO",
        ),
    ]
    return dashboard(
        "grill-live-run",
        "grill-locust — Live run",
        "Requests, users, latency percentiles and errors while a campaign runs; tiers as annotations.",
        request_variables(),
        panels,
        "now-30m",
        "5s",
    )


# ---------------------------------------------------------------- (c) GPUs and engines


def gpus_and_engines() -> model.Dashboard:
    def gpu(field: str, aggregate: str = "mean") -> str:
        return (
            f'SELECT {aggregate}("{field}") AS "{field}" FROM "grill_gpu" WHERE {GPU_FILTER} '
            'GROUP BY time($__interval), "host", "gpu_index" fill(null)'
        )

    def engine(field: str, aggregate: str = "mean") -> str:
        return (
            f'SELECT {aggregate}("{field}") AS "{field}" FROM "grill_engine" WHERE {ENGINE_FILTER} '
            'GROUP BY time($__interval), "backend" fill(null)'
        )

    gpu_alias = "$tag_host gpu$tag_gpu_index"
    panels = [
        timeseries(
            1,
            "GPU utilisation",
            [InfluxQLQuery(gpu("gpu_util_pct"), alias=gpu_alias)],
            grid(0, 0, 8),
            "percent",
            "NVML",
        ),
        timeseries(
            2,
            "VRAM used",
            [InfluxQLQuery(gpu("mem_used_bytes", "max"), alias=gpu_alias)],
            grid(8, 0, 8),
            "bytes",
            "Peak per interval",
        ),
        timeseries(
            3, "Power", [InfluxQLQuery(gpu("power_w"), alias=gpu_alias)], grid(16, 0, 8), "watt", "NVML power"
        ),
        timeseries(
            4,
            "KV-cache use",
            [InfluxQLQuery(engine("kv_cache_usage"), alias="$tag_backend")],
            grid(0, 8, 8),
            "percentunit",
            "Fraction of the engine's KV cache in use (vllm:kv_cache_usage_perc and equivalents)",
        ),
        timeseries(
            5,
            "Prefix-cache hit rate",
            [InfluxQLQuery(engine("prefix_cache_hit_rate"), alias="$tag_backend")],
            grid(8, 8, 8),
            "percentunit",
            "Cached prompt tokens / prompt tokens looked up, between two scrapes",
        ),
        timeseries(
            6,
            "Queue",
            [
                InfluxQLQuery(engine("requests_waiting"), "A", alias="waiting $tag_backend"),
                InfluxQLQuery(engine("requests_running"), "B", alias="running $tag_backend"),
            ],
            grid(16, 8, 8),
            "none",
            "Requests waiting for and in the engine's batch",
        ),
        timeseries(
            7,
            "Engine output tokens/s",
            [
                InfluxQLQuery(
                    'SELECT non_negative_derivative(last("generation_tokens_total"), 1s) AS "tokens_per_s" '
                    f'FROM "grill_engine" WHERE {ENGINE_FILTER} GROUP BY time($__interval), "backend" fill(null)',
                    alias="$tag_backend",
                )
            ],
            grid(0, 16, 24, 8),
            "none",
            "From the engine's own generation-token counter: a cross-check of the client's figures",
        ),
    ]
    return dashboard(
        "grill-gpus-engines",
        "grill-locust — GPUs and engines",
        "GPU utilisation, VRAM and power per host; KV cache, prefix-cache hit rate and queue per backend.",
        [
            run_variable(),
            backend_variable("grill_engine"),
            variable("host", 'SHOW TAG VALUES FROM "grill_gpu" WITH KEY = "host"', "GPU host"),
        ],
        panels,
        "now-30m",
        "5s",
    )


DASHBOARDS: dict[str, Callable[[], model.Dashboard]] = {
    "engine-comparison.json": engine_comparison,
    "live-run.json": live_run,
    "gpus-engines.json": gpus_and_engines,
}


def render(name: str) -> str:
    return json.dumps(DASHBOARDS[name](), cls=JSONEncoder, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    DASHBOARD_DIR.mkdir(parents=True, exist_ok=True)
    for name in DASHBOARDS:
        (DASHBOARD_DIR / name).write_text(render(name), encoding="utf-8")
        print(DASHBOARD_DIR / name)


if __name__ == "__main__":
    main()
