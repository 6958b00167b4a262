"""Trace replay (workload/trace.py): each format read into rows with their window, speedup and cap;
paths read beside the scenario; prompts of exactly the row's input length whose blocks follow the
trace's hash ids; and on the simulated engine, prompt and output sizes and the prefix cache they reach."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grill_locust.client import EngineClient, request_for
from grill_locust.config import Backend, ConfigError, Model
from grill_locust.record import measure
from grill_locust.scenario import Conversation, Scenario, load_scenario, parse_scenario, validate_conversation
from grill_locust.sim import SimProcess
from grill_locust.sim.text import render_chat
from grill_locust.tokens import count_tokens
from grill_locust.workload import backend_token_counter, build_workload
from grill_locust.workload.generators import ConversationScript
from grill_locust.workload.trace import (
    BLOCK_TOKENS,
    TraceError,
    TraceSend,
    TraceWindow,
    read_trace,
    trace_schedule,
)
from tests.workload.test_measured import counter

TRACES = Path(__file__).parent / "traces"
MOONCAKE = str(TRACES / "mooncake.jsonl")
AZURE = str(TRACES / "azure.csv")
BURSTGPT = str(TRACES / "burstgpt.csv")
MODEL = "grill-sim"
NATURAL_OUTPUT_TOKENS = 3  # the simulator's answers stop this early unless asked to ignore EOS


def replay(**fields: Any) -> Conversation:
    return validate_conversation({"name": "replay", "kind": "trace", **fields})


def script(
    conversation: Conversation, iteration: int, replay_key: str = "s1-p0a0", **kw: Any
) -> ConversationScript:
    found = build_workload(conversation, **kw).script(replay_key, iteration)
    assert isinstance(found, ConversationScript)
    return found


# ---- reading -----------------------------------------------------------------------------------


def test_mooncake_rows_keep_their_lines_lengths_hash_ids_and_times_from_the_first_row() -> None:
    rows = read_trace(MOONCAKE, "mooncake")
    assert [row.line for row in rows] == [0, 1, 2, 3, 5]  # line 4 is blank
    assert [row.at_s for row in rows] == [0.0, 0.25, 0.5, 1.5, 2.0]  # ms from the first row's 1000
    assert [(row.input_tokens, row.output_tokens) for row in rows][:2] == [(1100, 8), (700, 12)]
    assert rows[0].hash_ids == (11, 12, 13) and rows[4].hash_ids == (16, 17)


def test_azure_timestamps_are_read_to_the_tick_and_zero_lengths_kept() -> None:
    rows = read_trace(AZURE, "azure")
    assert [row.line for row in rows] == [0, 1, 2, 3]
    assert [row.at_s for row in rows] == pytest.approx([0.0, 1.31941, 4.314579, 7.31941], abs=1e-6)
    assert (rows[2].input_tokens, rows[2].output_tokens, rows[2].hash_ids) == (0, 0, None)


def test_burstgpt_rows_by_column_name_in_seconds() -> None:
    rows = read_trace(BURSTGPT, "burstgpt")
    assert [row.at_s for row in rows] == [0.0, 40.0, 113.0, 113.0, 255.0]
    assert [(row.input_tokens, row.output_tokens) for row in rows][1] == (1087, 230)


def test_window_speedup_and_max_requests() -> None:
    window = TraceWindow(start_s=0.5, duration_s=1.5)  # trace seconds from the file's first row
    rows = read_trace(MOONCAKE, "mooncake", window)
    assert [(row.line, row.at_s) for row in rows] == [(2, 0.0), (3, 1.0)]  # times from the window's first
    faster = read_trace(MOONCAKE, "mooncake", TraceWindow(speedup=4.0))
    assert [row.at_s for row in faster] == [0.0, 0.0625, 0.125, 0.375, 0.5]
    capped = read_trace(BURSTGPT, "burstgpt", TraceWindow(start_s=40, max_requests=2))
    assert [(row.line, row.at_s) for row in capped] == [(1, 0.0), (2, 73.0)]


def test_schedule_is_each_row_at_its_time_by_iteration() -> None:
    rows = read_trace(MOONCAKE, "mooncake", TraceWindow(speedup=2.0))
    assert trace_schedule(rows) == [
        TraceSend(0.0, 0),
        TraceSend(0.125, 1),
        TraceSend(0.25, 2),
        TraceSend(0.75, 3),
        TraceSend(1.0, 4),
    ]


def test_relative_path_reads_beside_the_scenario_file_or_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "scenarios"
    (folder / "traces").mkdir(parents=True)
    (folder / "traces" / "t.csv").write_text(Path(AZURE).read_text())
    data = {
        "backends": [{"name": "sim", "engine": "sim"}],
        "models": [{"name": "m"}],
        "conversations": [{"name": "replay", "kind": "trace", "format": "azure", "path": "traces/t.csv"}],
        "targets": [{"conversation": "replay"}],
    }
    import yaml

    (folder / "s.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(tmp_path)  # not the scenario's folder
    loaded = load_scenario(folder / "s.yaml")
    assert loaded.targets[0].conversation.path == str(folder / "traces" / "t.csv")
    assert Scenario.from_wire(loaded.to_wire()) == loaded  # workers get the absolute path
    with pytest.raises(ConfigError, match=r"data: conversations\[0\]\.path: .*: no such file"):
        parse_scenario(data, "data")  # from data: read from the working directory, where it is not
    monkeypatch.chdir(folder)
    assert parse_scenario(data, "data").targets[0].conversation.path == str(folder / "traces" / "t.csv")


def test_a_trace_key_on_another_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="speedup: not used by kind 'short-baseline'"):
        validate_conversation({"name": "c", "kind": "short-baseline", "speedup": 2})


# ---- prompts -----------------------------------------------------------------------------------


def blocks_shared(first: str, second: str) -> int:
    """Whole blocks' worth of tokens two prompts share from their start."""
    shared = 0
    while shared < min(len(first), len(second)) and first[shared] == second[shared]:
        shared += 1
    return count_tokens(first[:shared]) // BLOCK_TOKENS


@pytest.mark.parametrize("measured", [False, True], ids=["approximate", "measured"])
def test_prompts_have_the_input_length_and_share_the_blocks_their_hash_ids_share(measured: bool) -> None:
    conversation = replay(format="mooncake", path=MOONCAKE)
    kw = {"token_counter": counter()} if measured else {}
    rows = read_trace(MOONCAKE, "mooncake")
    prompts = [script(conversation, index, **kw).user_turns[0] for index in range(len(rows))]
    assert [count_tokens(prompt) for prompt in prompts] == [row.input_tokens for row in rows]
    # hash ids [11, 12, 13], [11, 14], [11, 12, 15], [16], [16, 17]
    assert blocks_shared(prompts[0], prompts[2]) == 2
    assert blocks_shared(prompts[0], prompts[1]) == 1
    assert prompts[3] == prompts[4][: len(prompts[3]) - 1] + "\n"  # a cut block is the whole one's start
    assert prompts[0][:8] != prompts[3][:8]  # different hash ids differ from the first token


def test_script_asks_the_rows_output_length_with_ignore_eos_and_names_its_line() -> None:
    conversation = replay(format="azure", path=AZURE)
    row = script(conversation, 3)
    assert (row.max_tokens, row.trace_line, len(row.user_turns)) == (80, 3, 1)
    assert conversation.sending(Model(name="m")).ignore_eos  # the kind's default
    empty = script(conversation, 2)  # 0 and 0 in the trace: an engine takes neither
    assert (count_tokens(empty.user_turns[0]), empty.max_tokens) == (1, 1)


def test_another_replay_shares_no_block_with_the_first() -> None:
    conversation = replay(format="mooncake", path=MOONCAKE)
    first, again = (
        script(conversation, 0, "s1-p0a0").user_turns[0],
        script(conversation, 0, "s1-p0a0").user_turns[0],
    )
    other = script(conversation, 0, "s2-p0a0").user_turns[0]
    assert first == again
    assert first.split()[0] != other.split()[0]


def test_rows_without_hash_ids_share_nothing() -> None:
    conversation = replay(format="burstgpt", path=BURSTGPT)
    prompts = [script(conversation, index).user_turns[0] for index in range(5)]
    assert [count_tokens(prompt) for prompt in prompts] == [472, 1087, 417, 1360, 600]
    assert len({prompt.split()[0] for prompt in prompts}) == 5


def test_ignore_eos_reaches_the_body_only_where_the_engine_takes_it() -> None:
    messages = [{"role": "user", "content": "hi"}]
    model = Model(name="m", max_tokens=7)
    for engine, expected in (
        ("vllm", True),
        ("llamacpp", True),
        ("sglang", True),
        ("sim", True),
        ("tgi", None),
    ):
        backend = Backend(name="b", engine=engine, url="http://127.0.0.1:9")
        _, body = request_for(backend, model, messages, ignore_eos=True)
        assert body.get("ignore_eos") == expected, engine
        assert "ignore_eos" not in request_for(backend, model, messages)[1]
    completions = Backend(name="b", engine="vllm", url="http://127.0.0.1:9", api="completions")
    assert request_for(completions, model, messages, ignore_eos=True)[1]["ignore_eos"] is True


# ---- on the simulated engine ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_backend() -> Iterator[Backend]:
    args = ["--natural-output-tokens", str(NATURAL_OUTPUT_TOKENS)]
    with SimProcess.start(profile="vllm", served_model_name=MODEL, extra_args=args) as process:
        yield Backend(name="sim", engine="sim", url=process.url)


def send(backend: Backend, client: EngineClient, row: ConversationScript, ignore_eos: bool = True) -> Any:
    model = Model(name=MODEL, max_tokens=row.max_tokens or 1)
    messages = [{"role": "user", "content": row.user_turns[0]}]
    measurement = measure(client.stream(*request_for(backend, model, messages, ignore_eos=ignore_eos)).raw)
    assert measurement.status == "ok", measurement.error
    return measurement


def test_trace_rows_on_the_simulator_exact_sizes_and_cached_blocks(sim_backend: Backend) -> None:
    """The engine's prompt_tokens is the row's input length: the chat template's tokens, measured once
    through the backend's /tokenize, are taken off the prompt."""
    conversation = replay(format="mooncake", path=MOONCAKE)
    rows = read_trace(MOONCAKE, "mooncake")
    client = EngineClient(sim_backend)
    calibrated = backend_token_counter(sim_backend)
    assert calibrated is not None
    template_tokens = count_tokens(render_chat([{"role": "user", "content": ""}]))
    assert calibrated.turn_overhead_tokens == template_tokens  # the simulator's own template rule
    try:
        sent = [
            send(sim_backend, client, script(conversation, index, "sim-1", token_counter=calibrated))
            for index in range(len(rows))
        ]
        assert [m.prompt_tokens for m in sent] == [row.input_tokens for row in rows]
        assert [m.output_tokens for m in sent] == [row.output_tokens for row in rows]
        cached = [m.cached_tokens for m in sent]
        # hash ids [11, 12, 13], [11, 14], [11, 12, 15], [16], [16, 17]: the simulator caches 16-token blocks
        assert cached[0] < 16 and cached[3] < 16
        assert 512 <= cached[1] < 512 + 32
        assert 1024 <= cached[2] < 1024 + 32
        # row 3's prompt but the newline that ends its cut block, in whole 16-token blocks
        assert 299 - 15 <= cached[4] < 300 + template_tokens
        another_run = send(sim_backend, client, script(conversation, 0, "sim-2", token_counter=calibrated))
        assert another_run.cached_tokens < 16
    finally:
        client.close()


def test_on_the_completions_api_the_role_labels_are_taken_off_too() -> None:
    """A trace row sent as one plain-text prompt: its role labels are the API's overhead."""
    with SimProcess.start(profile="vllm", served_model_name=MODEL) as process:
        backend = Backend(name="sim-text", engine="sim", url=process.url, api="completions")
        calibrated = backend_token_counter(backend)
        assert calibrated is not None and calibrated.turn_overhead_tokens > 0
        client = EngineClient(backend)
        try:
            conversation = replay(format="azure", path=AZURE)
            sizes = []
            for index in (0, 1, 3):
                sent = send(backend, client, script(conversation, index, "text-1", token_counter=calibrated))
                sizes.append(sent.prompt_tokens)
            assert sizes == [374, 396, 500]  # tests/workload/traces/azure.csv
        finally:
            client.close()


def test_without_ignore_eos_the_simulator_stops_early(sim_backend: Backend) -> None:
    """The check above can fail: asked nothing, the simulator's answer stops by itself."""
    row = script(replay(format="azure", path=AZURE), 0, "sim-eos")  # 44 tokens of output
    client = EngineClient(sim_backend)
    try:
        assert send(sim_backend, client, row, ignore_eos=False).output_tokens < row.max_tokens
        assert send(sim_backend, client, row).output_tokens == row.max_tokens == 44
    finally:
        client.close()


# ---- hostile files: one line naming the place, never a traceback or a row that cannot be sent -----

NESTED = "[" * 100_000


@pytest.mark.parametrize(
    ("trace_format", "content", "said"),
    [
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 1000000000, "output_length": 1}\n',
            ":1: input_length",
        ),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 1, "output_length": 1000000000000}\n',
            ":1: output_length",
        ),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 1, "output_length": 1}\n'
            '{"timestamp": 1e15, "input_length": 1, "output_length": 1}\n',
            ":2: sent",
        ),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 1, "hash_ids": ' + NESTED + "}\n",
            ":1: not a JSON object",
        ),
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n0001-01-01 00:00:00+14:00,1,1\n",
            ":2: TIMESTAMP",
        ),
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46+99:99,1,1\n",
            ":2: TIMESTAMP",
        ),
        ("burstgpt", "Timestamp,Request tokens,Response tokens\n0," + "1" * 140_000 + ",1\n", ": not CSV"),
    ],
    ids=["input-1e9", "output-1e12", "gap-1e15-ms", "nested", "year-1-east", "zone-99", "cell-140k"],
)
def test_a_hostile_trace_is_one_line_naming_the_place(
    tmp_path: Path, trace_format: str, content: str, said: str
) -> None:
    path = tmp_path / ("t.jsonl" if trace_format == "mooncake" else "t.csv")
    path.write_text(content)
    with pytest.raises(TraceError) as raised:
        read_trace(str(path), trace_format)
    message = str(raised.value)
    assert message.startswith(f"{path}{said}") and "\n" not in message, message


def test_bytes_that_are_not_utf8_are_named_by_line_and_byte_in_it(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = b'{"timestamp": 0, "input_length": 1, "output_length": 1}\n'
    path.write_bytes(good * 3000 + b'{"timestamp": 1, "x": "\xff", "input_length": 1, "output_length": 1}\n')
    with pytest.raises(
        TraceError, match=rf"^{path}:3001: not UTF-8 text \(invalid start byte at byte 23 of the line\)"
    ):
        read_trace(str(path), "mooncake")
