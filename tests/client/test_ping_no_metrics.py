"""`grill ping` on an engine that serves no metrics (Ollama): one line says so."""

from __future__ import annotations

from pathlib import Path

from client_servers import Server
from test_client_ping import lists_and_streams, table_rows, write_scenario

from grill_locust.cli import main


def test_ping_says_ollama_serves_no_engine_metrics(tmp_path: Path, capsys) -> None:
    events = [
        '{"choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}',
        '{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}',
        "[DONE]",
    ]
    server = Server(lists_and_streams("grill-sim", events))
    scenario = write_scenario(
        tmp_path,
        f"  - name: ollama\n    engine: ollama\n    url: {server.url}",
        "  - backend: ollama\n    model: grill-sim\n    conversation: short",
    )
    assert main(["ping", scenario]) == 0
    out = capsys.readouterr().out
    row = table_rows(out)["ollama"]
    assert row[3:10] == ["yes", "yes", "yes", "yes", "no", "-", "-"]  # /metrics: not checked
    notes = [line for line in out.splitlines() if "serves no engine metrics" in line]
    assert len(notes) == 1 and "ollama serves no engine metrics: no engine telemetry" in notes[0]
    assert not any(request.path == "/metrics" for request in server.requests)
    server.close()
