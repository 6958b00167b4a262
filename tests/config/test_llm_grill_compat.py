"""llm-grill files as llm-grill reads them: `api_key: none` sends no credentials; duplicate keys load
with a warning, the last one winning (native files keep refusing them)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from grill_locust.client.backend_http import auth_headers
from grill_locust.config import ConfigError
from grill_locust.ping import check_backend
from grill_locust.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]

LLM_GRILL_FILE = """
servers:
  - name: gateway
    url: {url}/v1
    api_key: {api_key}
models:
  - name: m
conversations:
  - name: hello
    turns:
      - {{role: user, content: hello}}
targets:
  - {{server: gateway, model: m, conversation: hello}}
"""


class Recorder:
    """A loopback server that lists one model and answers 404 to anything else, keeping every
    request's headers."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                recorder.headers.append({k.lower(): v for k, v in self.headers.items()})
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                body = json.dumps({"data": [{"id": "m"}]}).encode() if self.path == "/v1/models" else b"{}"
                self.send_response(200 if self.path == "/v1/models" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    yield server
    server.close()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("api_key", ["none", "None", "NONE", '""'])
def test_an_llm_grill_api_key_of_none_sends_no_credentials(
    api_key: str, recorder: Recorder, tmp_path: Path
) -> None:
    scenario = load_scenario(write(tmp_path, LLM_GRILL_FILE.format(url=recorder.url, api_key=api_key)))
    backend = scenario.backends[0]
    assert backend.api_key is None
    assert "Authorization" not in auth_headers(backend)
    check = check_backend(backend, ["m"], timeout_s=5.0)  # grill ping: model listing, then a stream
    assert check.reachable and check.model_listed
    assert len(recorder.headers) >= 2
    assert all("authorization" not in headers for headers in recorder.headers)


def test_an_llm_grill_api_key_is_sent_as_a_bearer_token(recorder: Recorder, tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, LLM_GRILL_FILE.format(url=recorder.url, api_key="sk-grill")))
    check_backend(scenario.backends[0], ["m"], timeout_s=5.0)
    assert recorder.headers and all(h["authorization"] == "Bearer sk-grill" for h in recorder.headers)


DUPLICATED = """
servers:
  - name: gateway
    url: http://127.0.0.1:1/v1
    type: vllm
    url: http://127.0.0.1:8000/v1
models:
  - name: first
models:
  - name: m
conversations:
  - name: hello
    turns:
      - {role: user, content: hello}
targets:
  - {server: gateway, model: m, conversation: hello}
"""


def test_an_llm_grill_file_with_duplicate_keys_loads_the_last_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, DUPLICATED)
    with caplog.at_level(logging.WARNING, logger="grill_locust.scenario"):
        scenario = load_scenario(path)
    assert scenario.backends[0].url == "http://127.0.0.1:8000"
    assert [model.name for model in scenario.models] == ["m"]
    assert [record.getMessage() for record in caplog.records] == [
        f"{path}:6:5: duplicate key 'url' in servers[0] (first at line 4): the last one is used, as llm-grill does",
        f"{path}:9:1: duplicate key 'models' (first at line 7): the last one is used, as llm-grill does",
    ]


def test_grill_validate_shows_the_duplicate_key_warning_on_stderr(tmp_path: Path) -> None:
    path = write(tmp_path, DUPLICATED)
    result = subprocess.run(
        [sys.executable, "-m", "grill_locust.run.estimate", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")},
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"{path}:6:5: duplicate key 'url' in servers[0] (first at line 4)" in result.stderr
    assert "gateway" in result.stdout  # the plan


def test_a_native_file_with_a_duplicate_key_is_refused(tmp_path: Path) -> None:
    native = DUPLICATED.replace("servers:", "backends:").replace("type:", "engine:")
    native = native.replace(
        "    turns:\n      - {role: user, content: hello}\n", "    kind: short-baseline\n"
    )
    native = native.replace("server: gateway", "backend: gateway")
    with pytest.raises(ConfigError) as caught:
        load_scenario(write(tmp_path, native))
    assert (
        str(caught.value)
        == f"{tmp_path / 'scenario.yaml'}:6:5: duplicate key 'url' in backends[0] (first at line 4)"
    )
