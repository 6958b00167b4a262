"""Fixtures of the telemetry tests (helpers live in telemetry_helpers.py: `conftest` names clash across folders)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from telemetry_helpers import FakeGpu, MetricsServer


@pytest.fixture
def metrics_server() -> Iterator[MetricsServer]:
    server = MetricsServer()
    yield server
    server.close()


@pytest.fixture
def h100_pair() -> list[FakeGpu]:
    return [
        FakeGpu(
            uuid="GPU-aaaa-0000",
            name="NVIDIA H100 80GB HBM3",
            util_pct=97,
            mem_used_bytes=74_000_000_000,
            mem_total_bytes=85_520_809_984,
            power_mw=512_250,
            energy_mj=987_654_321,
            temperature_c=61,
            sm_clock_mhz=1980,
            reasons=4,
        ),
        FakeGpu(
            uuid="GPU-bbbb-1111",
            name="NVIDIA H100 80GB HBM3",
            util_pct=3,
            mem_used_bytes=1_000_000_000,
            mem_total_bytes=85_520_809_984,
            power_mw=71_000,
            energy_mj=123_456,
            temperature_c=35,
            sm_clock_mhz=345,
            reasons=1,
        ),
    ]
