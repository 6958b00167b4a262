"""Start and stop the simulated engine in a subprocess (for tests, benchmarks and the demo)."""

from __future__ import annotations

import http.client
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from types import TracebackType
from typing import IO

from grill_locust.engines import engine_facts
from grill_locust.errors import GrillError

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0
_READY = re.compile(r"listening on http://([^:]+):(\d+)")


class SimProcess:
    """A running `python -m grill_locust.sim` on 127.0.0.1; `.url`, `.port`, `.stop()`; a context manager."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.stderr_file: IO[str] | None = None

    @classmethod
    def start(
        cls,
        profile: str = "vllm",
        port: int | None = None,
        served_model_name: str = "grill-sim",
        truth_log: str | None = None,
        extra_args: Sequence[str] = (),
        timeout_s: float = START_TIMEOUT_S,
        api_key: str | None = None,
    ) -> SimProcess:
        command = [
            sys.executable,
            "-m",
            "grill_locust.sim",
            "--profile",
            profile,
            "--host",
            "127.0.0.1",
            "--port",
            str(port or 0),
            "--served-model-name",
            served_model_name,
        ]
        if truth_log:
            command += ["--truth-log", str(truth_log)]
        command += list(extra_args)
        # stderr goes to a file: a pipe nobody reads could fill up and block the server
        stderr_file = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ)
        if api_key:  # through the environment: a command line shows in every `ps`
            env["GRILL_SIM_API_KEY"] = api_key
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=stderr_file,
            text=True,
            env=env,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout_s
        line = ""
        assert process.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], 0.1)
            if ready:
                line = process.stdout.readline()
                break
            if process.poll() is not None:
                break
        match = _READY.search(line)
        if not match:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)
            stderr_file.seek(0)
            last = stderr_file.read().strip().splitlines()[-1:] or ["no output"]
            stderr_file.close()
            raise GrillError(f"grill sim --profile {profile}: did not start: {last[0]}")
        sim = cls(process, int(match.group(2)))
        sim.stderr_file = stderr_file
        sim._wait_healthy(deadline)
        return sim

    def _wait_healthy(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self._answers_health():
                return
            time.sleep(0.05)
        self.stop()
        raise GrillError(f"grill sim at {self.url}: /health did not answer 200 in time")

    def _answers_health(self) -> bool:
        # The standard library's HTTP, not the client's: the simulator sits below client/ (docs/ARCHITECTURE.md "Layers").
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1.0)
        try:
            connection.request("GET", engine_facts("sim").health_path or "/health")
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()

    def stop(self) -> int | None:
        """SIGTERM, then kill after a grace period; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode

    def stderr_text(self) -> str:
        """What the server wrote to stderr so far (for test failure messages)."""
        if self.stderr_file is None or self.stderr_file.closed:
            return ""
        self.stderr_file.flush()
        self.stderr_file.seek(0)
        return self.stderr_file.read()

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def __del__(self) -> None:
        if getattr(self, "process", None) is not None and self.process.poll() is None and os.getpid():
            self.process.kill()


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(death_signal: int = signal.SIGTERM) -> None:
    """In a child (before exec, or just forked): ask Linux for `death_signal` when the parent dies, even by
    `kill -9`, so a simulated engine or a forked worker never outlives its run. Elsewhere, a no-op."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, death_signal)
        except OSError:
            pass
