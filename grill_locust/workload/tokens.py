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
