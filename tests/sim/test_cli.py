"""`grill sim` / `python -m grill_locust.sim`: flags, YAML overrides, one-line user errors, clean stop."""

from __future__ import annotations

import subprocess
import sys

from sim_driver import chat_payload, request

from grill_locust.config import Backend
from grill_locust.run.state import simulated_engine
from grill_locust.sim import SimProcess
from grill_locust.sim.params import PROFILES, resolve_params


def run_sim(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "grill_locust.sim", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def test_unknown_profile_is_a_one_line_error():
    done = run_sim("--profile", "nope", "--port", "0")
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


def test_bad_yaml_key_is_a_one_line_error(tmp_path):
    config = tmp_path / "engine.yaml"
    config.write_text("max_num_seqz: 3\n")
    done = run_sim("--config", str(config), "--port", "0")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert str(config) in line and "max_num_seqz" in line


def test_bad_flag_value_is_a_one_line_error():
    done = run_sim("--max-num-seqs", "many", "--port", "0")
    assert done.returncode == 2 and "max_num_seqs" in done.stderr


def test_yaml_then_flags_override_the_profile(tmp_path):
    config = tmp_path / "engine.yaml"
    config.write_text("max-model-len: 2048\nstep_a_ms: 1\nprefix_caching: off\n")
    params = resolve_params("vllm", str(config), {"max_model_len": "1024"})
    assert params.max_model_len == 1024 and params.step_a_ms == 1.0 and params.prefix_caching is False
    assert params.max_num_seqs == PROFILES["vllm"].max_num_seqs


def test_flags_reach_the_running_server(tmp_path):
    config = tmp_path / "engine.yaml"
    config.write_text("max_model_len: 64\n")
    args = ["--config", str(config), "--step-a-ms", "2"]
    with SimProcess.start("vllm", served_model_name="my-model", extra_args=args) as sim:
        models = request(sim.port, "/v1/models", method="GET").json()
        assert models["data"][0]["id"] == "my-model" and models["data"][0]["max_model_len"] == 64
        too_long = request(sim.port, "/v1/chat/completions", chat_payload("x " * 60, model="my-model"))
        assert too_long.status == 400
        assert sim.stop() == 0  # SIGTERM stops it cleanly


def test_a_backends_sim_args_become_flags_and_its_key_goes_through_the_environment():
    key = "sk-sim-for-backend-91c2"
    backend = Backend(
        name="sim", engine="sim", profile="sglang", sim_args={"max_model_len": 64, "api_key": key}
    )
    with simulated_engine(backend, "served-here") as sim:
        assert not any(key in argument for argument in sim.process.args)
        assert "--max-model-len=64" in sim.process.args and "sglang" in sim.process.args
        assert request(sim.port, "/v1/models", method="GET").status == 401
        models = request(sim.port, "/v1/models", method="GET", headers={"authorization": f"Bearer {key}"})
        assert models.status == 200
        assert (
            models.json()["data"][0]["id"] == "served-here"
            and models.json()["data"][0]["max_model_len"] == 64
        )


def test_grill_sim_is_routed_by_the_main_cli():
    code = "from grill_locust.sim import cli; import argparse; p = argparse.ArgumentParser(); cli.configure_parser(p, 'sim'); print(p.parse_args(['--profile', 'sglang', '--kv-blocks', '9']).param_kv_blocks)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "9"
    from grill_locust.cli import SUBCOMMANDS

    assert SUBCOMMANDS["sim"] == "grill_locust.sim.cli"
