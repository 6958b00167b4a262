"""Where a run's results go: every sink takes the same events (the `Sink` protocol).

Two sinks exist: the results folder (`results.ResultsWriter`, written by the master) and InfluxDB
(`influx.InfluxSink`, one per process). A new sink is one class with these methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

from grill_locust.samples import Sample

if TYPE_CHECKING:
    from grill_locust.record import RequestRecord

PhaseEvent = Literal["start", "end"]


class Sink(Protocol):
    """One destination of a run's events; no method may block the caller for long (users are waiting)."""

    # Read while the run goes on (a dashboard): such a sink is sent each finished tier's summary row,
    # which costs the master a summary of the tier's records; the others summarise at the end.
    live: ClassVar[bool]

    def write_records(self, records: Sequence[RequestRecord]) -> None:
        """Request records, in batches."""

    def write_phase(self, event: PhaseEvent, phase: dict[str, object]) -> None:
        """A tier started or ended: its phases.csv row (target, tier, start/end wall, iterations, ...)."""

    def write_tier(self, row: dict[str, object]) -> None:
        """The summary row (report.summarize's columns) of a tier that just ended."""

    def write_telemetry(self, samples: list[Sample]) -> None:
        """Engine /metrics scrapes and GPU readings (grill_locust/samples.py's columns)."""

    def close(self) -> None:
        """Write what is left; the sink takes nothing more."""


__all__ = ["PhaseEvent", "Sink"]
