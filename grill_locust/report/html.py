"""report.html: one self-contained file (inline CSS, figures as base64 PNG, no script, no network)."""

from __future__ import annotations

import base64
import datetime as dt
import html
from collections.abc import Iterable

import pandas as pd

from grill_locust.report.build import Report
from grill_locust.report.confidence import COMPARE_CONFIDENCE, CONFIDENCE
from grill_locust.report.figures import FigureFile
from grill_locust.report.tables import (
    display_agent_steps,
    display_capacity,
    display_searches,
    display_tiers,
    display_turns,
    display_verdicts,
)

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2rem auto;
       max-width: 1400px; padding: 0 1rem; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
h3 { margin-top: 1.4rem; font-size: 1.05rem; }
.subtitle { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: .6rem 0 1rem; font-size: .82rem; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; }
th { background: #f4f5f7; text-align: left; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.flagged td { background: #fff4e5; }
.scroll { overflow-x: auto; }
figure { margin: 1rem 0 2rem; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: .85rem; }
ul.recommendations li { margin: .3rem 0; }
.note { color: #8a4b00; } .legend { color: #555; font-size: .85rem; }
"""
WALL_KEYS = (
    ("started", ("started_wall", "started", "start_wall", "started_at")),
    ("ended", ("ended_wall", "ended", "end_wall", "ended_at")),
)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _is_number(text: str) -> bool:
    try:
        float(text.split(" ± ")[0].lstrip("~<>= "))
        return True
    except ValueError:
        return text == "-"


def html_table(table: pd.DataFrame, flagged: Iterable[bool] | None = None) -> str:
    """A DataFrame of strings as an HTML table; flagged rows are highlighted."""
    flags = list(flagged) if flagged is not None else [False] * len(table)
    head = "".join(f"<th>{_e(c)}</th>" for c in table.columns)
    rows = []
    for (_, row), flag in zip(table.iterrows(), flags, strict=True):
        cells = "".join(
            f'<td class="num">{_e(v)}</td>' if _is_number(str(v)) else f"<td>{_e(v)}</td>" for v in row
        )
        rows.append(f'<tr class="flagged">{cells}</tr>' if flag else f"<tr>{cells}</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def _when(meta: dict, keys: tuple[str, ...]) -> str:
    for key in keys:
        value = meta.get(key)
        if isinstance(value, (int, float)):
            return dt.datetime.fromtimestamp(float(value), dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        if isinstance(value, str) and value:
            return value
    return "-"


def _runs_section(report: Report) -> str:
    rows = []
    for labelled in report.runs:
        meta = labelled.run.meta
        scenario = meta.get("scenario") or meta.get("scenario_name") or "-"
        rows.append(
            {
                "label": labelled.label,
                "run_id": labelled.run.run_id,
                "scenario file": str(scenario),
                **{name: _when(meta, keys) for name, keys in WALL_KEYS},
                "records": str(len(labelled.run.records)),
                "unreadable lines": str(len(labelled.run.unreadable_lines)),
                "folder": str(labelled.run.run_dir),
            }
        )
    return "<h2>Runs</h2>" + html_table(pd.DataFrame(rows))


def _capacity_section(report: Report) -> str:
    parts = [
        f"<h2>Capacity at SLO</h2><p>SLO: {_e(report.slo.describe())}. A tier meets it when every bound "
        "holds (a mix's tier: when each persona meets its conversation's SLO); the estimate interpolates "
        "linearly in users (in the rate, for open-loop tiers) between the last passing and the first failing tier, "
        "on the binding metric.</p>"
    ]
    parts += [
        f"<p>SLO of {_e(name)}: {_e(slo.describe())}.</p>" for name, slo in report.conversation_slos.items()
    ]
    if len(report.recommendations):
        items = "".join(f"<li>{_e(text)}</li>" for text in report.recommendations["recommendation"])
        parts.append(f'<ul class="recommendations">{items}</ul>')
    if len(report.capacity):
        parts.append(html_table(display_capacity(report.capacity)))
    if len(report.searches):
        parts.append(
            "<h3>Capacity search</h3><p>The largest load that met the SLO and the smallest that missed it, "
            "found by probing one load after another (each probe a tier below), each judged during the run "
            "by the run's SLO.</p>"
        )
        parts.append(html_table(display_searches(report.searches)))
    return "".join(parts)


def _figures_section(figures: list[FigureFile]) -> str:
    if not figures:
        return "<h2>Figures</h2><p>No tier has records: nothing to plot.</p>"
    parts = ["<h2>Figures</h2>"]
    for figure in figures:
        encoded = base64.b64encode(figure.path.read_bytes()).decode("ascii")
        parts.append(
            f'<figure><h3>{_e(figure.title)}</h3><img alt="{_e(figure.title)}" src="data:image/png;base64,{encoded}">'
            f"<figcaption>{_e(figure.caption)}</figcaption></figure>"
        )
    return "".join(parts)


def _tiers_section(report: Report) -> str:
    summary = report.summary
    parts = [
        "<h2>Tiers</h2>",
        '<p class="legend">Statistics over successful requests; ITL is the distribution of each request\'s mean '
        "inter-token gap; tok/s/req = output tokens / E2E per request; system tok/s = output tokens of successful "
        "requests / tier span. Highlighted rows carry a flag (incomplete tier, load generator saturated). "
        "± is half the 95 % bootstrap interval over the tier's conversations (both ends in summary.csv, "
        f"`<figure>_lo` and `<figure>_hi`).{_repeats_phrase(report)}</p>",
    ]
    if not len(summary):
        return "".join(parts) + "<p>No tiers.</p>"
    if "abandoned_pct" in summary and summary["abandoned_pct"].notna().any():
        parts.append(
            '<p class="legend">Autocomplete: abandoned % = requests the developer\'s next keystroke cancelled, '
            "of all the tier's autocomplete requests; they are neither successes nor failures (ok % is of the "
            "others) and not in the percentiles, which are of completed requests. Shown in budget % = "
            "completions that arrived within the conversation's budget_ms and before the next keystroke, of all "
            "autocomplete requests. Abandoned tokens (client) = output tokens received before the cancels, a "
            "lower bound of the engine's wasted work; engine aborted (tokens) = the rise of the engine's own "
            "counters over the tier, where its /metrics have them.</p>"
        )
    table = display_tiers(summary)
    for conversation in sorted(summary["conversation"].unique()):
        mask = summary["conversation"] == conversation
        rows = table[mask].drop(columns=["conversation"])
        parts.append(
            f"<h3>{_e(conversation)}</h3>" + html_table(rows, (summary.loc[mask, "flags"] != "").tolist())
        )
    return "".join(parts)


def _repeats_phrase(report: Report) -> str:
    """` Each tier ran N times (--repeat N); its figures are over all N.` for runs with repeats."""
    phrases = []
    for labelled in report.runs:
        repeats = int(labelled.run.meta.get("repeats") or 1)
        if repeats > 1:
            who = f"run {labelled.label}: " if len(report.runs) > 1 else ""
            phrases.append(
                f" {who}each tier ran {repeats} times (--repeat {repeats}); its figures and intervals are "
                "over all of them."
            )
    return "".join(phrases)


def _turns_section(report: Report) -> str:
    if not len(report.turns):
        return ""
    table = display_turns(report.turns)
    parts = ["<h2>Multi-turn: per turn</h2>"]
    for conversation in sorted(report.turns["conversation"].unique()):
        rows = table[report.turns["conversation"] == conversation].drop(columns=["conversation"])
        parts.append(f"<h3>{_e(conversation)}</h3>" + html_table(rows))
    return "".join(parts)


def _agent_section(report: Report) -> str:
    if not len(report.agent_steps):
        return ""
    table = display_agent_steps(report.agent_steps)
    parts = [
        "<h2>Agent sessions: per step</h2>",
        '<p class="legend">A session is one developer\'s agent task. Its wait is the sum of E2E of its model '
        "calls (of parallel sub-sessions, the longest); a session with a failed step is failed and its wait "
        "is not in the tiers' session percentiles. Per step, over successful requests: the median context "
        "(prompt tokens), TTFT and the cached ratio (cached / prompt tokens). One row per session: "
        "sessions.csv.</p>",
    ]
    for conversation in sorted(report.agent_steps["conversation"].unique()):
        rows = table[report.agent_steps["conversation"] == conversation].drop(columns=["conversation"])
        parts.append(f"<h3>{_e(conversation)}</h3>" + html_table(rows))
    return "".join(parts)


def _verdicts_section(report: Report) -> str:
    if not len(report.verdicts) and not report.nothing_compared:
        return ""
    nothing = "".join(f'<p class="note">{_e(line)}</p>' for line in report.nothing_compared)
    table = html_table(display_verdicts(report.verdicts)) if len(report.verdicts) else ""
    return (
        "<h2>Differences between runs</h2>"
        '<p class="legend">Each run against the first, at each tier both ran (the same users, or the same '
        f"rate): TTFT p50 and p90, E2E p50, system tok/s and success rate. A figure differs when the {COMPARE_CONFIDENCE * 100:g} % interval of its "
        f"difference, bootstrapped from both runs' conversations, leaves out 0 ({CONFIDENCE * 100:g} % shared by the five "
        "figures: two runs of one engine are called different at a tier at most 5 % of the time); shown as "
        "the change and that interval in percent of the first run's value (success rate: in points). "
        "Throughput whose resamples do not vary in either run (every conversation the same work) differs "
        "only by the two spans, which no interval measures: not judged. Otherwise: no significant "
        "difference.</p>" + nothing + table
    )


def render_html(report: Report, figures: list[FigureFile]) -> str:
    title = "grill-locust comparison" if report.compare else "grill-locust report"
    labels = ", ".join(r.label for r in report.runs)
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in report.notes)
    body = "".join(
        [
            f'<h1>{_e(title)}</h1><p class="subtitle">{_e(labels)}</p>',
            notes,
            _capacity_section(report),
            _verdicts_section(report),
            _figures_section(figures),
            _tiers_section(report),
            _turns_section(report),
            _agent_section(report),
            _runs_section(report),
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
        f"<title>{_e(title)}: {_e(labels)}</title><style>{STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )
