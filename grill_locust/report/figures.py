"""The seed study's figures, from a summary: metrics against the tiers' load, one line per series.
The load axis is concurrent users, or an open-loop campaign's rate (report/load_axis.py); tiers of users
and tiers of rates (a comparison of a users run with a rate run) go in separate figures, the rate
figures' files ending in "-rate".

Figure 1.3: TTFT, TPOT, tokens/s and E2E p50 against users for one conversation (a 2 x 2 panel).
Figure 1.4: the same metrics as a grid, one row per conversation. GPU utilisation and VRAM against users
when telemetry columns exist. Users on a log axis; an optional band from p50 to p90; tiers where the
load generator was saturated are ringed in red, incomplete tiers drawn hollow.
Agent sessions: per tier, TTFT against the context size of each step and the cached ratio per step;
the developer's wait per session against users. Autocomplete: abandoned % and shown-in-budget % against
users; TTFT p90 of completed requests against users with the conversation's budget.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window: reports run on servers and in CI

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullLocator  # noqa: E402

from grill_locust.report.load_axis import USERS, axis_label, load_text, load_units, with_load  # noqa: E402

FIGURE_DPI = 100
SATURATED_COLOR = "#d62728"
GIB_BYTES = 1024**3
MIN_LABEL_GAP_DECADES = 0.2  # load-axis labels closer than this (log10 units) would overlap


@dataclass(frozen=True)
class MetricPlot:
    """One panel: a summary metric family, its title and how its values are scaled for the axis."""

    p50_column: str
    p90_column: str | None
    title: str
    unit: str
    scale: float = 1.0


SEED_METRICS: list[MetricPlot] = [
    MetricPlot("ttft_p50_s", "ttft_p90_s", "TTFT p50 (time to first token)", "s"),
    MetricPlot("tpot_p50_s", "tpot_p90_s", "TPOT p50 (time per output token)", "ms", 1000.0),
    MetricPlot(
        "request_tokens_per_s_p50", "request_tokens_per_s_p90", "Output tokens/s per request, p50", "tokens/s"
    ),
    MetricPlot("e2e_p50_s", "e2e_p90_s", "E2E latency p50", "s"),
]
SESSION_METRICS: list[MetricPlot] = [
    MetricPlot("session_wait_p50_s", "session_wait_p90_s", "Session wait p50 (Σ E2E of a session)", "s"),
    MetricPlot("session_steps_mean", None, "Steps per session, mean", "steps"),
]
AGENT_TIERS_PER_ROW = 4  # tiers side by side in the per-step figure before it wraps
ABANDONED_METRIC = MetricPlot("abandoned_pct", None, "Abandoned (solid) and shown in budget (dashed)", "%")
SHOWN_METRIC = MetricPlot("shown_in_budget_pct", None, "", "%")
COMPLETION_TTFT_METRIC = MetricPlot("ttft_p90_s", None, "TTFT p90 of completed requests", "s")
BUDGET_COLOR = "#555555"
TELEMETRY_METRICS: list[MetricPlot] = [
    MetricPlot("gpu_util_mean", None, "GPU utilisation, mean", "%"),
    MetricPlot("vram_peak_bytes", None, "VRAM, peak", "GiB", 1.0 / GIB_BYTES),
]


@dataclass(frozen=True)
class FigureFile:
    """A figure written to disk, with the title and caption the HTML shows beside it."""

    path: Path
    title: str
    caption: str


def series_colors(summary: pd.DataFrame) -> dict[str, str]:
    """One colour per series, the same in every figure of a report."""
    palette = matplotlib.colormaps["tab10"]
    names = sorted(summary["series"].astype(str).unique())
    return {name: matplotlib.colors.to_hex(palette(i % palette.N)) for i, name in enumerate(names)}


def _plot_panel(
    axes: Axes,
    tiers: pd.DataFrame,
    metric: MetricPlot,
    colors: dict[str, str],
    band: bool,
    show_title: bool = True,
    linestyle: str = "-",
) -> None:
    tiers = with_load(tiers)
    for series, rows in tiers.groupby("series", sort=True):
        rows = rows.sort_values("_load")
        color = colors[str(series)]
        users = rows["_load"]
        values = rows[metric.p50_column].astype(float) * metric.scale
        axes.plot(users, values, color=color, linewidth=1.8, linestyle=linestyle, label=str(series), zorder=3)
        complete = rows["complete"].astype(bool) if "complete" in rows else pd.Series(True, index=rows.index)
        axes.scatter(users[complete], values[complete], color=color, s=22, zorder=4)
        axes.scatter(
            users[~complete],
            values[~complete],
            facecolors="white",
            edgecolors=color,
            s=30,
            linewidths=1.5,
            zorder=4,
        )
        if band and metric.p90_column and metric.p90_column in rows:
            upper = rows[metric.p90_column].astype(float) * metric.scale
            axes.fill_between(users, values, upper, color=color, alpha=0.15, linewidth=0, zorder=2)
        if "saturated" in rows:
            saturated = rows["saturated"].astype(bool)
            axes.scatter(
                users[saturated],
                values[saturated],
                facecolors="none",
                edgecolors=SATURATED_COLOR,
                s=120,
                linewidths=1.8,
                zorder=5,
            )
    axes.set_xscale("log")
    tested = sorted(float(load) for load in tiers["_load"].unique() if load > 0)
    axes.set_xticks(tested)
    labelled = _spaced_on_log_axis(tested, MIN_LABEL_GAP_DECADES)
    axes.xaxis.set_major_formatter(
        FuncFormatter(lambda value, _: f"{value:g}" if any(math.isclose(value, v) for v in labelled) else "")
    )
    axes.xaxis.set_minor_locator(NullLocator())  # log-axis minor ticks cost time and say nothing here
    axes.tick_params(axis="x", labelsize=8)
    axes.set_xlabel(_axis_label(tiers))
    axes.set_ylabel(metric.unit)
    axes.set_ylim(bottom=0)
    axes.grid(True, which="major", alpha=0.3)
    if show_title:
        axes.set_title(metric.title, fontsize=10)


def _axis_label(tiers: pd.DataFrame) -> str:
    """The load axis of these tiers (write_figures never puts two units in one figure)."""
    units = sorted(load_units(tiers).unique()) if len(tiers) else [USERS]
    return axis_label(units[0])


def _spaced_on_log_axis(values: list[float], min_gap_decades: float) -> set[float]:
    """The tier loads to label: the first, the last, and those far enough from the last one kept."""
    kept: list[float] = []
    for value in values:
        if not kept or math.log10(value) - math.log10(kept[-1]) >= min_gap_decades:
            kept.append(value)
    if values and values[-1] not in kept:
        if len(kept) > 1 and math.log10(values[-1]) - math.log10(kept[-1]) < min_gap_decades:
            kept.pop()
        kept.append(values[-1])
    return set(kept)


def _legend_handles(summary: pd.DataFrame, colors: dict[str, str], band: bool) -> list[Line2D]:
    handles = [
        Line2D([], [], color=color, marker="o", markersize=4, label=name) for name, color in colors.items()
    ]
    if band:
        handles.append(Line2D([], [], color="grey", alpha=0.4, linewidth=6, label="p50 to p90"))
    if "complete" in summary and (~summary["complete"].astype(bool)).any():
        handles.append(
            Line2D(
                [],
                [],
                color="grey",
                marker="o",
                markerfacecolor="white",
                linestyle="",
                label="incomplete tier",
            )
        )
    if "saturated" in summary and summary["saturated"].astype(bool).any():
        handles.append(
            Line2D(
                [],
                [],
                color=SATURATED_COLOR,
                marker="o",
                markerfacecolor="none",
                markersize=10,
                linestyle="",
                label="load generator saturated",
            )
        )
    return handles


def figure_metrics(summary: pd.DataFrame, conversation: str, band: bool = True) -> Figure:
    """Figure 1.3 of the seed: TTFT, TPOT, tokens/s and E2E p50 against users, one line per series."""
    tiers = summary[summary["conversation"] == conversation]
    colors = series_colors(summary)
    figure, axes = plt.subplots(2, 2, figsize=(11, 7.5), dpi=FIGURE_DPI)
    for panel, metric in zip(axes.flat, SEED_METRICS, strict=True):
        _plot_panel(panel, tiers, metric, colors, band)
    figure.suptitle(f"{conversation}: latency and throughput against {_axis_label(tiers)}", fontsize=12)
    handles = _legend_handles(tiers, {s: colors[s] for s in sorted(tiers["series"].unique())}, band)
    figure.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False, fontsize=9)
    figure.subplots_adjust(left=0.07, right=0.98, top=0.9, bottom=0.14, hspace=0.38, wspace=0.2)
    return figure


def figure_grid(summary: pd.DataFrame, band: bool = True) -> Figure:
    """Figure 1.4 of the seed: one row per conversation, one column per metric."""
    conversations = sorted(summary["conversation"].unique())
    colors = series_colors(summary)
    figure, axes = plt.subplots(
        len(conversations),
        len(SEED_METRICS),
        figsize=(16, 3.2 * len(conversations) + 1.0),
        dpi=FIGURE_DPI,
        squeeze=False,
    )
    for row, conversation in enumerate(conversations):
        tiers = summary[summary["conversation"] == conversation]
        for column, metric in enumerate(SEED_METRICS):
            _plot_panel(axes[row][column], tiers, metric, colors, band, show_title=False)
            if row < len(conversations) - 1:
                axes[row][column].set_xlabel("")
            if row == 0:
                axes[row][column].set_title(metric.title, fontsize=10)
        axes[row][0].set_ylabel(f"{conversation}\n{SEED_METRICS[0].unit}", fontsize=9)
    figure.suptitle(f"All conversations: p50 against {_axis_label(summary)}", fontsize=13)
    handles = _legend_handles(summary, colors, band)
    figure.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False, fontsize=9)
    height_in = 3.2 * len(conversations) + 1.0
    # fixed margins (in inches, turned into fractions): tight_layout on a big grid costs seconds
    figure.subplots_adjust(
        left=0.06, right=0.99, top=1 - 0.75 / height_in, bottom=1.0 / height_in, hspace=0.3, wspace=0.25
    )
    return figure


def has_telemetry(summary: pd.DataFrame) -> bool:
    return any(m.p50_column in summary and summary[m.p50_column].notna().any() for m in TELEMETRY_METRICS)


def figure_telemetry(summary: pd.DataFrame, conversation: str) -> Figure:
    """GPU utilisation and VRAM against users (panels for the telemetry columns the run has)."""
    tiers = summary[summary["conversation"] == conversation]
    metrics = [m for m in TELEMETRY_METRICS if m.p50_column in tiers and tiers[m.p50_column].notna().any()]
    colors = series_colors(summary)
    figure, axes = plt.subplots(1, max(len(metrics), 1), figsize=(11, 4.2), dpi=FIGURE_DPI, squeeze=False)
    for index, metric in enumerate(metrics):
        _plot_panel(axes[0][index], tiers, metric, colors, band=False)
    figure.suptitle(f"{conversation}: GPU against {_axis_label(tiers)}", fontsize=12)
    handles = _legend_handles(tiers, {s: colors[s] for s in sorted(tiers["series"].unique())}, band=False)
    figure.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False, fontsize=9)
    figure.subplots_adjust(left=0.07, right=0.98, top=0.86, bottom=0.24, wspace=0.25)
    return figure


def figure_agent_steps(steps: pd.DataFrame, colors: dict[str, str], conversation: str, band: bool) -> Figure:
    """Per tier: TTFT p50 (band to p90) against the median context of each step, and the cached ratio
    per step (mean solid, p10 dashed); one line per series."""
    rows = steps[steps["conversation"] == conversation]
    rows = with_load(rows)
    tiers = sorted(rows["_load"].unique())
    columns = min(len(tiers), AGENT_TIERS_PER_ROW)
    bands = math.ceil(len(tiers) / columns)
    figure, axes = plt.subplots(
        2 * bands, columns, figsize=(3.6 * columns + 1.0, 5.6 * bands + 1.3), dpi=FIGURE_DPI, squeeze=False
    )
    for index, users in enumerate(tiers):
        ttft_axes = axes[2 * (index // columns)][index % columns]
        cached_axes = axes[2 * (index // columns) + 1][index % columns]
        of_tier = rows[rows["_load"] == users]
        tier_name = load_text(users, str(of_tier["_unit"].iloc[0]))
        for series, lines in of_tier.groupby("series", sort=True):
            color = colors.get(str(series), "black")
            by_context = lines.sort_values("context_tokens_p50")
            context = by_context["context_tokens_p50"].astype(float)
            ttft = by_context["ttft_p50_s"].astype(float)
            ttft_axes.plot(context, ttft, color=color, marker="o", markersize=3, linewidth=1.6)
            if band:
                upper = by_context["ttft_p90_s"].astype(float)
                ttft_axes.fill_between(context, ttft, upper, color=color, alpha=0.15, linewidth=0)
            by_step = lines.sort_values("step")
            cached_axes.plot(by_step["step"], by_step["cached_ratio_mean"] * 100, color=color, linewidth=1.6)
            cached_axes.plot(
                by_step["step"], by_step["cached_ratio_p10"] * 100, color=color, linewidth=1.0, linestyle="--"
            )
        ttft_axes.set_title(f"{tier_name}: TTFT p50 vs context", fontsize=9)
        ttft_axes.set_xlabel("context tokens (median of the step)", fontsize=8)
        ttft_axes.set_ylabel("s")
        ttft_axes.set_ylim(bottom=0)
        cached_axes.set_title(f"{tier_name}: cached % per step", fontsize=9)
        cached_axes.set_xlabel("step", fontsize=8)
        cached_axes.set_ylabel("%")
        cached_axes.set_ylim(0, 105)
        for panel in (ttft_axes, cached_axes):
            panel.tick_params(labelsize=8)
            panel.grid(True, alpha=0.3)
    for index in range(len(tiers), bands * columns):  # the wrapped last row's empty places
        axes[2 * (index // columns)][index % columns].set_visible(False)
        axes[2 * (index // columns) + 1][index % columns].set_visible(False)
    names = sorted(rows["series"].astype(str).unique())
    handles = [Line2D([], [], color=colors.get(name, "black"), label=name) for name in names]
    handles.append(Line2D([], [], color="grey", linestyle="--", label="cached % p10"))
    if band:
        handles.append(Line2D([], [], color="grey", alpha=0.4, linewidth=6, label="TTFT p50 to p90"))
    figure.suptitle(f"{conversation}: agent steps, per tier", fontsize=12)
    figure.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False, fontsize=9)
    height_in = 5.6 * bands + 1.3
    figure.subplots_adjust(
        left=0.08, right=0.98, top=1 - 1.0 / height_in, bottom=0.7 / height_in, hspace=0.55, wspace=0.3
    )
    return figure


def figure_sessions(summary: pd.DataFrame, conversation: str, band: bool) -> Figure:
    """Session wait p50 (band to p90) and steps per session against users, one line per series."""
    tiers = summary[(summary["conversation"] == conversation) & summary["session_wait_p50_s"].notna()]
    colors = series_colors(summary)
    figure, axes = plt.subplots(1, len(SESSION_METRICS), figsize=(11, 4.2), dpi=FIGURE_DPI, squeeze=False)
    for panel, metric in zip(axes[0], SESSION_METRICS, strict=True):
        _plot_panel(panel, tiers, metric, colors, band)
    figure.suptitle(f"{conversation}: the developer's wait per agent session", fontsize=12)
    handles = _legend_handles(tiers, {s: colors[s] for s in sorted(tiers["series"].unique())}, band)
    figure.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False, fontsize=9)
    figure.subplots_adjust(left=0.07, right=0.98, top=0.86, bottom=0.24, wspace=0.25)
    return figure


def figure_autocomplete(summary: pd.DataFrame, conversation: str) -> Figure:
    """Abandoned % (solid) and shown-in-budget % (dashed) against users; TTFT p90 of completed requests
    against users with the conversation's budget as a horizontal line. One colour per series."""
    tiers = summary[summary["conversation"] == conversation]
    colors = series_colors(summary)
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=FIGURE_DPI, squeeze=False)
    shares, ttft = axes[0]
    _plot_panel(shares, tiers, ABANDONED_METRIC, colors, band=False)
    _plot_panel(shares, tiers, SHOWN_METRIC, colors, band=False, show_title=False, linestyle="--")
    shares.set_ylim(0, 105)
    _plot_panel(ttft, tiers, COMPLETION_TTFT_METRIC, colors, band=False)
    handles = _legend_handles(tiers, {s: colors[s] for s in sorted(tiers["series"].unique())}, band=False)
    handles.append(Line2D([], [], color="grey", linestyle="--", label="shown in budget %"))
    budgets_ms = sorted(tiers["budget_ms"].dropna().unique()) if "budget_ms" in tiers else []
    for budget_ms in budgets_ms:
        ttft.axhline(budget_ms / 1000.0, color=BUDGET_COLOR, linestyle=":", linewidth=1.5, zorder=2)
    if budgets_ms:
        label = "budget " + ", ".join(f"{b:g} ms" for b in budgets_ms)
        handles.append(Line2D([], [], color=BUDGET_COLOR, linestyle=":", label=label))
    figure.suptitle(f"{conversation}: autocomplete against {_axis_label(tiers)}", fontsize=12)
    figure.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False, fontsize=9)
    figure.subplots_adjust(left=0.07, right=0.98, top=0.86, bottom=0.24, wspace=0.25)
    return figure


def autocomplete_conversations(summary: pd.DataFrame) -> list[str]:
    """Conversations with autocomplete tiers (an abandoned % to plot)."""
    if "abandoned_pct" not in summary:
        return []
    return sorted(summary.loc[summary["abandoned_pct"].notna(), "conversation"].astype(str).unique())


def _agent_conversations(summary: pd.DataFrame, steps: pd.DataFrame | None) -> list[str]:
    """Conversations with agent steps to plot and session waits to plot (ok sessions in some tier)."""
    if steps is None or not len(steps) or "session_wait_p50_s" not in summary:
        return []
    with_waits = set(summary.loc[summary["session_wait_p50_s"].notna(), "conversation"].astype(str))
    return sorted(set(steps["conversation"].astype(str)) & with_waits)


def slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower() or "conversation"


def write_figures(
    summary: pd.DataFrame,
    out_dir: Path,
    band: bool = True,
    on_step=None,
    steps: pd.DataFrame | None = None,
) -> list[FigureFile]:
    """Every figure of a report as PNG in out_dir; `on_step(name)` after each (progress); `steps`:
    the report's agent steps (agent figures for each agentic conversation). Tiers of users and tiers of
    rates get figures of their own."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files: list[FigureFile] = []
    for unit, plotted in _by_load_unit(summary):
        files += _write_unit_figures(plotted, unit, out_dir, band, on_step, _steps_of(steps, plotted))
    return files


def _by_load_unit(summary: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The tiers with records, by load unit: users first, then each rate unit."""
    plotted = summary[summary["requests"] > 0]
    if not len(plotted):
        return []
    units = load_units(plotted)
    return [(unit, plotted[units == unit]) for unit in sorted(units.unique(), key=lambda u: (u != USERS, u))]


def _steps_of(steps: pd.DataFrame | None, summary: pd.DataFrame) -> pd.DataFrame | None:
    """The agent steps of the summary's tiers (those of one load unit)."""
    if steps is None or not len(steps):
        return steps
    keys = ["series", "target", "tier_index"]  # series: a comparison's runs share targets and tiers
    tiers = summary[keys].drop_duplicates()
    return steps.merge(tiers.astype({"series": str, "target": str}), on=keys, how="inner")


def _write_unit_figures(
    plotted: pd.DataFrame,
    unit: str,
    out_dir: Path,
    band: bool,
    on_step,
    steps: pd.DataFrame | None,
) -> list[FigureFile]:
    """The figures of tiers of one load unit; file names end in "-rate" for rate tiers."""
    files: list[FigureFile] = []
    suffix = "" if unit == USERS else "-rate"
    against = "users" if unit == USERS else f"rate ({unit})"

    def save(figure: Figure, name: str, title: str, caption: str) -> None:
        path = out_dir / name.replace(".png", f"{suffix}.png")
        figure.savefig(path, dpi=FIGURE_DPI, format="png")
        plt.close(figure)
        files.append(FigureFile(path, title, caption))
        if on_step:
            on_step(path.name)

    band_text = " Shaded: p50 to p90." if band else ""
    axis_text = "users on a log axis." if unit == USERS else f"the tier's rate ({unit}) on a log axis."
    for conversation in sorted(plotted["conversation"].unique()):
        save(
            figure_metrics(plotted, conversation, band),
            f"metrics-{slug(conversation)}.png",
            f"{conversation}: TTFT, TPOT, tokens/s and E2E against {against}",
            "p50 over successful requests, " + axis_text + band_text,
        )
    save(
        figure_grid(plotted, band),
        "grid.png",
        "All conversations x metrics" + ("" if unit == USERS else f", against {against}"),
        "Rows: conversations; columns: TTFT, TPOT, tokens/s per request, E2E (p50)." + band_text,
    )
    if has_telemetry(plotted):
        for conversation in sorted(plotted["conversation"].unique()):
            save(
                figure_telemetry(plotted, conversation),
                f"gpu-{slug(conversation)}.png",
                f"{conversation}: GPU utilisation and VRAM against {against}",
                "Per tier: mean GPU utilisation and peak VRAM from telemetry.",
            )
    for conversation in _agent_conversations(plotted, steps):
        assert steps is not None
        save(
            figure_agent_steps(steps, series_colors(plotted), conversation, band),
            f"agent-steps-{slug(conversation)}.png",
            f"{conversation}: TTFT against context size, cached ratio per step",
            "Per tier, over successful requests: TTFT p50 at each step against the step's median context "
            "tokens" + (" (shaded: to p90)" if band else "") + "; cached tokens / prompt tokens per step, "
            "mean (solid) and p10 (dashed).",
        )
        save(
            figure_sessions(plotted, conversation, band),
            f"sessions-{slug(conversation)}.png",
            f"{conversation}: session wait and steps per session against {against}",
            "Σ E2E of each ok session (sub-sessions: the longest), p50"
            + (" to p90" if band else "")
            + "; failed sessions are not in the percentiles (summary.csv counts them).",
        )
    for conversation in autocomplete_conversations(plotted):
        save(
            figure_autocomplete(plotted, conversation),
            f"autocomplete-{slug(conversation)}.png",
            f"{conversation}: abandoned and shown-in-budget %, TTFT p90 of completions against {against}",
            "Of all the tier's autocomplete requests: abandoned by the next keystroke (solid) and shown within "
            "the budget before it (dashed). TTFT p90 over completed requests only; dotted: the conversation's "
            "budget_ms.",
        )
    return files


def figure_count(summary: pd.DataFrame, steps: pd.DataFrame | None = None) -> int:
    """How many figures write_figures will write (for the progress bar)."""
    count = 0
    for _, plotted in _by_load_unit(summary):
        conversations = plotted["conversation"].nunique()
        agent = 2 * len(_agent_conversations(plotted, _steps_of(steps, plotted)))
        autocomplete = len(autocomplete_conversations(plotted))
        count += conversations + 1 + (conversations if has_telemetry(plotted) else 0) + agent + autocomplete
    return count
