"""Live metrics to InfluxDB (or anything that speaks its v2 write API), off the Locust users' path.

The caller only appends to an in-memory buffer (bounded; what does not fit is dropped and counted). A real
OS thread (gevent's thread pool, so it works under Locust's monkey-patching) turns the buffered rows into
line protocol and writes them with influxdb-client's synchronous write API, retrying with backoff while
InfluxDB is slow or down. influxdb-client's own batching write API is not used: its reactivex scheduler
threads become greenlets under gevent and it can hang at exit.

The points themselves (schema and encoding) come from `line_protocol`.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import gevent
import gevent.threadpool
from gevent import monkey

from grill_locust.record import RequestRecord
from grill_locust.samples import Sample
from grill_locust.sinks import PhaseEvent
from grill_locust.sinks.line_protocol import Point, phase_point, request_point, telemetry_point, tier_point

logger = logging.getLogger(__name__)

DEFAULT_MAX_BUFFERED_POINTS = 100_000  # about 40 MB of line protocol; ~100 s of 1,000 requests/s
DEFAULT_BATCH_POINTS = 5_000
DEFAULT_FLUSH_INTERVAL_S = 1.0
DEFAULT_HTTP_TIMEOUT_S = 5.0
DEFAULT_CLOSE_TIMEOUT_S = 10.0
RETRY_FIRST_DELAY_S = 0.2
RETRY_MAX_DELAY_S = 5.0
WRITER_POLL_S = 0.05  # how often the writer thread looks at the buffer when idle
WARNING_INTERVAL_S = 10.0  # at most one warning of each kind per interval
TIMESTAMP_MEMORY_POINTS = 200_000  # timestamps remembered per sink to keep points of one series apart

_real_sleep: Callable[[float], None] = monkey.get_original("time", "sleep")
_real_lock_factory: Callable[[], Any] = monkey.get_original("_thread", "allocate_lock")


class _SeriesClock:
    """Keeps two points of one series from sharing a millisecond (Influx would keep only the last one).

    Requests of one worker that start in the same millisecond with the same labels are common at a tier
    start; the later one moves forward by a millisecond until its timestamp is free.
    """

    def __init__(self, memory_points: int = TIMESTAMP_MEMORY_POINTS) -> None:
        self._used: dict[str, set[int]] = {}
        self._order: deque[tuple[str, int]] = deque()
        self._memory_points = memory_points

    def place(self, point: Point) -> Point:
        used = self._used.setdefault(point.series, set())
        time_ms = point.time_ms
        while time_ms in used:
            time_ms += 1
        used.add(time_ms)
        self._order.append((point.series, time_ms))
        if len(self._order) > self._memory_points:
            old_series, old_ms = self._order.popleft()
            old_set = self._used.get(old_series)
            if old_set is not None:
                old_set.discard(old_ms)
                if not old_set:
                    del self._used[old_series]
        return point.at(time_ms)


# ---------------------------------------------------------------- the sink


@dataclass(frozen=True, slots=True)
class _Chunk:
    """Rows handed over by one call, converted to points by the writer thread."""

    to_point: Callable[[object], Point | None]
    rows: list[object]


class InfluxSink:
    """Buffers points and writes them from a background OS thread; no method blocks the caller.

    `dropped` counts points lost: buffer full, rejected by the server (4xx), or still unsent at close.
    A `Sink`; `worker` tags its request, phase and tier points, `run_id` its telemetry.
    """

    live: ClassVar[bool] = True

    def __init__(
        self,
        url: str,
        org: str,
        bucket: str,
        token: str,
        worker: str,
        *,
        run_id: str | None = None,
        max_buffered_points: int = DEFAULT_MAX_BUFFERED_POINTS,
        batch_points: int = DEFAULT_BATCH_POINTS,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        http_timeout_s: float = DEFAULT_HTTP_TIMEOUT_S,
    ) -> None:
        from influxdb_client import InfluxDBClient
        from influxdb_client.client.write_api import SYNCHRONOUS

        self.url = url
        self.org = org
        self.bucket = bucket
        self.worker = worker
        self.run_id = run_id
        self.max_buffered_points = max_buffered_points
        self.batch_points = batch_points
        self.flush_interval_s = flush_interval_s
        self.written = 0  # points the server acknowledged
        self._client = InfluxDBClient(url=url, token=token, org=org, timeout=int(http_timeout_s * 1000))
        self._write_api = self._client.write_api(write_options=SYNCHRONOUS)
        self._lock = _real_lock_factory()  # a real lock: shared with the writer thread
        self._incoming: deque[_Chunk] = deque()
        self._buffered = 0  # points accepted and not yet written or dropped
        self._dropped_full = 0
        self._dropped_by_writer = 0
        self._last_error = ""  # secret-free summary of the writer's last failure
        self._errors_seen = 0
        self._warned_at: dict[str, float] = {}
        self._reported = {"full": 0, "writer": 0, "errors": 0}
        self._stopping = False
        self._close_deadline = math.inf
        self._closed = False
        self._pool = gevent.threadpool.ThreadPool(1)
        self._writer = self._pool.spawn(self._run_writer)

    # ------------------------------------------------------------ caller side (gevent greenlets)

    def write_records(self, records: Sequence[RequestRecord]) -> None:
        worker = self.worker
        self._offer(lambda record: request_point(record, worker), list(records))

    def write_phase(self, event: PhaseEvent, phase: dict[str, object]) -> None:
        worker, at_s = self.worker, time.time()
        self._offer(lambda row: phase_point(event, row, worker, at_s), [dict(phase)])

    def write_tier(self, row: dict[str, object]) -> None:
        worker = self.worker
        self._offer(lambda summary: tier_point(summary, worker), [dict(row)])

    def write_telemetry(self, samples: list[Sample]) -> None:
        run_id = self.run_id
        self._offer(lambda sample: telemetry_point(sample, run_id), list(samples))

    @property
    def dropped(self) -> int:
        """Points lost, all causes."""
        return self._dropped_full + self._dropped_by_writer

    def buffered(self) -> int:
        """Points accepted and not yet written or dropped."""
        return self._buffered

    def close(self, timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Flush what is buffered (for at most `timeout_s` plus one HTTP timeout), then stop the thread."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._close_deadline = time.monotonic() + timeout_s
            self._stopping = True
        try:
            self._writer.get(timeout=timeout_s + DEFAULT_HTTP_TIMEOUT_S + 5.0)
        except (
            Exception,
            gevent.Timeout,
        ) as error:  # the thread's own failure: report it, never raise at shutdown
            logger.warning("InfluxDB sink %s: writer stopped with %s", self.url, type(error).__name__)
        finally:
            self._pool.kill()
        with self._lock:
            # whatever the writer did not get to is lost
            self._dropped_by_writer += self._buffered
            self._buffered = 0
            self._incoming.clear()
        self._report_problems(force=True)

    def _offer(self, to_point: Callable[[Any], Point | None], rows: list[object]) -> None:
        if not rows:
            return
        if self._closed:  # too late to send: counted and said, never silent
            self._dropped_by_writer += len(rows)
            self._last_error = "offered after the sink closed"
            self._report_problems(force=True)
            return
        with self._lock:
            room = self.max_buffered_points - self._buffered
            if room < len(rows):
                lost = len(rows) - max(room, 0)
                self._dropped_full += lost
                rows = rows[: max(room, 0)]
            if rows:
                self._incoming.append(_Chunk(to_point, rows))
                self._buffered += len(rows)
        self._report_problems()

    def _report_problems(self, force: bool = False) -> None:
        """Warnings are logged here, on the caller's side: never from the writer thread."""
        now = time.monotonic()
        current = {"full": self._dropped_full, "writer": self._dropped_by_writer, "errors": self._errors_seen}
        for kind, count in current.items():
            if count <= self._reported[kind]:
                continue
            if not force and now - self._warned_at.get(kind, -math.inf) < WARNING_INTERVAL_S:
                continue
            self._warned_at[kind] = now
            self._reported[kind] = count
            if kind == "full":
                logger.warning(
                    "InfluxDB sink %s: buffer full (%d points), %d points dropped so far",
                    self.url,
                    self.max_buffered_points,
                    count,
                )
            elif kind == "writer":
                logger.warning(
                    "InfluxDB sink %s: %d points dropped (rejected or unsent at close): %s",
                    self.url,
                    count,
                    self._last_error,
                )
            else:
                logger.warning(
                    "InfluxDB sink %s: write failed (%s), retrying; %d points buffered",
                    self.url,
                    self._last_error,
                    self._buffered,
                )

    # ------------------------------------------------------------ writer side (one real OS thread)

    def _run_writer(self) -> None:
        try:
            self._write_until_closed()
        finally:
            self._close_connections()
            # Destroy this thread's gevent hub (if sockets made one) now, inside the task: the pool would do it
            # only after close() has returned, racing interpreter shutdown (a segfault at exit).
            gevent.get_hub().destroy(destroy_loop=True)

    def _close_connections(self) -> None:
        """Close the HTTP connections here, in the thread that opened them.

        Under gevent their sockets belong to this thread's own event loop, which dies with the thread;
        urllib3 2's PoolManager.clear() leaves pooled sockets to an exit-time finaliser that would then
        fail ("operation on destroyed loop"), so each pool is closed explicitly first.
        """
        try:
            pools = self._client.api_client.rest_client.pool_manager.pools
            for key in list(pools.keys()):
                pools[key].close()
        except Exception:  # influxdb-client internals moved: the finaliser remains as a fallback
            pass
        self._client.close()

    def _write_until_closed(self) -> None:
        clock = _SeriesClock()
        lines: deque[str] = deque()
        batch: list[str] = []
        delay_s = 0.0
        retry_at = 0.0
        last_flush = time.monotonic()
        while True:
            self._convert_incoming(clock, lines)
            now = time.monotonic()
            stopping = self._stopping
            if stopping and now >= self._close_deadline:
                return
            if not batch:
                due = len(lines) >= self.batch_points or now - last_flush >= self.flush_interval_s or stopping
                if due and lines:
                    batch = [lines.popleft() for _ in range(min(self.batch_points, len(lines)))]
                elif stopping and not lines and not self._incoming:
                    return
            if batch and now >= retry_at:
                outcome = self._send(batch)
                last_flush = time.monotonic()
                if outcome == "retry":
                    delay_s = min(max(delay_s * 2.0, RETRY_FIRST_DELAY_S), RETRY_MAX_DELAY_S)
                    retry_at = last_flush + delay_s
                else:
                    with self._lock:
                        self._buffered -= len(batch)
                        if outcome == "ok":
                            self.written += len(batch)
                        else:
                            self._dropped_by_writer += len(batch)
                    batch = []
                    delay_s = 0.0
                    retry_at = 0.0
                continue
            _real_sleep(WRITER_POLL_S)

    def _convert_incoming(self, clock: _SeriesClock, lines: deque[str]) -> None:
        while self._incoming:
            chunk = self._incoming.popleft()
            skipped = 0
            for row in chunk.rows:
                try:
                    point = chunk.to_point(row)
                except Exception as error:  # a malformed row must not stop the writer
                    self._last_error = f"bad row ({type(error).__name__})"
                    point = None
                if point is None:
                    skipped += 1
                else:
                    lines.append(clock.place(point).line())
            if skipped:
                with self._lock:  # nothing to write (no numeric field): not a loss, just not buffered
                    self._buffered -= skipped

    def _send(self, batch: list[str]) -> str:
        """'ok', 'retry' (network, 429, 5xx) or 'rejected' (other 4xx: retrying would not help)."""
        from influxdb_client.client.write_api import WritePrecision
        from influxdb_client.rest import ApiException

        try:
            self._write_api.write(
                bucket=self.bucket,
                org=self.org,
                record="\n".join(batch),
                write_precision=WritePrecision.MS,  # type: ignore[arg-type]
            )
            return "ok"
        except ApiException as error:
            status = int(error.status or 0)
            self._last_error = f"HTTP {status} {str(error.reason or '')[:80]}".strip()
            if status == 429 or status >= 500 or status == 0:
                self._errors_seen += 1
                return "retry"
            return "rejected"
        except Exception as error:  # connection refused, timeout, DNS: InfluxDB is down or slow
            self._last_error = type(error).__name__
            self._errors_seen += 1
            return "retry"
