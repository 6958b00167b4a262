"""`grill ping FILE`: a capability table per backend, simulated engines started for the check."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from client_replay import load
from client_servers import Request, Server

from grill_locust.cli import main


def write_scenario(tmp_path: Path, backends: str, targets: str) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(
        f"name: ping-test\nbackends:\n{backends}\nmodels:\n  - name: grill-sim\n    max_tokens: 8\n"
        f"conversations:\n  - name: short\n    kind: short-baseline\ntargets:\n{targets}\n"
        "load:\n  tiers: [1]\n  iterations: 1\n"
    )
    return str(path)


def table_rows(output: str) -> dict[str, list[str]]:
    lines = output.strip().splitlines()
    return {line.split()[0]: line.split() for line in lines[2:]}


def lists_and_streams(model: str, events: list[str]) -> Callable[[socket.socket, Request, Server], bool]:
    """An OpenAI-compatible server that lists `model` and streams `events`; 404 elsewhere."""
    models = json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]}).encode()
    stream = "".join(f"data: {e}\n\n" for e in events).encode()

    def handler(conn: socket.socket, request: Request, server: Server) -> bool:
        if request.path == "/v1/models":
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(models), models))
        elif request.path == "/v1/chat/completions":
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + stream
            )
        else:
            conn.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        return False

    return handler


@pytest.mark.slow
def test_ping_starts_a_simulated_engine_and_reports_every_capability(tmp_path: Path, capsys) -> None:
    scenario = write_scenario(
        tmp_path,
        "  - name: sim-vllm\n    engine: sim\n    profile: vllm",
        "  - backend: sim-vllm\n    model: grill-sim\n    conversation: short",
    )
    assert main(["ping", scenario]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:4] == ["backend", "engine", "url", "reachable"]
    row = table_rows(out)["sim-vllm"]
    assert row[1] == "sim" and row[2].startswith("http://127.0.0.1:")
    # reachable, listed, streams, usage, cached_tokens, /tokenize, /metrics; tools and fim not checked
    # (no agent sessions, no autocomplete)
    assert row[3:] == ["yes"] * 7 + ["-", "-"]


def test_ping_reports_an_unreachable_backend_and_exits_1(tmp_path: Path, capsys) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    scenario = write_scenario(
        tmp_path,
        f"  - name: gone\n    engine: vllm\n    url: http://127.0.0.1:{port}",
        "  - backend: gone\n    model: grill-sim\n    conversation: short",
    )
    assert main(["ping", scenario]) == 1
    row = table_rows(capsys.readouterr().out)["gone"]
    assert row[3:9] == ["no", "-", "-", "-", "-", "-"]
    assert " ".join(row[9:]).endswith("connection refused")


def test_ping_tells_a_missing_model_and_a_stream_without_usage(tmp_path: Path, capsys) -> None:
    events = [
        '{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}',
        "[DONE]",
    ]
    server = Server(lists_and_streams("other-model", events))
    scenario = write_scenario(
        tmp_path,
        f"  - name: proxy\n    engine: openai\n    url: {server.url}\n    api_key: sk-ping-secret-123456",
        "  - backend: proxy\n    model: grill-sim\n    conversation: short",
    )
    assert main(["ping", scenario]) == 0
    out = capsys.readouterr().out
    row = table_rows(out)["proxy"]
    assert row[3:10] == ["yes", "no", "yes", "no", "no", "-", "-"]
    assert "not listed: grill-sim" in out and "sk-ping-secret" not in out
    assert all(r.headers.get("authorization") == "Bearer sk-ping-secret-123456" for r in server.requests)
    server.close()


def test_ping_streams_over_the_backends_own_api_anthropics_messages_included(tmp_path: Path, capsys) -> None:
    models = json.dumps({"object": "list", "data": [{"id": "grill-sim", "object": "model"}]}).encode()
    stream = load("llamacpp_messages")  # a whole Anthropic reply: usage with cache_read_input_tokens

    def handler(conn: socket.socket, request: Request, server: Server) -> bool:
        if request.path == "/v1/models":
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(models), models))
        elif request.path == "/v1/messages":
            conn.sendall(stream)
        else:
            conn.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        return False

    server = Server(handler)
    scenario = write_scenario(
        tmp_path,
        f"  - name: anthropic\n    engine: litellm\n    api: messages\n    url: {server.url}",
        "  - backend: anthropic\n    model: grill-sim\n    conversation: short",
    )
    try:
        assert main(["ping", scenario]) == 0
    finally:
        server.close()
    row = table_rows(capsys.readouterr().out)["anthropic"]
    assert row[3:10] == ["yes", "yes", "yes", "yes", "yes", "-", "-"]  # streams, usage, cached: yes
    sent = [r for r in server.requests if r.method == "POST"]
    assert [r.path for r in sent] == ["/v1/messages"]
    assert (
        json.loads(sent[0].body)["max_tokens"] == 8 and sent[0].headers["anthropic-version"] == "2023-06-01"
    )


def test_ping_bad_timeout_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    scenario = write_scenario(
        tmp_path,
        "  - name: b\n    engine: vllm\n    url: http://127.0.0.1:9",
        "  - backend: b\n    model: grill-sim\n    conversation: short",
    )
    assert main(["ping", scenario, "--timeout", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--timeout" in err


def _command_lines() -> list[str]:
    """Every process's command line on this machine, as `ps` shows them to any user."""
    lines = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                lines.append(file.read().replace(b"\0", b" ").decode("utf-8", errors="replace"))
        except OSError:  # a process that ended meanwhile
            continue
    return lines


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads command lines from /proc")
def test_ping_passes_a_simulated_engines_key_through_its_environment_never_its_command_line(
    tmp_path: Path,
) -> None:
    key = "sk-sim-key-in-no-ps-7f3a9c"
    scenario = write_scenario(
        tmp_path,
        f"  - name: sim-keyed\n    engine: sim\n    api_key: {key}\n    sim_args:\n      api_key: {key}",
        "  - backend: sim-keyed\n    model: grill-sim\n    conversation: short",
    )
    ping = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from grill_locust.cli import main; sys.exit(main())",
            "ping",
            scenario,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    simulators_seen = 0
    while ping.poll() is None:
        lines = _command_lines()
        simulators_seen += sum("grill_locust.sim" in line for line in lines)
        assert not [line for line in lines if key in line]
        time.sleep(0.02)
    out, err = ping.communicate()
    assert simulators_seen > 0, "the simulated engine was never seen running"
    assert ping.returncode == 0, out + err
    # the simulator wants the key (an unauthenticated /v1/models is refused): it got it, from the environment
    assert table_rows(out)["sim-keyed"][3:] == ["yes"] * 7 + ["-", "-"]
    assert key not in out + err


def test_ping_names_the_server_flag_that_turns_cached_tokens_on(tmp_path: Path, capsys) -> None:
    events = [
        '{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}',
        '{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13}}',
        "[DONE]",
    ]
    outputs = {}
    for engine in ("vllm", "sglang", "openai"):
        server = Server(lists_and_streams("grill-sim", events))
        scenario = write_scenario(
            tmp_path,
            f"  - name: {engine}-b\n    engine: {engine}\n    url: {server.url}",
            f"  - backend: {engine}-b\n    model: grill-sim\n    conversation: short",
        )
        main(["ping", scenario])
        outputs[engine] = capsys.readouterr().out
        assert table_rows(outputs[engine])[f"{engine}-b"][5:8] == [
            "yes",
            "yes",
            "no",
        ]  # streams, usage, cached
        server.close()
    assert "no cached_tokens: start vllm with --enable-prompt-tokens-details" in outputs["vllm"]
    assert "no cached_tokens: start sglang with --enable-cache-report" in outputs["sglang"]
    assert "no cached_tokens" not in outputs["openai"]  # a gateway or unknown server: no flag to name
