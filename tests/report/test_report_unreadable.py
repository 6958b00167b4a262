"""`grill report` on a records.jsonl with lines it cannot read: it says how many and where (stdout,
summary.json, report.html) and flags the tiers whose figures may lack them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from grill_locust.report import load_run, summarize
from grill_locust.sinks.results import ResultsWriter
from tests.report.test_report_cli import grill
from tests.synthetic import synthetic_records, write_results_folder

BROKEN_AT = 5  # 1-based line of records.jsonl cut in the middle of a record of the second tier


def records_with_two_tiers() -> pd.DataFrame:
    records = synthetic_records(40, backends=("vllm",), conversations=("short-baseline",), tiers=(1, 5))
    return records.sort_values(["tier_index", "wall_start"], kind="stable").reset_index(drop=True)


def break_lines(path: Path) -> tuple[str, int]:
    """Cut line BROKEN_AT after its tier (a copy of a second-tier record, the original kept), and append a
    torn last line that names no tier. Returns the broken line's (target, tier_index)."""
    lines = path.read_text().splitlines()
    second_tier = next(line for line in lines if json.loads(line)["tier_index"] == 1)
    record = json.loads(second_tier)
    cut = second_tier[: second_tier.index('"ttft_s"') + 12]
    lines.insert(BROKEN_AT - 1, cut)
    path.write_text("\n".join(lines) + "\n" + '{"record_id":"torn","run_i')
    return record["target"], record["tier_index"]


def test_report_names_the_unreadable_lines_and_flags_the_tiers(tmp_path: Path, capsys) -> None:
    records = records_with_two_tiers()
    run = write_results_folder(tmp_path / "run", records, records_format="jsonl")
    target, tier = break_lines(run / "records.jsonl")
    last_line = len(records) + 2

    out = tmp_path / "report"
    assert grill("report", str(run), "--out", str(out), "--no-progress") == 0

    stdout = capsys.readouterr().out
    assert (
        f"2 unreadable lines in records.jsonl (lines {BROKEN_AT}, {last_line}; line {BROKEN_AT}: not JSON; "
        f"line {last_line}: not JSON)" in stdout
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"][0]["unreadable_record_lines"] == [
        {"line": BROKEN_AT, "target": target, "tier_index": tier, "reason": "not JSON"},
        {"line": last_line, "target": None, "tier_index": None, "reason": "not JSON"},
    ]
    # the cut line names its tier; the torn one names none, so it may belong to any tier
    flags = {row["tier_index"]: (row["unreadable_lines"], row["flags"]) for row in summary["tiers"]}
    assert flags == {0: (1, "1 unreadable record line"), 1: (2, "2 unreadable record lines")}
    assert sum(row["requests"] for row in summary["tiers"]) == len(records)
    html = (out / "report.html").read_text()
    assert f"lines {BROKEN_AT}, {last_line}" in html
    assert "<th>unreadable lines</th>" in html and '<td class="num">2</td>' in html


def test_a_clean_close_keeps_the_unreadable_lines_for_the_report_of_its_parquet(tmp_path: Path) -> None:
    records = records_with_two_tiers()
    write_results_folder(tmp_path, records.iloc[:30], records_format="jsonl")
    target, tier = break_lines(tmp_path / "records.jsonl")
    writer = ResultsWriter(tmp_path, {"run_id": "synthetic"}, {})  # a run that goes on in the folder
    writer.write_records(records.iloc[30:].to_dict("records"))
    writer.close()

    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert (
        lines[31] == '{"record_id":"torn","run_i'
    )  # ended where it was cut, the next record on its own line
    run = load_run(tmp_path)
    assert (tmp_path / "records.parquet").exists() and len(run.records) == len(records)
    assert [(u.line, u.target, u.tier_index) for u in run.unreadable_lines] == [
        (BROKEN_AT, target, tier),
        (32, None, None),
    ]
    assert summarize(run)["unreadable_lines"].tolist() == [1, 2]


def test_a_readable_folder_flags_nothing(tmp_path: Path) -> None:
    run = load_run(write_results_folder(tmp_path, records_with_two_tiers(), records_format="jsonl"))
    assert run.unreadable_lines == ()
    summary = summarize(run)
    assert summary["unreadable_lines"].tolist() == [0, 0] and (summary["flags"] == "").all()
