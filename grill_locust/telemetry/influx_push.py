"""Push the GPU exporter's samples to InfluxDB as `grill_gpu` points, the points a run writes.

Where gevent is installed the run's own sink (`grill_locust.sinks.influx.InfluxSink`: buffered,
retried, off the caller's thread) does it; on an engine machine with only the exporter's dependencies
(and influxdb-client) a direct writer sends the same lines synchronously: the exporter calls it from
its poll thread, never from a request path.
"""

from __future__ import annotations

import logging
from typing import Protocol

from grill_locust.samples import Sample
from grill_locust.sinks.line_protocol import telemetry_point

log = logging.getLogger(__name__)

HTTP_TIMEOUT_MS = 5_000


class TelemetryPush(Protocol):
    def write_telemetry(self, samples: list[Sample]) -> None: ...

    def close(self) -> None: ...


class DirectInfluxWriter:
    """Writes samples with influxdb-client's synchronous API; failures are logged once, then retried."""

    def __init__(self, url: str, org: str, bucket: str, token: str) -> None:
        from influxdb_client import InfluxDBClient
        from influxdb_client.client.write_api import SYNCHRONOUS

        self.bucket, self.org, self.url = bucket, org, url
        self._client = InfluxDBClient(url=url, token=token, org=org, timeout=HTTP_TIMEOUT_MS)
        self._write_api = self._client.write_api(write_options=SYNCHRONOUS)
        self._failing = False

    def write_telemetry(self, samples: list[Sample]) -> None:
        from influxdb_client.client.write_api import WritePrecision

        points = [telemetry_point(sample) for sample in samples]
        lines = [point.line() for point in points if point is not None]
        if not lines:
            return
        try:
            self._write_api.write(
                bucket=self.bucket,
                org=self.org,
                record="\n".join(lines),
                write_precision=WritePrecision.MS,  # type: ignore[arg-type]
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


def influx_push(url: str, org: str, bucket: str, token: str, host: str) -> TelemetryPush:
    """The run's InfluxSink where gevent is installed, else the direct writer."""
    try:
        from grill_locust.sinks.influx import InfluxSink
    except ImportError:  # an engine machine with the exporter's dependencies only
        return DirectInfluxWriter(url, org, bucket, token)
    return InfluxSink(url, org, bucket, token, worker=host)
