"""The code corpus prompts are made of: real source files of the Python standard library.

Files are found once (sorted, so every process sees the same list for one Python version) and read
on first use. Workloads ask for an `Excerpt`: code starting at a function or class definition,
long enough for the tokens they need, chosen by a seeded random generator.
"""

from __future__ import annotations

import os
import random
import re
import sysconfig
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from grill_locust.errors import GrillError
from grill_locust.tokens import tokenize

# folders of the standard library that are tests, demos or vendored code rather than library code
_SKIPPED_DIRS = frozenset(
    {"test", "tests", "idle_test", "idlelib", "lib2to3", "ensurepip", "turtledemo", "site-packages"}
    | {"encodings"}  # generated codec tables: a fifth of the library's files, not code one asks about
    | {"dist-packages", "lib-dynload", "__pycache__", "tkinter", "pydoc_data", "venv"}
)
MIN_FILE_BYTES = 4_000  # shorter files are mostly imports and constants
MAX_FILE_BYTES = 400_000  # a few generated tables are huge and not code a developer asks about
# Python source averages ~3.4 characters per approximate token; read a little past that (more is
# appended when a piece of code is denser)
_CHARS_PER_TOKEN_READ = 4.5
_DEFINITION = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)


@dataclass(frozen=True)
class Definition:
    name: str  # e.g. "JSONDecoder" or "JSONDecoder.raw_decode"
    kind: str  # "function", "class" or "method"
    offset: int  # character offset of the line where it starts


@dataclass(frozen=True)
class SourceFile:
    module: str  # dotted module name, e.g. "json.decoder"
    text: str
    definitions: tuple[Definition, ...]


@dataclass(frozen=True)
class Excerpt:
    """Code from one module, starting at `definition`, with `token_count` approximate tokens or more."""

    module: str
    definition: Definition
    text: str
    tokens: list[str] = field(repr=False, compare=False)  # `text`, tokenized
    source: SourceFile = field(repr=False, compare=False)  # the file it starts in, for follow-up questions


class Corpus:
    """Source files of one directory tree, loaded lazily and cached."""

    def __init__(self, root: Path, paths: list[Path]) -> None:
        if not paths:
            raise GrillError(f"workload corpus: no Python source files under {root}")
        self.root = root
        self._paths = paths
        self._files: dict[int, SourceFile] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._paths)

    def file(self, index: int) -> SourceFile:
        found = self._files.get(index)
        if found is None:
            found = self._read(self._paths[index])
            with self._lock:
                self._files[index] = found
        return found

    def preload(self) -> None:
        """Read every file now (~0.2 s for the standard library), so no script pays for a first read."""
        for index in range(len(self._paths)):
            self.file(index)

    def random_file(self, rng: random.Random) -> SourceFile:
        # a file without definitions is rare (the size filter removes most); skip forward to one
        start = rng.randrange(len(self._paths))
        for step in range(len(self._paths)):
            candidate = self.file((start + step) % len(self._paths))
            if candidate.definitions:
                return candidate
        raise GrillError(f"workload corpus: no function or class definitions under {self.root}")

    def excerpt(self, rng: random.Random, min_tokens: int, file: SourceFile | None = None) -> Excerpt:
        """Code from a random definition onwards, continued into further files until `min_tokens`."""
        file = file or self.random_file(rng)
        definition = rng.choice(file.definitions)
        want_chars = int(max(min_tokens, 16) * _CHARS_PER_TOKEN_READ)
        text = file.text[definition.offset : definition.offset + want_chars]
        tokens = tokenize(text)
        # a short remainder: go on with further files, each under a header naming it. The header starts
        # with a newline, which never merges with the token before it, so the token lists just add up.
        while len(tokens) < min_tokens:
            following = self.random_file(rng)
            missing_chars = int((min_tokens - len(tokens)) * _CHARS_PER_TOKEN_READ) + 200
            added = f"\n\n# ---- {following.module} ----\n" + following.text[:missing_chars]
            text += added
            tokens += tokenize(added)
        return Excerpt(module=file.module, definition=definition, text=text, tokens=tokens, source=file)

    def _read(self, path: Path) -> SourceFile:
        text = path.read_text(encoding="utf-8", errors="replace")
        module = ".".join(path.relative_to(self.root).with_suffix("").parts).removesuffix(".__init__")
        return SourceFile(module=module, text=text, definitions=_definitions(text))


def _definitions(text: str) -> tuple[Definition, ...]:
    found: list[Definition] = []
    current_class = ""
    for match in _DEFINITION.finditer(text):
        indent, keyword, name = match.groups()
        if not indent:
            current_class = name if keyword == "class" else ""
            kind = "class" if keyword == "class" else "function"
            qualified = name
        elif current_class and keyword == "def" and len(indent.expandtabs()) == 4:
            kind, qualified = "method", f"{current_class}.{name}"
        else:
            continue  # nested helpers: too deep to ask about without their context
        if name.startswith("__") and name.endswith("__") and name != "__init__":
            continue
        found.append(Definition(name=qualified, kind=kind, offset=match.start()))
    return tuple(found)


def _source_paths(root: Path) -> list[Path]:
    paths: list[Path] = []
    for folder, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames if d not in _SKIPPED_DIRS and not d.startswith(("config-", "."))
        )
        for filename in sorted(filenames):
            if not filename.endswith(".py"):
                continue
            path = Path(folder) / filename
            try:
                size_bytes = path.stat().st_size
            except OSError:
                continue
            if MIN_FILE_BYTES <= size_bytes <= MAX_FILE_BYTES:
                paths.append(path)
    return sorted(paths, key=lambda p: p.relative_to(root).as_posix())


@lru_cache(maxsize=1)
def stdlib_corpus() -> Corpus:
    """The standard library's sources (sysconfig's stdlib path); cached for the process."""
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = _source_paths(root)
    if not paths:  # some distributions ship only bytecode: fall back to our own installed sources
        root = Path(__file__).resolve().parents[1]
        paths = _source_paths(root)
    return Corpus(root, paths)
