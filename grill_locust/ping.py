"""`grill ping FILE`: check each backend of a scenario and print what it can do for a load test.

Per backend: reachable, its target models listed at /v1/models, a tiny request streams over the
backend's own API (chat, completions or Anthropic's messages, as a run sends it), usage in the stream,
cached_tokens reported, /tokenize and /metrics answering. Where the run would send what an engine may
refuse, ping sends it first and names the refusal with what to change (errors.refusal_advice): a request
carrying tools (agent sessions), and a fill-in-the-middle request over each autocomplete conversation's
transport (`fim: infill` on a model without FIM tokens: llama-server's HTTP 501). Simulated backends
(`engine: sim` without a URL) are started for the check and stopped after it.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grill_locust.client._engine import EngineClient
from grill_locust.client._replies import scrub
from grill_locust.client.backend_http import NoReply, fetch_text, headers_for, list_models
from grill_locust.client.payloads import INFILL_PATH, fim_request, request_for
from grill_locust.engines import engine_facts
from grill_locust.errors import GrillError, is_known_refusal, is_refusal, refusal_advice
from grill_locust.fim_templates import choose_fim
from grill_locust.record import STATUS_OK, RawTiming, measure

if TYPE_CHECKING:
    from grill_locust.config import Backend, Model
    from grill_locust.scenario import Conversation

PING_MAX_TOKENS = 8
PING_PROMPT = "Write a Python function that returns the sum of two numbers."
PING_FIM_PREFIX = "def add(a, b):\n    "  # a cursor inside a function, as a typing developer's
PING_FIM_SUFFIX = "\n\n\nprint(add(1, 2))\n"
DEFAULT_TIMEOUT_S = 30.0


@dataclass
class BackendCheck:
    """What one backend answered; None means "not checked" (not configured, or unreachable)."""

    name: str
    engine: str
    url: str
    reachable: bool = False
    model_listed: bool | None = None
    streams: bool | None = None
    usage_in_stream: bool | None = None
    cached_tokens: bool | None = None
    tokenize: bool | None = None
    metrics: bool | None = None
    tools: bool | None = None  # checked only for a backend that carries agent sessions
    fim: bool | None = None  # checked only for a backend that carries autocomplete conversations
    note: str = ""

    @property
    def usable(self) -> bool:
        """It streams, and serves what its targets will send (a refused probe: the run's tier would be)."""
        return self.reachable and bool(self.streams) and self.tools is not False and self.fim is not False


COLUMNS: tuple[tuple[str, str], ...] = (
    ("backend", "name"),
    ("engine", "engine"),
    ("url", "url"),
    ("reachable", "reachable"),
    ("model listed", "model_listed"),
    ("streams", "streams"),
    ("usage in stream", "usage_in_stream"),
    ("cached_tokens", "cached_tokens"),
    ("/tokenize", "tokenize"),
    ("/metrics", "metrics"),
    ("tools", "tools"),
    ("fim", "fim"),
    ("note", "note"),
)


# each subcommand this module serves, with its one-line help (grill_locust/command.py)
COMMANDS = {"ping": "check each backend of a scenario and print its capabilities"}


def configure_parser(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("scenario", metavar="FILE", help="scenario YAML whose backends to check")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds allowed for each check of each backend (default {DEFAULT_TIMEOUT_S:g})",
    )


def run(args: argparse.Namespace) -> int:
    from grill_locust.scenario import load_scenario

    if args.timeout <= 0:
        raise GrillError(f"--timeout: expected a positive number of seconds, got {args.timeout:g}")
    scenario = load_scenario(args.scenario)
    checks: list[BackendCheck] = []
    for backend in scenario.backends:
        targets = [t for t in scenario.targets if t.backend.name == backend.name]
        models = list(dict.fromkeys(t.model.name for t in targets))
        tools = None
        if any(p.conversation.workload_kind.uses_tools for t in targets for p in t.personas):
            from grill_locust.workload.tools import TOOLS

            tools = TOOLS
        fim = {  # one probe per model x transport (and template) the run sends FIM requests over
            (t.model.name, choose_fim(backend.engine, t.model, p.conversation)): (t.model, p.conversation)
            for t in targets
            for p in t.personas
            if p.conversation.workload_kind.typed_completions
        }
        with _running(backend, models) as live:
            checks.append(
                check_backend(live, models, timeout_s=args.timeout, tools=tools, fim=list(fim.values()))
            )
    print(format_table(checks))
    return 0 if all(check.usable for check in checks) else 1


@contextlib.contextmanager
def _running(backend: Backend, models: list[str]) -> Iterator[Backend]:
    """The backend, started first if it is a simulated engine that only runs during a run."""
    if not backend.managed:
        yield backend
        return
    from grill_locust.run.state import simulated_engine

    sim = simulated_engine(backend, models[0] if models else "grill-sim")
    try:
        yield backend.with_url(sim.url)
    finally:
        sim.stop()


def check_backend(
    backend: Backend,
    models: list[str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    tools: list[dict[str, Any]] | None = None,
    fim: list[tuple[Model, Conversation]] | None = None,
) -> BackendCheck:
    """Probe one backend; with `tools` (its targets run agent sessions), also a request carrying them;
    with `fim` (its autocomplete targets' model and conversation), a FIM request as each sends them."""
    from grill_locust.config import Model

    check = BackendCheck(name=backend.name, engine=backend.engine, url=backend.url)
    client = EngineClient(backend)
    client.connect_s = min(client.connect_s, timeout_s)
    client.first_token_s = min(client.first_token_s, timeout_s)
    client.total_s = min(client.total_s, timeout_s)
    notes: list[str] = []

    facts = engine_facts(backend.engine)
    try:
        listing = list_models(
            backend.url, backend.engine, headers=headers_for(backend, backend.url), timeout_s=timeout_s
        )
    except NoReply as error:
        check.note = str(error)
        client.close()
        return check
    check.reachable = True
    served = listing.ids
    if listing.status != 200:
        notes.append(f"{facts.models_path}: HTTP {listing.status}")
    elif models:
        check.model_listed = all(name in served for name in models)
        if not check.model_listed:
            missing = ", ".join(name for name in models if name not in served)
            notes.append(f"not listed: {missing} (served: {', '.join(served[:5]) or 'none'})")
    model = models[0] if models else (served[0] if served else None)

    if model is None:
        notes.append("no model to stream with")
    else:
        # the backend's own API and body, as a run sends them: a short reply, the backend's extra_body
        path, payload = request_for(
            backend, Model(name=model, max_tokens=PING_MAX_TOKENS), [{"role": "user", "content": PING_PROMPT}]
        )
        result = client.stream(path, payload)
        raw = result.raw
        measurement = measure(raw)
        check.streams = measurement.status == STATUS_OK
        if check.streams:
            check.usage_in_stream = raw.completion_tokens is not None
            check.cached_tokens = raw.cached_tokens is not None
            if not check.cached_tokens and facts.cached_tokens_flag:
                notes.append(f"no cached_tokens: start {facts.name} with {facts.cached_tokens_flag}")
        else:
            notes.append(f"stream: {measurement.status} {raw.error}".strip())
        if tools is not None:
            path, payload = request_for(
                backend,
                Model(name=model, max_tokens=PING_MAX_TOKENS),
                [{"role": "user", "content": PING_PROMPT}],
                tools=tools,
            )
            tooled = client.stream(path, payload).raw
            check.tools = measure(tooled).status == STATUS_OK
            if not check.tools:
                notes.append(_refused("tools", tooled))
        for fim_model, conversation in fim or []:
            path, payload = fim_request(backend, fim_model, conversation, PING_FIM_PREFIX, PING_FIM_SUFFIX)
            payload["n_predict" if path == INFILL_PATH else "max_tokens"] = PING_MAX_TOKENS
            filled = client.stream(path, payload).raw
            filled_ok = measure(filled).status == STATUS_OK
            check.fim = filled_ok if check.fim is None else check.fim and filled_ok
            if not filled_ok:
                notes.append(
                    _refused(f"fim {choose_fim(backend.engine, fim_model, conversation).transport}", filled)
                )

    if backend.tokenize_url:
        check.tokenize = client.count_tokens("def add(a, b):\n    return a + b\n", model) is not None
    if backend.metrics_url:
        check.metrics = _metrics_answer(backend, backend.metrics_url, timeout_s)
    elif facts.metrics is None:  # Ollama, gateways: nothing to scrape, so the run scrapes nothing
        notes.append(f"{facts.name} serves no engine metrics: no engine telemetry (metrics_url sets one)")
    client.close()
    check.note = scrub("; ".join(notes), client.secrets)
    return check


def _refused(what: str, raw: RawTiming) -> str:
    """A note on a probe that failed: the engine's answer and, where it is a refusal (the run would mark
    the tier refused), what to change."""
    status = measure(raw).status
    answer = f"{status} {raw.error}".strip()
    if is_refusal(status) or is_known_refusal(raw.error):
        # what to change first: the table's note is cut at a record error's length
        return f"{what} refused: {refusal_advice(raw.error, status)} (engine: {answer})"
    return f"{what} failed: {answer}"


def _metrics_answer(backend: Backend, url: str, timeout_s: float) -> bool:
    try:
        text = fetch_text(url, headers=headers_for(backend, url), timeout_s=timeout_s)
    except OSError:
        return False
    return "# TYPE" in text or "# HELP" in text


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def format_table(checks: list[BackendCheck]) -> str:
    """A plain-text table, one row per backend ("-": not checked or not configured)."""
    rows = [[title for title, _ in COLUMNS]]
    rows += [[_cell(getattr(check, attribute)) for _, attribute in COLUMNS] for check in checks]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
