"""The state of one run inside one Locust process, declared in one place and reached by `run_state()`.

Locust's `Environment` is not ours to add attributes to: each environment's state lives here, keyed by
the environment. The campaign and the worker state hold their environment, so an entry lasts as long
as the process (Locust makes one environment per process).
"""

from __future__ import annotations

import atexit
import logging
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import gevent

if TYPE_CHECKING:
    from locust.env import Environment

    from grill_locust.config import Backend
    from grill_locust.run.campaign import Campaign
    from grill_locust.run.worker import WorkerState
    from grill_locust.scenario import Scenario
    from grill_locust.sim import SimProcess
    from grill_locust.telemetry import TelemetryScraper

log = logging.getLogger("grill")


@dataclass
class RunState:
    """What grill-locust keeps for one environment. The scenario is the campaign's (master) or the worker
    state's (worker); the options are Locust's `environment.parsed_options`."""

    # the master's side: the campaign walking targets x tiers, with its sinks (master and local runner)
    campaign: Campaign | None = None
    # the users' side: phase, record buffer and its sinks (worker and local runner)
    worker: WorkerState | None = None
    # `engine: sim` backends this process started; stopped when Locust quits or the process exits
    sim_processes: list[SimProcess] = field(default_factory=list)
    # scrapes engine /metrics and GPU exporters into the campaign while the run lasts (master or local)
    telemetry: TelemetryScraper | None = None
    # prints the campaign's progress line every few seconds (headless runs)
    progress_greenlet: gevent.Greenlet | None = None
    # workers that said hello before the campaign existed (the simulated engines were starting)
    hello_waiters: list[str] = field(default_factory=list)
    # the summary table and where the results are: printed last, after Locust's own statistics
    closing_words: list[str] = field(default_factory=list)
    # this process's own --influx-token (INFLUX_TOKEN), kept off Locust's options, which the master
    # sends to every worker that connects
    influx_token: str | None = None

    def start_simulated_backends(self, scenario: Scenario) -> Scenario:
        """Start `engine: sim` backends on free loopback ports; the scenario with their URLs."""
        urls: dict[str, str] = {}
        for backend in scenario.backends:
            if not backend.managed:
                continue
            model = next(
                (t.model.name for t in scenario.targets if t.backend.name == backend.name), "grill-sim"
            )
            sim = simulated_engine(backend, model)
            self.sim_processes.append(sim)
            urls[backend.name] = sim.url
            log.info("simulated engine %s (profile %s) at %s", backend.name, backend.profile, sim.url)
        if urls:
            atexit.register(self.stop_simulated_backends)
        return scenario.with_backend_urls(urls) if urls else scenario

    def stop_simulated_backends(self) -> None:
        while self.sim_processes:
            self.sim_processes.pop().stop()

    def stop_telemetry(self) -> None:
        if self.telemetry is not None:
            self.telemetry.stop()
            self.telemetry = None


_states: weakref.WeakKeyDictionary[Environment, RunState] = weakref.WeakKeyDictionary()


def run_state(environment: Environment) -> RunState:
    """The run state of this environment (an empty one the first time it is asked for)."""
    state = _states.get(environment)
    if state is None:
        state = _states[environment] = RunState()
    return state


def simulated_engine(backend: Backend, served_model_name: str) -> SimProcess:
    """The simulated engine a scenario's `engine: sim` backend describes: its profile, its `sim_args`
    as flags, except `api_key`, which goes through the environment."""
    from grill_locust.client.backend_http import secret_value
    from grill_locust.sim import SimProcess

    args = dict(backend.sim_args)
    api_key = secret_value(args.pop("api_key", None))
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in args.items()]
    return SimProcess.start(
        profile=backend.profile or "vllm",
        served_model_name=served_model_name,
        extra_args=flags,
        api_key=api_key,
    )
