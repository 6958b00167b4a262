"""The tests that need Locust inside the test process (its Environment, runners and events: the run state,
a resumed campaign's session filter) run in a fresh interpreter that gevent has patched first, as
Locust's own entry point does. Patching in the middle of this session, after other tests imported ssl and
urllib3, breaks every TLS context made afterwards (Locust makes one on import: RecursionError in ssl)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
IN_LOCUST = sorted(path.name for path in HERE.glob("in_locust_*.py"))
PATCHED_PYTEST = (
    "from gevent import monkey; monkey.patch_all()\n"
    "import sys, pytest\n"
    "sys.exit(pytest.main([sys.argv[1], '-q', '-p', 'no:cacheprovider', '-o', 'python_files=in_locust_*.py']))\n"
)


def test_the_in_locust_files_are_found() -> None:
    assert IN_LOCUST == ["in_locust_resume_exact.py", "in_locust_run_state.py"]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", IN_LOCUST)
def test_in_a_process_patched_as_locust_patches_it(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PATCHED_PYTEST, str(HERE / name)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=880,
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " failed" not in done.stdout, done.stdout[-3000:]
