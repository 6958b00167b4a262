"""Token counting: a fast, deterministic approximate tokenizer, shared with the simulated engine.

It splits text losslessly into pieces shaped like a code BPE's tokens: short letter runs (long words
are split every 6 letters), digit groups of up to 3, whitespace runs, and single or paired punctuation marks.
On Python source it gives about one token per 3.4 characters, close to the tokenizers of common code
models. The simulated engine tokenizes with it, so prompt sizes are exact against `grill sim`; against
a real engine prompts are calibrated through its `/tokenize` endpoint (see `workload/calibrate.py`).
"""

from __future__ import annotations

import re
import zlib

_TOKEN = re.compile(r" ?[A-Za-z]{1,8}|\d{1,3}|\n[ \t]*|[ \t]+|[^A-Za-z\d\s]{1,2}|\s")


def tokenize(text: str) -> list[str]:
    """Split text into token strings; `"".join(tokenize(t)) == t`."""
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


SEAM_TOKENS = 8  # tokens of the right-hand side `seam_change` re-reads


def seam_change(left: list[str], right: list[str]) -> int | None:
    """How many tokens joining two texts adds (negative: removes) where they meet, from their token
    lists, reading only the seam: `len(left) + len(right) + seam_change(left, right)` is the token
    count of the joined text. None when the seam is still unsettled after SEAM_TOKENS tokens of
    `right` (count the joined text then).

    Only `left`'s last token can change: every other token's match ends inside `left`, before the
    characters that stopped it. From the first place where the re-read seam ends a token where one
    of `right`'s own tokens ends, the tokenization is `right`'s again (a match depends only on the
    text from where it starts). Tokens that end before the re-read window's end are the same as in
    the whole joined text (cutting the text changes only a match that reaches the cut)."""
    if not left or not right:
        return 0
    last = left[-1]
    window = right[:SEAM_TOKENS]
    text = last + "".join(window)
    ends = {len(last): 0}  # where `right`'s tokens end (in `text`) -> how many of them end there
    offset = len(last)
    for index, token in enumerate(window, 1):
        offset += len(token)
        ends[offset] = index
    whole_right = len(window) == len(right)
    offset = 0
    for count, token in enumerate(_TOKEN.findall(text), 1):
        offset += len(token)
        settled = ends.get(offset)
        if settled is not None and (offset < len(text) or whole_right):
            return count - 1 - settled  # the seam's tokens, less `last` and `right`'s tokens they replace
    return None


def token_id(token: str) -> int:
    """A stable id for a token string (the same in every process)."""
    return zlib.crc32(token.encode("utf-8")) & 0x7FFFFFFF


def truncate_to_tokens(text: str, n_tokens: int) -> str:
    """The longest prefix of `text` that has at most `n_tokens` tokens."""
    return "".join(tokenize(text)[:n_tokens])


FIT_ATTEMPTS = 6


def fit_tokens(head: str, body: str | list[str], tail: str, n_tokens: int) -> str:
    """head + a prefix of body + tail with exactly `n_tokens` approximate tokens.

    `body` (text, or its tokens) must have at least `n_tokens` tokens. If head and tail alone are
    too long, the text is cut. The count is checked at the two seams only (`seam_change`: a prefix of
    tokens re-tokenizes the same, so the middle needs no second reading; a 4,000-token prompt took
    twice as long with whole-text recounts)."""
    body_tokens = tokenize(body) if isinstance(body, str) else body
    head_tokens, tail_tokens = tokenize(head), tokenize(tail)
    budget = n_tokens - len(head_tokens) - len(tail_tokens)
    for _ in range(FIT_ATTEMPTS):
        if budget < 0:
            break
        middle = body_tokens[:budget]
        text = head + "".join(middle) + tail
        difference = n_tokens - _joined_count(head_tokens, middle, tail_tokens, text)
        if difference == 0:
            return text
        budget += difference  # a token merged (or split) across a seam: adjust and retry
    # rare: fall back to a plain cut, exact by construction (a prefix of tokens re-tokenizes the same)
    return truncate_to_tokens(head + "".join(body_tokens) + tail, n_tokens)


def _joined_count(head: list[str], middle: list[str], tail: list[str], text: str) -> int:
    """Tokens in `text`, the three joined: from the seams when the middle keeps them apart."""
    if len(middle) > SEAM_TOKENS + 1:  # the first seam settles before the middle's last token
        first, second = seam_change(head, middle), seam_change(middle, tail)
        if first is not None and second is not None:
            return len(head) + len(middle) + len(tail) + first + second
    return count_tokens(text)
