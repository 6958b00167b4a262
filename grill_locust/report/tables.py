"""Human-readable tables: the summary with units in the headers, as terminal text or HTML rows.

`display_*` functions give DataFrames of strings (one place decides how each number reads);
`format_*` functions lay them out as fixed-width text for the terminal.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from grill_locust.report.load_axis import USERS, load_text, load_units, tier_load
from grill_locust.report.percentiles import QUANTILES

Formatter = Callable[[float], str]
MISSING = "-"
GIB_BYTES = 1024**3


def _seconds(value: float) -> str:
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"


def _milliseconds(value: float) -> str:
    return f"{value * 1000:.1f}"


def _rate(value: float) -> str:
    return f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"


def _percent(value: float) -> str:
    return f"{value * 100:.1f}"


def _ratio(value: float) -> str:
    return f"{value:.2f}"


def _integer(value: float) -> str:
    return f"{int(value)}"


def _gib(value: float) -> str:
    return f"{value / GIB_BYTES:.1f}"


def _plain_percent(value: float) -> str:
    return f"{value:.0f}"


def _percent_points(value: float) -> str:
    return f"{value:.1f}"


# (summary column, header, formatter); optional columns are shown only when some tier has a value
TIER_TABLE: list[tuple[str, str, Formatter]] = [
    ("tier_users", "users", _integer),
    ("requests", "requests", _integer),
    ("success_rate", "ok %", _percent),
    ("ttft_p50_s", "TTFT p50 s", _seconds),
    ("ttft_p90_s", "TTFT p90 s", _seconds),
    ("ttft_p99_s", "TTFT p99 s", _seconds),
    ("tpot_p50_s", "TPOT p50 ms", _milliseconds),
    ("tpot_p90_s", "TPOT p90 ms", _milliseconds),
    ("tpot_p99_s", "TPOT p99 ms", _milliseconds),
    ("itl_p50_s", "ITL p50 ms", _milliseconds),
    ("itl_p90_s", "ITL p90 ms", _milliseconds),
    ("itl_p99_s", "ITL p99 ms", _milliseconds),
    ("e2e_p50_s", "E2E p50 s", _seconds),
    ("e2e_p90_s", "E2E p90 s", _seconds),
    ("e2e_p99_s", "E2E p99 s", _seconds),
    ("request_tokens_per_s_p50", "tok/s/req p50", _rate),
    ("output_tokens_per_s", "system tok/s", _rate),
    ("requests_per_s", "req/s", _ratio),
    ("cached_token_ratio", "cached %", _percent),
]
# shown beside TTFT's and the total rates when some tier's output included reasoning
REASONING_TTFO_COLUMNS: list[tuple[str, str, Formatter]] = [
    ("ttfo_p50_s", "TTFO p50 s", _seconds),
    ("ttfo_p90_s", "TTFO p90 s", _seconds),
    ("ttfo_p99_s", "TTFO p99 s", _seconds),
]
REASONING_RATE_COLUMNS: list[tuple[str, str, Formatter]] = [
    ("request_visible_tokens_per_s_p50", "visible tok/s/req p50", _rate),
    ("visible_output_tokens_per_s", "visible system tok/s", _rate),
]
# after "ok %" where some tier has autocomplete requests: what the typing developer saw, and the work
# spent on requests it abandoned (the client's lower bound; the engine's own count where it has one)
AUTOCOMPLETE_TIER_COLUMNS: list[tuple[str, str, Formatter]] = [
    ("abandoned_pct", "abandoned %", _percent_points),
    ("shown_in_budget_pct", "shown in budget %", _percent_points),
    ("abandoned_output_tokens", "abandoned tokens (client)", _integer),
    ("engine_aborted_requests", "engine aborted", _integer),
    ("engine_aborted_tokens", "engine aborted tokens", _integer),
]
# after "ok %" where a per-request SLO applies to some tier: the share of requests meeting it, their rates
GOODPUT_TIER_COLUMNS: list[tuple[str, str, Formatter]] = [
    ("slo_attainment", "SLO met %", _percent),
    ("goodput_rps", "goodput req/s", _ratio),
    ("goodput_tokens_per_s", "goodput tok/s", _rate),
]
OPTIONAL_TIER_COLUMNS: list[tuple[str, str, Formatter]] = [
    ("turns", "turns", _integer),
    ("ttft_turn_ratio", "TTFT last/first", _ratio),
    ("e2e_turn_ratio", "E2E last/first", _ratio),
    ("context_growth", "context growth", _ratio),
    ("sessions", "sessions", _integer),
    ("failed_sessions", "failed sessions", _integer),
    ("session_wait_p50_s", "session wait p50 s", _seconds),
    ("session_wait_p90_s", "session wait p90 s", _seconds),
    ("session_steps_mean", "steps/session", _rate),
    ("gpu_util_mean", "GPU util %", _plain_percent),
    ("vram_peak_bytes", "VRAM peak GiB", _gib),
    ("power_mean_w", "power W", _plain_percent),
    ("energy_per_token_j", "J/token", _ratio),
    ("kv_cache_mean", "KV cache mean %", _percent),
    ("kv_cache_peak", "KV cache peak %", _percent),
    ("prefix_hit_rate", "prefix hit %", _percent),
    ("waiting_mean", "waiting", _ratio),
    ("queue_time_mean_s", "engine queue ms", _milliseconds),
]
TERMINAL_TIER_COLUMNS = {
    "rate",
    "users",
    "developers",
    "requests",
    "cancelled",
    "ok %",
    "SLO met %",
    "goodput req/s",
    "abandoned %",
    "shown in budget %",
    "TTFT p50 s",
    "TTFT p90 s",
    "TTFO p50 s",
    "TTFO p90 s",
    "TPOT p50 ms",
    "ITL p50 ms",
    "E2E p50 s",
    "E2E p90 s",
    "tok/s/req p50",
    "system tok/s",
    "visible system tok/s",
    "req/s",
    "cached %",
    "TTFT last/first",
    "context growth",
    "sessions",
    "failed sessions",
    "session wait p50 s",
    "session wait p90 s",
    "steps/session",
    "GPU util %",
    "VRAM peak GiB",
}
BINDING_NAMES = {
    **{f"{metric}_p{q}_s": f"{metric.upper()} p{q}" for metric in ("ttft", "tpot", "e2e") for q in QUANTILES},
    "success_rate": "success rate",
    "slo_attainment": "SLO attainment",
}
TURN_TABLE: list[tuple[str, str, Formatter]] = [
    ("tier_users", "users", _integer),
    ("turn", "turn", _integer),
    ("ok_requests", "requests", _integer),
    ("ttft_p50_s", "TTFT p50 s", _seconds),
    ("e2e_p50_s", "E2E p50 s", _seconds),
    ("prompt_tokens_mean", "prompt tokens", _integer),
]
AGENT_STEP_TABLE: list[tuple[str, str, Formatter]] = [
    ("tier_users", "users", _integer),
    ("step", "step", _integer),
    ("ok_requests", "requests", _integer),
    ("context_tokens_p50", "context tokens p50", _integer),
    ("ttft_p50_s", "TTFT p50 s", _seconds),
    ("ttft_p90_s", "TTFT p90 s", _seconds),
    ("cached_ratio_mean", "cached % mean", _percent),
    ("cached_ratio_p10", "cached % p10", _percent),
]


def _format_column(values: pd.Series, formatter: Formatter) -> pd.Series:
    # pd.isna: a column of whole numbers with gaps (sessions, on agent rows alone) holds pd.NA
    return values.map(lambda v: MISSING if pd.isna(v) else formatter(v))


def _display(
    frame: pd.DataFrame, spec: list[tuple[str, str, Formatter]], leading: list[str], intervals: bool = False
) -> pd.DataFrame:
    """`intervals`: a figure with a bootstrap interval reads `value ± half its width` (summary.csv has
    both ends: an interval need not be symmetric)."""
    out = pd.DataFrame(index=frame.index)
    for column in leading:
        out[column] = frame[column].astype(str)
    for column, header, formatter in spec:
        if column in frame.columns:
            out[header] = _format_column(pd.to_numeric(frame[column], errors="coerce"), formatter)
            if intervals and f"{column}_lo" in frame.columns:
                half = (frame[f"{column}_hi"] - frame[f"{column}_lo"]) / 2.0
                plus_minus = _format_column(pd.to_numeric(half, errors="coerce"), formatter)
                out[header] = out[header].where(plus_minus == MISSING, out[header] + " ± " + plus_minus)
    return out


def display_tiers(summary: pd.DataFrame, terminal: bool = False) -> pd.DataFrame:
    """The tier table as strings; `terminal` keeps the columns that fit a wide terminal."""
    optional = [(c, h, f) for c, h, f in OPTIONAL_TIER_COLUMNS if c in summary and summary[c].notna().any()]
    spec = list(TIER_TABLE)
    if _some_reasoning(summary):
        after_ttft = spec.index(("ttft_p99_s", "TTFT p99 s", _seconds)) + 1
        spec[after_ttft:after_ttft] = REASONING_TTFO_COLUMNS
        after_rates = spec.index(("output_tokens_per_s", "system tok/s", _rate)) + 1
        spec[after_rates:after_rates] = REASONING_RATE_COLUMNS
    if "cancelled" in summary and (summary["cancelled"] > 0).any():  # requests our own stop cut short
        spec.insert(2, ("cancelled", "cancelled", _integer))
    after_ok = spec.index(("success_rate", "ok %", _percent)) + 1
    spec[after_ok:after_ok] = [
        (c, h, f)
        for c, h, f in (*GOODPUT_TIER_COLUMNS, *AUTOCOMPLETE_TIER_COLUMNS)
        if c in summary and summary[c].notna().any()
    ]
    if _has_mix(summary):  # each persona's share of the tier's developers
        spec.insert(1, ("developers", "developers", _integer))
    table = _with_rates(
        _display(summary, spec + optional, ["series", "conversation"], intervals=not terminal), summary
    )
    table["flags"] = summary["flags"].astype(str) if "flags" in summary else ""
    if terminal:
        keep = ["series", "conversation", *[c for c in table.columns if c in TERMINAL_TIER_COLUMNS], "flags"]
        table = table[keep]
    return table


def _with_rates(table: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """A `rate` column before `users` where some tier of `rows` (the table's rows: tiers, turns or steps)
    is a rate (a rate tier's users then read "-"; a table of rate tiers alone has no users column)."""
    units = load_units(rows)
    rated = units != USERS
    if not rated.any():
        return table
    loads = tier_load(rows)
    rates = [
        load_text(load, unit) if is_rate else MISSING
        for load, unit, is_rate in zip(loads, units, rated, strict=True)
    ]
    table.insert(list(table.columns).index("users"), "rate", rates)
    if rated.all():
        return table.drop(columns="users")
    table.loc[rated, "users"] = MISSING
    return table


def _has_mix(summary: pd.DataFrame) -> bool:
    return "mix" in summary and bool((summary["mix"].astype(str) != "").any())


def block_title(series: str, conversation: str, summary_rows: pd.DataFrame) -> str:
    """A table block's heading: `series · conversation`, and for a mix's persona, the mix target."""
    first = summary_rows.iloc[0] if len(summary_rows) else None
    persona_of = (
        str(first["target"])
        if first is not None and str(first.get("mix", "")) not in ("", conversation)
        else ""
    )
    title = f"{series} · {conversation}"
    return f"{title} (a persona of mix target {persona_of})" if persona_of else title


def _some_reasoning(summary: pd.DataFrame) -> bool:
    """Some tier's output was partly reasoning: its visible rate is below its total."""
    if "visible_output_tokens_per_s" not in summary:
        return False
    return bool((summary["visible_output_tokens_per_s"] < summary["output_tokens_per_s"]).any())


def display_turns(turns: pd.DataFrame) -> pd.DataFrame:
    """The per-turn table as strings; a rate tier's load read as the tier table reads it."""
    return _with_rates(_display(turns, TURN_TABLE, ["series", "conversation"]), turns)


def display_agent_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The per-step table as strings; a rate tier's load read as the tier table reads it."""
    return _with_rates(_display(steps, AGENT_STEP_TABLE, ["series", "conversation"]), steps)


def display_capacity(capacity: pd.DataFrame) -> pd.DataFrame:
    """Capacity for reading; a rate tier's loads with their unit (`8 req/s`)."""
    from grill_locust.report.capacity import users_phrase

    units = capacity["load_unit"].astype(str) if "load_unit" in capacity else pd.Series(USERS, capacity.index)

    def tier(value: float, unit: str) -> str:
        if pd.isna(value):
            return MISSING
        return f"{value:g}" if unit == USERS else load_text(value, unit)

    out = pd.DataFrame(index=capacity.index)
    out["conversation"] = capacity["conversation"].astype(str)
    out["series"] = capacity["series"].astype(str)
    out["largest tier meeting SLO"] = [
        tier(v, u) if v else "none" for v, u in zip(capacity["max_users_meeting_slo"], units, strict=True)
    ]
    estimated = "estimated users" if (units == USERS).all() else "estimated load"
    out[estimated] = capacity.apply(users_phrase, axis=1) if len(capacity) else []
    out["binding metric"] = capacity["binding_metric"].map(lambda m: BINDING_NAMES.get(m, m))
    if "binding_persona" in capacity and (capacity["binding_persona"].astype(str) != "").any():
        out["binding persona"] = capacity["binding_persona"].astype(str)
    out["first failing tier"] = [
        tier(v, u) for v, u in zip(capacity["first_failing_users"], units, strict=True)
    ]
    out["note"] = capacity["note"].astype(str)
    return out


def format_text(table: pd.DataFrame) -> str:
    """Fixed-width text: numbers right-aligned, words left-aligned, a rule under the header."""
    if not len(table.columns):
        return ""
    headers = list(table.columns)
    cells = [[str(v) for v in table[c]] for c in headers]
    widths = [max([len(h), *(len(v) for v in column)]) for h, column in zip(headers, cells, strict=True)]
    numeric = [all(_looks_numeric(v) for v in column) and len(column) > 0 for column in cells]

    def line(values: list[str]) -> str:
        padded = [v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric, strict=True)]
        return "  ".join(padded).rstrip()

    lines = [line(headers), line(["-" * w for w in widths])]
    lines += [line([column[i] for column in cells]) for i in range(len(table))]
    return "\n".join(lines)


def _looks_numeric(text: str) -> bool:
    stripped = text.lstrip("~<>= ")
    try:
        float(stripped)
        return True
    except ValueError:
        return text == MISSING


def format_table(summary: pd.DataFrame) -> str:
    """The tier summary as terminal text, one block per conversation x series."""
    if not len(summary):
        return "(no tiers)"
    table = display_tiers(summary, terminal=True)
    # a mix's persona rows apart from a target of that conversation alone
    table["_mix_target"] = summary["target"].astype(str).where(_mix_of(summary) != "", "")
    blocks = []
    for (conversation, series, _), rows in table.groupby(
        ["conversation", "series", "_mix_target"], sort=True
    ):
        title = block_title(str(series), str(conversation), summary.loc[rows.index])
        body = rows.drop(columns=["conversation", "series", "_mix_target"])
        empty = [
            c for c in body.columns if (body[c] == MISSING).all() or (c == "flags" and (body[c] == "").all())
        ]
        body = body.drop(columns=empty)
        blocks.append(f"{title}\n{format_text(body)}")
    return "\n\n".join(blocks)


def _mix_of(summary: pd.DataFrame) -> pd.Series:
    return summary["mix"].astype(str) if "mix" in summary else pd.Series("", index=summary.index)


def format_turns(turns: pd.DataFrame) -> str:
    return _format_blocks(display_turns(turns), "per turn") if len(turns) else ""


def format_agent_steps(steps: pd.DataFrame) -> str:
    return _format_blocks(display_agent_steps(steps), "per agent step") if len(steps) else ""


def _format_blocks(table: pd.DataFrame, what: str) -> str:
    """A table of strings as one text block per conversation x series, `(what)` in each heading; a
    block's tiers all users or all rates show that one load column."""
    blocks = []
    for (conversation, series), rows in table.groupby(["conversation", "series"], sort=True):
        body = rows.drop(columns=["conversation", "series"])
        body = body.drop(columns=[c for c in ("rate", "users") if c in body and (body[c] == MISSING).all()])
        blocks.append(f"{series} · {conversation} ({what})\n{format_text(body)}")
    return "\n\n".join(blocks)


def display_searches(searches: pd.DataFrame) -> pd.DataFrame:
    """Capacity searches for reading: the bracket found, and each probe's load and verdict in order
    (`4 misses (E2E p50)`)."""

    def load(value: float | None, unit: str) -> str:
        return "none" if value is None or pd.isna(value) else load_text(value, unit)

    def probe(entry: dict, by: str) -> str:
        if entry["passed"]:
            return f"{entry[by]:g} meets"
        persona = f", {entry['binding_persona']}" if entry.get("binding_persona") else ""
        metric = BINDING_NAMES.get(entry["binding_metric"], entry["binding_metric"])
        return f"{entry[by]:g} misses ({metric}{persona})"

    out = pd.DataFrame(index=searches.index)
    if searches["run_label"].nunique() > 1:
        out["run"] = searches["run_label"].astype(str)
    out["target"] = searches["target"].astype(str)
    out["searched"] = [
        f"{by} {lo:g} to {hi:g}" + ("" if unit == USERS else f" {unit}")
        for by, (lo, hi), unit in zip(searches["by"], searches["bracket"], searches["unit"], strict=True)
    ]
    out["largest passing"] = [
        load(v, unit) for v, unit in zip(searches["largest_passing"], searches["unit"], strict=True)
    ]
    out["smallest failing"] = [
        load(v, unit) for v, unit in zip(searches["smallest_failing"], searches["unit"], strict=True)
    ]
    out["probes in order"] = [
        ", ".join(probe(entry, by) for entry in probes) + ("" if done else " (search cut short)")
        for probes, by, done in zip(searches["probes"], searches["by"], searches["done"], strict=True)
    ]
    return out


def format_searches(searches: pd.DataFrame) -> str:
    return format_text(display_searches(searches))


def display_verdicts(verdicts: pd.DataFrame) -> pd.DataFrame:
    """`grill compare`'s verdict per run x target x tier against the first run."""
    out = verdicts[["run", "baseline", "target", "tier", "verdict"]].astype(str)
    return out.rename(columns={"run": "run", "baseline": "against"})


def format_verdicts(verdicts: pd.DataFrame) -> str:
    return format_text(display_verdicts(verdicts)) if len(verdicts) else ""


def format_capacity(capacity: pd.DataFrame) -> str:
    return format_text(display_capacity(capacity)) if len(capacity) else "(no capacity: no tiers)"
