"""`grill validate`: the estimate for good files; one line and exit 2 for each broken one (tests/config/broken)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grill_locust.run import estimate
from grill_locust.scenario import load_scenario
from grill_locust.sim.params import PROFILES

REPO = Path(__file__).resolve().parents[2]
BROKEN = sorted((Path(__file__).parent / "broken").glob("*.yaml"))
UNSET_VARIABLE = "GRILL_TEST_SURELY_UNSET_KEY"  # used by broken/unset_env_variable.yaml
SUBPROCESS_TIMEOUT_S = 120


def expectation(path: Path) -> str:
    first_line = path.read_text().splitlines()[0]
    assert first_line.startswith("# expect: "), f"{path.name}: first line must be '# expect: <message part>'"
    return first_line.removeprefix("# expect: ")


def clean_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != UNSET_VARIABLE}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_corpus_has_at_least_twenty_broken_scenarios() -> None:
    assert len(BROKEN) >= 20


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_each_broken_scenario_gives_one_line_naming_the_place(
    path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(UNSET_VARIABLE, raising=False)
    status = estimate.main([str(path)])
    captured = capsys.readouterr()
    assert status == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"grill validate: {path}")
    assert expectation(path) in lines[0]
    assert "987654321" not in lines[0]  # broken/secret_of_wrong_type.yaml: a secret is never echoed


def test_all_broken_files_in_one_process_no_traceback() -> None:
    """One subprocess validates them all: one line per file, exit 2, never a traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "grill_locust.run.estimate", *map(str, BROKEN)],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=REPO,
        timeout=SUBPROCESS_TIMEOUT_S,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == len(BROKEN)
    for path, line in zip(BROKEN, lines, strict=True):
        assert expectation(path) in line, line


@pytest.mark.parametrize("name", ["unknown_backend_reference", "yaml_syntax", "unset_env_variable"])
def test_grill_cli_validate_exits_2_with_one_line(name: str) -> None:
    path = Path(__file__).parent / "broken" / f"{name}.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "grill_locust.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=REPO,
        timeout=SUBPROCESS_TIMEOUT_S,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert expectation(path) in result.stderr


def test_validate_prints_the_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    status = estimate.main([str(REPO / "scenarios" / "demo.yaml")])
    out = capsys.readouterr().out
    assert status == 0
    assert "2 targets x 3 tiers x 1 iteration = 6 tiers to run" in out
    # (1 + 4 + 8) users x 1 iteration x 2 turns, for each of 2 targets
    assert "requests to send: 52" in out
    assert "duration estimate: ~" in out
    assert "sim-vllm/grill-sim/demo-session" in out and "sim (llamacpp)" in out


def test_agentic_scenario_validates(capsys: pytest.CaptureFixture[str]) -> None:
    """scenarios/agentic.yaml: agent sessions on four simulated engines at 1 to 50 developers."""
    path = REPO / "scenarios" / "agentic.yaml"
    status = estimate.main([str(path)])
    captured = capsys.readouterr()
    assert status == 0 and captured.err == ""
    assert "4 targets x 5 tiers x 1 iteration = 20 tiers to run" in captured.out
    assert "tiers (users): 1, 5, 10, 25, 50;" in captured.out
    for profile in ("vllm", "vllm-no-prefix-cache", "sglang", "llamacpp"):
        assert f"sim ({profile})" in captured.out
    scenario = load_scenario(path)
    assert {target.conversation.kind for target in scenario.targets} == {"agentic"}
    # llama.cpp's slot bounds its requests: its sessions compact before they pass it (else HTTP 400)
    for target in scenario.targets:
        limit = target.conversation.context_limit_tokens
        if target.backend.profile == "llamacpp":
            assert limit is not None and limit <= PROFILES["llamacpp"].slot_tokens
        else:
            assert limit is None  # the kind's defaults: contexts grow as far as the session goes


def test_validate_warns_of_each_secret_written_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRILL_T_KEY", "sk-from-env")
    path = tmp_path / "keys.yaml"
    path.write_text(
        "backends:\n"
        "  - {name: a, engine: vllm, url: 'http://127.0.0.1:8000', api_key: '${GRILL_T_KEY}'}\n"
        "  - name: b\n"
        "    engine: vllm\n"
        "    url: http://127.0.0.1:8001\n"
        "    headers: {X-Api-Key: sk-written-here-5e1}\n"
        "models: [{name: m}]\n"
        "targets: [{backend: a, model: m, conversation: short-baseline}, "
        "{backend: b, model: m, conversation: short-baseline}]\n"
    )
    status = estimate.main([str(path)])
    captured = capsys.readouterr()
    assert status == 0 and "requests to send" in captured.out
    assert captured.err.splitlines() == [
        f"grill validate: warning: {path}: backends[1].headers.X-Api-Key: a secret written literally in the "
        "file never goes to workers (a distributed run refuses it): write ${NAME} and set NAME in the "
        "environment of the master and of every worker (line 6)"
    ]
    assert "sk-written-here-5e1" not in captured.out + captured.err


def test_validate_applies_overrides(capsys: pytest.CaptureFixture[str]) -> None:
    status = estimate.main(
        [str(REPO / "scenarios" / "demo.yaml"), "--tiers", "2", "--iterations", "3", "--pause", "0"]
    )
    out = capsys.readouterr().out
    assert status == 0
    assert "2 targets x 1 tiers x 3 iterations" in out
    assert "requests to send: 24" in out  # 2 users x 3 iterations x 2 turns x 2 targets


def test_estimate_arithmetic() -> None:
    from grill_locust.scenario import load_scenario

    scenario = load_scenario(REPO / "scenarios" / "demo.yaml").with_overrides(
        tiers=[1, 2], pause_s=10, think_time_s=1
    )
    campaign = estimate.estimate_campaign(scenario, ttft_s=1.0, tpot_ms=0.0)
    # per user: 2 requests of 1 s + one think time of 1 s = 3 s per tier; 2 targets x 2 tiers; 3 pauses
    assert campaign.phases == 4 and campaign.requests == 2 * (1 + 2) * 2
    assert campaign.duration_s == pytest.approx(4 * 3.0 + 3 * 10.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tiers", "1,x"], "--tiers: expected comma-separated"),
        (["--iterations", "0"], "--iterations: expected a whole number >= 1, got '0'"),
        (["--pause", "soon"], "--pause: expected a number >= 0, got 'soon'"),
        (["--think-time", "-1"], "--think-time: expected a number >= 0"),
    ],
)
def test_bad_cli_values_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = estimate.main([str(REPO / "scenarios" / "demo.yaml"), *argv])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and message in err


def test_a_tiers_override_of_a_rate_scenario_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (REPO / "scenarios" / "demo.yaml").read_text()
    path = tmp_path / "rates.yaml"
    path.write_text(text.replace("  tiers: [1, 4, 8]\n", "  rates: [2, 4]\n  duration_s: 5\n"))
    assert estimate.main([str(path), "--iterations", "2"]) == 0
    capsys.readouterr()
    status = estimate.main([str(path), "--tiers", "1,2"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert "override: tiers: this scenario's load is open-loop (load.rates)" in err
