"""Helpers of the telemetry tests: recorded /metrics texts, a fake at the `pynvml` boundary, a loopback /metrics server."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


@dataclass
class FakeGpu:
    """What one GPU reports; `failing` makes every reading raise like a lost GPU."""

    uuid: str
    name: str
    util_pct: int = 50
    mem_used_bytes: int = 10 * 1024**3
    mem_total_bytes: int = 80 * 1024**3
    power_mw: int = 300_000
    energy_mj: int = 1_000_000
    temperature_c: int = 60
    sm_clock_mhz: int = 1500
    reasons: int = 0
    failing: bool = False
    unsupported: set[str] = field(default_factory=set)


class FakeNvml:
    """The subset of pynvml the exporter calls, with pynvml's own error classes."""

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = pynvml.NVMLError_DriverNotLoaded
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.shut_down = False

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:  # noqa: N802
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:  # noqa: N802
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> bytes:  # noqa: N802 (older pynvml returned bytes)
        return gpu.name.encode()

    def _read(self, gpu: FakeGpu, what: str, value: Any) -> Any:
        if gpu.failing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if what in gpu.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> Any:  # noqa: N802
        return self._read(gpu, "util", SimpleNamespace(gpu=gpu.util_pct, memory=10))

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> Any:  # noqa: N802
        memory = SimpleNamespace(
            used=gpu.mem_used_bytes, total=gpu.mem_total_bytes, free=gpu.mem_total_bytes - gpu.mem_used_bytes
        )
        return self._read(gpu, "memory", memory)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:  # noqa: N802
        return self._read(gpu, "power", gpu.power_mw)

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:  # noqa: N802
        return self._read(gpu, "energy", gpu.energy_mj)

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:  # noqa: N802
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._read(gpu, "temperature", gpu.temperature_c)

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, clock: int) -> int:  # noqa: N802
        assert clock == pynvml.NVML_CLOCK_SM
        return self._read(gpu, "clock", gpu.sm_clock_mhz)

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu) -> int:  # noqa: N802
        return self._read(gpu, "reasons", gpu.reasons)


# how often a test server looks for its shutdown: serve_forever's default (0.5 s) is each test's teardown
SERVE_POLL_S = 0.05


class MetricsServer:
    """A real HTTP server on loopback whose /metrics body (or status) the test changes between scrapes."""

    def __init__(self) -> None:
        self.body = ""
        self.status = 200
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.hits += 1
                payload = outer.body.encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(SERVE_POLL_S,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
