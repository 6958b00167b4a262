"""Bad command-line values, through the real entry points: one line naming the flag or place, exit 2,
no traceback (`locust -f locustfiles/coding.py --headless ...` and the `grill` subcommands)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from reliability_servers import closed_port

from tests.run.conftest import run_locust, write_scenario

pytestmark = pytest.mark.slow

QUICK_EXIT_S = 20.0  # a bad value must be refused at once; a run that goes on past this has accepted it
ROOT = Path(__file__).resolve().parents[2]


def quiet_scenario(tmp_path: Path) -> Path:
    """A valid scenario that would start nothing and finish at once: its backend refuses connections."""
    data = {
        "name": "cli",
        "backends": [{"name": "down", "engine": "openai", "url": f"http://127.0.0.1:{closed_port()}"}],
        "models": [{"name": "m", "max_tokens": 8}],
        "conversations": [{"name": "sb", "kind": "short-baseline", "prompt_tokens": 20}],
        "targets": [{"backend": "down", "model": "m", "conversation": "sb"}],
        "load": {"tiers": [1, 2], "iterations": 1, "pause_s": 0.1, "think_time_s": 0.0},
    }
    return write_scenario(tmp_path / "ok.yaml", data)


def broken_scenario(tmp_path: Path, where: str) -> Path:
    path = quiet_scenario(tmp_path)
    text = path.read_text()
    if where == "top":
        text += "lod:\n  tiers: [1]\n"
    elif where == "backend":
        text = text.replace("engine: openai", "engine: openai\n  timout: 3")
    elif where == "load":
        text = text.replace("iterations: 1", "iterations: 1\n  tier: [3]")
    return write_path(tmp_path / f"bad-{where}.yaml", text)


def write_path(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def assert_one_line_error(done: subprocess.CompletedProcess[str] | None, *needles: str) -> None:
    assert done is not None, f"still running after {QUICK_EXIT_S:g} s: the bad value was accepted"
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("grill") or "error:" in line]
    assert len(errors) == 1, done.stderr[-2000:]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])


def locust(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        quiet = [] if "--telemetry-interval" in args else ["--telemetry-interval", "0"]
        return run_locust(
            [*args, "--results-dir", str(tmp_path / "r"), *quiet],
            tmp_path,
            timeout_s=QUICK_EXIT_S,
        )
    except subprocess.TimeoutExpired:
        return None


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        pytest.param(["--tiers", "0,x"], ["--tiers", "0,x"], id="tiers-not-numbers"),
        pytest.param(["--tiers", "0,1"], ["--tiers", "positive"], id="tiers-zero"),
        pytest.param(["--tiers", "2,-4"], ["--tiers"], id="tiers-negative"),
        pytest.param(
            ["--tiers", ""],
            ["--tiers"],
            id="tiers-empty",
        ),
        pytest.param(["--iterations", "-1"], ["--iterations", "-1"], id="iterations-negative"),
        pytest.param(["--iterations", "0"], ["--iterations", ">= 1"], id="iterations-zero"),
        pytest.param(["--iterations", "abc"], ["--iterations", "abc"], id="iterations-not-a-number"),
        pytest.param(["--pause", "-2"], ["--pause", "-2"], id="pause-negative"),
        pytest.param(["--pause", "nan"], ["pause"], id="pause-nan"),
        pytest.param(
            ["--pause", "inf"],
            ["pause"],
            id="pause-inf",
        ),
        pytest.param(["--think-time", "-1"], ["--think-time"], id="think-time-negative"),
        pytest.param(
            ["--think-time", "inf"],
            ["think"],
            id="think-time-inf",
        ),
        pytest.param(
            ["--telemetry-interval", "-1"],
            ["--telemetry-interval"],
            id="telemetry-interval-negative",
        ),
        pytest.param(
            ["--influx-url", "notaurl"],
            ["--influx-url"],
            id="influx-url-not-a-url",
        ),
    ],
)
def test_bad_locust_option_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], needles: list[str]
) -> None:
    done = locust(tmp_path, "--scenario", str(quiet_scenario(tmp_path)), *args)
    assert_one_line_error(done, *needles)


def test_missing_scenario_file_names_it(tmp_path: Path) -> None:
    assert_one_line_error(
        locust(tmp_path, "--scenario", str(tmp_path / "nope.yaml")), "nope.yaml", "no such file"
    )


@pytest.mark.parametrize(
    ("where", "needle"), [("top", "lod"), ("backend", "backends[0].timout"), ("load", "load.tier")]
)
def test_unknown_scenario_key_names_its_yaml_path(tmp_path: Path, where: str, needle: str) -> None:
    path = broken_scenario(tmp_path, where)
    assert_one_line_error(locust(tmp_path, "--scenario", str(path)), path.name, needle, "unknown key")


def test_resume_of_a_folder_that_is_no_run(tmp_path: Path) -> None:
    assert_one_line_error(locust(tmp_path, "--resume", str(tmp_path / "nothing")), "--resume")


def test_results_dir_that_cannot_be_made(tmp_path: Path) -> None:
    blocker = write_path(tmp_path / "a-file", "not a folder")
    done = run_locust(
        ["--scenario", str(quiet_scenario(tmp_path)), "--results-dir", str(blocker / "r")],
        tmp_path,
        timeout_s=QUICK_EXIT_S,
    )
    assert_one_line_error(done, "a-file")


def test_results_dir_that_exists_but_cannot_be_written(tmp_path: Path) -> None:
    # /proc exists and refuses new folders, even to root (for whom permission bits do not count)
    done = run_locust(
        ["--scenario", str(quiet_scenario(tmp_path)), "--results-dir", "/proc"],
        tmp_path,
        timeout_s=QUICK_EXIT_S,
    )
    assert_one_line_error(done, "--results-dir /proc", "cannot write in it")


# --- grill subcommands ----------------------------------------------------------------------------


def grill(*args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            [sys.executable, "-m", "grill_locust.cli", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=QUICK_EXIT_S,
        )
    except subprocess.TimeoutExpired:
        return None


GRILL_CASES = [
    pytest.param(["validate", "{missing}"], ["grill validate", "no such file"], id="validate-missing"),
    pytest.param(["validate", "{ok}", "--tiers", "0,x"], ["--tiers"], id="validate-tiers"),
    pytest.param(["validate", "{ok}", "--iterations", "-1"], ["--iterations"], id="validate-iterations"),
    pytest.param(["validate", "{ok}", "--pause", "-2"], ["--pause"], id="validate-pause"),
    pytest.param(
        ["validate", "{ok}", "--think-time", "inf"],
        ["think"],
        id="validate-think-time-inf",
    ),
    pytest.param(["validate", "{bad}"], ["lod", "unknown key"], id="validate-unknown-key"),
    pytest.param(["ping", "{ok}", "--timeout", "-1"], ["--timeout"], id="ping-timeout"),
    pytest.param(["sim", "--fault-rate", "2"], ["--fault-rate"], id="sim-fault-rate"),
    pytest.param(["sim", "--fault-kinds", "meteor"], ["--fault-kinds", "meteor"], id="sim-fault-kinds"),
    pytest.param(["sim", "--config", "{missing}"], ["nope.yaml"], id="sim-config-missing"),
    pytest.param(["sim", "--max-num-seqs", "0"], ["max_num_seqs"], id="sim-max-num-seqs"),
    pytest.param(
        ["sim", "--port", "99999"],
        ["--port"],
        id="sim-port",
    ),
    pytest.param(["report", "{missing}"], ["nope.yaml"], id="report-missing"),
    pytest.param(["report", "{empty}"], ["records"], id="report-not-a-run"),
    pytest.param(["compare", "--label", "nolabel"], ["--label", "NAME=RUN_DIR"], id="compare-label"),
    pytest.param(["gpu-exporter", "--interval", "0"], ["--interval"], id="gpu-exporter-interval"),
]


@pytest.mark.parametrize(("args", "needles"), GRILL_CASES)
def test_bad_grill_value_is_one_line_and_exit_2(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    (tmp_path / "empty").mkdir()
    places = {
        "{missing}": str(tmp_path / "nope.yaml"),
        "{ok}": str(quiet_scenario(tmp_path)),
        "{bad}": str(broken_scenario(tmp_path, "top")),
        "{empty}": str(tmp_path / "empty"),
    }
    done = grill(*[places.get(a, a) for a in args])
    assert_one_line_error(done, *needles)
    assert done is not None and "Traceback" not in done.stdout
    assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1, done.stderr
