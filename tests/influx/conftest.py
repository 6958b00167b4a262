"""Fixtures: the real servers of influx_servers.py (each gates on its binary)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from influx_servers import InfluxD, VictoriaMetrics


@pytest.fixture
def victoria(tmp_path: Path) -> Iterator[VictoriaMetrics]:
    server = VictoriaMetrics(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def influxd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InfluxD]:
    server = InfluxD(tmp_path_factory.mktemp("influxd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
