"""Tier statistics on hand-made records: exact percentiles, throughput, cache ratio, multi-turn, flags."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from grill_locust.errors import GrillError
from grill_locust.record import percentile
from grill_locust.report import format_table, load_run, summarize, summarize_run, summarize_turns
from grill_locust.report.aggregate import SUMMARY_COLUMNS
from tests.synthetic import START_WALL, make_record, write_results_folder

TARGET = "sim/grill-sim/short-baseline"


def phase(tier_index: int, users: int, start: float, end: float, complete: bool = True, **labels) -> dict:
    row = {
        "run_id": "run",
        "target": TARGET,
        "backend": "sim",
        "engine": "sim",
        "model": "grill-sim",
        "conversation": "short-baseline",
        "kind": "short-baseline",
        "tier_index": tier_index,
        "tier_users": users,
        "start_wall": start,
        "end_wall": end,
        "iterations_target": 1,
        "iterations_done": 1 if complete else 0,
        "complete": complete,
        "note": "" if complete else "tier timeout",
    }
    row.update(labels)
    return row


def ten_ok_and_one_failure() -> list[dict]:
    records = [
        make_record(
            record_id=f"r{i}",
            ttft_s=i / 10,
            e2e_s=i,
            tpot_s=i / 100,
            itl_mean_s=i / 100,
            tokens_per_s=10.0 * i,
            output_tokens=100,
            prompt_tokens=200,
            cached_tokens=50 if i <= 5 else None,
            wall_start=START_WALL + i,
        )
        for i in range(1, 11)
    ]
    records.append(
        make_record(
            record_id="bad",
            status="http_500",
            ttft_s=100.0,
            e2e_s=100.0,
            output_tokens=999,
            cached_tokens=None,
        )
    )
    return records


def test_percentiles_are_exact_over_successful_requests_only(tmp_path):
    write_results_folder(
        tmp_path, ten_ok_and_one_failure(), phases=[phase(0, 1, START_WALL, START_WALL + 20)]
    )
    row = summarize(load_run(tmp_path)).iloc[0]

    assert row["requests"] == 11 and row["ok_requests"] == 10
    assert row["success_rate"] == pytest.approx(10 / 11)
    assert row["ttft_p50_s"] == pytest.approx(0.55)
    assert row["ttft_p90_s"] == pytest.approx(0.91)
    assert row["ttft_p99_s"] == pytest.approx(0.991)
    assert row["e2e_p99_s"] == pytest.approx(9.91)
    assert row["tpot_p90_s"] == pytest.approx(0.091)
    assert row["itl_p50_s"] == pytest.approx(0.055)
    assert row["request_tokens_per_s_p50"] == pytest.approx(55.0)
    ttfts = [i / 10 for i in range(1, 11)]
    assert row["ttft_p90_s"] == pytest.approx(percentile(ttfts, 90))  # same definition as record.py
    assert row["ttft_p99_s"] == pytest.approx(float(np.percentile(ttfts, 99)))


def test_throughput_uses_the_tier_span_from_phases(tmp_path):
    write_results_folder(
        tmp_path, ten_ok_and_one_failure(), phases=[phase(0, 1, START_WALL, START_WALL + 20)]
    )
    row = summarize(load_run(tmp_path)).iloc[0]
    assert row["span_s"] == pytest.approx(20.0)
    assert row["output_tokens_per_s"] == pytest.approx(
        10 * 100 / 20.0
    )  # the failed request's 999 not counted
    assert row["requests_per_s"] == pytest.approx(10 / 20.0)


def test_tier_span_falls_back_to_first_start_and_last_end_without_phases(tmp_path):
    write_results_folder(tmp_path, ten_ok_and_one_failure(), phases=[])
    run = load_run(tmp_path)
    row = summarize(run).iloc[0]
    # first start: the failed record at START_WALL, which also ends last (its e2e is 100 s)
    assert row["span_s"] == pytest.approx(100.0)
    assert row["complete"]


def test_cached_ratio_counts_requests_that_report_cached_tokens(tmp_path):
    write_results_folder(tmp_path, ten_ok_and_one_failure())
    row = summarize(load_run(tmp_path)).iloc[0]
    assert row["cached_token_ratio"] == pytest.approx(5 * 50 / (5 * 200))


def test_multi_turn_reports_turns_ratio_and_context_growth(tmp_path):
    records = []
    for conversation in range(2):
        for turn in range(3):
            records.append(
                make_record(
                    record_id=f"c{conversation}t{turn}",
                    target="vllm/m/multi-turn-session",
                    backend="vllm",
                    conversation="multi-turn-session",
                    kind="multi-turn",
                    conversation_id=f"c{conversation}",
                    turn=turn,
                    ttft_s=(turn + 1) * 0.1 + conversation * 0.02,  # turn p50: 0.11, 0.21, 0.31
                    e2e_s=(turn + 1) * 1.0,
                    prompt_tokens=1000 * (turn + 1),
                )
            )
    write_results_folder(tmp_path, records)
    run = load_run(tmp_path)
    row = summarize(run).iloc[0]
    assert row["turns"] == 3
    assert row["ttft_turn_ratio"] == pytest.approx(0.31 / 0.11)
    assert row["e2e_turn_ratio"] == pytest.approx(3.0)
    assert row["context_growth"] == pytest.approx(3.0)
    turns = summarize_turns(run)
    assert turns["turn"].tolist() == [0, 1, 2]
    assert turns["ttft_p50_s"].tolist() == pytest.approx([0.11, 0.21, 0.31])
    assert turns["ok_requests"].tolist() == [2, 2, 2]


def test_single_turn_targets_have_no_turn_columns(tmp_path):
    write_results_folder(tmp_path, ten_ok_and_one_failure())
    run = load_run(tmp_path)
    assert np.isnan(summarize(run).iloc[0]["ttft_turn_ratio"])
    assert len(summarize_turns(run)) == 0


def test_incomplete_and_saturated_tiers_are_flagged(tmp_path):
    # the timing lag judges: the read lag where every read was stamped, else the event-loop lag
    stamped_calm = {"worker_lag_p99_ms": 30.0, "worker_read_lag_p99_ms": 1.0}  # sends late, reads on time
    records = [make_record(record_id="a", tier_index=0, tier_users=1, worker_cpu=20.0, **stamped_calm)]
    records += [
        make_record(
            record_id=f"b{i}",
            tier_index=1,
            tier_users=5,
            worker_lag_p99_ms=40.0,
            worker_read_lag_p99_ms=12.0,
            worker_cpu=20.0,
        )
        for i in range(3)
    ]
    records += [
        make_record(record_id="c", tier_index=2, tier_users=10, worker_cpu=95.0, **stamped_calm),
        make_record(  # TLS: no stamps, so the event loop's lag is in the timings
            record_id="d",
            tier_index=3,
            tier_users=20,
            worker_lag_p99_ms=7.0,
            worker_read_lag_p99_ms=None,
            worker_cpu=20.0,
        ),
    ]
    phases = [
        phase(0, 1, START_WALL, START_WALL + 10),
        phase(1, 5, START_WALL + 20, START_WALL + 30),
        phase(2, 10, START_WALL + 40, START_WALL + 50, complete=False),
        phase(3, 20, START_WALL + 60, START_WALL + 70),
    ]
    write_results_folder(tmp_path, records, phases=phases)
    summary = summarize(load_run(tmp_path))
    assert summary["saturated"].tolist() == [False, True, True, True]
    assert summary["flags"].iloc[0] == ""
    assert "saturated" in summary["flags"].iloc[1] and "lag p99 12.0 ms" in summary["flags"].iloc[1]
    assert "incomplete" in summary["flags"].iloc[2] and "cpu 95%" in summary["flags"].iloc[2]
    assert "lag p99 7.0 ms" in summary["flags"].iloc[3]
    table = format_table(summary)
    assert "incomplete" in table and "saturated" in table


def test_a_tiers_lag_p99_is_each_workers_last_record_and_the_highest_worker(tmp_path):
    """The self-check's window is the tier: a worker's last record of a tier carries its lag p99 over
    the whole tier; an early record's (over a few probes, so nearly their maximum) is superseded."""
    records = [
        # worker a: one late wake-up early in the tier, the tier's p99 on its last record
        make_record(record_id="a1", worker_id="a", wall_start=START_WALL + 1, worker_lag_p99_ms=40.0),
        make_record(record_id="a2", worker_id="a", wall_start=START_WALL + 8, worker_lag_p99_ms=1.5),
        make_record(record_id="a3", worker_id="a", wall_start=START_WALL + 4, worker_lag_p99_ms=9.0),
        # worker b: its last record ends after a's last one starts, with a higher p99
        make_record(record_id="b1", worker_id="b", wall_start=START_WALL + 2, worker_lag_p99_ms=0.5),
        make_record(record_id="b2", worker_id="b", wall_start=START_WALL + 7.5, worker_lag_p99_ms=2.5),
        make_record(record_id="b3", worker_id="b", wall_start=START_WALL + 9, worker_lag_p99_ms=None),
        # the next tier: a worker saturated throughout
        make_record(record_id="c1", worker_id="a", tier_index=1, tier_users=5, worker_lag_p99_ms=3.0),
        make_record(record_id="c2", worker_id="a", tier_index=1, tier_users=5, wall_start=START_WALL + 5,
                    worker_lag_p99_ms=7.0),
    ]  # fmt: skip
    write_results_folder(tmp_path, records, phases=[])
    summary = summarize(load_run(tmp_path))
    assert summary["worker_lag_p99_ms"].tolist() == [2.5, 7.0]
    assert summary["saturated"].tolist() == [False, True]


def test_a_tier_in_phases_without_records_still_has_a_row(tmp_path):
    records = [make_record(record_id="a", tier_index=0, tier_users=1)]
    phases = [
        phase(0, 1, START_WALL, START_WALL + 10),
        phase(1, 5, START_WALL + 20, START_WALL + 21, complete=False),
    ]
    write_results_folder(tmp_path, records, phases=phases)
    summary = summarize(load_run(tmp_path))
    assert summary["tier_users"].tolist() == [1, 5]
    assert summary["requests"].tolist() == [1, 0]
    assert "no successful requests" in summary["flags"].iloc[1]


def test_crashed_run_is_read_from_jsonl_with_a_cut_last_line(tmp_path):
    write_results_folder(tmp_path, ten_ok_and_one_failure(), phases=[], records_format="jsonl")
    with (tmp_path / "records.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"record_id": "half", "ttft_s": 0.')
    run = load_run(tmp_path)
    assert len(run.records) == 11
    assert summarize(run).iloc[0]["ttft_p50_s"] == pytest.approx(0.55)


def test_records_missing_newer_columns_are_filled(tmp_path):
    frame = pd.DataFrame(ten_ok_and_one_failure()).drop(
        columns=["retries", "worker_cpu", "worker_lag_p99_ms"]
    )
    tmp_path.mkdir(exist_ok=True)
    frame.to_parquet(tmp_path / "records.parquet")
    summary = summarize(load_run(tmp_path))
    assert not summary["saturated"].iloc[0]
    assert list(summary.columns[: len(SUMMARY_COLUMNS)]) == SUMMARY_COLUMNS


def test_missing_results_folder_is_a_one_line_user_error(tmp_path):
    with pytest.raises(GrillError, match="no such results folder"):
        load_run(tmp_path / "nope")
    with pytest.raises(GrillError, match="records.parquet or records.jsonl"):
        load_run(tmp_path)


def test_summarize_run_writes_summary_csv(tmp_path):
    write_results_folder(tmp_path, ten_ok_and_one_failure(), meta={"slo": {"ttft_p50_s": 1.0}})
    summary = summarize_run(tmp_path)
    written = pd.read_csv(tmp_path / "summary.csv")
    assert len(written) == len(summary) == 1
    assert written["ttft_p50_s"].iloc[0] == pytest.approx(0.55)
    assert json.loads((tmp_path / "run.json").read_text())["slo"] == {"ttft_p50_s": 1.0}


def test_telemetry_columns_join_their_tier_and_get_a_gpu_figure(tmp_path):
    from grill_locust.config import Slo
    from grill_locust.report.build import LabelledRun, assemble
    from grill_locust.report.write import write_report
    from grill_locust.samples import KIND_GPU, empty_sample

    records = [
        make_record(record_id=f"a{i}", tier_index=0, tier_users=1, wall_start=START_WALL + i)
        for i in range(3)
    ]
    records += [
        make_record(record_id=f"b{i}", tier_index=1, tier_users=4, wall_start=START_WALL + 100 + i)
        for i in range(3)
    ]
    phases = [phase(0, 1, START_WALL, START_WALL + 10), phase(1, 4, START_WALL + 100, START_WALL + 110)]
    write_results_folder(tmp_path, records, phases=phases)
    samples = []
    for second, util in [(1, 40.0), (5, 60.0), (101, 90.0), (105, 100.0)]:
        sample = empty_sample(KIND_GPU, START_WALL + second, "exporter:9400", "", "gpu-host")
        sample.update(gpu_index=0, gpu_uuid="GPU-0", gpu_name="H100", gpu_util_pct=util)
        sample.update(mem_used_bytes=int(util) * 2**30, power_w=300.0)
        samples.append(sample)
    pd.DataFrame(samples).to_parquet(tmp_path / "telemetry.parquet")

    run = load_run(tmp_path)
    summary = summarize(run)
    assert summary["gpu_util_mean"].tolist() == pytest.approx([50.0, 95.0])
    assert summary["vram_peak_bytes"].tolist() == pytest.approx([60 * 2**30, 100 * 2**30])
    report = assemble([LabelledRun("run", run)], Slo(), compare=False)
    written = write_report(report, tmp_path / "report")
    assert tmp_path / "report" / "gpu-short-baseline.png" in written
    page = (tmp_path / "report" / "report.html").read_text()
    assert "GPU util %" in page and "VRAM peak GiB" in page


def test_requests_our_stop_cut_short_count_as_neither_failures_nor_requests(tmp_path):
    records = ten_ok_and_one_failure()
    records += [
        make_record(record_id=f"c{i}", status="stream_cut", error="cancelled", ttft_s=None, e2e_s=0.5)
        for i in range(3)
    ]
    records.append(make_record(record_id="cut", status="stream_cut", error="connection reset"))
    write_results_folder(tmp_path, records)
    row = summarize(load_run(tmp_path)).iloc[0]
    assert (row["requests"], row["ok_requests"], row["cancelled"]) == (12, 10, 3)
    assert row["success_rate"] == pytest.approx(10 / 12)
    assert "cancelled" in format_table(summarize(load_run(tmp_path)))


def test_a_plain_runs_tier_is_labelled_with_its_most_users_not_its_first_records(tmp_path):
    # without a campaign each record carries Locust's user count at its moment, growing while users spawn
    users = [1, 2, 3, 4, 4, 6, 6, 6]
    records = [
        make_record(record_id=f"r{i}", tier_users=n, wall_start=START_WALL + i) for i, n in enumerate(users)
    ]
    write_results_folder(tmp_path, records, phases=[])
    assert summarize(load_run(tmp_path))["tier_users"].tolist() == [6]


def test_a_stale_or_broken_parquet_gives_way_to_the_jsonl(tmp_path):
    from grill_locust.sinks.results import ResultsWriter

    records = ten_ok_and_one_failure()
    writer = ResultsWriter(tmp_path, {"run_id": "run"}, {})
    writer.write_records(records[:5])
    writer.write_phase("end", phase(0, 1, START_WALL, START_WALL + 20, complete=True))
    writer.close()  # a clean close: records.parquet holds the five
    writer = ResultsWriter(tmp_path, {"run_id": "run"}, {}, resume=True)
    assert not (tmp_path / "records.parquet").exists()
    writer.write_records(records[5:])  # the resumed run, not closed yet (or crashed)
    assert len(load_run(tmp_path).records) == 11
    writer.close()
    (tmp_path / "records.parquet").write_bytes(b"PAR1 cut short by a kill")
    (tmp_path / "phases.csv").write_text("")  # killed while it was written
    run = load_run(tmp_path)
    assert len(run.records) == 11 and len(run.phases) == 1  # phases derived from the records


def test_a_crashed_runs_telemetry_is_read_from_its_jsonl(tmp_path):
    from grill_locust.samples import KIND_GPU, empty_sample
    from grill_locust.sinks.results import ResultsWriter

    writer = ResultsWriter(tmp_path, {"run_id": "run"}, {})
    writer.write_records(ten_ok_and_one_failure())
    sample = empty_sample(KIND_GPU, START_WALL + 5, "gpu0:9835", "", "gpu0")
    sample.update(gpu_index=0, gpu_util_pct=90.0)
    writer.write_telemetry([sample, {**sample, "wall_time": START_WALL + 6}])
    # no close: the process died; telemetry.jsonl is all there is, with a cut last line
    with (tmp_path / "telemetry.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"kind": "gpu", "wall_time": 1')
    run = load_run(tmp_path)
    assert run.telemetry is not None and run.telemetry["gpu_util_pct"].tolist() == [90.0, 90.0]
    assert summarize(run)["gpu_util_mean"].iloc[0] == pytest.approx(90.0)
