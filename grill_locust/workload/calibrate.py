"""Prompt sizes in a backend's own tokens, measured once per backend through its tokenize endpoint.

Exact mode (the endpoint returns token pieces: llama.cpp `with_pieces`, vLLM `return_token_strs`):
`backend_token_counter(backend)` sends, in two calls, (1) a stream of whole standard-library files
and (2) every variable piece of text the workloads insert (the words request ids are made of,
definition and module names) and every message head with reference values, each in the context it
is used in. From the pieces it
keeps where each token of the stream starts, so a workload can cut code at a definition and end it
after exactly the tokens it still needs (`MeasuredCorpus`). A message's size is then the sum of known
counts; the seams between the parts (after a newline, before a space-led word) are ones tokenizers
do not merge across, which the real-engine test checks with one `/tokenize` per message (±2 %).
Measured on gemma-3 through llama-server: every message of the four workloads exact (0 tokens off in
180 messages); calibration ~1.5-3 s (~90k tokens of code, then ~2.8k spans, ~1.8k of them the words
request ids are made of), scripts ~0.05 ms.

Scaled mode (the endpoint gives counts only, e.g. `grill sim`): the stream's count over the
approximate tokenizer's (`tokens.py`) gives one ratio, and workloads aim at `target / ratio`
approximate tokens. Exact against the simulated engine (ratio 1); on a real BPE tokenizer single
messages are off by up to ~30 %.

Turn overhead: what the engine adds around one user turn on the backend's API (the chat template's
role tags and BOS; for the completions API the role labels and BOS), measured once with
`REFERENCE_TURN`: llama.cpp renders it through `/apply-template` and counts the result with its special
tokens, vLLM-like engines (the simulator too, with its own template rule) count it from `/tokenize` with
`messages`. A trace row's prompt is that much shorter, so the engine's `prompt_tokens` is the row's
input length (gemma-3 on llama-server: 8 tokens; by the usage fit through LiteLLM, 10).

Usage fit (a backend with no tokenize endpoint, or one that fails: a gateway such as LiteLLM, TGI,
Ollama, any OpenAI-compatible server): two requests of one output token over the backend's own API,
`REFERENCE_TURN` and a turn of its shape with USAGE_SAMPLE_TOKENS of code, whose `prompt_tokens` (or
`input_tokens`) in the engine's usage give `prompt_tokens = scale * approximate tokens + overhead`. The
overhead is the turn overhead; where no tokenize count was made, the scale is the scaled mode's ratio.
Their X-Request-Id starts with CALIBRATION_ID_PREFIX, and they are sent outside any user, so they are
never records (the simulator's truth log has them, under that prefix).

The tokenize calls go through `client.backend_http.tokenize`, in the body shape the engine table
gives each engine. Counters are cached per backend in the process.
"""

from __future__ import annotations

import bisect
import logging
import random
import re
import secrets
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from grill_locust.client import EngineClient, request_for
from grill_locust.client.backend_http import (
    TokenizeError,
    Tokens,
    headers_for,
    list_models,
    token_count,
    tokenize,
    tokenizer_answer,
)
from grill_locust.client.payloads import completion_prompt
from grill_locust.engines import engine_facts
from grill_locust.record import STATUS_OK
from grill_locust.tokens import count_tokens, fit_tokens
from grill_locust.workload.heads import HEAD_REFERENCE, ID_HEAD, QUESTIONS, measured_heads

if TYPE_CHECKING:
    from grill_locust.config import Backend
    from grill_locust.workload.corpus import Corpus

log = logging.getLogger(__name__)

CALIBRATION_TOKENS = 3000  # approximate tokens in the fallback sample (scaled mode, stream refused)
CALIBRATION_TIMEOUT_S = 30.0
CALIBRATION_SEED = 20260101
STREAM_CHARS = 320_000  # measured corpus: ~90k tokens of code, one /tokenize call (~1-2 s)
STREAM_FILE_CHARS = 12_000  # at most this much of each file, so the stream spans many modules
ID_WORD_PIECE = re.compile(r" [a-z]{2,}")  # stream pieces whose words may make request ids
ID_WORDS_MIN = 256  # fewer single-token words would make ids long (8 bits a word: 8 words for 64 bits)
ID_RIGHT = ": x"  # an id is measured before the colon and space-led word that follow it in every head
SPAN_LEFT = "w"  # a variable span is measured between a word end and a space-led word, as it is used
SPAN_RIGHT = " x"
HEAD_RIGHT = "def x():"  # a head is measured before a code line, as it is used
# a turn shaped as a trace row's prompt (an id head, code, a last newline), whose overhead is measured
REFERENCE_TURN = ID_HEAD.format(**HEAD_REFERENCE) + "def x():\n    return 1\n"
USAGE_SAMPLE_TOKENS = 400  # approximate tokens of the usage fit's larger turn: fits a 1,024-token slot
CALIBRATION_ID_PREFIX = "grill-calibrate-"  # X-Request-Id of the usage fit's requests, which are no load
TIMEOUT_NAMES = ("connect_s", "first_token_s", "idle_s", "total_s")  # a backend's, capped for the fit

_cache: dict[tuple[str, str | None, str | None], TokenCounter | None] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class MeasuredDefinition:
    name: str  # e.g. "JSONDecoder" or "JSONDecoder.raw_decode"
    module: str
    file_index: int  # into MeasuredCorpus.files
    token_index: int  # the stream token where its line starts


@dataclass(frozen=True)
class MeasuredFile:
    module: str
    definitions: tuple[int, ...]  # indices into MeasuredCorpus.definitions, in stream order


@dataclass
class MeasuredCorpus:
    """Code whose every token start is known on one backend, and the counts of the parts around it.

    `code(start, n)` is the text of tokens start..start+n of the stream; `span(text)` the tokens of a
    measured piece of text (a request id, a name between backticks, a message head)."""

    text: str
    token_starts: list[int]  # character offset of every token of `text`, then len(text)
    definitions: list[MeasuredDefinition]
    files: list[MeasuredFile]
    span_tokens: dict[str, int]
    id_words: list[str]  # words that are one token each wherever a request id puts them
    _definition_tokens: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._definition_tokens = [definition.token_index for definition in self.definitions]

    @property
    def total_tokens(self) -> int:
        return len(self.token_starts) - 1

    def code(self, start_token: int, n_tokens: int) -> str:
        return self.text[self.token_starts[start_token] : self.token_starts[start_token + n_tokens]]

    def span(self, text: str) -> int:
        return self.span_tokens[text]

    def id_tokens(self, request_id: str) -> int:
        """Tokens of a request id made of `id_words` joined by spaces: one a word."""
        return request_id.count(" ") + 1

    def definitions_fitting(self, n_tokens: int) -> int:
        """How many definitions (the first ones in the stream) leave at least `n_tokens` after them."""
        return bisect.bisect_right(self._definition_tokens, self.total_tokens - n_tokens)


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens as one backend would: measured pieces (exact mode) and a scale (both modes)."""

    backend_name: str
    tokenize_url: str | None  # None: sized by the engine's usage (no endpoint to count with)
    engine: str
    backend_tokens_per_approx_token: float
    model: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False, compare=False)  # may hold the API key
    measured: MeasuredCorpus | None = field(default=None, repr=False, compare=False)
    # backend tokens the engine counts around one user turn on the backend's API (see the module's doc)
    turn_overhead_tokens: int = 0

    def count(self, text: str) -> int:
        """Estimated backend tokens in `text` (no network)."""
        return round(count_tokens(text) * self.backend_tokens_per_approx_token)

    def approx_tokens(self, backend_tokens: int) -> int:
        """Approximate-tokenizer tokens that make `backend_tokens` on the backend."""
        return max(1, round(backend_tokens / self.backend_tokens_per_approx_token))

    def remote_count(self, text: str) -> int:
        """The backend's own count for `text` (one HTTP call; for checks, not the hot path)."""
        if self.tokenize_url is None:
            raise TokenizeError(f"backend {self.backend_name}: no tokenize endpoint to count with")
        return _tokenize(self.tokenize_url, self.engine, text, self.model, self.headers).count


# ---- what is measured --------------------------------------------------------------------------


def measured_stream(corpus: Corpus) -> tuple[str, list[tuple[str, int, int]]]:
    """The code sent to be measured: whole lines of many modules under a header each, and where each
    module is in it (module, start, end) by character. ASCII files only (pieces split no characters)."""
    parts: list[str] = []
    where: list[tuple[str, int, int]] = []
    length = 0
    for index in _spread(len(corpus)):  # however soon the stream is full, from all over the library
        source = corpus.file(index)
        if not source.text.isascii() or not source.definitions:
            continue
        text = source.text
        if len(text) > STREAM_FILE_CHARS:
            text = text[: text.rfind("\n", 0, STREAM_FILE_CHARS) + 1]
        if not text.endswith("\n"):
            text += "\n"
        part = f"# ---- {source.module} ----\n{text}\n"
        where.append((source.module, length, length + len(part)))
        parts.append(part)
        length += len(part)
        if length >= STREAM_CHARS:
            break
    return "".join(parts), where


def _spread(count: int) -> list[int]:
    """0 .. count-1 in bit-reversed order: every prefix of it is spread evenly over the range."""
    bits = max(1, (count - 1).bit_length())
    return sorted(range(count), key=lambda index: int(format(index, f"0{bits}b")[::-1], 2))


def id_word_item(word: str) -> tuple[str, tuple[str, ...], str]:
    """How a candidate id word is measured: first, inside and last in an id, which opens a line (a
    message) and is followed by a colon and a space-led word."""
    return "", (word, f" {word}", f" {word}"), ID_RIGHT


def name_span(name: str) -> str:
    """How a name sits in a sentence: after a word, between backticks, before a space-led word."""
    return f" `{name}`"


def _measure_spans(
    items: Iterable[tuple[str, tuple[str, ...], str]], send: Any
) -> dict[tuple[str, ...], tuple[int, ...]]:
    """Token counts of the parts of each item, measured in one call as lines `left + parts + right`;
    items with a part whose ends are not token boundaries there are left out."""
    lines: list[str] = []
    places: list[tuple[tuple[str, ...], list[int]]] = []  # parts, the offsets where they start and end
    length = 0
    for left, parts, right in items:
        offsets = [length + len(left)]
        for part in parts:
            offsets.append(offsets[-1] + len(part))
        places.append((parts, offsets))
        line = left + "".join(parts) + right + "\n"
        lines.append(line)
        length += len(line)
    text = "".join(lines)
    starts = _token_starts(text, send(text))
    index = {offset: token for token, offset in enumerate(starts)}
    counts: dict[tuple[str, ...], tuple[int, ...]] = {}
    for parts, offsets in places:
        if all(offset in index for offset in offsets):
            counts[parts] = tuple(index[end] - index[start] for start, end in pairwise(offsets))
    return counts


def _token_starts(text: str, pieces: list[str]) -> list[int]:
    starts = [0]
    for piece in pieces:
        starts.append(starts[-1] + len(piece))
    if starts[-1] != len(text):
        raise TokenizeError("token pieces do not join back into the text")
    return starts


def measure_corpus(send: Any, heads: Sequence[str], reference: dict[str, str]) -> MeasuredCorpus:
    """Everything exact sizing needs, from two calls of `send(text) -> pieces`.

    `heads` are message heads with `{id}`, `{name}` and `{module}` filled from `reference`."""
    from grill_locust.workload.corpus import _definitions, stdlib_corpus

    text, where = measured_stream(stdlib_corpus())
    token_starts = _token_starts(text, send(text))
    token_at = {offset: token for token, offset in enumerate(token_starts)}
    pieces = {text[start:end] for start, end in pairwise(token_starts)}
    id_candidates = sorted(piece[1:] for piece in pieces if ID_WORD_PIECE.fullmatch(piece))
    names: set[str] = set()
    candidates: list[tuple[str, str, int, int]] = []  # name, module, file index, token index
    for file_index, (module, start, end) in enumerate(where):
        names.add(module)
        for definition in _definitions(text[start:end]):
            token = token_at.get(start + definition.offset)
            if token is not None:  # a definition whose line starts on a token boundary
                candidates.append((definition.name, module, file_index, token))
                names.add(definition.name)
    names.update((reference["name"], reference["module"]))
    items = [id_word_item(word) for word in id_candidates]
    items.append(("", (reference["id"],), ID_RIGHT))
    items += [(SPAN_LEFT, (name_span(name),), SPAN_RIGHT) for name in sorted(names)]
    items += [("", (head,), HEAD_RIGHT) for head in heads]
    counts = _measure_spans(items, send)
    span_tokens = {parts[0]: count[0] for parts, count in counts.items() if len(parts) == 1}
    id_words = [word for word in id_candidates if counts.get(id_word_item(word)[1]) == (1, 1, 1)]
    if len(id_words) < ID_WORDS_MIN:
        raise TokenizeError(f"{len(id_words)} words are single tokens in ids; at least {ID_WORDS_MIN} needed")
    definitions: list[MeasuredDefinition] = []
    members: list[list[int]] = [[] for _ in where]
    for name, module, file_index, token in candidates:
        if name_span(name) in span_tokens and name_span(module) in span_tokens:
            members[file_index].append(len(definitions))
            definitions.append(MeasuredDefinition(name, module, file_index, token))
    return MeasuredCorpus(
        text=text,
        token_starts=token_starts,
        definitions=definitions,
        files=[
            MeasuredFile(module, tuple(member)) for (module, _, _), member in zip(where, members, strict=True)
        ],
        span_tokens=span_tokens,
        id_words=id_words,
    )


# ---- the counter per backend -------------------------------------------------------------------


def calibration_sample() -> str:
    """The fallback sample (scaled mode when the stream is refused): code and questions."""
    from grill_locust.workload.corpus import stdlib_corpus

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
    """A counter calibrated on `backend`'s tokenize endpoint, else (no endpoint, or it fails) on the
    engine's usage, or None (approximate sizes) when neither answers (logged once). `model`: the served
    model name, sent where the endpoint wants one and in the usage requests (else the first listed)."""
    key = (backend.name, backend.tokenize_url, model)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    counter = _backend_counter(backend, model)
    with _cache_lock:
        _cache[key] = counter
    return counter


def _backend_counter(backend: Backend, model: str | None) -> TokenCounter | None:
    if model is None and backend.url:  # vLLM's tokenize wants one, and every usage request
        model = _first_served_model(backend)
    if not backend.tokenize_url:
        try:
            fit = usage_fit(backend, model)
        except UsageError as error:
            log.warning(
                "backend %s: no tokenize endpoint and no usage to measure prompts by (%s); prompt sizes "
                "use the approximate tokenizer, and a trace row reaches the engine with the chat "
                "template's tokens added",
                backend.name,
                error,
            )
            return None
        _log_fit(backend, fit, "")
        return fit.counter(backend, model)
    headers = headers_for(backend, backend.tokenize_url)
    try:
        counter = _calibrate(backend.name, backend.tokenize_url, backend.engine, model, headers)
    except TokenizeError as error:
        try:
            fit = usage_fit(backend, model)
        except UsageError as usage_error:
            log.warning(
                "backend %s: tokenize failed (%s), and so did measuring by usage (%s); prompt sizes use "
                "the approximate tokenizer",
                backend.name,
                error,
                usage_error,
            )
            return None
        _log_fit(backend, fit, f"tokenize failed ({error}); ")
        return fit.counter(backend, model)
    try:
        overhead = _turn_overhead(backend, model, headers)
    except TokenizeError as error:
        try:
            fit = usage_fit(backend, model)
        except UsageError as usage_error:
            log.warning(
                "backend %s: the chat template's tokens cannot be measured (%s; by usage: %s); a trace "
                "row's prompt is its input length and the engine's prompt_tokens that plus the template's",
                backend.name,
                error,
                usage_error,
            )
            return counter
        _log_fit(backend, fit, f"the chat template's tokens cannot be measured by tokenize ({error}); ")
        overhead = fit.overhead_tokens
    return replace(counter, turn_overhead_tokens=overhead)


def _ratio(url: str, engine: str, backend_tokens: int, text: str) -> float:
    """Backend tokens per approximate token; none counted means the endpoint read another body shape."""
    if backend_tokens <= 0:
        raise TokenizeError(
            f"{url}: counted no tokens in {len(text)} characters (is `{engine}` the engine behind it?)"
        )
    return backend_tokens / count_tokens(text)


def _calibrate(name: str, url: str, engine: str, model: str | None, headers: dict[str, str]) -> TokenCounter:
    from grill_locust.workload.corpus import stdlib_corpus

    def counter(ratio: float, measured: MeasuredCorpus | None = None) -> TokenCounter:
        return TokenCounter(name, url, engine, ratio, model, headers, measured)

    stream, _ = measured_stream(stdlib_corpus())
    try:
        stream_tokens = _tokenize(url, engine, stream, model, headers, pieces=True)
    except TokenizeError as error:  # e.g. an endpoint that caps the length: one small sample
        log.info("backend %s: stream calibration refused (%s); using a sample", name, error)
        sample = calibration_sample()
        return counter(_ratio(url, engine, _tokenize(url, engine, sample, model, headers).count, sample))
    ratio = _ratio(url, engine, stream_tokens.count, stream)
    pieces = stream_tokens.pieces
    if pieces is None:
        return counter(ratio)

    def send(text: str) -> list[str]:
        if text == stream:
            return pieces  # already measured
        found = _tokenize(url, engine, text, model, headers, pieces=True).pieces
        if found is None:
            raise TokenizeError(f"{url}: no token pieces for the spans")
        return found

    try:
        measured = measure_corpus(send, measured_heads(), HEAD_REFERENCE)
    except TokenizeError as error:  # the stream was measured: its ratio still sizes the prompts
        log.warning(
            "backend %s: measuring the corpus failed (%s); prompt sizes use the measured ratio", name, error
        )
        return counter(ratio)
    return counter(ratio, measured)


def _turn_overhead(backend: Backend, model: str | None, headers: dict[str, str]) -> int:
    """Tokens the engine counts for a request of REFERENCE_TURN alone, less the turn's own; raises
    `TokenizeError` where the engine cannot render its template for us."""
    url = backend.tokenize_url
    assert url is not None  # a counter is calibrated only where there is one
    messages = [{"role": "user", "content": REFERENCE_TURN}]
    llamacpp = engine_facts(backend.engine).tokenize_body == "content"
    own = _tokenize(url, backend.engine, REFERENCE_TURN, model, headers).count
    if backend.api == "completions":
        sent = _count_sent(url, llamacpp, model, headers, prompt=completion_prompt(messages))
    elif llamacpp:  # llama-server renders its template on /apply-template, beside /tokenize
        root = url.removesuffix("/tokenize")
        rendered = _post(f"{root}/apply-template", {"messages": messages}, headers).get("prompt")
        if not isinstance(rendered, str):
            raise TokenizeError(f"{root}/apply-template: no 'prompt' in the answer")
        sent = _count_sent(url, llamacpp, model, headers, prompt=rendered)
    else:
        sent = _count_sent(url, llamacpp, model, headers, messages=messages)
    return max(0, sent - own)


def _count_sent(
    url: str,
    llamacpp: bool,
    model: str | None,
    headers: dict[str, str],
    prompt: str | None = None,
    messages: list[dict[str, str]] | None = None,
) -> int:
    """Tokens the engine counts for `prompt` as sent (its special tokens added, as a request's are) or
    for chat `messages` through its template."""
    body: dict[str, Any]
    if llamacpp:
        body = {"content": prompt, "add_special": True}
    elif messages is not None:
        body = {"messages": messages, "add_generation_prompt": True}
    else:
        body = {"prompt": prompt, "add_special_tokens": True}
    if model and not llamacpp:
        body["model"] = model
    return token_count(url, _post(url, body, headers))


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    return tokenizer_answer(url, body, headers, CALIBRATION_TIMEOUT_S)


def _tokenize(
    url: str, engine: str, text: str, model: str | None, headers: dict[str, str], pieces: bool = False
) -> Tokens:
    return tokenize(
        url, engine, text, model=model, headers=headers, pieces=pieces, timeout_s=CALIBRATION_TIMEOUT_S
    )


# ---- the usage fit -----------------------------------------------------------------------------


class UsageError(Exception):
    """The engine's usage gives no fit: no answer, no usage in it, or a count that does not grow."""


@dataclass(frozen=True)
class UsageFit:
    """`prompt_tokens = scale * approximate tokens + overhead_tokens` on one backend's API."""

    scale: float
    overhead_tokens: int
    prompt_tokens: tuple[int, int]  # what the engine counted for the two turns of `usage_turns()`

    def counter(self, backend: Backend, model: str | None) -> TokenCounter:
        return TokenCounter(
            backend.name, None, backend.engine, self.scale, model, turn_overhead_tokens=self.overhead_tokens
        )


@dataclass(frozen=True)
class _OneToken:
    """The model as a usage request asks for it (`payloads` reads these attributes): one token out."""

    name: str
    max_tokens: int = 1


def usage_turns() -> tuple[str, str]:
    """The fit's two user turns: REFERENCE_TURN, and its head with USAGE_SAMPLE_TOKENS approximate
    tokens of code (a trace block's shape) ending in a newline."""
    from grill_locust.workload.corpus import stdlib_corpus

    excerpt = stdlib_corpus().excerpt(random.Random(CALIBRATION_SEED), USAGE_SAMPLE_TOKENS)
    head = ID_HEAD.format(**HEAD_REFERENCE)
    return REFERENCE_TURN, fit_tokens(head, excerpt.tokens, "\n", USAGE_SAMPLE_TOKENS)


def usage_fit(backend: Backend, model: str | None) -> UsageFit:
    """The fit from the engine's usage of the two turns of `usage_turns()`, sent as the load's requests
    are (the backend's API, headers and extra_body) with one output token; raises `UsageError`."""
    if not model:
        raise UsageError("no model name to ask for (the backend lists none)")
    turns = usage_turns()
    run = secrets.token_hex(4)  # the two requests' ids: CALIBRATION_ID_PREFIX, this run, the turn
    small, large = (
        _usage_prompt_tokens(backend, model, turn, f"{CALIBRATION_ID_PREFIX}{run}-{index}")
        for index, turn in enumerate(turns)
    )
    small_approx, large_approx = (count_tokens(turn) for turn in turns)
    if large <= small:
        raise UsageError(
            f"prompt_tokens {small} and {large} for turns of {small_approx} and {large_approx} approximate "
            "tokens: the count does not grow with the prompt"
        )
    scale = (large - small) / (large_approx - small_approx)
    return UsageFit(scale, max(0, round(small - scale * small_approx)), (small, large))


def _usage_prompt_tokens(backend: Backend, model: str, turn: str, request_id: str) -> int:
    """The engine's prompt count (usage) for one request of `turn`, outside any user: never a record."""
    # no tokenize call for a missing count, and no wait longer than a tokenize call's
    limits = {name: min(getattr(backend.timeouts, name), CALIBRATION_TIMEOUT_S) for name in TIMEOUT_NAMES}
    sending = backend.model_copy(
        update={"tokenize_url": None, "timeouts": backend.timeouts.model_copy(update=limits)}
    )
    path, body = request_for(sending, _OneToken(model), [{"role": "user", "content": turn}])
    client = EngineClient(sending)
    try:
        raw = client.stream(path, body, request_id=request_id).raw
    finally:
        client.close()
    if raw.status != STATUS_OK:
        raise UsageError(f"{path}: {raw.status}" + (f" ({raw.error})" if raw.error else ""))
    if raw.prompt_tokens is None:
        raise UsageError(f"{path}: the answer has no usage")
    return raw.prompt_tokens


def _log_fit(backend: Backend, fit: UsageFit, why: str) -> None:
    """The one line that says what the usage fit measured; `why`: why it was needed, when tokenize failed."""
    log.info(
        "backend %s: %smeasured by the engine's usage (requests %s*): prompt_tokens = %.4f x approximate "
        "tokens + %d, the chat template's tokens taken off each trace row",
        backend.name,
        why,
        CALIBRATION_ID_PREFIX,
        fit.scale,
        fit.overhead_tokens,
    )


def _first_served_model(backend: Backend) -> str | None:
    """The first model the backend lists, or None."""
    try:
        listing = list_models(
            backend.url,
            backend.engine,
            headers=headers_for(backend, backend.url),
            timeout_s=CALIBRATION_TIMEOUT_S,
        )
    except (OSError, ValueError):
        return None
    return listing.ids[0] if listing.ids else None


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()
