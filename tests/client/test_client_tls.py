"""EngineClient over TLS (https backends): the same streams, timed when each read returns (no kernel
stamps through the SSL layer), keep-alive across requests. The certificate is trusted the way a user
trusts a self-signed engine: `SSL_CERT_FILE`."""

from __future__ import annotations

import ssl
import subprocess
import time
from pathlib import Path

import pytest
from client_replay import load, split_pieces
from client_servers import Request, Server, backend, send_slowly

from grill_locust.client import EngineClient, chat_payload
from grill_locust.record import measure
from tests.real_binaries import require_binary

PATH = "/v1/chat/completions"
PAYLOAD = chat_payload("devstral", [{"role": "user", "content": "hi"}])
PIECE_GAP_S = 0.15  # between the server's pieces: wide enough that a late read cannot pass for its own
PIECES = split_pieces(load("vllm_chat"))


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    require_binary("openssl", install="Debian package: apt-get install openssl; it makes the certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_context(certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    cert, key = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts it through the default context
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


@pytest.fixture
def tls_server(tls_context: ssl.SSLContext) -> Server:
    def handler(conn, request: Request, server: Server) -> bool:  # type: ignore[no-untyped-def]
        send_slowly(conn, PIECES, PIECE_GAP_S, server)
        return True

    return Server(handler, tls=tls_context)


def test_a_stream_over_tls_is_read_and_timed_and_the_connection_kept(tls_server: Server) -> None:
    client = EngineClient(backend(tls_server.url))
    first = client.stream(PATH, PAYLOAD)
    m = measure(first.raw)
    assert m.status == "ok" and first.text == "def add(a, b):" and m.output_tokens == 5
    # each event is timed when its own read returned: after the server sent it, long before the next
    # piece (a loaded host may hold the reader tens of ms; an event timed at a later read is a gap late)
    sent = tls_server.sent_at[2:7]
    lags = [arrived - sent_at for arrived, sent_at in zip(first.raw.output_times, sent, strict=True)]
    assert all(0 <= lag < PIECE_GAP_S * 2 / 3 for lag in lags), lags
    second = client.stream(PATH, PAYLOAD)
    assert second.raw.status == "ok" and client.connections_opened == 1
    tls_server.close()


def test_idle_s_over_tls_moves_with_each_event_and_fires_on_a_stall(
    tls_server: Server, tls_context: ssl.SSLContext
) -> None:
    # TLS replies are read in the client's own loop, not the poller: its idle deadline is kept apart
    # after its last output the stream has three more pieces (finish, usage, [DONE]): idle_s leaves room
    idle_s = 5 * PIECE_GAP_S
    result = EngineClient(backend(tls_server.url, idle_s=idle_s)).stream(PATH, PAYLOAD)
    m = measure(result.raw)
    assert m.status == "ok", m.error
    assert result.raw.t0 + m.e2e_s - result.raw.output_times[0] > idle_s
    tls_server.close()

    def stall(conn, request: Request, server: Server) -> bool:  # type: ignore[no-untyped-def]
        conn.sendall(b"".join(PIECES[:4]))  # two output events, then nothing
        time.sleep(2.0)
        return False

    stalled = Server(stall, tls=tls_context)
    m = measure(EngineClient(backend(stalled.url, idle_s=0.3)).stream(PATH, PAYLOAD).raw)
    assert m.status == "timeout" and "idle_s=0.3" in m.error and m.e2e_s < 1.5, m.error
    stalled.close()


def test_an_untrusted_certificate_is_a_connect_error(
    tls_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE")
    m = measure(EngineClient(backend(tls_server.url)).stream(PATH, PAYLOAD).raw)
    assert m.status == "connect" and "CERTIFICATE_VERIFY_FAILED" in m.error
    tls_server.close()
