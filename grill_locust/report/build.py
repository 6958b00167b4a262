"""Assemble a report from one or more runs: the tables every view of it (HTML, JSON, figures) shows.

`grill report` is a comparison of one run; `grill compare` labels each run and names each series
`<label>/<backend>` so that two runs of the same backend stay two lines.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from grill_locust.config import Slo
from grill_locust.report.aggregate import summarize_all
from grill_locust.report.capacity import capacity_at_slo, recommendations
from grill_locust.report.confidence import (
    COMPARISON_COLUMNS,
    RunFigures,
    compare_runs,
    nothing_in_common,
    verdicts,
)
from grill_locust.report.load import RunData, load_run
from grill_locust.report.progress import Progress
from grill_locust.sinks.results import line_numbers_text


@dataclass(frozen=True)
class LabelledRun:
    label: str
    run: RunData


@dataclass
class Report:
    """Everything a report shows, as DataFrames (the HTML and JSON are views of this)."""

    runs: list[LabelledRun]
    slo: Slo
    conversation_slos: dict[str, Slo]  # conversations judged by their own SLO rather than `slo`
    summary: pd.DataFrame
    turns: pd.DataFrame
    sessions: pd.DataFrame  # one row per agent session (report.sessions), empty without agentic records
    agent_steps: pd.DataFrame  # per target x tier x agent step
    capacity: pd.DataFrame
    recommendations: pd.DataFrame
    compare: bool
    notes: list[str] = field(default_factory=list)
    searches: pd.DataFrame = field(default_factory=pd.DataFrame)  # capacity searches (SEARCH_COLUMNS)
    # `grill compare`: each later run against the first, per tier and headline figure (confidence.py)
    comparisons: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=COMPARISON_COLUMNS))
    verdicts: pd.DataFrame = field(default_factory=pd.DataFrame)  # a line per run x target x tier
    nothing_compared: list[str] = field(default_factory=list)  # a line per later run with no tier in common


def load_runs(
    run_dirs: Sequence[tuple[str | None, str | Path]], progress: Progress | None = None
) -> list[LabelledRun]:
    """Load each (label or None, folder); unlabelled runs are named by run_id, made unique."""
    runs: list[LabelledRun] = []
    used: set[str] = set()
    for label, run_dir in run_dirs:
        run = load_run(run_dir)
        name = label or run.run_id
        base, counter = name, 2
        while name in used:
            name, counter = f"{base}#{counter}", counter + 1
        used.add(name)
        runs.append(LabelledRun(name, run))
        if progress:
            progress.step(f"loaded {name}")
    return runs


def assemble(
    runs: list[LabelledRun],
    slo: Slo,
    compare: bool,
    progress: Progress | None = None,
    conversation_slos: dict[str, Slo] | None = None,
) -> Report:
    per_run: dict[str, list[pd.DataFrame]] = {"summary": [], "turns": [], "sessions": [], "agent_steps": []}
    figures: list[RunFigures] = []
    for labelled in runs:
        tables = summarize_all(labelled.run, slo, conversation_slos or {})
        figures.append(RunFigures(labelled.label, tables.summary.copy(), tables.resamples))
        for name, frames in per_run.items():
            table = getattr(tables, name)
            if compare and "series" in table:
                table["series"] = labelled.label + "/" + table["series"].astype(str)
            label = pd.DataFrame({"run_label": labelled.label}, index=table.index)
            frames.append(pd.concat([label, table], axis=1))  # not insert: a summary has many columns
        if progress:
            progress.step(f"summarised {labelled.label}")
    summary = pd.concat(per_run["summary"], ignore_index=True) if runs else pd.DataFrame()
    turns, sessions, agent_steps = (_concat(per_run[name]) for name in ("turns", "sessions", "agent_steps"))
    conversation_slos = conversation_slos or {}
    capacity = capacity_at_slo(summary, slo, conversation_slos)
    comparisons = [compare_runs(figures[0], other) for other in figures[1:]] if compare else []
    comparison = _concat(comparisons) if comparisons else pd.DataFrame(columns=COMPARISON_COLUMNS)
    nothing_compared = [nothing_in_common(figures[0], other) for other in figures[1:]] if compare else []
    return Report(
        runs=runs,
        slo=slo,
        conversation_slos=conversation_slos,
        summary=summary,
        turns=turns,
        sessions=sessions,
        agent_steps=agent_steps,
        capacity=capacity,
        recommendations=recommendations(capacity),
        compare=compare,
        notes=_unreadable_notes(runs) + _slo_notes(runs, slo),
        searches=search_table(runs),
        comparisons=comparison,
        verdicts=verdicts(comparison),
        nothing_compared=[line for line in nothing_compared if line],
    )


SEARCH_COLUMNS = [
    "run_label",
    "target",
    "by",
    "unit",
    "bracket",
    "largest_passing",
    "smallest_failing",
    "done",
    "probes",
]


def search_table(runs: list[LabelledRun]) -> pd.DataFrame:
    """One row per run x target of a capacity search (run.json `search`): the bracket it was given, the
    one it found, whether it ended, and its probes in order as run.json keeps them, each judged during
    the run by the run's SLO."""
    rows = []
    for labelled in runs:
        search = labelled.run.meta.get("search")
        if not isinstance(search, dict):
            continue
        for found in search.get("targets", []):
            rows.append(
                {
                    "run_label": labelled.label,
                    "target": found["target"],
                    "by": search["by"],
                    # what its loads count (run.json before it said: a rate search's were requests/s)
                    "unit": found.get("unit") or ("users" if search["by"] == "users" else "req/s"),
                    "bracket": search["bracket"],
                    "largest_passing": found["largest_passing"],
                    "smallest_failing": found["smallest_failing"],
                    "done": found["done"],
                    "probes": found["probes"],
                }
            )
    return pd.DataFrame(rows, columns=SEARCH_COLUMNS)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The runs' tables one under the other; the first (empty, with its columns) when all are empty."""
    nonempty = [frame for frame in frames if len(frame)]
    if nonempty:
        return pd.concat(nonempty, ignore_index=True)
    return frames[0]


UNREADABLE_REASONS_SHOWN = 3  # a note names why for the first few lines (summary.json has every one)


def _unreadable_notes(runs: list[LabelledRun]) -> list[str]:
    """One note per run whose records.jsonl has lines that are not a record: how many, where, and why
    for the first few."""
    notes = []
    for labelled in runs:
        lines = list(labelled.run.unreadable_lines)
        if lines:
            why = "; ".join(
                f"line {line.line}: {line.reason}" for line in lines[:UNREADABLE_REASONS_SHOWN] if line.reason
            )
            notes.append(
                f"run {labelled.label}: {len(lines)} unreadable lines in records.jsonl "
                f"({line_numbers_text(lines)}{f'; {why}' if why else ''}): their requests are not in the "
                f"figures; the tiers they may belong to are flagged"
            )
    return notes


def _slo_notes(runs: list[LabelledRun], slo: Slo) -> list[str]:
    notes = []
    for labelled in runs:
        own = labelled.run.meta.get("slo")
        if isinstance(own, dict) and any(
            own.get(k) is not None and (v is None or not math.isclose(float(own[k]), v))
            for k, v in slo.model_dump().items()
        ):
            notes.append(
                f"run {labelled.label} declared a different SLO ({own}); all runs are judged by {slo.describe()}"
            )
    return notes


def _records(frame: pd.DataFrame) -> list[dict[str, object]]:
    """DataFrame rows as JSON-ready dicts (NaN -> null)."""
    return json.loads(frame.to_json(orient="records", double_precision=10)) if len(frame) else []


def report_json(report: Report) -> dict[str, object]:
    return {
        "slo": report.slo.model_dump(exclude_none=True),  # bounds the SLO has
        "conversation_slo": {
            name: slo.model_dump(exclude_none=True) for name, slo in report.conversation_slos.items()
        },
        "runs": [
            {
                "label": r.label,
                "run_id": r.run.run_id,
                "run_dir": str(r.run.run_dir),
                "meta": r.run.meta,
                "unreadable_record_lines": [line.as_dict() for line in r.run.unreadable_lines],
            }
            for r in report.runs
        ],
        "tiers": _records(report.summary),
        "turns": _records(report.turns),
        **({"agent_steps": _records(report.agent_steps)} if len(report.agent_steps) else {}),
        "capacity": _records(report.capacity),
        "recommendations": _records(report.recommendations),
        **({"searches": _records(report.searches)} if len(report.searches) else {}),
        **({"comparisons": _records(report.comparisons)} if len(report.comparisons) else {}),
        **({"verdicts": _records(report.verdicts)} if len(report.verdicts) else {}),
        **({"nothing_compared": report.nothing_compared} if report.nothing_compared else {}),
        "notes": report.notes,
    }
