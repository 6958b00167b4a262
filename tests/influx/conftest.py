"""Fixtures: the real servers of influx_servers.py, skipped (saying which package) when a binary is absent."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from influx_servers import InfluxD, VictoriaMetrics


def _require(binary: str) -> None:
    if shutil.which(binary) is None:
        pytest.skip(f"{binary} not installed (Debian package: apt-get install victoria-metrics influxdb)")


@pytest.fixture
def victoria(tmp_path: Path) -> Iterator[VictoriaMetrics]:
    _require(VictoriaMetrics.binary)
    server = VictoriaMetrics(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def influxd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InfluxD]:
    _require(InfluxD.binary)
    server = InfluxD(tmp_path_factory.mktemp("influxd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
