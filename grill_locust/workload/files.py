"""A file a scenario names (a dataset, a trace): read once per process and version of the file."""

from __future__ import annotations

import os


def file_version(path: str, error: type[Exception]) -> tuple[int, int]:
    """The file's (modification time in ns, size in bytes): what keys a process's cached reading of it,
    so an edited file is read again; `error` with one line where it is missing or unreadable."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except OSError as problem:
        raise error(f"{path}: cannot read: {problem.strerror}") from None
    return stat.st_mtime_ns, stat.st_size
