"""llm-grill files as llm-grill reads them: `api_key: none` sends no credentials; duplicate keys load
with a warning, the last one winning (native files keep refusing them)."""

from __future__ import annotations

import json
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from grill_locust.client import EngineClient
from grill_locust.client.ping import check_backend
from grill_locust.config import load_scenario

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
    assert "Authorization" not in EngineClient(backend).auth_headers
    check = check_backend(backend, ["m"], timeout_s=5.0)  # grill ping: model listing, then a stream
    assert check.reachable and check.model_listed
    assert len(recorder.headers) >= 2
    assert all("authorization" not in headers for headers in recorder.headers)


def test_an_llm_grill_api_key_is_sent_as_a_bearer_token(recorder: Recorder, tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, LLM_GRILL_FILE.format(url=recorder.url, api_key="sk-grill")))
    check_backend(scenario.backends[0], ["m"], timeout_s=5.0)
    assert recorder.headers and all(h["authorization"] == "Bearer sk-grill" for h in recorder.headers)
