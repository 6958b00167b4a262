"""The GPU exporter against a fake at the pynvml boundary: values on /metrics, a GPU that errors, no library."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest
from telemetry_helpers import FakeGpu, FakeNvml, fixture_text

from grill_locust.sinks.line_protocol import telemetry_point
from grill_locust.telemetry.exporter import GpuExporter
from grill_locust.telemetry.gpu_metrics import parse_gpu_text
from grill_locust.telemetry.nvml import NvmlReader, NvmlUnavailable

REPO = Path(__file__).resolve().parents[2]


def get_metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


@pytest.fixture
def served(h100_pair: list[FakeGpu]) -> Iterator[tuple[GpuExporter, int, list[FakeGpu]]]:
    reader = NvmlReader(FakeNvml(h100_pair), host="gpu-node-1")
    reader.open()
    exporter = GpuExporter(reader, interval_s=60.0)  # the test drives poll_once() itself
    server, port = exporter.serve("127.0.0.1", 0)
    yield exporter, port, h100_pair
    exporter.stop()
    server.shutdown()


def test_exporter_serves_each_gpu_with_exact_values(served: tuple[GpuExporter, int, list[FakeGpu]]) -> None:
    _exporter, port, _gpus = served
    samples = parse_gpu_text(
        get_metrics(port), wall_time=5.0, source="gpu-node-1:9835", backend="vllm-a", host=""
    )
    assert [s["gpu_index"] for s in samples] == [0, 1]
    first = samples[0]
    assert first["kind"] == "gpu" and first["backend"] == "vllm-a" and first["host"] == "gpu-node-1"
    assert first["gpu_uuid"] == "GPU-aaaa-0000" and first["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert first["gpu_util_pct"] == 97.0
    assert first["mem_used_bytes"] == 74_000_000_000.0
    assert first["mem_total_bytes"] == 85_520_809_984.0
    assert first["power_w"] == 512.25
    assert first["energy_mj"] == 987_654_321.0
    assert first["temperature_c"] == 61.0
    assert first["sm_clock_mhz"] == 1980.0
    assert first["throttle_reasons"] == 4.0
    assert samples[1]["power_w"] == 71.0 and samples[1]["throttle_reasons"] == 1.0


def test_energy_is_a_counter_on_metrics(served: tuple[GpuExporter, int, list[FakeGpu]]) -> None:
    _exporter, port, _gpus = served
    text = get_metrics(port)
    assert "# TYPE grill_gpu_energy_millijoules_total counter" in text
    assert (
        'grill_gpu_energy_millijoules_total{gpu="0",host="gpu-node-1",name="NVIDIA H100 80GB HBM3",uuid="GPU-aaaa-0000"}'
        in text
    )


def test_gpu_that_errors_mid_run_is_logged_once_and_others_still_served(
    served: tuple[GpuExporter, int, list[FakeGpu]], caplog: pytest.LogCaptureFixture
) -> None:
    exporter, port, gpus = served
    gpus[1].failing = True
    gpus[0].util_pct = 42
    with caplog.at_level(logging.ERROR, logger="grill_locust.telemetry.nvml"):
        exporter.poll_once()
        exporter.poll_once()
    failures = [r for r in caplog.records if "GPU 1" in r.getMessage()]
    assert len(failures) == 1 and "still serving the others" in failures[0].getMessage()
    text = get_metrics(port)
    samples = parse_gpu_text(text, 1.0, "x", "", "")
    assert [s["gpu_index"] for s in samples] == [0]
    assert samples[0]["gpu_util_pct"] == 42.0
    assert (
        'grill_gpu_up{gpu="1",host="gpu-node-1",name="NVIDIA H100 80GB HBM3",uuid="GPU-bbbb-1111"} 0.0'
        in text
    )
    gpus[1].failing = False
    exporter.poll_once()
    assert [s["gpu_index"] for s in parse_gpu_text(get_metrics(port), 1.0, "x", "", "")] == [0, 1]


def test_field_a_gpu_does_not_support_is_left_out_not_an_error(h100_pair: list[FakeGpu]) -> None:
    h100_pair[0].unsupported = {"energy", "reasons"}
    reader = NvmlReader(FakeNvml(h100_pair), host="h")
    reader.open()
    samples, failed = reader.read(wall_time=1.0)
    assert failed == []
    assert samples[0]["energy_mj"] is None and samples[0]["throttle_reasons"] is None
    assert samples[0]["power_w"] == 512.25


def test_no_nvml_library_is_one_clear_error() -> None:
    reader = NvmlReader(FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    with pytest.raises(
        NvmlUnavailable, match="^NVML library not found: no NVIDIA driver on this machine$"
    ) as raised:
        reader.open()
    assert raised.value.exit_code == 2


def test_no_driver_and_no_gpu_are_clear_errors() -> None:
    with pytest.raises(NvmlUnavailable, match="driver not loaded"):
        NvmlReader(FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)).open()
    with pytest.raises(NvmlUnavailable, match="no NVIDIA GPU"):
        NvmlReader(FakeNvml([])).open()


def test_exporter_command_without_gpu_prints_one_line_and_exits_2() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVIDIA driver")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-m", "grill_locust.telemetry.cli", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "grill gpu-exporter: NVML library not found: no NVIDIA driver on this machine"
    ]


def test_dcgm_exporter_text_is_read_too() -> None:
    (sample,) = parse_gpu_text(
        fixture_text("dcgm.txt"), wall_time=1.0, source="gpu-node-1:9400", backend="", host="gpu-node-1"
    )
    assert sample["gpu_uuid"] == "GPU-5b7a1c2e-0c1d-4e2f-9a3b-7c6d5e4f3a21"
    assert sample["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert sample["mem_used_bytes"] == 73456 * 1024 * 1024
    assert sample["power_w"] == 512.25 and sample["energy_mj"] == 987654321.0
    assert sample["gpu_util_pct"] == 97.0 and sample["sm_clock_mhz"] == 1980.0


def test_gpu_sample_becomes_a_grill_gpu_point_with_numeric_fields_only(h100_pair: list[FakeGpu]) -> None:
    reader = NvmlReader(FakeNvml(h100_pair), host="gpu-node-1")
    reader.open()
    samples, _failed = reader.read(wall_time=1700000000.5)
    point = telemetry_point(samples[0])
    assert point is not None
    line = point.line()
    assert line.startswith(
        "grill_gpu,gpu_index=0,gpu_name=NVIDIA\\ H100\\ 80GB\\ HBM3,gpu_uuid=GPU-aaaa-0000,"
        "host=gpu-node-1,source=gpu-node-1 "
    )
    assert "power_w=512.25" in line and "energy_mj=987654321" in line
    assert line.endswith(" 1700000000500")  # milliseconds, as every grill point
