"""`grill report` and `grill compare` end to end on results folders; report.html checked in headless Chromium."""

from __future__ import annotations

import argparse
import io
import json
import re
from pathlib import Path

import pytest
from PIL import Image
from report_chromium import view_page

from grill_locust.errors import GrillError
from grill_locust.report import cli
from tests.synthetic import (
    ENGINE_SHAPES,
    synthetic_records,
    to_older_column_names,
    write_results_folder,
)

CONVERSATIONS = ("multi-turn-session", "short-baseline")


def grill(*argv: str) -> int:
    """Run `grill report|compare ...` through this package's parser (the router adds nothing else)."""
    parser = argparse.ArgumentParser(prog="grill")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in ("report", "compare"):
        cli.configure_parser(subparsers.add_parser(name), name)
    return cli.run(parser.parse_args(list(argv)))


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    """The seed's vLLM with and without prefix caching: same backend name, two runs."""
    root = tmp_path_factory.mktemp("results")
    with_cache = synthetic_records(
        1500, backends=("vllm", "llamacpp"), conversations=CONVERSATIONS, run_id="r-cache", seed=1
    )
    without_cache = synthetic_records(
        1500,
        backends=("vllm",),
        conversations=CONVERSATIONS,
        run_id="r-nocache",
        seed=2,
        shapes={"vllm": ENGINE_SHAPES["vllm-no-prefix-cache"]},
    )
    first = write_results_folder(root / "r-cache", with_cache, meta={"slo": {"ttft_p50_s": 2.0}})
    second = write_results_folder(root / "r-nocache", without_cache)
    return first, second


@pytest.fixture(scope="module")
def report_dir(two_runs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    assert grill("report", str(two_runs[0]), "--out", str(out), "--no-progress") == 0
    return out


def test_report_writes_html_summaries_and_figures(report_dir):
    names = sorted(p.name for p in report_dir.iterdir())
    assert names == [
        "grid.png",
        "metrics-multi-turn-session.png",
        "metrics-short-baseline.png",
        "report.html",
        "summary.csv",
        "summary.json",
    ]
    summary = json.loads((report_dir / "summary.json").read_text())
    assert {t["series"] for t in summary["tiers"]} == {"vllm", "llamacpp"}
    # no agent sessions: no sessions.csv (the list above), no step table, empty session figures
    assert "agent_steps" not in summary and "Agent sessions" not in (report_dir / "report.html").read_text()
    assert all(t["sessions"] is None and t["session_wait_p50_s"] is None for t in summary["tiers"])
    assert len(summary["tiers"]) == 2 * 2 * 4  # backends x conversations x tiers
    assert summary["slo"] == {"ttft_p50_s": 2.0, "e2e_p50_s": 10.0, "success_rate": 0.99}
    assert {c["conversation"] for c in summary["capacity"]} == set(CONVERSATIONS)
    assert any(t["turn"] == 3 for t in summary["turns"])
    assert summary["recommendations"][0]["recommendation"].startswith("for multi-turn-session, vllm holds")


def test_report_html_is_self_contained(report_dir):
    page = (report_dir / "report.html").read_text()
    assert "<script" not in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched from the network
    assert page.count('<img alt="') == 3
    assert page.count('src="data:image/png;base64,') == 3


def test_report_defaults_to_a_folder_inside_the_run(two_runs, tmp_path):
    run = write_results_folder(
        tmp_path / "run", synthetic_records(200, backends=("vllm",), conversations=CONVERSATIONS)
    )
    assert grill("report", str(run), "--no-progress") == 0
    assert (run / "report" / "report.html").is_file()


def test_format_table_prints_tables_and_writes_nothing(capsys, tmp_path):
    records = synthetic_records(1500, backends=("vllm", "llamacpp"), conversations=CONVERSATIONS, seed=1)
    run = write_results_folder(tmp_path / "run", records)
    assert grill("report", str(run), "--format", "table", "--slo-ttft-p50", "1.5") == 0
    printed = capsys.readouterr().out
    assert "SLO: TTFT p50 <= 1.5 s" in printed
    assert "vllm · multi-turn-session" in printed and "TTFT p50 s" in printed
    assert "multi-turn-session (per turn)" in printed
    assert "Capacity at SLO" in printed
    assert "for short-baseline, vllm holds" in printed
    assert sorted(p.name for p in run.iterdir()) == ["phases.csv", "records.parquet", "run.json"]


def test_compare_has_one_series_per_run_and_backend(two_runs, tmp_path):
    out = tmp_path / "cmp"
    status = grill(
        "compare",
        "--label",
        f"cache-on={two_runs[0]}",
        "--label",
        f"cache-off={two_runs[1]}",
        "--out",
        str(out),
    )
    assert status == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {t["series"] for t in summary["tiers"]} == {"cache-on/vllm", "cache-on/llamacpp", "cache-off/vllm"}
    assert [r["label"] for r in summary["runs"]] == ["cache-on", "cache-off"]
    capacity = {(c["conversation"], c["series"]) for c in summary["capacity"]}
    assert ("multi-turn-session", "cache-off/vllm") in capacity and (
        "multi-turn-session",
        "cache-on/vllm",
    ) in capacity
    page = (out / "report.html").read_text()
    assert "cache-off/vllm" in page and "cache-on/vllm" in page and "grill-locust comparison" in page


def test_report_and_compare_read_folders_from_before_the_conversation_column(tmp_path):
    """`scenario` was the conversation's column and `kind` did not exist: such folders read as
    `conversation` with an empty kind, whether their records are in parquet or only in jsonl."""
    now = write_results_folder(
        tmp_path / "now",
        synthetic_records(400, backends=("vllm",), conversations=CONVERSATIONS, run_id="now"),
    )
    older = {}
    for records_format in ("parquet", "jsonl"):
        folder = write_results_folder(
            tmp_path / records_format,
            synthetic_records(400, backends=("sglang",), conversations=CONVERSATIONS, run_id=records_format),
            records_format=records_format,
        )
        to_older_column_names(folder)
        assert "scenario" in (folder / "phases.csv").read_text().splitlines()[0].split(",")
        older[records_format] = folder
        assert grill("report", str(folder), "--no-progress") == 0
        tiers = json.loads((folder / "report" / "summary.json").read_text())["tiers"]
        assert {t["conversation"] for t in tiers} == set(CONVERSATIONS)
        assert {t["kind"] for t in tiers} == {""} and all("scenario" not in t for t in tiers)

    out = tmp_path / "cmp"
    assert grill("compare", str(now), *map(str, older.values()), "--out", str(out), "--no-progress") == 0
    summary = json.loads((out / "summary.json").read_text())
    kinds = {(t["series"], t["conversation"]): t["kind"] for t in summary["tiers"]}
    assert kinds[("now/vllm", "multi-turn-session")] == "multi-turn"
    assert kinds[("jsonl/sglang", "multi-turn-session")] == kinds[("parquet/sglang", "short-baseline")] == ""
    capacity = {(c["conversation"], c["series"]) for c in summary["capacity"]}
    assert capacity == {
        (conversation, series)
        for conversation in CONVERSATIONS
        for series in ("now/vllm", "jsonl/sglang", "parquet/sglang")
    }


def test_compare_names_unlabelled_runs_by_run_id(two_runs, tmp_path):
    assert grill("compare", str(two_runs[0]), str(two_runs[1]), "--out", str(tmp_path), "--no-progress") == 0
    series = {t["series"] for t in json.loads((tmp_path / "summary.json").read_text())["tiers"]}
    assert series == {"r-cache/vllm", "r-cache/llamacpp", "r-nocache/vllm"}


def test_compare_errors_are_one_line(two_runs):
    with pytest.raises(GrillError, match="--out DIR is required"):
        grill("compare", str(two_runs[0]))
    with pytest.raises(GrillError, match="expected NAME=RUN_DIR"):
        grill("compare", "--label", "nolabel", "--out", "x")
    with pytest.raises(GrillError, match="no such results folder"):
        grill("report", "/nonexistent/run", "--format", "table")


def test_progress_bar_is_drawn_when_asked(two_runs, tmp_path, capsys):
    assert grill("report", str(two_runs[1]), "--out", str(tmp_path), "--progress") == 0
    err = capsys.readouterr().err
    assert "report.html" in err and "[" in err and "#" in err


def test_report_html_renders_in_headless_chromium(report_dir):
    view = view_page(report_dir / "report.html", timeout_s=90)
    assert view.console_errors == []
    assert view.title.startswith("grill-locust report")
    assert len(view.images) == 3
    for image in view.images:
        assert image["complete"] and image["naturalWidth"] > 0 and image["naturalHeight"] > 0
        assert image["levels"] > 20 and image["nonWhite"] > 100, image  # a plot, not a blank canvas
    fetched = [url for url in view.requested_urls if not url.startswith(("file:", "data:"))]
    assert fetched == []
    screenshot = Image.open(io.BytesIO(view.screenshot_png)).convert("L")
    assert screenshot.size == (1400, 1000)
    low, high = screenshot.getextrema()
    assert high - low > 100 and len(screenshot.getcolors(256) or []) > 20  # text and tables drawn, not blank


def test_the_grill_command_routes_report_and_compare(two_runs, capsys):
    from grill_locust.cli import main

    assert main(["report", str(two_runs[0]), "--format", "table"]) == 0
    assert "Capacity at SLO" in capsys.readouterr().out
    assert main(["compare", str(two_runs[0]), str(two_runs[1])]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "grill compare: --out DIR is required (the folder report.html goes to)"
    )


def test_a_run_that_recorded_nothing_still_reports(tmp_path, capsys):
    run = tmp_path / "crashed"
    run.mkdir()
    (run / "records.jsonl").write_text("")
    assert grill("report", str(run), "--format", "table") == 0
    assert "(no tiers)" in capsys.readouterr().out
    (run / "phases.csv").write_text(
        "run_id,target,backend,engine,model,conversation,kind,tier_index,tier_users,start_wall,end_wall,"
        "iterations_target,iterations_done,complete,note\n"
        "r,vllm/m/s,vllm,vllm,m,short-baseline,short-baseline,0,1,100,110,1,0,False,crashed\n"
    )
    assert grill("report", str(run), "--no-progress") == 0
    printed = capsys.readouterr().out
    assert "vllm: no successful requests to judge" in printed
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert summary["tiers"][0]["flags"] == "incomplete; no successful requests"
    assert "No tier has records" in (run / "report" / "report.html").read_text()


def test_compare_judges_all_runs_by_one_slo_and_says_so(two_runs, tmp_path):
    strict = write_results_folder(
        tmp_path / "strict",
        synthetic_records(300, backends=("sglang",), conversations=CONVERSATIONS, run_id="strict"),
        meta={"slo": {"ttft_p50_s": 0.5, "e2e_p50_s": 10.0, "success_rate": 0.99}},
    )
    out = tmp_path / "out"
    assert grill("compare", str(two_runs[0]), str(strict), "--out", str(out), "--slo-e2e-p50", "8") == 0
    report = json.loads((out / "summary.json").read_text())
    assert report["slo"] == {"ttft_p50_s": 2.0, "e2e_p50_s": 8.0, "success_rate": 0.99}
    assert len(report["notes"]) == 1 and "run strict declared a different SLO" in report["notes"][0]
    assert "run strict declared a different SLO" in (out / "report.html").read_text()
