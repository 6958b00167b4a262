"""The points the sink writes: low-cardinality tags, numbers-only fields, millisecond timestamps."""

from __future__ import annotations

import math
from typing import Any

from influx_dataset import make_record, records_of

from grill_locust.record import RequestRecord
from grill_locust.sinks.influx import _SeriesClock
from grill_locust.sinks.line_protocol import phase_point, request_point, telemetry_point, tier_point


def parse_line(line: str) -> tuple[str, dict[str, str], dict[str, float], int]:
    """Good enough for lines without escaped spaces."""
    series, fields_text, time_text = line.split(" ")
    measurement, *tag_parts = series.split(",")
    tags = dict(part.split("=", 1) for part in tag_parts)
    fields = {name: float(value) for name, value in (part.split("=", 1) for part in fields_text.split(","))}
    return measurement, tags, fields, int(time_text)


def test_request_point_has_only_label_tags_and_numeric_fields() -> None:
    record = make_record(
        wall_start=1_700_000_000.1234, ttft_s=0.25, tpot_s=None, output_tokens=7, http_status=200
    )
    point = request_point(RequestRecord(**record), "worker-3")
    assert point is not None
    measurement, tags, fields, time_ms = parse_line(point.line())
    assert measurement == "grill_request"
    assert set(tags) == {
        "run_id", "target", "backend", "engine", "model", "conversation", "kind", "tier_users", "status", "worker",
    }  # fmt: skip
    assert tags["worker"] == "worker-3" and tags["tier_users"] == "1"
    assert fields["ttft_s"] == 0.25 and fields["output_tokens"] == 7.0 and fields["http_status"] == 200.0
    assert "tpot_s" not in fields  # None is left out, never written as 0
    for high_cardinality_or_text in (
        "record_id",
        "conversation_id",
        "tokens_source",
        "finish_reason",
        "error",
    ):
        assert high_cardinality_or_text not in fields and high_cardinality_or_text not in tags
    assert time_ms == 1_700_000_000_123
    assert all(isinstance(value, float) for value in point.fields.values())  # one type per field, always


def test_an_agent_step_is_tagged_with_its_step_and_still_carries_its_turn() -> None:
    point = request_point(record_of(kind="agentic", turn=7, prompt_tokens=12_000), "w")
    assert point is not None
    _, tags, fields, _ = parse_line(point.line())
    assert tags["step"] == "7" and tags["kind"] == "agentic"
    assert fields["turn"] == 7.0 and fields["prompt_tokens"] == 12_000.0
    first = request_point(record_of(kind="agentic", turn=0), "w")
    assert first is not None and parse_line(first.line())[1]["step"] == "0"  # step 0 is a value, not empty


def test_not_finite_numbers_are_left_out() -> None:
    point = request_point(record_of(ttft_s=math.nan, e2e_s=math.inf, output_tokens=3), "w")
    assert point is not None
    assert "ttft_s" not in point.fields and "e2e_s" not in point.fields


def test_tag_values_are_escaped() -> None:
    point = request_point(record_of(target="my backend,a=b/m/s", status="ok"), "w")
    assert point is not None
    assert r"target=my\ backend\,a\=b/m/s" in point.line()


def test_phase_point_is_stamped_at_the_event_and_carries_users() -> None:
    phase = {
        "run_id": "r",
        "target": "t",
        "backend": "b",
        "tier_index": 2,
        "tier_users": 10,
        "start_wall": 100.0,
    }
    start = phase_point("start", phase, "master", 100.0)
    end = phase_point("end", {**phase, "end_wall": 160.0}, "master", 160.5)
    assert start is not None and end is not None
    assert start.time_ms == 100_000 and end.time_ms == 160_500
    assert start.fields["users"] == 10.0 and end.fields["users"] == 0.0
    _, tags, fields, _ = parse_line(end.line())
    assert tags["event"] == "end" and tags["tier_users"] == "10"
    assert "start_wall" not in fields and "end_wall" not in fields


def test_tier_point_keeps_numbers_and_users_as_a_number() -> None:
    row = {
        "run_id": "r", "target": "t", "backend": "b", "conversation": "s", "kind": "fixed", "tier_users": 5, "tier_index": 1,
        "ttft_p50_s": 0.5, "success_rate": 1.0, "complete": True, "note": "text", "flags": "", "end_wall": 42.0,
    }  # fmt: skip
    point = tier_point(row, "master")
    assert point is not None
    _, tags, fields, time_ms = parse_line(point.line())
    assert tags["tier_users"] == "5" and tags["conversation"] == "s" and tags["kind"] == "fixed"
    assert fields == {
        "tier_index": 1.0,
        "ttft_p50_s": 0.5,
        "success_rate": 1.0,
        "complete": 1.0,
        "users": 5.0,
    }
    assert time_ms == 42_000


def test_telemetry_goes_to_grill_gpu_and_grill_engine() -> None:
    gpu = {"wall_time": 10.0, "kind": "gpu", "source": "h:9400", "backend": "", "host": "h", "gpu_index": 0,
           "gpu_uuid": "GPU-0", "gpu_name": "H100", "gpu_util_pct": 55.0, "kv_cache_usage": None}  # fmt: skip
    engine = {"wall_time": 11.0, "kind": "engine", "source": "vllm", "backend": "vllm", "host": "h",
              "gpu_index": None, "kv_cache_usage": 0.3, "gpu_util_pct": None}  # fmt: skip
    gpu_point, engine_point = telemetry_point(gpu, "run-1"), telemetry_point(engine, None)
    assert gpu_point is not None and engine_point is not None
    measurement, tags, fields, time_ms = parse_line(gpu_point.line())
    assert measurement == "grill_gpu" and time_ms == 10_000
    assert tags == {"source": "h:9400", "host": "h", "gpu_index": "0", "gpu_uuid": "GPU-0", "gpu_name": "H100",
                    "run_id": "run-1"}  # fmt: skip
    assert fields == {"gpu_util_pct": 55.0}
    measurement, tags, fields, _ = parse_line(engine_point.line())
    assert measurement == "grill_engine" and tags["backend"] == "vllm" and fields == {"kv_cache_usage": 0.3}


def test_points_of_one_series_never_share_a_millisecond() -> None:
    clock = _SeriesClock(memory_points=1000)
    points = [request_point(record_of(wall_start=5.0, output_tokens=i), "w") for i in range(5)]
    placed = [clock.place(point).time_ms for point in points if point is not None]
    assert placed == [5000, 5001, 5002, 5003, 5004]
    other_worker = request_point(record_of(wall_start=5.0), "w2")
    assert other_worker is not None and clock.place(other_worker).time_ms == 5000


def record_of(**values: Any) -> RequestRecord:
    return records_of([make_record(**values)])[0]
