"""Gates on what a test needs from the machine (a binary, a built server, a model file): the test skips
and says how to get it, except under GRILL_REQUIRE_REAL=1 (`.ci/run` sets it), where it fails.

Under that variable tests/conftest.py also fails the run on any other skip not listed in
EXPECTED_SKIPS, so that a suite cannot turn green by skipping what it was meant to run.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

REQUIRE_REAL_ENV = "GRILL_REQUIRE_REAL"

# The skips CI may see, by their exact reason, and why each is the machine's and not the suite's fault.
EXPECTED_SKIPS: dict[str, str] = {
    "this machine has a working NVIDIA driver": (
        "the exporter's no-driver exit can only be run where NVML cannot start; on a machine with a GPU "
        "the fake-NVML tests cover that path"
    ),
    "already the gevent run": (
        "test_client_gevent.py runs the client tests again in a gevent-patched interpreter; in there its "
        "own tests that start that run skip (they would start it again)"
    ),
}


def require_real() -> bool:
    """Whether this run must run every gated test (CI)."""
    return os.environ.get(REQUIRE_REAL_ENV) == "1"


def unavailable(message: str) -> NoReturn:
    """The test cannot run here: skip saying why, or fail under GRILL_REQUIRE_REAL=1."""
    if require_real():
        pytest.fail(f"{message} ({REQUIRE_REAL_ENV}=1: a missing dependency fails)", pytrace=False)
    pytest.skip(message)


def require_binary(*names: str, install: str) -> str:
    """The path of the first of `names` on PATH; otherwise `unavailable`, saying how to `install` it."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    unavailable(f"{' or '.join(names)} not installed ({install})")
