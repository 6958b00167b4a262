"""A short Mooncake trace replayed end to end through Locust against a real llama.cpp `llama-server`: one
replay at the trace's own times, every row one ok record carrying its trace line, generated to the row's
output length (`ignore_eos`)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.real.campaigns import llama_backend
from tests.real.conftest import SERVED_MODEL, ServerProcess, run_campaign

pytestmark = pytest.mark.real

# 8 rows over 3.5 s, sized for llama-server's 1024-token slots (which slot serves a row, and so what it
# finds cached, is llama-server's choice: the simulator's test checks the cached blocks)
TRACE_ROWS = [
    {"timestamp": 0, "input_length": 520, "output_length": 6, "hash_ids": [1, 2]},
    {"timestamp": 400, "input_length": 600, "output_length": 4, "hash_ids": [1, 3]},
    {"timestamp": 900, "input_length": 200, "output_length": 8, "hash_ids": [4]},
    {"timestamp": 1500, "input_length": 90, "output_length": 5, "hash_ids": [5]},
    {"timestamp": 2000, "input_length": 700, "output_length": 3, "hash_ids": [1, 6]},
    {"timestamp": 2600, "input_length": 300, "output_length": 7, "hash_ids": [7]},
    {"timestamp": 3100, "input_length": 560, "output_length": 6, "hash_ids": [1, 8]},
    {"timestamp": 3500, "input_length": 150, "output_length": 4, "hash_ids": [9]},
]


def test_a_short_trace_replays_through_locust_every_row_recorded(
    llama_server: ServerProcess, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in TRACE_ROWS))
    scenario = {
        "name": "real-trace",
        "backends": [llama_backend(llama_server)],
        "models": [{"name": SERVED_MODEL, "temperature": 0.0}],
        "conversations": [{"name": "replay", "kind": "trace", "format": "mooncake", "path": str(trace)}],
        "targets": [{"backend": "llamacpp", "model": SERVED_MODEL, "conversation": "replay"}],
    }  # no load section: a trace runs at its own times
    run = run_campaign(scenario, tmp_path / "campaign", ["--pause", "0.5"])
    records = pd.read_parquet(run.run_dir / "records.parquet").sort_values("trace_line")
    assert (records["status"] == "ok").all(), records["error"].dropna().unique()
    assert records["trace_line"].tolist() == list(range(len(TRACE_ROWS)))
    assert records["output_tokens"].tolist() == [row["output_length"] for row in TRACE_ROWS]
    offsets = (records["scheduled_wall"] - records["scheduled_wall"].iloc[0]).to_numpy()
    assert offsets == pytest.approx([row["timestamp"] / 1000 for row in TRACE_ROWS], abs=1e-3)
    assert records["schedule_lag_s"].median() < 0.020
    phases = pd.read_csv(run.run_dir / "phases.csv")
    assert len(phases) == 1 and bool(phases["complete"].iloc[0])
    print(f"llama-server trace replay: {run.wall_s:.1f} s")
