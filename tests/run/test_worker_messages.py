"""The master/worker messages survive Locust's own serialisation, and a batch's records reach the
results folder as the users built them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import msgpack
import pytest

from grill_locust.record import RECORD_COLUMNS, RequestRecord
from grill_locust.run.messages import (
    Claim,
    Developer,
    Dispatched,
    Hello,
    PhaseMessage,
    RecordsBatch,
    Refused,
    Release,
    Wire,
)
from grill_locust.run.phase import Phase
from grill_locust.sinks.results import ResultsWriter
from tests.influx.influx_dataset import make_record, records_of


def over_locust(name: str, data: Wire) -> Wire:
    """The data as the other side's handler gets it: msgpack there and back, with the options of
    Locust's `rpc.protocol.Message` (not imported here: importing Locust patches the process)."""
    kind, wire, node = msgpack.loads(msgpack.dumps((name, data, "client-1")), raw=False, strict_map_key=False)
    assert (kind, node) == (name, "client-1")
    received: Wire = wire
    return received


def a_phase() -> Phase:
    return Phase(
        phase_id=3,
        run_id="run-1",
        target="sim/m/short",
        tier_index=1,
        tier_users=0,
        iterations_per_user=0,
        think_time_s=0.5,
        session="run-1.0",
        tier_rate=4.0,
        dispatchers=("w1", "w2"),
        duration_s=30.0,
        resplits=((12.5, ("w2",)),),
    )


MESSAGES = [
    RecordsBatch(
        "w1",
        records_of([make_record(record_id="r1", ttft_s=0.25, warmup=True), make_record(record_id="r2")]),
        {"run-1.0/3/0": 2},
        {"run-1.0/3/0": Dispatched(sends=40, waited=3)},
    ),
    PhaseMessage("run-1", "run-1.0", {"name": "s"}, a_phase(), 1_700_000_000.5),
    PhaseMessage("run-1", "run-1.0"),
    Hello(),
    Refused("w1", "INFLUX_TOKEN is not set"),
    Claim("run-1.0/3/0", "w1-u0"),
    Developer("run-1.0/3/0", "w1-u0", 7),
    Developer("run-1.0/3/0", "w1-u0", None),
    Release("run-1.0/3/0", "w1-u0"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_arrives_as_it_was_sent(message: RecordsBatch) -> None:
    assert type(message).from_wire(over_locust(message.name, message.to_wire())) == message


def test_a_batch_from_a_worker_whose_record_has_its_columns_in_another_order_reads_by_name() -> None:
    records = records_of([make_record(record_id="r1", ttft_s=0.25), make_record(record_id="r2", turn=3)])
    wire = RecordsBatch("w1", records).to_wire()
    order = list(reversed(RECORD_COLUMNS))
    rows = [dict(zip(RECORD_COLUMNS, row, strict=True)) for row in wire["records"]]
    wire = {**wire, "columns": order, "records": [[row[name] for name in order] for row in rows]}
    assert RecordsBatch.from_wire(over_locust(RecordsBatch.name, wire)).records == records


def test_records_jsonl_holds_each_record_as_its_columns_in_order(tmp_path: Path) -> None:
    record = records_of([make_record(record_id="r1", ttft_s=0.25, warmup=False, developer=2)])[0]
    sent = RecordsBatch.from_wire(over_locust(RecordsBatch.name, RecordsBatch("w1", [record]).to_wire()))
    writer = ResultsWriter(tmp_path / "run", {"run_id": "run-a"}, {})
    writer.write_records(sent.records)
    writer.close()
    line = (tmp_path / "run" / "records.jsonl").read_text().splitlines()[0]
    assert list(json.loads(line)) == list(RECORD_COLUMNS)
    assert json.loads(line) == dataclasses.asdict(record)
    assert RequestRecord(**json.loads(line)) == record
