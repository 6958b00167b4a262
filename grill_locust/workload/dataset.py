"""Dataset replay (kind `dataset`): recorded prompts and conversations read from a file, once per process.

Two formats: JSONL, one row per line, `{"messages": [...]}` (OpenAI chat messages, sent as recorded and
ending in a user message) or `{"prompt": "..."}` (one user message), each with an optional
`max_tokens`; and ShareGPT JSON (a list of `{"conversations": [{"from": ..., "value": ...}]}`, as the
vLLM benchmark's ShareGPT_V3 file), whose user turns are replayed one after another with the engine's
real replies carried forward (the recorded replies are dropped) and whose system turn is the system
message. Bad input is one `DatasetError` naming the file and line (JSONL) or conversation (ShareGPT).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from functools import lru_cache

from grill_locust.errors import GrillError
from grill_locust.workload.files import file_version
from grill_locust.workload.trace import MAX_ROW_TOKENS

log = logging.getLogger(__name__)

DATASET_FORMATS = ("jsonl", "sharegpt")
FORMAT_OF_SUFFIX = {".jsonl": "jsonl", ".json": "sharegpt"}
MESSAGE_ROLES = ("system", "user", "assistant")
# ShareGPT speakers: the user's turns (FastChat's files say `human`, some say `user`), the system
# prompt, and the recorded replies, which are dropped (the engine's own replies take their place)
SHAREGPT_USER = frozenset({"human", "user"})
SHAREGPT_SYSTEM = "system"
SHAREGPT_REPLY = frozenset({"gpt", "assistant", "chatgpt", "bing", "bard"})


class DatasetError(GrillError):
    """A dataset file that cannot be replayed, in one line naming the file and the line or conversation."""


@dataclass(frozen=True)
class DatasetRow:
    """One replayable conversation: an optional system message, recorded messages sent before the first
    user turn as they are (a JSONL row's earlier turns), the user turns, and its own max_tokens."""

    line: int  # 0-based: the JSONL line, or the conversation's index in a ShareGPT list
    system: str | None
    history: tuple[dict[str, str], ...]
    user_turns: tuple[str, ...]
    max_tokens: int | None = None


@dataclass(frozen=True)
class Dataset:
    path: str
    format: str
    rows: tuple[DatasetRow, ...]

    @property
    def mean_user_turns(self) -> float:
        """Requests one replayed row sends on average."""
        return sum(len(row.user_turns) for row in self.rows) / len(self.rows)


def dataset_format(path: str, format: str | None) -> str:
    """The format given, or the one the file's extension says; ValueError when neither tells."""
    if format is not None:
        if format not in DATASET_FORMATS:
            raise ValueError(f"format: expected 'jsonl' or 'sharegpt' for kind 'dataset', got {format!r}")
        return format
    guessed = FORMAT_OF_SUFFIX.get(os.path.splitext(path)[1].lower())
    if guessed is None:
        raise ValueError(
            f"format: cannot tell the format of {path!r} from its extension (.jsonl or .json): "
            "give format: jsonl or format: sharegpt"
        )
    return guessed


def load_dataset(path: str, format: str | None = None) -> Dataset:
    """The rows of the dataset at `path` (relative paths from the current folder), read on first use and
    kept for the process; DatasetError on any bad input."""
    try:
        chosen = dataset_format(path, format)
    except ValueError as error:
        raise DatasetError(f"{path}: {error}") from None
    return _read_cached(os.path.abspath(path), chosen, file_version(path, DatasetError))


@lru_cache(maxsize=16)
def _read_cached(path: str, chosen: str, version: tuple[int, int]) -> Dataset:
    """One parse per file version in a process (every user's script asks for a row)."""
    rows = _read_jsonl(path) if chosen == "jsonl" else _read_sharegpt(path)
    return Dataset(path, chosen, tuple(rows))


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except UnicodeDecodeError as error:
        raise DatasetError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise DatasetError(f"{path}: cannot read: {error.strerror}") from None


def _read_jsonl(path: str) -> list[DatasetRow]:
    rows = []
    # split on newlines only: JSON text may hold U+2028 or U+0085 unescaped, which splitlines() cuts at
    for index, text in enumerate(_read_text(path).split("\n")):
        if not text.strip():
            continue
        place = f"{path}:{index + 1}"  # as editors number lines
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise DatasetError(f"{place}: not JSON ({error.msg}, column {error.colno})") from None
        except RecursionError:
            raise DatasetError(f"{place}: not JSON (nested too deeply)") from None
        rows.append(_jsonl_row(data, index, place))
    if not rows:
        raise DatasetError(f"{path}: no rows (an empty file): give one JSON object per line")
    return rows


def _jsonl_row(data: object, index: int, place: str) -> DatasetRow:
    expected = 'expected an object with "messages" (a list of {role, content}) or "prompt" (text)'
    if not isinstance(data, dict):
        raise DatasetError(f"{place}: {expected}, got {_shown(data)}")
    max_tokens = data.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or not 1 <= max_tokens <= MAX_ROW_TOKENS
    ):
        raise DatasetError(
            f"{place}: max_tokens: expected a whole number from 1 to {MAX_ROW_TOKENS:,}, got {_shown(max_tokens)}"
        )
    if "messages" in data and "prompt" in data:
        raise DatasetError(f"{place}: give messages or prompt, not both")
    if "prompt" in data:
        prompt = data["prompt"]
        if not isinstance(prompt, str) or not prompt:
            raise DatasetError(f"{place}: prompt: expected non-empty text, got {_shown(prompt)}")
        return DatasetRow(index, None, (), (prompt,), max_tokens)
    if "messages" not in data:
        raise DatasetError(f"{place}: {expected}")
    messages = data["messages"]
    if not isinstance(messages, list) or not messages:
        raise DatasetError(
            f"{place}: messages: expected a non-empty list of {{role, content}}, got {_shown(messages)}"
        )
    for position, message in enumerate(messages):
        where = f"{place}: messages[{position}]"
        if not isinstance(message, dict):
            raise DatasetError(f"{where}: expected an object with role and content, got {_shown(message)}")
        for key in ("role", "content"):
            if key not in message:
                raise DatasetError(f"{where}.{key}: required (a message is {{role, content}})")
        if message["role"] not in MESSAGE_ROLES:
            raise DatasetError(
                f"{where}.role: expected 'system', 'user' or 'assistant', got {_shown(message['role'])}"
            )
        if not isinstance(message["content"], str):
            raise DatasetError(f"{where}.content: expected text, got {_shown(message['content'])}")
    if messages[-1]["role"] != "user":
        raise DatasetError(
            f"{place}: messages: the last message is the request: expected role 'user', got {messages[-1]['role']!r}"
        )
    # only role and content are sent: other keys (names, ids) are the recording's, not the request's
    sent = [{"role": message["role"], "content": message["content"]} for message in messages]
    system = sent[0]["content"] if sent[0]["role"] == "system" else None
    history = tuple(sent[1 if system is not None else 0 : -1])
    return DatasetRow(index, system, history, (sent[-1]["content"],), max_tokens)


def _read_sharegpt(path: str) -> list[DatasetRow]:
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as error:
        raise DatasetError(f"{path}:{error.lineno}: not JSON ({error.msg}, column {error.colno})") from None
    except RecursionError:
        raise DatasetError(f"{path}: not JSON (nested too deeply)") from None
    if not isinstance(data, list):
        raise DatasetError(
            f"{path}: expected a list of {{conversations: [...]}} (ShareGPT), got {_shown(data)}"
        )
    if not data:
        raise DatasetError(f"{path}: no conversations (an empty list)")
    rows = []
    without_user_turn = 0
    for index, item in enumerate(data):
        row = _sharegpt_row(item, index, f"{path}: conversation {index}")
        if row is None:
            without_user_turn += 1
        else:
            rows.append(row)
    if not rows:
        raise DatasetError(f"{path}: no conversation has a user turn (from: human)")
    if without_user_turn:
        # the public ShareGPT files hold some: skipped, as vLLM's benchmark skips them
        log.info("%s: %d conversations without a user turn are skipped", path, without_user_turn)
    return rows


def _sharegpt_row(item: object, index: int, place: str) -> DatasetRow | None:
    turns = item.get("conversations") if isinstance(item, dict) else None
    if not isinstance(turns, list):
        raise DatasetError(
            f"{place}: expected an object with conversations (a list of {{from, value}}), got {_shown(item)}"
        )
    system_parts = []
    user_turns = []
    for position, turn in enumerate(turns):
        where = f"{place}: conversations[{position}]"
        if not isinstance(turn, dict):
            raise DatasetError(f"{where}: expected an object with from and value, got {_shown(turn)}")
        if not isinstance(turn.get("value"), str):
            raise DatasetError(f"{where}.value: expected text, got {_shown(turn.get('value'))}")
        speaker = turn.get("from")
        if speaker in SHAREGPT_USER:
            user_turns.append(turn["value"])
        elif speaker == SHAREGPT_SYSTEM:
            system_parts.append(turn["value"])
        elif speaker not in SHAREGPT_REPLY:
            raise DatasetError(f"{where}.from: expected 'human', 'gpt' or 'system', got {_shown(speaker)}")
    if not user_turns:
        return None
    system = "\n\n".join(system_parts) if system_parts else None
    return DatasetRow(index, system, (), tuple(user_turns))


def _shown(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
