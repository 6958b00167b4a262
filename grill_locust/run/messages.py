"""The messages between the master and its workers: one dataclass each, with its Locust message name and
its wire form (the plain data Locust's msgpack carries), as `Phase` has; `send` and `listen` are the
only places that turn one into the other.

A user's developer index in its tier is the master's to give (`DeveloperSeats`), whatever worker runs
it: a user claims it (`Claim`), the master answers (`Developer`), the user gives it back (`Release`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from grill_locust.record import RECORD_COLUMNS, RequestRecord
from grill_locust.run.phase import Phase

if TYPE_CHECKING:
    from locust.runners import Runner

# What Locust's msgpack carries: a message's data (values are plain data: str, numbers, lists, dicts).
Wire = dict[str, Any]


class Message(Protocol):
    name: ClassVar[str]

    def to_wire(self) -> Wire: ...


MessageT = TypeVar("MessageT", bound="Received")


class Received(Message, Protocol):
    @classmethod
    def from_wire(cls: type[MessageT], data: Wire) -> MessageT: ...


@dataclass(frozen=True, slots=True)
class Dispatched:
    """A worker's dispatcher sent its share of an open-loop phase: `sends` in all, `waited` of them held
    back by max_in_flight."""

    sends: int
    waited: int


@dataclass(frozen=True, slots=True)
class RecordsBatch:
    """worker -> master: a batch of records, and the iterations done and open-loop shares sent since the
    last batch, by Phase.key. On the wire each record is its values, in the order of the batch's
    `columns` (a quarter of a dict's bytes, and faster both ways: bench/master_ingest.py)."""

    name: ClassVar[str] = "grill_records"
    worker: str
    records: list[RequestRecord]
    iterations: dict[str, int] = field(default_factory=dict)
    dispatched: dict[str, Dispatched] = field(default_factory=dict)

    def to_wire(self) -> Wire:
        return {
            "worker": self.worker,
            "columns": RECORD_COLUMNS,
            "records": [_record_values(record) for record in self.records],
            "iterations": self.iterations,
            "dispatched": {key: {"sends": d.sends, "waited": d.waited} for key, d in self.dispatched.items()},
        }

    @classmethod
    def from_wire(cls, data: Wire) -> RecordsBatch:
        columns = tuple(data["columns"])
        rows = data["records"]
        if columns == RECORD_COLUMNS:
            records = [RequestRecord(*row) for row in rows]
        else:  # a worker whose record has its columns in another order
            records = [RequestRecord(**dict(zip(columns, row, strict=True))) for row in rows]
        return cls(
            worker=data["worker"],
            records=records,
            iterations=dict(data.get("iterations") or {}),
            dispatched={key: Dispatched(**d) for key, d in (data.get("dispatched") or {}).items()},
        )


_record_values = operator.attrgetter(*RECORD_COLUMNS)


@dataclass(frozen=True, slots=True)
class PhaseMessage:
    """master -> workers: the campaign's run and session, its scenario (its wire form, whose secrets each
    worker reads from its own environment) when asked, and the current phase with the master's
    time.time() at its start (a request's warmup is judged from it), None between phases."""

    name: ClassVar[str] = "grill_phase"
    run_id: str
    session: str
    scenario: Wire | None = None
    phase: Phase | None = None
    phase_started_wall: float | None = None

    def to_wire(self) -> Wire:
        return {
            "run_id": self.run_id,
            "session": self.session,
            "scenario": self.scenario,
            "phase": self.phase.to_wire() if self.phase is not None else None,
            "phase_started_wall": self.phase_started_wall,
        }

    @classmethod
    def from_wire(cls, data: Wire) -> PhaseMessage:
        phase = data.get("phase")
        return cls(
            run_id=data.get("run_id") or "",
            session=data.get("session") or "",
            scenario=data.get("scenario"),
            phase=Phase.from_wire(phase) if phase is not None else None,
            phase_started_wall=data.get("phase_started_wall"),
        )


@dataclass(frozen=True, slots=True)
class Hello:
    """worker -> master: send me the scenario and the current phase."""

    name: ClassVar[str] = "grill_hello"

    def to_wire(self) -> Wire:
        return {}

    @classmethod
    def from_wire(cls, data: Wire) -> Hello:
        return cls()


@dataclass(frozen=True, slots=True)
class Refused:
    """worker -> master: this worker cannot run the scenario (a secret it lacks), and why."""

    name: ClassVar[str] = "grill_refused"
    worker: str
    reason: str

    def to_wire(self) -> Wire:
        return {"worker": self.worker, "reason": self.reason}

    @classmethod
    def from_wire(cls, data: Wire) -> Refused:
        return cls(worker=data["worker"], reason=data["reason"])


@dataclass(frozen=True, slots=True)
class Claim:
    """worker -> master: the developer index, please, of this user (WorkerState.user_key) in this phase
    (Phase.key). Claims are idempotent: one unanswered is sent again."""

    name: ClassVar[str] = "grill_claim"
    phase: str
    user: str

    def to_wire(self) -> Wire:
        return {"phase": self.phase, "user": self.user}

    @classmethod
    def from_wire(cls, data: Wire) -> Claim:
        return cls(phase=data["phase"], user=data["user"])


@dataclass(frozen=True, slots=True)
class Developer:
    """master -> worker: the answer to a claim, None for a phase the master does not know."""

    name: ClassVar[str] = "grill_developer"
    phase: str
    user: str
    developer: int | None

    def to_wire(self) -> Wire:
        return {"phase": self.phase, "user": self.user, "developer": self.developer}

    @classmethod
    def from_wire(cls, data: Wire) -> Developer:
        return cls(phase=data["phase"], user=data["user"], developer=data["developer"])


@dataclass(frozen=True, slots=True)
class Release:
    """worker -> master: this user stopped; a user started in its place takes its developer index."""

    name: ClassVar[str] = "grill_release"
    phase: str
    user: str

    def to_wire(self) -> Wire:
        return {"phase": self.phase, "user": self.user}

    @classmethod
    def from_wire(cls, data: Wire) -> Release:
        return cls(phase=data["phase"], user=data["user"])


def send(runner: Runner, message: Message, client_id: str | None = None) -> None:
    """Send a message to the master (from a worker), or to one worker or every worker (from the master)."""
    runner.send_message(message.name, message.to_wire(), client_id=client_id)


def listen(runner: Runner, kind: type[MessageT], handler: Callable[[MessageT, str], None]) -> None:
    """Call `handler(message, sender's Locust client id)` for each message of this kind that arrives."""

    def received(environment: object, msg: Any, **_: object) -> None:
        handler(kind.from_wire(msg.data), msg.node_id)

    runner.register_message(kind.name, received)
