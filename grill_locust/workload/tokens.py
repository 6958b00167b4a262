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


def token_id(token: str) -> int:
    """A stable id for a token string (the same in every process)."""
    return zlib.crc32(token.encode("utf-8")) & 0x7FFFFFFF


def truncate_to_tokens(text: str, n_tokens: int) -> str:
    """The longest prefix of `text` that has at most `n_tokens` tokens."""
    return "".join(tokenize(text)[:n_tokens])
