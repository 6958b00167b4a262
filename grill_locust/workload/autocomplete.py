"""The `autocomplete` kind: a developer typing through a source file, a fill-in-the-middle request at
every pause in the typing, cancelled by the next keystroke.

`Workload.script` gives an `AutocompletePlan` for kind `autocomplete`, fixed by (seed, user key,
iteration) and with no I/O: the cursor is at a definition of a real corpus file, `prefix_tokens` of the
text before it and `suffix_tokens` of the file after the code the developer writes there. The
developer types that code (the file's own text, so what is typed stays code) in bursts of words at
`typing_cps`, each interval between keystrokes drawn around 1/typing_cps, with a pause between bursts.
Whenever no keystroke follows the last one for `debounce_ms`, a request goes out with the current
prefix and suffix; the next keystroke cancels it if its completion has not arrived by then. So the
plan is a list of requests, each with the text typed since the last one, when it is sent and when
the next keystroke comes: the keystrokes in between change only the text, and need no timer of
their own. An iteration ends after `requests` requests.

`AutocompleteSession` carries the text before the cursor as it grows (typed text, accepted
completions: the engine's real text) and gives each request's prefix: the last `prefix_tokens`
tokens, a window that slides as an editor's does. Exact on the approximate tokenizer (the simulated
engine), scaled on a calibrated backend.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, cast

from grill_locust.tokens import tokenize
from grill_locust.workload.seeding import ShapeKey

if TYPE_CHECKING:
    import random

    from grill_locust.workload.corpus import Corpus, SourceFile
    from grill_locust.workload.generators import Workload
    from grill_locust.workload.kinds.autocomplete import AutocompleteConversation

KEYSTROKE_SIGMA = 0.35  # log-normal spread of the interval between two keystrokes of a burst
BURST_WORDS = (1, 6)  # words typed in one burst, drawn uniformly
PAUSE_MEDIAN_S = 1.0  # a pause between bursts (reading, thinking): log-normal, median and p95
PAUSE_P95_S = 4.0
# other files of the corpus sent as context where the transport takes them (llama.cpp's /infill)
EXTRA_FILES = 2
EXTRA_FILE_TOKENS = 256
_P95_Z = 1.6448536269514722  # the standard normal's 95th percentile
_CHARS_PER_TOKEN = 4.5  # of the text read before it is cut to size (as corpus.py reads code)
_KEYSTROKE = re.compile(r"\n[ \t]*|[^\n]")  # Enter and the editor's indentation after it: one keystroke
_WORD = re.compile(r"\S+\s*|\s+")


class ExtraFile(NamedTuple):
    """Another file of the project, as an editor sends it for context."""

    filename: str
    text: str


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request of an iteration, its times from the iteration's start (seconds)."""

    typed: str  # what the developer typed since the previous request, before this one is sent
    send_at_s: float  # the last keystroke + debounce
    next_keystroke_at_s: float  # cancels the request if its completion has not arrived by then
    accept: bool  # the developer accepts this completion if it is shown (drawn with accept_rate)


@dataclass(frozen=True)
class AutocompletePlan:
    """One iteration of one developer (see the module docstring)."""

    conversation_id: str
    module: str  # the file the cursor is in
    prefix: str  # the text before the cursor when the iteration starts: prefix_tokens
    suffix: str  # the file after the code the developer writes: suffix_tokens
    requests: tuple[PlannedRequest, ...]
    keystroke_times_s: tuple[float, ...]  # every keystroke typed before the last request
    extra_files: tuple[ExtraFile, ...]
    prefix_tokens: int  # the window's size, on the approximate tokenizer
    budget_s: float


class AutocompleteSession:
    """The text around the cursor during one iteration: `type(text)` or `accept(completion)` insert
    at the cursor, `prefix` is the window a request sends, `suffix` never changes."""

    def __init__(self, plan: AutocompletePlan) -> None:
        self.suffix = plan.suffix
        self._window = plan.prefix_tokens
        self._tokens = tokenize(plan.prefix)

    def insert(self, text: str) -> None:
        """Text typed or accepted at the cursor. Only the last token can merge with what follows it,
        so it alone is read again; older tokens are dropped past twice the window."""
        if not text:
            return
        tokens = self._tokens
        last = tokens.pop() if tokens else ""
        tokens.extend(tokenize(last + text))
        if len(tokens) > 2 * self._window:
            del tokens[: -self._window]

    @property
    def prefix(self) -> str:
        """The last `prefix_tokens` tokens before the cursor (a tokenization read from one of its token
        starts is the same tokens: the window has exactly its size)."""
        tokens = self._tokens
        if len(tokens) > self._window:
            del tokens[: -self._window]
        return "".join(tokens)


def plan_autocomplete(
    workload: Workload, conversation_id: str, rng: random.Random, shape: ShapeKey
) -> AutocompletePlan:
    """The plan of one iteration (the `autocomplete` kind's script builder)."""
    conversation = cast("AutocompleteConversation", workload.conversation)
    corpus = workload.corpus
    prefix_size = workload._size(conversation.prefix_tokens)
    suffix_size = workload._size(conversation.suffix_tokens)
    file = corpus.random_file(rng)
    line_start = rng.choice(file.definitions).offset
    # the cursor after the line's indentation, which the editor put there
    line = file.text[line_start : line_start + 80]
    cursor = line_start + len(line) - len(line.lstrip(" \t"))
    prefix = _last_tokens(corpus, rng, file, cursor, prefix_size)
    ahead = _TextAhead(corpus, rng, file.text[cursor:])
    times, requests = _typing(rng, conversation, ahead)
    hole_chars = sum(len(request.typed) for request in requests)
    suffix = ahead.first_tokens(hole_chars, suffix_size)
    extra_files = tuple(_extra_file(corpus, rng) for _ in range(EXTRA_FILES))
    return AutocompletePlan(
        conversation_id=conversation_id,
        module=file.module,
        prefix=prefix,
        suffix=suffix,
        requests=requests,
        keystroke_times_s=times,
        extra_files=extra_files,
        prefix_tokens=prefix_size,
        budget_s=(conversation.budget_ms or 1) / 1000.0,
    )


def _typing(
    rng: random.Random, conversation: AutocompleteConversation, ahead: _TextAhead
) -> tuple[tuple[float, ...], tuple[PlannedRequest, ...]]:
    """Keystroke times and the requests their pauses send, until `requests` requests."""
    wanted = conversation.requests or 1
    debounce_s = (conversation.debounce_ms or 0.0) / 1000.0
    accept_rate = conversation.accept_rate or 0.0
    key_median_s = 1.0 / (conversation.typing_cps or 1.0)
    pause_sigma = math.log(PAUSE_P95_S / PAUSE_MEDIAN_S) / _P95_Z
    times: list[float] = []
    requests: list[PlannedRequest] = []
    typed: list[str] = []  # keystrokes since the last request
    words = ahead.words()
    while True:
        burst = "".join(next(words) for _ in range(rng.randint(*BURST_WORDS)))
        for index, key in enumerate(_KEYSTROKE.findall(burst)):
            if times:
                if index == 0:
                    gap_s = PAUSE_MEDIAN_S * math.exp(pause_sigma * rng.gauss())
                else:
                    gap_s = key_median_s * math.exp(KEYSTROKE_SIGMA * rng.gauss())
                at_s = times[-1] + gap_s
                if gap_s > debounce_s:  # the debounce ran out before this keystroke: a request went out
                    accept = rng.random() < accept_rate
                    requests.append(PlannedRequest("".join(typed), times[-1] + debounce_s, at_s, accept))
                    typed.clear()
                    if len(requests) == wanted:
                        return tuple(times), tuple(requests)
            else:
                at_s = 0.0
            times.append(at_s)
            typed.append(key)


class _TextAhead:
    """The file's text from the cursor on, continued into other files of the corpus when it runs out."""

    def __init__(self, corpus: Corpus, rng: random.Random, text: str) -> None:
        self._corpus = corpus
        self._rng = rng
        self.text = text

    def _extend(self) -> None:
        following = self._corpus.random_file(self._rng)
        self.text += f"\n\n# ---- {following.module} ----\n" + following.text

    def words(self) -> Iterator[str]:
        position = 0
        while True:
            match = _WORD.match(self.text, position)
            # a word that reaches the end may go on in the next file: read it once that is there
            while match is None or match.end() == len(self.text):
                self._extend()
                match = _WORD.match(self.text, position)
            position = match.end()
            yield match.group()

    def first_tokens(self, start: int, n_tokens: int) -> str:
        """Exactly `n_tokens` tokens of the text from `start` (a prefix of a tokenization is itself)."""
        want_chars = int(n_tokens * _CHARS_PER_TOKEN) + 64
        while True:
            while start + want_chars > len(self.text):
                self._extend()
            tokens = tokenize(self.text[start : start + want_chars])
            if len(tokens) > n_tokens:  # one to spare: the read may end inside a token
                return "".join(tokens[:n_tokens])
            want_chars *= 2  # dense code


def _last_tokens(corpus: Corpus, rng: random.Random, file: SourceFile, cursor: int, n_tokens: int) -> str:
    """Exactly `n_tokens` tokens ending at `cursor`; a file with fewer before its cursor is preceded
    by another of the corpus."""
    text = file.text[:cursor]
    want_chars = int(n_tokens * _CHARS_PER_TOKEN) + 64
    while True:
        cut = len(text) > want_chars
        tokens = tokenize(text[-want_chars:] if cut else text)
        if len(tokens) > n_tokens or (not cut and len(tokens) == n_tokens):
            # read from a cut, the first token may be part of one: it is the one left out
            return "".join(tokens[-n_tokens:])
        if cut:
            want_chars *= 2  # dense code
            continue
        earlier = corpus.random_file(rng)
        text = earlier.text + f"\n\n# ---- {file.module} ----\n" + text


def _extra_file(corpus: Corpus, rng: random.Random) -> ExtraFile:
    excerpt = corpus.excerpt(rng, EXTRA_FILE_TOKENS)
    filename = excerpt.module.replace(".", "/") + ".py"
    return ExtraFile(filename, "".join(excerpt.tokens[:EXTRA_FILE_TOKENS]))
