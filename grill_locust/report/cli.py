"""`grill report RUN_DIR` and `grill compare RUN... [--label NAME=RUN]`: tables, figures, report.html."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grill_locust.config import Slo
from grill_locust.errors import GrillError
from grill_locust.report.build import Report, assemble, load_runs
from grill_locust.report.capacity import conversation_slos_of_run, slo_of_run
from grill_locust.report.confidence import COMPARE_CONFIDENCE, CONFIDENCE
from grill_locust.report.figures import figure_count
from grill_locust.report.progress import Progress
from grill_locust.report.tables import (
    format_agent_steps,
    format_capacity,
    format_searches,
    format_table,
    format_turns,
    format_verdicts,
)
from grill_locust.report.write import write_report

DEFAULT_REPORT_SUBDIR = "report"
FORMAT_HTML = "html"
FORMAT_TABLE = "table"


# each subcommand this module serves, with its one-line help (grill_locust/command.py)
COMMANDS = {
    "report": "turn a run's results into tables, figures and report.html",
    "compare": "compare several runs in one report",
}


def configure_parser(parser: argparse.ArgumentParser, name: str) -> None:
    if name == "compare":
        parser.add_argument("runs", nargs="*", metavar="RUN_DIR", help="results folders (results/<run_id>)")
        parser.add_argument(
            "--label",
            action="append",
            default=[],
            metavar="NAME=RUN_DIR",
            help="a results folder with the name its series get (repeatable), e.g. --label cache-off=results/r2",
        )
        parser.add_argument(
            "--out", metavar="DIR", help="where report.html, summary.* and figures go (required for html)"
        )
    else:
        parser.add_argument("run_dir", metavar="RUN_DIR", help="a results folder (results/<run_id>)")
        parser.add_argument(
            "--out", metavar="DIR", help=f"output folder (default: RUN_DIR/{DEFAULT_REPORT_SUBDIR})"
        )
    parser.add_argument(
        "--format",
        choices=(FORMAT_HTML, FORMAT_TABLE),
        default=FORMAT_HTML,
        help="html: write report.html, summary.csv/json and PNGs; table: print the tables to the terminal",
    )
    parser.add_argument(
        "--slo-ttft-p50", type=float, metavar="S", help="SLO: TTFT p50 at most S seconds (default 2)"
    )
    parser.add_argument(
        "--slo-e2e-p50", type=float, metavar="S", help="SLO: E2E p50 at most S seconds (default 10)"
    )
    parser.add_argument(
        "--slo-success",
        type=float,
        metavar="FRACTION",
        help="SLO: success rate at least FRACTION (default 0.99)",
    )
    parser.add_argument("--slo-ttft", type=float, metavar="S", help="SLO per request: TTFT at most S seconds")
    parser.add_argument(
        "--slo-tpot-ms", type=float, metavar="MS", help="SLO per request: TPOT at most MS milliseconds"
    )
    parser.add_argument("--slo-e2e", type=float, metavar="S", help="SLO per request: E2E at most S seconds")
    parser.add_argument(
        "--slo-percentile",
        type=float,
        metavar="P",
        help="a tier meets the per-request limits when their P-th percentile does (50, 90, 95 or 99)",
    )
    parser.add_argument(
        "--slo-attainment",
        type=float,
        metavar="FRACTION",
        help="a tier meets the per-request limits when at least FRACTION of its requests meet all of them",
    )
    parser.add_argument(
        "--band", action=argparse.BooleanOptionalAction, default=True, help="shade p50 to p90 in figures"
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar (default: on a terminal)",
    )
    parser.set_defaults(_report_kind=name)


def _run_dirs(args: argparse.Namespace) -> list[tuple[str | None, str]]:
    if args._report_kind != "compare":
        return [(None, args.run_dir)]
    pairs: list[tuple[str | None, str]] = [(None, run) for run in args.runs]
    for item in args.label:
        name, sep, run_dir = item.partition("=")
        if not sep or not name or not run_dir:
            raise GrillError(f"--label {item!r}: expected NAME=RUN_DIR")
        pairs.append((name, run_dir))
    if not pairs:
        raise GrillError("give at least one results folder (RUN_DIR or --label NAME=RUN_DIR)")
    return pairs


def _slo(args: argparse.Namespace, report_meta: dict) -> Slo:
    return slo_of_run(
        report_meta,
        ttft_p50_s=args.slo_ttft_p50,
        e2e_p50_s=args.slo_e2e_p50,
        success_rate=args.slo_success,
        ttft_s=args.slo_ttft,
        tpot_ms=args.slo_tpot_ms,
        e2e_s=args.slo_e2e,
        percentile=args.slo_percentile,
        attainment=args.slo_attainment,
    )


def print_tables(report: Report) -> None:
    print(f"SLO: {report.slo.describe()}")
    for conversation, slo in report.conversation_slos.items():
        print(f"SLO of {conversation}: {slo.describe()}")
    for note in report.notes:
        print(f"note: {note}")
    print()
    print(format_table(report.summary))
    for detail in (format_turns(report.turns), format_agent_steps(report.agent_steps)):
        if detail:
            print()
            print(detail)
    print()
    print("Capacity at SLO")
    print(format_capacity(report.capacity))
    print()
    if len(report.searches):
        print("Capacity search")
        print(format_searches(report.searches))
        print()
    for text in report.recommendations["recommendation"]:
        print(text)
    print_verdicts(report)


def print_verdicts(report: Report) -> None:
    """`grill compare`: whether each run differs from the first beyond the bootstrap intervals, and the
    runs that share no tier with it."""
    for line in report.nothing_compared:
        print(line)
    if len(report.verdicts):
        print()
        print(
            f"Differences from the first run (bootstrap of the difference, {COMPARE_CONFIDENCE * 100:g} % "
            f"per figure, {CONFIDENCE * 100:g} % per tier; change and interval in %)"
        )
        print(format_verdicts(report.verdicts))


def run(args: argparse.Namespace) -> int:
    pairs = _run_dirs(args)
    compare = args._report_kind == "compare"
    if compare and args.format == FORMAT_HTML and not args.out:
        raise GrillError("--out DIR is required (the folder report.html goes to)")
    progress = Progress(total=2 * len(pairs), enabled=args.progress)
    runs = load_runs(pairs, progress)
    slo = _slo(args, runs[0].run.meta)
    conversation_slos = conversation_slos_of_run(runs[0].run.meta, slo)
    report = assemble(runs, slo, compare=compare, progress=progress, conversation_slos=conversation_slos)
    if args.format == FORMAT_TABLE:
        progress.close()
        print_tables(report)
        return _exit_code(report)
    out_dir = Path(args.out) if args.out else Path(args.run_dir) / DEFAULT_REPORT_SUBDIR
    progress.total += figure_count(report.summary, report.agent_steps) + 1
    written = write_report(report, out_dir, band=args.band, progress=progress)
    progress.close()
    for note in report.notes:
        print(f"note: {note}")
    for text in report.recommendations["recommendation"]:
        print(text)
    print_verdicts(report)
    print(f"wrote {len(written)} files to {out_dir}; open {out_dir / 'report.html'}", file=sys.stdout)
    return _exit_code(report)


def _exit_code(report: Report) -> int:
    """1 when `grill compare` was given a run it could compare nothing of (a script that gates on the
    verdict must not read silence as "no difference"), else 0."""
    return 1 if report.nothing_compared else 0
