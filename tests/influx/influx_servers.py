"""Real servers on loopback for the InfluxDB tests: VictoriaMetrics (v2 write API) and influxd 1.x (InfluxQL).

A uniquely named module (not conftest) so that test files can import it whatever other conftests exist.

Debian packages: `victoria-metrics` (binary /usr/bin/victoria-metrics) and `influxdb` (/usr/bin/influxd).
A test that needs one skips, saying which, when its binary is absent (fails under GRILL_REQUIRE_REAL=1).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.ports import free_port
from tests.real_binaries import require_binary

STARTUP_TIMEOUT_S = 30.0
EXPORT_AHEAD_S = 86_400  # an export reaches this far past the present: points from a clock that runs ahead


def http_get(url: str, timeout_s: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return bytes(response.read())


def http_post(url: str, body: bytes, timeout_s: float = 10.0) -> bytes:
    request = urllib.request.Request(url, data=body, method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return bytes(response.read())


def wait_until_up(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            http_get(url, timeout_s=1.0)
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise RuntimeError(f"server not up after {STARTUP_TIMEOUT_S} s: {url}")


class _ServerProcess:
    """A server binary on a free loopback port with its files in `folder`; `start` is the subclass's."""

    binary: str
    package: str  # the Debian package that installs `binary`

    def __init__(self, folder: Path) -> None:
        require_binary(self.binary, install=f"Debian package: apt-get install {self.package}")
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.process = None


class VictoriaMetrics(_ServerProcess):
    """victoria-metrics on a fixed loopback port and data folder, so it can be stopped and started again."""

    binary = "victoria-metrics"
    package = "victoria-metrics"

    def start(self) -> None:
        log = self.folder / "victoria.log"
        self.process = subprocess.Popen(
            [
                self.binary,
                f"-storageDataPath={self.folder / 'data'}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                "-search.latencyOffset=0s",
                "-search.disableCache",
                "-retentionPeriod=100y",
            ],
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        wait_until_up(f"{self.url}/health", self.process, log)

    def export(self, match: str) -> list[dict[str, Any]]:
        """Every stored sample of the matching series: [{metric: {...}, values: [...], timestamps: [...]}].

        The range is explicit: export's default end is "now" on the server's clock, which ticks in whole
        seconds, so without it the samples stamped in the last second (a run's last requests, its last
        tier's summary) are left out of an export made just after they were written.
        """
        http_get(f"{self.url}/internal/force_flush")
        end_s = int(time.time()) + EXPORT_AHEAD_S
        query = urllib.parse.urlencode({"match[]": match, "start": "0", "end": str(end_s)})
        body = http_get(f"{self.url}/api/v1/export?{query}", timeout_s=30.0).decode()
        return [json.loads(line) for line in body.splitlines() if line.strip()]


class InfluxD(_ServerProcess):
    """Debian's influxd 1.x with its own config, database `grill`; /write and /query."""

    binary = "influxd"
    package = "influxdb"
    database = "grill"

    def start(self) -> None:
        config = self.folder / "influxdb.conf"
        config.write_text(
            "\n".join(
                [
                    "reporting-disabled = true",
                    f'bind-address = "127.0.0.1:{free_port()}"',
                    "[meta]",
                    f'  dir = "{self.folder / "meta"}"',
                    "[data]",
                    f'  dir = "{self.folder / "data"}"',
                    f'  wal-dir = "{self.folder / "wal"}"',
                    "  query-log-enabled = false",
                    "[http]",
                    f'  bind-address = "127.0.0.1:{self.port}"',
                    "  log-enabled = false",
                    "[monitor]",
                    "  store-enabled = false",
                    "[continuous_queries]",
                    "  enabled = false",
                    "",
                ]
            )
        )
        log = self.folder / "influxd.log"
        self.process = subprocess.Popen(
            [self.binary, "-config", str(config)], stdout=log.open("ab"), stderr=subprocess.STDOUT
        )
        wait_until_up(f"{self.url}/ping", self.process, log)
        self.query(f'CREATE DATABASE "{self.database}"')

    def write_lines(self, lines: list[str]) -> None:
        http_post(f"{self.url}/write?db={self.database}&precision=ms", "\n".join(lines).encode())

    def query(self, influxql: str) -> list[dict[str, Any]]:
        """The statement's series; raises AssertionError with the server's message on an error."""
        params = urllib.parse.urlencode({"db": self.database, "q": influxql, "epoch": "ms"})
        try:
            body = http_post(f"{self.url}/query?{params}", b"")
        except urllib.error.HTTPError as error:
            raise AssertionError(
                f"{error.code} {error.read().decode(errors='replace')} for: {influxql}"
            ) from None
        result = json.loads(body)["results"][0]
        if "error" in result:
            raise AssertionError(f"{result['error']} for: {influxql}")
        return list(result.get("series", []))
