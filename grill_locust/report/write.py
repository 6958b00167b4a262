"""Write a report's files: summary.csv, summary.json, sessions.csv (agent sessions), the figures and report.html."""

from __future__ import annotations

import json
from pathlib import Path

from grill_locust.report.aggregate import SUMMARY_CSV
from grill_locust.report.build import Report, report_json
from grill_locust.report.figures import write_figures
from grill_locust.report.html import render_html
from grill_locust.report.progress import Progress
from grill_locust.report.sessions import SESSIONS_CSV

SUMMARY_JSON = "summary.json"
REPORT_HTML = "report.html"


def write_report(
    report: Report, out_dir: str | Path, band: bool = True, progress: Progress | None = None
) -> list[Path]:
    """Write summary.csv, summary.json, the figures and report.html into out_dir; returns the paths."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / SUMMARY_CSV, folder / SUMMARY_JSON]
    report.summary.to_csv(written[0], index=False)
    if len(report.sessions):  # a run without agent sessions writes what it always wrote
        written.append(folder / SESSIONS_CSV)
        report.sessions.to_csv(written[-1], index=False)
    written[1].write_text(json.dumps(report_json(report), indent=1, default=str), encoding="utf-8")
    figures = write_figures(
        report.summary,
        folder,
        band=band,
        on_step=progress.step if progress else None,
        steps=report.agent_steps,
    )
    written += [f.path for f in figures]
    html_path = folder / REPORT_HTML
    html_path.write_text(render_html(report, figures), encoding="utf-8")
    written.append(html_path)
    if progress:
        progress.step("report.html")
    return written
