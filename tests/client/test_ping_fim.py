"""`grill ping` sends a fill-in-the-middle request over each autocomplete conversation's transport, so
that the refusal a run would meet (llama-server's /infill on a model without FIM tokens: HTTP 501) is
named with what to change before any load, against the simulated llama.cpp with and without FIM tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grill_locust.cli import main
from grill_locust.errors import refusal_advice
from grill_locust.sim import SimProcess

pytestmark = pytest.mark.slow

NO_FIM_TOKENS = "Infill is not supported by this model"


def scenario(tmp_path: Path, url: str, fims: list[str]) -> str:
    """One llama.cpp backend at `url`, an autocomplete conversation per transport in `fims`."""
    conversations = [
        {"name": f"typing-{fim}", "kind": "autocomplete", "fim": fim, "fim_template": "qwen-coder"}
        for fim in fims
    ]
    data = {
        "name": "ping-fim",
        "backends": [{"name": "llama", "engine": "llamacpp", "url": url}],
        "models": [{"name": "grill-sim", "max_tokens": 8}],
        "conversations": conversations,
        "targets": [{"backend": "llama", "conversation": c["name"]} for c in conversations],
        "load": {"tiers": [1], "iterations": 1},
    }
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def row_of(output: str) -> tuple[str, str]:
    """The fim cell and the note of the table's only backend."""
    header, _, row = output.strip().splitlines()
    fim_at, note_at = header.index("fim"), header.index("note")
    return row[fim_at:note_at].strip(), row[note_at:].strip()


def test_ping_names_the_infill_refusal_of_a_model_without_fim_tokens(tmp_path: Path, capsys) -> None:
    with SimProcess.start(profile="llamacpp", extra_args=["--fim-tokens=false"]) as sim:
        code = main(["ping", scenario(tmp_path, sim.url, ["infill", "template"])])
    fim, note = row_of(capsys.readouterr().out)
    assert code == 1 and fim == "no"  # the run would mark the infill tier refused
    advice = refusal_advice(NO_FIM_TOKENS, "http_501")
    assert note.startswith(f"fim infill refused: {advice} (engine: http_501 {NO_FIM_TOKENS}"), note
    assert "fim template" not in note  # the template transport was served


def test_ping_passes_fim_where_the_model_has_its_tokens(tmp_path: Path, capsys) -> None:
    with SimProcess.start(profile="llamacpp") as sim:
        code = main(["ping", scenario(tmp_path, sim.url, ["infill", "suffix"])])
    fim, note = row_of(capsys.readouterr().out)
    assert code == 0 and fim == "yes" and "refused" not in note, note
