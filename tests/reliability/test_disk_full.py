"""A results folder on a disk that fills mid-run (a real, small tmpfs): no record is lost or written twice
while space comes back; when it does not, the run stops and says how many records were not written."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from grill_locust.sinks import results as results_module
from grill_locust.sinks.results import ResultsWriter
from tests.real_binaries import unavailable
from tests.reliability.ledger import ledger
from tests.run.conftest import only_run_dir, sim_scenario, truth_once_it_holds, write_scenario
from tests.run.test_interrupt import SHORT, start_local, wait_for_lines
from tests.synthetic import make_record

pytestmark = pytest.mark.slow

DISK_BYTES = 1 << 20  # a run's folder takes ~100 KB here: room to start, soon filled by the filler
FULL_HOLD_S = 3.0  # how long the disk stays full in the case where space comes back
GIVE_UP_S = 3.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_BYTES mounted for the test, unmounted after it whatever happens."""
    mount_point = tmp_path / "results"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(disk: Path) -> Path:
    """Fill the disk to its last byte with one file; returns it."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (b"\0" * 65536, b"\0" * 4096, b"\0"):
            try:
                while True:
                    f.write(chunk)
            except OSError:
                pass
    return filler


def scenario(tmp_path: Path, truth: Path, tiers: list[int]) -> Path:
    data = sim_scenario(
        conversation=SHORT, tiers=tiers, iterations=8, max_tokens=16, sim_args={"truth_log": str(truth)}
    )
    return write_scenario(tmp_path / "s.yaml", data)


def wait_for_log(log: Path, text: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, f"no {text!r} in the log"
        time.sleep(0.1)


def record_lines(run_dir: Path) -> list[dict]:
    """records.jsonl, every line of which must be a whole record."""
    data = (run_dir / "records.jsonl").read_bytes()
    assert data.endswith(b"\n"), data[-200:]
    return [json.loads(line) for line in data.splitlines()]


def test_the_writer_holds_what_a_full_disk_refuses_up_to_its_bound_and_counts_the_rest(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results_module, "MAX_UNWRITTEN_RECORDS", 3)
    writer = ResultsWriter(small_disk / "run", {"run_id": "run"}, {})
    # each record longer than a page: none fits in the slack of the file's last page
    records = [make_record(record_id=f"r{i}", tier_index=i % 2, error="x" * 5000) for i in range(6)]
    writer.write_records(records[:1])
    filler = fill(small_disk)
    writer.write_records(records[1:6])
    writer.write_phase("end", {"target": records[0]["target"], "tier_index": 0, "complete": True})
    writer.write_telemetry([{"metric": "x", "value": 1.0}])
    assert writer.record_count == 1 and writer.unwritten_record_count == 5 and writer.held_record_count == 3
    assert writer.unwritten_of(records[0]["target"], 1) == (2, 1)  # r1, r3 held; r5 beyond the bound
    assert writer.unwritable_reason.startswith("no space left on device writing ")
    assert writer.unwritable_for_s() > 0

    filler.unlink()
    writer.write_records(records[:2])  # a batch resent: r0 is written, r1 held; neither goes twice
    assert writer.record_count == 4 and writer.unwritten_record_count == 2 and writer.unwritable_for_s() == 0
    writer.close()
    assert [r["record_id"] for r in record_lines(small_disk / "run")] == ["r0", "r1", "r2", "r3"]
    assert (small_disk / "run" / "phases.csv").read_text().count("\n") == 2
    assert (small_disk / "run" / "telemetry.jsonl").read_text() == '{"metric":"x","value":1.0}\n'


def test_a_disk_full_for_seconds_loses_no_record_and_writes_none_twice(
    tmp_path: Path, small_disk: Path
) -> None:
    truth = tmp_path / "truth.jsonl"
    proc = start_local(tmp_path, scenario(tmp_path, truth, tiers=[2, 3]))
    log = tmp_path / "out.log"
    wait_for_lines(small_disk, 4)
    filler = fill(small_disk)
    wait_for_log(log, "no space left on device writing", proc)
    time.sleep(FULL_HOLD_S)  # requests go on meanwhile: their records wait in memory
    filler.unlink()
    assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]

    run_dir = only_run_dir(small_disk)
    records = record_lines(run_dir)
    counts = Counter(r["record_id"] for r in records)
    truth_lines = truth_once_it_holds(truth, set(counts))
    served = {t["request_id"] for t in truth_lines}
    assert set(counts) == served and set(counts.values()) == {1}
    assert len(records) == 2 * 8 + 3 * 8
    accounts = ledger(
        "disk full for seconds", pd.DataFrame(records), truth_lines, pd.read_csv(run_dir / "phases.csv")
    )
    assert accounts.clean, accounts
    out = log.read_text()
    assert f"{len(records)} requests recorded" in out
    assert re.search(r"writable again .*every held record written", out)
    phases = (run_dir / "phases.csv").read_text().splitlines()
    assert [row.split(",")[-2] for row in phases[1:]] == ["True", "True"], phases


def test_a_disk_that_stays_full_stops_the_run_saying_how_many_records_are_missing(
    tmp_path: Path, small_disk: Path
) -> None:
    truth = tmp_path / "truth.jsonl"
    proc = start_local(tmp_path, scenario(tmp_path, truth, tiers=[3]), "--disk-full-give-up", str(GIVE_UP_S))
    log = tmp_path / "out.log"
    wait_for_lines(small_disk, 2)
    fill(small_disk)
    assert proc.wait(timeout=120) != 0, log.read_text()[-3000:]

    run_dir = only_run_dir(small_disk)
    written = {r["record_id"] for r in record_lines(run_dir)}
    out = log.read_text()
    stopped = re.search(r"for \d+ s: stopping the run; (\d+) records not written", out)
    assert stopped, out[-3000:]
    missing = re.search(r"(\d+) requests NOT written: no space left on device writing \S+records.jsonl", out)
    assert missing, out[-3000:]
    served = {t["request_id"] for t in truth_once_it_holds(truth, written, timeout_s=3)}
    assert written < served
    assert int(missing.group(1)) == len(served - written)
