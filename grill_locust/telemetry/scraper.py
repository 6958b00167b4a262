"""The run's telemetry loop: every interval, scrape each backend's /metrics and each GPU exporter.

A gevent greenlet (the master or local runner hosts it). Each target is fetched in its own greenlet
by the backend's plain HTTP calls (`client.backend_http`), whose sockets yield to the hub once Locust
has patched them, so a slow target holds up no other; parsing is pure Python. A target that fails is logged once, retried each round,
and its recovery logged: a scrape never stops the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from grill_locust.client.backend_http import fetch_text, headers_for
from grill_locust.engines import engine_facts
from grill_locust.samples import KIND_ENGINE, KIND_GPU, Sample
from grill_locust.telemetry.engine_metrics import EngineSampler
from grill_locust.telemetry.gpu_metrics import parse_gpu_text

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 2.0
MAX_SCRAPE_TIMEOUT_S = 10.0

SamplesCallback = Callable[[list[Sample]], None]


def default_metrics_url(backend: Any) -> str | None:
    """The backend's `metrics_url`, else its engine's default metrics route (None: the engine has none)."""
    explicit = getattr(backend, "metrics_url", None)
    if explicit:
        return str(explicit)
    path = engine_facts(backend.engine).metrics_path
    if path is not None and getattr(backend, "url", None):
        return str(backend.url).rstrip("/") + path
    return None


def exporter_metrics_url(url: str) -> str:
    """`gpu-host:9835` or `http://gpu-host:9835` -> `http://gpu-host:9835/metrics`."""
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        url = url.rstrip("/") + "/metrics"
    return url


@dataclass
class ScrapeTarget:
    """One URL scraped each round, with the labels its samples carry."""

    kind: str
    url: str
    source: str
    backend: str
    host: str
    engine_sampler: EngineSampler | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # the backend's auth, to its own server

    def samples_from(self, text: str, wall_time: float) -> list[Sample]:
        if self.engine_sampler is not None:
            return [self.engine_sampler.sample(text, wall_time)]
        return parse_gpu_text(text, wall_time, self.source, self.backend, self.host)


def build_targets(backends: Iterable[Any], gpu_exporter_urls: Iterable[str]) -> list[ScrapeTarget]:
    """Engine targets for backends with a metrics URL; one GPU target per distinct exporter URL."""
    targets: list[ScrapeTarget] = []
    exporters: dict[str, str] = {}  # url -> the backend that lists it ("": none, or several: tiers tell)
    for backend in backends:
        url = default_metrics_url(backend)
        if url is not None:
            host = urlsplit(url).hostname or ""
            sampler = EngineSampler(str(backend.engine), backend.name, backend.name, host)
            headers = headers_for(backend, url)
            targets.append(ScrapeTarget(KIND_ENGINE, url, backend.name, backend.name, host, sampler, headers))
        for exporter in getattr(backend, "gpu_exporters", None) or []:
            url = exporter_metrics_url(exporter)
            # one GPU host serving two backends (vLLM with and without prefix caching, say): its
            # samples belong to whichever tier runs at the time
            exporters[url] = backend.name if exporters.get(url, backend.name) == backend.name else ""
    for exporter in gpu_exporter_urls:
        exporters.setdefault(exporter_metrics_url(exporter), "")
    for url, backend_name in exporters.items():
        parts = urlsplit(url)
        source = parts.netloc
        targets.append(ScrapeTarget(KIND_GPU, url, source, backend_name, parts.hostname or ""))
    return targets


class TelemetryScraper:
    """Scrapes every target each `interval_s` and hands each round's samples to `on_samples`."""

    def __init__(
        self,
        backends: Iterable[object],
        gpu_exporter_urls: Iterable[str] = (),
        interval_s: float = DEFAULT_INTERVAL_S,
        on_samples: SamplesCallback | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.targets = build_targets(backends, gpu_exporter_urls)
        self.interval_s = interval_s
        self.timeout_s = min(MAX_SCRAPE_TIMEOUT_S, max(1.0, interval_s))
        self.on_samples = on_samples
        self._failing: set[str] = set()
        self._greenlet: Any = None
        self.rounds = 0

    def start(self) -> None:
        import gevent

        if self._greenlet is None and self.targets:
            self._greenlet = gevent.spawn(self._loop)

    def stop(self, timeout_s: float = 5.0) -> None:
        greenlet, self._greenlet = self._greenlet, None
        if greenlet is not None:
            greenlet.kill(block=True, timeout=timeout_s)

    def scrape_once(self) -> list[Sample]:
        """One round: all targets at once; the samples of those that answered."""
        import gevent

        jobs = [gevent.spawn(self._scrape, target) for target in self.targets]
        deadline = time.monotonic() + self.timeout_s + 1.0
        # joinall can come back early on a stray wake-up of this greenlet: wait again until the deadline
        while not all(job.ready() for job in jobs) and time.monotonic() < deadline:
            gevent.joinall(
                [job for job in jobs if not job.ready()], timeout=max(0.0, deadline - time.monotonic())
            )
        samples: list[Sample] = []
        for job in jobs:
            if job.successful() and job.value:
                samples.extend(job.value)
            else:
                job.kill(block=False)
        self.rounds += 1
        return samples

    def _loop(self) -> None:
        import gevent

        next_at = time.monotonic()
        while True:
            samples = self.scrape_once()
            if samples and self.on_samples is not None:
                try:
                    self.on_samples(samples)
                except Exception:  # the consumer's problem must not end telemetry
                    log.exception("telemetry: handling %d samples failed", len(samples))
            next_at = max(next_at + self.interval_s, time.monotonic())
            gevent.sleep(next_at - time.monotonic())

    def _scrape(self, target: ScrapeTarget) -> list[Sample]:
        try:
            text = fetch_text(target.url, headers=target.headers, timeout_s=self.timeout_s)
            samples = target.samples_from(text, time.time())
        except Exception as error:  # network, HTTP status, unparseable text: all retried next round
            if target.url not in self._failing:
                self._failing.add(target.url)
                what = f"backend {target.backend}" if target.kind == KIND_ENGINE else "GPU exporter"
                log.warning(
                    "telemetry: scraping %s at %s failed (%s); retrying every %g s",
                    what,
                    target.url,
                    _short(error),
                    self.interval_s,
                )
            return []
        if target.url in self._failing:
            self._failing.discard(target.url)
            log.warning("telemetry: %s answers again", target.url)
        return samples


def _short(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text.splitlines()[0][:200]
