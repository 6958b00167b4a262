"""Push GPU samples to InfluxDB as `grill_gpu` points.

The project's sink (`grill_locust.sinks.influx.InfluxSink.write_telemetry`) is used when it is
installed; otherwise a small direct writer with influxdb-client does the same, synchronously (the
exporter calls it from its poll thread, never from a request path).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from grill_locust.telemetry.samples import ENGINE_COLUMNS, GPU_COLUMNS, KIND_ENGINE

log = logging.getLogger(__name__)

GPU_MEASUREMENT = "grill_gpu"
ENGINE_MEASUREMENT = "grill_engine"
NANOSECONDS_PER_SECOND = 1_000_000_000
# as grill_locust.sinks.influx tags telemetry, so dashboards read either writer alike
TAG_COLUMNS: tuple[str, ...] = ("backend", "source", "host", "gpu_index", "gpu_uuid", "gpu_name")


def telemetry_point(sample: dict[str, Any]) -> Any:
    """One InfluxDB point for one sample: the label columns as tags (the project sink's tag names), numbers as fields."""
    from influxdb_client import Point

    point = Point(ENGINE_MEASUREMENT if sample["kind"] == KIND_ENGINE else GPU_MEASUREMENT)
    for tag in TAG_COLUMNS:
        value = sample.get(tag)
        if value is not None and value != "":
            point = point.tag(tag, str(value))
    for field in ENGINE_COLUMNS if sample["kind"] == KIND_ENGINE else GPU_COLUMNS:
        value = sample.get(field)
        if value is not None:
            point = point.field(field, float(value))
    return point.time(int(float(sample["wall_time"]) * NANOSECONDS_PER_SECOND))


class DirectInfluxWriter:
    """Writes samples with influxdb-client's synchronous API; failures are logged once, then retried."""

    def __init__(self, url: str, org: str, bucket: str, token: str) -> None:
        from influxdb_client import InfluxDBClient
        from influxdb_client.client.write_api import SYNCHRONOUS

        self.bucket, self.org, self.url = bucket, org, url
        self._client = InfluxDBClient(url=url, token=token, org=org, timeout=5_000)
        self._write_api = self._client.write_api(write_options=SYNCHRONOUS)
        self._failing = False

    def write_telemetry(self, samples: list[dict[str, Any]]) -> None:
        try:
            self._write_api.write(
                bucket=self.bucket, org=self.org, record=[telemetry_point(s) for s in samples]
            )
        except Exception as error:
            if not self._failing:
                log.warning(
                    "gpu-exporter: InfluxDB at %s refused the points (%s); retrying each interval",
                    self.url,
                    error,
                )
            self._failing = True
            return
        if self._failing:
            log.warning("gpu-exporter: InfluxDB at %s accepts points again", self.url)
        self._failing = False

    def close(self) -> None:
        self._client.close()


def influx_writer(
    url: str, org: str, bucket: str, token: str, worker: str
) -> tuple[Callable[[list[dict[str, Any]]], None], Callable[[], None]]:
    """(write_telemetry, close) from the project's InfluxSink when present, else the direct writer."""
    try:
        sink_module = importlib.import_module("grill_locust.sinks.influx")
        sink = sink_module.InfluxSink(url, org, bucket, token, worker)
        if hasattr(sink, "write_telemetry"):
            return sink.write_telemetry, sink.close
    except ImportError:
        pass
    writer = DirectInfluxWriter(url, org, bucket, token)
    return writer.write_telemetry, writer.close
