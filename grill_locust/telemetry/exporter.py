"""The GPU exporter: polls NVML every interval, serves the latest readings on /metrics, optionally pushes them.

Scrapes never call NVML: a poll thread reads the GPUs (off gevent's hub when gevent is patched) and
the Prometheus collector serves the last snapshot, so a slow or failing GPU never stalls /metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric

from grill_locust.samples import Sample
from grill_locust.telemetry.gpu_metrics import GPU_LABELS, GPU_METRICS, GPU_UP_METRIC
from grill_locust.telemetry.nvml import GpuInfo, NvmlReader
from grill_locust.telemetry.offhub import call_off_hub

log = logging.getLogger(__name__)

SamplesCallback = Callable[[list[Sample]], None]


class GpuExporter:
    """Holds the latest NVML snapshot; `poll_once()` refreshes it, `collect()` serves it."""

    def __init__(
        self, reader: NvmlReader, interval_s: float = 1.0, on_samples: SamplesCallback | None = None
    ) -> None:
        self.reader = reader
        self.interval_s = interval_s
        self.on_samples = on_samples
        self._lock = threading.Lock()
        self._samples: list[Sample] = []
        self._failed: list[GpuInfo] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> list[Sample]:
        samples, failed = call_off_hub(self.reader.read)
        with self._lock:
            self._samples, self._failed = samples, failed
        if self.on_samples is not None and samples:
            try:
                self.on_samples(samples)
            except Exception as error:  # a sink problem must not stop the exporter
                log.warning("gpu-exporter: pushing samples failed: %s", error)
        return samples

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            samples, failed = list(self._samples), list(self._failed)
        families: list[GaugeMetricFamily | CounterMetricFamily] = []
        for metric in GPU_METRICS:
            family_type = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
            family = family_type(metric.name, metric.help, labels=list(GPU_LABELS))
            for sample in samples:
                value = sample.get(metric.field)
                if isinstance(value, int | float):  # a GPU column: a number, or None where unread
                    family.add_metric(_label_values(sample), value)
            families.append(family)
        up = GaugeMetricFamily(
            GPU_UP_METRIC, "1 if the last NVML reading of this GPU succeeded", labels=list(GPU_LABELS)
        )
        for sample in samples:
            up.add_metric(_label_values(sample), 1.0)
        for gpu in failed:
            up.add_metric([self.reader.host, str(gpu.index), gpu.uuid, gpu.name], 0.0)
        families.append(up)
        yield from families

    def start_polling(self) -> None:
        self.poll_once()
        self._thread = threading.Thread(target=self._poll_loop, name="grill-gpu-poll", daemon=True)
        self._thread.start()

    def _poll_loop(self) -> None:
        next_at = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            try:
                self.poll_once()
            except Exception as error:  # never let one bad round end the exporter
                log.error("gpu-exporter: polling failed: %s", error)
            next_at = max(next_at + self.interval_s, time.monotonic())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5.0)

    def serve(self, host: str, port: int) -> tuple[Any, int]:
        """Start polling and the /metrics server; returns (server, bound port)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)  # type: ignore[arg-type]
        self.start_polling()
        server, _thread = start_http_server(port, addr=host, registry=registry)
        return server, int(server.server_address[1])


def _label_values(sample: Sample) -> list[str]:
    return [str(sample["host"]), str(sample["gpu_index"]), str(sample["gpu_uuid"]), str(sample["gpu_name"])]
