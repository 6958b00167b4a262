"""The backend's plain HTTP calls: list its models, tokenize, health, fetch /metrics text, and the
headers that authenticate them.

One stack for all of them: `request_once`, a whole request and reply on a fresh connection over the
streaming client's socket layer (`_connection`) and HTTP parser (`_http`); gevent-cooperative once
Locust has monkey-patched sockets. Routes and body shapes come from the engine table (`engines.py`).
"""

from __future__ import annotations

import json
import re
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from grill_locust.client._connection import USER_AGENT, Origin, connect_error, open_socket
from grill_locust.client._http import ProtocolError, ResponseParser
from grill_locust.client._poller import RECV_BYTES
from grill_locust.engines import engine_facts

MAX_BODY_BYTES = 8 * 1024 * 1024
ANTHROPIC_VERSION = "2023-06-01"  # the Messages API version every server of it accepts


class BackendAddress(Protocol):
    """What the plain calls read of a backend (`config.Backend` has it)."""

    @property
    def url(self) -> str: ...

    @property
    def api_key(self) -> object: ...  # a pydantic SecretStr, a plain string, or None

    @property
    def headers(self) -> Mapping[str, str]: ...


class StreamTimeouts(Protocol):
    """A backend's per-request time limits in seconds (`config.Timeouts` has them)."""

    @property
    def connect_s(self) -> float: ...

    @property
    def first_token_s(self) -> float: ...

    @property
    def idle_s(self) -> float: ...

    @property
    def total_s(self) -> float: ...


class StreamingBackend(BackendAddress, Protocol):
    """What the streaming client (`EngineClient`) reads of a backend (`config.Backend` has it)."""

    @property
    def engine(self) -> str: ...

    @property
    def timeouts(self) -> StreamTimeouts: ...

    @property
    def tokenize_url(self) -> str | None: ...

    @property
    def extra_body(self) -> Mapping[str, object]: ...  # scanned for secrets to scrub from errors

    @property
    def sim_args(self) -> Mapping[str, object]: ...  # likewise


class NoReply(OSError):
    """No whole HTTP reply: the server cannot be reached, or its reply was late, cut or not HTTP."""


class TokenizeError(Exception):
    """The backend's tokenize endpoint did not answer as expected."""


@dataclass(frozen=True, slots=True)
class HttpReply:
    """A whole (non-streamed) HTTP reply."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class ModelListing:
    """What the model listing answered: its HTTP status and the model ids it lists."""

    status: int
    ids: list[str]


@dataclass(frozen=True, slots=True)
class Tokens:
    """A tokenize answer: the count, and the text of each token when asked and given (else None)."""

    count: int
    pieces: list[str] | None = None


# ---- authentication ----------------------------------------------------------------------------


def secret_value(secret: object) -> str | None:
    """The text of an API key given as a pydantic SecretStr or a plain string; None when empty."""
    if secret is None:
        return None
    getter = getattr(secret, "get_secret_value", None)
    value = getter() if getter is not None else secret
    return str(value) if value else None


def auth_headers(backend: BackendAddress) -> dict[str, str]:
    """`Authorization: Bearer <api_key>`; for `api: messages` also Anthropic's `x-api-key: <api_key>`
    and `anthropic-version`; then the backend's own `headers` (which may replace them)."""
    headers: dict[str, str] = {}
    api_key = secret_value(backend.api_key)
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if getattr(backend, "api", None) == "messages":
        # servers of the Messages API check one or the other (Anthropic's own x-api-key, or the
        # Bearer header of an OpenAI-compatible server's --api-key): both go
        if api_key:
            headers["x-api-key"] = api_key
        headers["anthropic-version"] = ANTHROPIC_VERSION
    for name, value in (backend.headers or {}).items():
        headers[str(name)] = str(value)
    return headers


def headers_for(backend: BackendAddress, url: str) -> dict[str, str]:
    """The backend's auth headers when `url` is on its own server (scheme, host and port), else none:
    a key never leaves for a tokenizer or exporter elsewhere."""
    if not backend.url:
        return {}
    try:
        same = Origin.parse(url).same_server(Origin.parse(backend.url))
    except ValueError:
        return {}
    return auth_headers(backend) if same else {}


# ---- the one request ---------------------------------------------------------------------------


def request_once(
    url: str,
    method: str = "GET",
    json_body: object = None,
    *,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> HttpReply:
    """One request on a fresh connection, its whole reply within `timeout_s`; raises `NoReply`
    (saying why) when there is none."""
    origin = Origin.parse(url)
    target = origin.prefix or "/"
    query = urlsplit(url).query
    if query:
        target += "?" + query
    body = b"" if json_body is None else json.dumps(json_body).encode("utf-8")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {origin.host_header}", f"User-Agent: {USER_AGENT}"]
    lines += ["Accept-Encoding: identity", "Connection: close"]
    if json_body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    deadline = time.monotonic() + timeout_s
    try:
        sock = open_socket(origin, timeout_s)
    except OSError as error:
        raise NoReply(connect_error(error, timeout_s)) from None
    parser = ResponseParser(request_method=method)
    pieces: list[bytes] = []
    size = 0
    try:
        sock.settimeout(timeout_s)
        sock.sendall(request)
        while not parser.complete:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            sock.settimeout(remaining)
            data = sock.recv(RECV_BYTES)
            events = parser.feed(data) if data else parser.feed_eof()
            for event in events:
                if type(event) is bytes and size < max_body_bytes:
                    pieces.append(event)
                    size += len(event)
            if not data:
                break
    except TimeoutError:
        raise NoReply(f"no whole reply within {timeout_s:g} s") from None
    except ProtocolError:
        raise NoReply("the reply is not HTTP") from None
    except OSError as error:
        raise NoReply(error.strerror or type(error).__name__) from None
    finally:
        sock.close()
    if not parser.complete or parser.head is None:
        raise NoReply("the reply was cut short")
    headers = parser.head.headers
    return HttpReply(parser.head.status, headers, _decoded(b"".join(pieces), headers, max_body_bytes))


def _decoded(body: bytes, headers: Mapping[str, str], max_body_bytes: int) -> bytes:
    """The body without the gzip or deflate encoding a proxy may add although we asked for identity
    (a whole reply: no timing is lost); raises `NoReply` for an encoding we cannot read."""
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity") or not body:
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise NoReply(f"the reply is {encoding}-encoded although the request asked for identity")
    try:
        decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, by their headers
        return decoder.decompress(body, max_body_bytes)
    except zlib.error:
        raise NoReply(f"the reply says {encoding} but does not decode") from None


# ---- the calls ---------------------------------------------------------------------------------


def list_models(
    base_url: str, engine: str, *, headers: Mapping[str, str] | None = None, timeout_s: float = 10.0
) -> ModelListing:
    """The ids at the engine's model listing (empty when the reply lists none or is not a listing);
    raises `NoReply`, or `ValueError` when the engine has no listing route."""
    path = engine_facts(engine).models_path
    if path is None:
        raise ValueError(f"engine {engine!r} lists no models")
    reply = request_once(base_url + path, headers=headers, timeout_s=timeout_s)
    return ModelListing(reply.status, _model_ids(reply.body) if reply.status == 200 else [])


def _model_ids(body: bytes) -> list[str]:
    try:
        data = json.loads(body)
    except ValueError:
        return []
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return []
    return [str(item["id"]) for item in items if isinstance(item, dict) and "id" in item]


def health(
    base_url: str, engine: str, *, headers: Mapping[str, str] | None = None, timeout_s: float = 10.0
) -> bool | None:
    """Whether the engine's health route answers 200; None when the engine has none. Raises `NoReply`."""
    path = engine_facts(engine).health_path
    if path is None:
        return None
    return request_once(base_url + path, headers=headers, timeout_s=timeout_s).status == 200


def fetch_text(url: str, *, headers: Mapping[str, str] | None = None, timeout_s: float = 10.0) -> str:
    """The body of a 200 reply at `url` as text (a Prometheus /metrics page); raises `NoReply`, or
    OSError("HTTP <status>") for any other status."""
    reply = request_once(url, headers=headers, timeout_s=timeout_s)
    if reply.status != 200:
        raise OSError(f"HTTP {reply.status}")
    return reply.body.decode("utf-8", errors="replace")


def tokenize(
    url: str,
    engine: str,
    text: str,
    *,
    model: str | None = None,
    headers: Mapping[str, str] | None = None,
    pieces: bool = False,
    timeout_s: float = 10.0,
) -> Tokens:
    """Tokens in `text` by the tokenize endpoint at `url`, in the body shape of `engine` (without
    special tokens: a message's size is its own tokens). With `pieces`, the text of each token too,
    where the endpoint gives it and it joins back into `text`. Raises `TokenizeError`."""
    facts = engine_facts(engine)
    body: dict[str, object]
    if facts.tokenize_body == "content":  # llama.cpp: {"content"} -> {"tokens": [id or {"id", "piece"}]}
        body = {"content": text, "add_special": False}
        if pieces:
            body["with_pieces"] = True
    else:  # vLLM, SGLang, the simulator: {"model", "prompt"} -> {"count", "tokens", "token_strs"}
        body = {"prompt": text, "add_special_tokens": False}
        if model and facts.model_in_tokenize:
            body["model"] = model
        if pieces:
            body["return_token_strs"] = True
    answer = tokenizer_answer(url, body, headers, timeout_s)
    tokens, count = answer.get("tokens"), token_count(url, answer)
    if not pieces:
        return Tokens(count)
    found: list[str] | None = None
    if isinstance(tokens, list) and tokens and all(isinstance(token, dict) for token in tokens):
        found = [_llamacpp_piece(token.get("piece")) for token in tokens]  # llama.cpp with_pieces
    elif isinstance(answer.get("token_strs"), list):
        found = decode_token_strs(answer["token_strs"], text)  # vLLM return_token_strs
    if found is not None and "".join(found) != text:
        found = None
    return Tokens(count, found)


def tokenizer_answer(
    url: str, body: dict[str, object], headers: Mapping[str, str] | None, timeout_s: float
) -> dict[str, Any]:
    """The JSON object a tokenizer endpoint (/tokenize, /apply-template) answers `body` with; raises
    `TokenizeError` naming `url` for no reply, another status, or an answer that is no JSON object."""
    try:
        reply = request_once(url, "POST", body, headers=headers, timeout_s=timeout_s)
    except NoReply as error:
        raise TokenizeError(f"{url}: {error}") from None
    if reply.status != 200:
        raise TokenizeError(f"{url}: HTTP {reply.status}")
    try:
        answer = json.loads(reply.body)
    except ValueError:
        raise TokenizeError(f"{url}: the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise TokenizeError(f"{url}: the answer is not a JSON object")
    return answer


def token_count(url: str, answer: dict[str, object]) -> int:
    """A tokenize answer's count: vLLM's `count`, else the length of `tokens` (llama.cpp)."""
    count, tokens = answer.get("count"), answer.get("tokens")
    if isinstance(count, int):
        return count
    if isinstance(tokens, list):
        return len(tokens)
    raise TokenizeError(f"{url}: no 'count' or 'tokens' in the answer")


def _llamacpp_piece(piece: object) -> str:
    if isinstance(piece, list):  # bytes that are not valid UTF-8 on their own
        return bytes(int(b) & 0xFF for b in piece).decode("utf-8", errors="replace")
    return str(piece)


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet: the character standing for each byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    characters = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    return {chr(character): byte for byte, character in zip(printable, characters, strict=True)}


_BYTE_LEVEL = _byte_level_alphabet()
_SPM_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def decode_token_strs(token_strs: Sequence[Any], text: str) -> list[str] | None:
    """The text of each token from a tokenizer's own token strings (byte-level BPE or SentencePiece),
    or None when neither reading joins back into `text`."""
    if not all(isinstance(token, str) for token in token_strs):
        return None
    if all(ch in _BYTE_LEVEL for token in token_strs for ch in token):
        try:
            byte_level = [bytes(_BYTE_LEVEL[ch] for ch in token).decode("utf-8") for token in token_strs]
        except UnicodeDecodeError:
            byte_level = []
        if "".join(byte_level) == text:
            return byte_level
    sentencepiece = [
        _SPM_BYTE.sub(lambda match: chr(int(match.group(1), 16)), token.replace("▁", " "))
        for token in token_strs
    ]
    return sentencepiece if "".join(sentencepiece) == text else None
