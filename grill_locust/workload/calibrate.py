"""Prompt sizes in a backend's own tokens: one call to its tokenize endpoint gives the scale.

The approximate tokenizer (`tokens.py`) is exact against the simulated engine. Against a real engine,
`backend_token_counter(backend)` sends one sample of the same kind of text the workloads build (code
and questions about it) to the backend's `/tokenize`, and keeps the ratio of its count to ours.
Workloads then aim at `target / ratio` approximate tokens. Counters are cached per backend.

Accuracy on a real BPE tokenizer (gemma-3 through llama-server): the mean size error is ~10 %, single
messages are off by up to ~30 %, because code density varies from file to file and SentencePiece
merges across word boundaries. Reaching ±2 % per message needs per-message sizing with token pieces
(llama.cpp `with_pieces`, vLLM `return_token_strs`); not done yet.

Request shapes: vLLM, SGLang and `grill sim` take `{"model", "prompt"}` and answer
`{"count", "tokens"}`; llama.cpp's server takes `{"content"}` and answers `{"tokens"}`.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grill_locust.workload.tokens import count_tokens

if TYPE_CHECKING:
    from grill_locust.config import Backend

log = logging.getLogger(__name__)

CALIBRATION_TOKENS = 3000  # approximate tokens in the calibration sample
CALIBRATION_TIMEOUT_S = 10.0
CALIBRATION_SEED = 20260101

_cache: dict[tuple[str, str, str | None], TokenCounter | None] = {}
_cache_lock = threading.Lock()


class TokenizeError(Exception):
    """The backend's tokenize endpoint did not answer as expected."""


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens as one backend would, scaled from the approximate tokenizer."""

    backend_name: str
    tokenize_url: str
    engine: str
    backend_tokens_per_approx_token: float
    model: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False, compare=False)  # may hold the API key

    def count(self, text: str) -> int:
        """Estimated backend tokens in `text` (no network)."""
        return round(count_tokens(text) * self.backend_tokens_per_approx_token)

    def approx_tokens(self, backend_tokens: int) -> int:
        """Approximate-tokenizer tokens that make `backend_tokens` on the backend."""
        return max(1, round(backend_tokens / self.backend_tokens_per_approx_token))

    def remote_count(self, text: str) -> int:
        """The backend's own count for `text` (one HTTP call; for checks, not the hot path)."""
        return tokenize_remote(self.tokenize_url, self.engine, text, self.model, self.headers)


def tokenize_remote(
    url: str, engine: str, text: str, model: str | None = None, headers: dict[str, str] | None = None
) -> int:
    """Tokens in `text` by the tokenize endpoint at `url` (vLLM/SGLang/sim or llama.cpp shape)."""
    import requests  # here, so the config and plan code never pay for it

    payload: dict[str, Any]
    if engine == "llamacpp":
        payload = {"content": text}
    else:
        payload = {"prompt": text}
        if model:
            payload["model"] = model
    try:
        response = requests.post(url, json=payload, headers=headers or {}, timeout=CALIBRATION_TIMEOUT_S)
    except requests.RequestException as error:
        raise TokenizeError(f"{url}: {type(error).__name__}") from None
    if response.status_code != 200:
        raise TokenizeError(f"{url}: HTTP {response.status_code}")
    try:
        body = response.json()
    except ValueError:
        raise TokenizeError(f"{url}: the answer is not JSON") from None
    if isinstance(body, dict) and isinstance(body.get("count"), int):
        return int(body["count"])
    if isinstance(body, dict) and isinstance(body.get("tokens"), list):
        return len(body["tokens"])
    raise TokenizeError(f"{url}: no 'count' or 'tokens' in the answer")


def calibration_sample() -> str:
    """The text sent to calibrate: code and questions, as the workloads build them."""
    from grill_locust.workload.corpus import stdlib_corpus
    from grill_locust.workload.generators import QUESTIONS

    rng = random.Random(CALIBRATION_SEED)
    corpus = stdlib_corpus()
    parts: list[str] = []
    total = 0
    while total < CALIBRATION_TOKENS:
        excerpt = corpus.excerpt(rng, 400)
        part = (
            rng.choice(QUESTIONS).format(name=excerpt.definition.name)
            + "\n```python\n"
            + excerpt.text
            + "\n```\n"
        )
        parts.append(part)
        total += count_tokens(part)
    return "".join(parts)


def backend_token_counter(backend: Backend, model: str | None = None) -> TokenCounter | None:
    """A counter calibrated on `backend`'s tokenize endpoint, or None (approximate sizes) when it has none
    or it fails (logged once). `model`: the served model name, sent where the endpoint wants one."""
    if not backend.tokenize_url:
        return None
    key = (backend.name, backend.tokenize_url, model)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    headers = dict(backend.headers)
    if backend.api_key is not None:
        headers["Authorization"] = f"Bearer {backend.api_key.get_secret_value()}"
    if model is None and backend.engine != "llamacpp" and backend.url:
        model = _first_served_model(backend.url, headers)
    sample = calibration_sample()
    counter: TokenCounter | None
    try:
        backend_tokens = tokenize_remote(backend.tokenize_url, backend.engine, sample, model, headers)
        counter = TokenCounter(
            backend_name=backend.name,
            tokenize_url=backend.tokenize_url,
            engine=backend.engine,
            backend_tokens_per_approx_token=backend_tokens / count_tokens(sample),
            model=model,
            headers=headers,
        )
    except TokenizeError as error:
        log.warning(
            "backend %s: tokenize failed (%s); prompt sizes use the approximate tokenizer",
            backend.name,
            error,
        )
        counter = None
    with _cache_lock:
        _cache[key] = counter
    return counter


def _first_served_model(url: str, headers: dict[str, str]) -> str | None:
    """The first model id at `<url>/v1/models` (vLLM's tokenize wants one), or None."""
    import requests

    try:
        response = requests.get(f"{url}/v1/models", headers=headers, timeout=CALIBRATION_TIMEOUT_S)
        models = response.json().get("data") or []
        return str(models[0]["id"]) if models else None
    except (requests.RequestException, ValueError, KeyError, TypeError, AttributeError):
        return None


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()
