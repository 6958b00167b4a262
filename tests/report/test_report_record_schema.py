"""Lines of a real run's records.jsonl that are JSON objects but no record (a field of the wrong type, a
number that is not finite, a required field missing): never counted, named with their line and why, by
`grill report`, by a run's close (records.parquet) and by `--resume`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grill_locust.report import load_run, summarize
from grill_locust.sinks.results import ResultsWriter, read_records_table
from tests.report.test_report_cli import grill
from tests.run.conftest import only_run_dir, run_locust, write_scenario

pytestmark = pytest.mark.slow

REQUESTS = 20  # 2 developers x 10 iterations of one request


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A short closed-loop run against the simulated engine: 20 ok records, phases.csv, run.json."""
    workdir = tmp_path_factory.mktemp("run")
    scenario = {
        "name": "schema",
        "backends": [{"name": "sim", "engine": "sim", "profile": "vllm"}],
        "models": [{"name": "grill-sim", "max_tokens": 8, "ignore_eos": True}],
        "conversations": [{"name": "short", "kind": "short-baseline", "prompt_tokens": 40}],
        "targets": [{"backend": "sim", "model": "grill-sim", "conversation": "short"}],
        "load": {"tiers": [2], "iterations": 10, "pause_s": 0.1, "think_time_s": 0.01},
    }
    path = write_scenario(workdir / "s.yaml", scenario)
    done = run_locust(["--scenario", str(path), "--results-dir", str(workdir / "results")], workdir)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = only_run_dir(workdir / "results")
    assert len((run_dir / "records.jsonl").read_text().splitlines()) == REQUESTS
    return run_dir


def with_lines_that_are_no_record(real_run: Path, folder: Path, bad: list[str]) -> list[int]:
    """A copy of the run's folder without its parquet copies, `bad` inserted among its records (one after
    every third record); their 1-based line numbers."""
    shutil.copytree(real_run, folder)
    for parquet in folder.glob("*.parquet"):
        parquet.unlink()
    lines = (folder / "records.jsonl").read_text().splitlines()
    numbers = []
    for index, line in enumerate(bad):
        at = 3 * (index + 1) + index
        lines.insert(at, line)
        numbers.append(at + 1)
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n")
    return numbers


def nan_ttft_line(real_run: Path) -> str:
    """A whole record of tier 0, its ttft_s the string "NaN" (another record's id: not a duplicate)."""
    record = json.loads((real_run / "records.jsonl").read_text().splitlines()[0])
    return json.dumps({**record, "record_id": "copy-with-nan", "ttft_s": "NaN"})


WRONG_TYPES = '{"record_id":5,"tier_index":"x"}'


def test_the_report_counts_records_only_and_names_the_lines_that_are_none(real_run, tmp_path, capsys):
    folder = tmp_path / "run"
    nan_line, wrong_line = with_lines_that_are_no_record(
        real_run, folder, [nan_ttft_line(real_run), WRONG_TYPES]
    )

    assert grill("report", str(folder), "--out", str(tmp_path / "report"), "--no-progress") == 0

    stdout = capsys.readouterr().out
    assert (
        f"2 unreadable lines in records.jsonl (lines {nan_line}, {wrong_line}; "
        f"line {nan_line}: ttft_s is 'NaN', not a finite number; "
        f"line {wrong_line}: record_id is 5, not a string)"
    ) in stdout
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    (tier,) = summary["tiers"]
    assert tier["requests"] == REQUESTS and tier["ok_requests"] == REQUESTS
    assert tier["flags"] == "2 unreadable record lines"  # the NaN line names tier 0; the other no tier
    assert [line["line"] for line in summary["runs"][0]["unreadable_record_lines"]] == [nan_line, wrong_line]


def test_a_close_over_lines_that_are_no_record_writes_the_parquet_copy_and_lists_them(real_run, tmp_path):
    folder = tmp_path / "run"
    numbers = with_lines_that_are_no_record(real_run, folder, [nan_ttft_line(real_run), WRONG_TYPES])
    ResultsWriter(folder, json.loads((folder / "run.json").read_text()), {}).close()

    assert len(read_records_table(folder / "records.jsonl")[0]) == REQUESTS
    meta = json.loads((folder / "run.json").read_text())
    assert [line["line"] for line in meta["unreadable_record_lines"]] == numbers
    run = load_run(folder)  # from records.parquet now
    assert (folder / "records.parquet").is_file() and len(run.records) == REQUESTS
    assert [(u.line, u.reason) for u in run.unreadable_lines] == [
        (numbers[0], "ttft_s is 'NaN', not a finite number"),
        (numbers[1], "record_id is 5, not a string"),
    ]
    assert summarize(run)["requests"].tolist() == [REQUESTS]


def test_a_resume_keeps_lines_that_are_no_record_as_they_are(real_run, tmp_path):
    folder = tmp_path / "run"
    bad = [nan_ttft_line(real_run), WRONG_TYPES]
    with_lines_that_are_no_record(real_run, folder, bad)
    writer = ResultsWriter(folder, json.loads((folder / "run.json").read_text()), {}, resume=True)
    writer.close()
    lines = (folder / "records.jsonl").read_text().splitlines()
    assert len(lines) == REQUESTS + 2 and set(bad) <= set(lines)
    assert writer.record_count == REQUESTS


# Each a record of the run with one field made wrong: the fast column-wise read must not let it through.
BROKEN_FIELDS = {
    "a NaN literal": ('"ttft_s":', "NaN"),
    "infinity": ('"e2e_s":', "Infinity"),
    "a fraction for a count": ('"tier_index":', "0.5"),
    "a number for a label": ('"target":', "7"),
    "a string for a flag": ('"cooldown":', '"no"'),
    "a count beyond int64": ('"output_tokens":', str(2**64)),
    "an array for a number": ('"wall_start":', "[1]"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_FIELDS))
def test_every_reader_refuses_a_field_of_the_wrong_type(real_run, tmp_path, case):
    record = json.loads((real_run / "records.jsonl").read_text().splitlines()[0])
    record.pop("cooldown", None)
    field, value = BROKEN_FIELDS[case]
    line = json.dumps({**record, "record_id": "broken"}, separators=(",", ":"))
    start = line.index(field) + len(field) if field in line else None
    if start is None:  # a field the record leaves out: add it
        line = line[:-1] + f",{field}{value}}}"
    else:
        end = line.index(",", start)
        line = line[:start] + value + line[end:]
    folder = tmp_path / "run"
    (number,) = with_lines_that_are_no_record(real_run, folder, [line])
    table, unreadable = read_records_table(folder / "records.jsonl")
    assert table.num_rows == REQUESTS and "broken" not in table.column("record_id").to_pylist()
    assert [u.line for u in unreadable] == [number] and unreadable[0].reason


def test_a_line_of_two_records_and_one_missing_its_tier_are_no_record(real_run, tmp_path):
    record = json.loads((real_run / "records.jsonl").read_text().splitlines()[0])
    two = json.dumps({**record, "record_id": "a"}) + " " + json.dumps({**record, "record_id": "b"})
    untiered = json.dumps({k: v for k, v in record.items() if k != "tier_index"} | {"record_id": "c"})
    folder = tmp_path / "run"
    numbers = with_lines_that_are_no_record(real_run, folder, [two, untiered, "[" * 100_000])
    table, unreadable = read_records_table(folder / "records.jsonl")
    assert table.num_rows == REQUESTS
    assert [(u.line, u.reason) for u in unreadable] == [
        (numbers[0], "not JSON"),
        (numbers[1], "no tier_index"),
        (numbers[2], "not JSON"),
    ]
