"""Session fixtures for the real-engine tests: llama.cpp's own `llama-server` (twice: the shared one
without --jinja, and one with it for requests carrying tools) and a LiteLLM proxy in front of both, each
started on a free loopback port and stopped at the end of the session.

The binary, the model and the proxy come from `.ci/setup_llama.sh` and `.ci/setup_litellm.sh`
(cached builds); the tests find them through those scripts' `--paths` mode, or through the
GRILL_LLAMA_SERVER, GRILL_LLAMA_MODEL and GRILL_LITELLM variables. Where they are absent the tests
skip with the command that provides them, unless GRILL_REQUIRE_REAL=1 (CI), where they fail.
"""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
import requests
import yaml

from tests.ports import free_port
from tests.real_binaries import unavailable

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = ROOT / "locustfiles" / "coding.py"
SETUP_LLAMA = ROOT / ".ci" / "setup_llama.sh"
SETUP_LITELLM = ROOT / ".ci" / "setup_litellm.sh"

SERVED_MODEL = "gemma3-270m"  # llama-server's --alias
AGENT_CONTEXT_TOKENS = 8192  # the agent server's context (llama_agent_server_argv)
PROXY_MODEL = "coder"  # the alias LiteLLM routes to llama-server
AGENT_PROXY_MODEL = "coder-agent"  # the alias LiteLLM routes to the --jinja llama-server (tools)
AGENT_TEMPLATE = Path(__file__).with_name("agent_chat_template.jinja")
MASTER_KEY_ENV = "GRILL_TEST_LITELLM_MASTER_KEY"  # the proxy and the scenario both read the key from here
LLAMA_SLOTS = 4
LLAMA_CONTEXT_TOKENS = 4096  # shared by the slots: 1024 tokens each
LLAMA_START_TIMEOUT_S = 120.0
LITELLM_START_TIMEOUT_S = 240.0  # the proxy imports a lot; on a loaded 2-core machine that takes a while
STOP_TIMEOUT_S = 15.0
POLL_INTERVAL_S = 0.25
LOG_TAIL_CHARS = 3000
SCENARIO_FILE = "scenario.yaml"  # run_campaign's, beside the results folder


def _script_paths(script: Path) -> dict[str, str]:
    """The `export NAME=VALUE` lines a setup script prints with `--paths` (it builds nothing then)."""
    done = subprocess.run(
        ["bash", str(script), "--paths"], capture_output=True, text=True, timeout=30, check=True
    )
    paths = {}
    for line in done.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        if value:
            paths[name] = value
    return paths


def _locate(name: str, script: Path) -> Path:
    value = os.environ.get(name) or _script_paths(script).get(name, "")
    return Path(value)


def _absent(what: str, path: Path, script: Path) -> NoReturn:
    unavailable(f"{what} not found at {path}: run `bash {script.relative_to(ROOT)}` first")


@dataclass
class ServerProcess:
    """A server we started: its base URL (no /v1), its log file and the process."""

    name: str
    url: str
    port: int
    log_path: Path
    process: subprocess.Popen[bytes]

    @classmethod
    def start(
        cls, name: str, argv: list[str], port: int, log_path: Path, env: dict[str, str]
    ) -> ServerProcess:
        log = log_path.open("wb")
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=log_path.parent
        )
        log.close()
        return cls(name, f"http://127.0.0.1:{port}", port, log_path, process)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""

    def wait_healthy(self, path: str, timeout_s: float) -> None:
        """Poll `path` until it answers 200; fail with the log's tail if the process dies or time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(self.url + path, timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(POLL_INTERVAL_S)
        self.stop()
        raise RuntimeError(
            f"{self.name} not healthy at {self.url}{path} after {timeout_s:g} s:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_S)


def llama_server_argv(binary: Path, model: Path, port: int) -> list[str]:
    """The command line of issue 8 (without --no-jinja the template name would be taken literally)."""
    return [
        str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
        "-c", str(LLAMA_CONTEXT_TOKENS), "-np", str(LLAMA_SLOTS), "-t", "2",
        "--metrics", "--alias", SERVED_MODEL, "--no-jinja", "--chat-template", "gemma",
    ]  # fmt: skip


def llama_agent_server_argv(binary: Path, model: Path, port: int) -> list[str]:
    """llama-server for requests carrying tools: --jinja (without it they are refused) with a template
    that renders tools, calls and results, in one slot, so that each step of a session finds the last
    one's prefix in the slot's cache. Its context is AGENT_CONTEXT_TOKENS: the model allows 32k, but on
    two CPUs this model prefills ~150-350 tokens/s, so a session fills 8k within CI's time, not 32k."""
    return [
        str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
        "-c", str(AGENT_CONTEXT_TOKENS), "-np", "1", "-t", "2", "--metrics", "--slots", "--alias", SERVED_MODEL,
        "--jinja", "--chat-template-file", str(AGENT_TEMPLATE),
    ]  # fmt: skip


def litellm_config(llama_url: str, agent_url: str) -> dict[str, Any]:
    """Routes PROXY_MODEL to llama-server and AGENT_PROXY_MODEL to the --jinja one through LiteLLM's
    OpenAI-compatible provider, as the seed's gateway did; the master key is read from the environment,
    never written down."""
    return {
        "model_list": [
            {
                "model_name": alias,
                "litellm_params": {
                    "model": f"openai/{SERVED_MODEL}",
                    "api_base": f"{url}/v1",
                    "api_key": "none",  # llama-server wants none; the provider wants a value
                },
            }
            for alias, url in ((PROXY_MODEL, llama_url), (AGENT_PROXY_MODEL, agent_url))
        ],
        "general_settings": {"master_key": f"os.environ/{MASTER_KEY_ENV}"},
        "litellm_settings": {"telemetry": False, "drop_params": True},
    }


@pytest.fixture(scope="session")
def llama_paths() -> tuple[Path, Path]:
    binary = _locate("GRILL_LLAMA_SERVER", SETUP_LLAMA)
    model = _locate("GRILL_LLAMA_MODEL", SETUP_LLAMA)
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        _absent("llama-server", binary, SETUP_LLAMA)
    if not model.is_file():
        _absent("the gemma3-270m GGUF", model, SETUP_LLAMA)
    return binary, model


def _serve_llama(
    argv_of: Callable[[Path, Path, int], list[str]],
    llama_paths: tuple[Path, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    binary, model = llama_paths
    port = free_port()
    log_path = tmp_path_factory.mktemp("llama") / "llama-server.log"
    server = ServerProcess.start(
        "llama-server", argv_of(binary, model, port), port, log_path, dict(os.environ)
    )
    try:
        server.wait_healthy("/health", LLAMA_START_TIMEOUT_S)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llama_server(
    llama_paths: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    yield from _serve_llama(llama_server_argv, llama_paths, tmp_path_factory)


@pytest.fixture(scope="session")
def llama_agent_server(
    llama_paths: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    yield from _serve_llama(llama_agent_server_argv, llama_paths, tmp_path_factory)


@pytest.fixture(scope="session")
def master_key() -> str:
    return "sk-grill-" + secrets.token_hex(16)


@pytest.fixture(scope="session")
def litellm_proxy(
    llama_server: ServerProcess,
    llama_agent_server: ServerProcess,
    master_key: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    binary = _locate("GRILL_LITELLM", SETUP_LITELLM)
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        _absent("the LiteLLM proxy", binary, SETUP_LITELLM)
    folder = tmp_path_factory.mktemp("litellm")
    config = folder / "litellm.yaml"
    config.write_text(
        yaml.safe_dump(litellm_config(llama_server.url, llama_agent_server.url), sort_keys=False)
    )
    port = free_port()
    env = {
        **os.environ,
        MASTER_KEY_ENV: master_key,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no download of the price list: no network here
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "ERROR",
        "DISABLE_SCHEMA_UPDATE": "True",
    }
    argv = [
        str(binary),
        "--config",
        str(config),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--num_workers",
        "1",
    ]
    proxy = ServerProcess.start("litellm", argv, port, folder / "litellm.log", env)
    try:
        proxy.wait_healthy("/health/liveliness", LITELLM_START_TIMEOUT_S)
        yield proxy
    finally:
        proxy.stop()


# ---- running campaigns -----------------------------------------------------------------------


@dataclass
class CampaignRun:
    """One headless Locust campaign: its results folder and everything it printed."""

    run_dir: Path
    results_dir: Path
    output: str
    returncode: int
    wall_s: float


def run_campaign(
    scenario: dict[str, Any], folder: Path, extra_args: Sequence[str] = (), env: dict[str, str] | None = None,
    timeout_s: float = 900, returncodes: Sequence[int] = (0,),
) -> CampaignRun:  # fmt: skip
    """`locust -f locustfiles/coding.py --headless --scenario FILE --results-dir DIR`, as a user runs it;
    `returncodes` are its expected exits (Locust exits 1 when a request failed)."""
    folder.mkdir(parents=True, exist_ok=True)
    scenario_path = folder / SCENARIO_FILE
    scenario_path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    results_dir = folder / "results"
    argv = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
        "--scenario", str(scenario_path), "--results-dir", str(results_dir), *extra_args,
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        argv,
        cwd=folder,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    wall_s = time.monotonic() - started
    output = done.stdout + done.stderr
    (folder / "locust.log").write_text(output)
    runs = [path for path in results_dir.iterdir() if path.is_dir()] if results_dir.exists() else []
    assert done.returncode in returncodes and len(runs) == 1, (
        f"{shlex.join(argv)} -> exit {done.returncode}, runs {runs}\n{output[-LOG_TAIL_CHARS:]}"
    )
    return CampaignRun(runs[0], results_dir, output, done.returncode, wall_s)
