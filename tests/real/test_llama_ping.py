"""`grill ping` against the real llama-server (gemma3-270m, which has no FIM tokens): the /infill refusal
a run of `fim: infill` would meet is named beforehand with what to change; `fim: suffix` is served."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grill_locust.cli import main
from tests.real.campaigns import llama_backend
from tests.real.conftest import SERVED_MODEL, ServerProcess

pytestmark = pytest.mark.real


def test_ping_names_the_infill_refusal_and_passes_suffix(
    llama_server: ServerProcess, tmp_path: Path, capsys
) -> None:
    conversations = [
        {"name": f"typing-{fim}", "kind": "autocomplete", "fim": fim} for fim in ("infill", "suffix")
    ]
    data = {
        "name": "ping-real",
        "backends": [llama_backend(llama_server)],
        "models": [{"name": SERVED_MODEL, "max_tokens": 8}],
        "conversations": conversations,
        "targets": [{"backend": "llamacpp", "conversation": c["name"]} for c in conversations],
        "load": {"tiers": [1], "iterations": 1},
    }
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["ping", str(path)]) == 1
    header, _, row = capsys.readouterr().out.strip().splitlines()
    assert row[header.index("fim") :].startswith("no ")
    note = row[header.index("note") :]
    assert note.startswith(
        "fim infill refused: use a model with FIM tokens, or fim: suffix or fim: template in the "
        "conversation (engine: http_501 Infill is not supported by this model"
    ), note
    assert "fim suffix" not in note
