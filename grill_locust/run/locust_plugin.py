"""Everything grill-locust hooks into Locust: options, event listeners, the load shape, the web UI tab.

Only Locust's extension points are used (events, LoadTestShape, register_message, the web UI's
extended tabs); Locust itself is never patched. `locustfiles/coding.py` imports this module.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import re
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
from locust import LoadTestShape, User, events
from locust.runners import STATE_INIT, STATE_STOPPED, LocalRunner, MasterRunner, WorkerRunner

from grill_locust.errors import GrillError
from grill_locust.run.campaign import FINAL_RECORDS_WAIT_S, Campaign, progress_printer, run_dir_for
from grill_locust.run.user import CampaignUser, standalone_scenario
from grill_locust.run.worker import MSG_HELLO, MSG_PHASE, MSG_RECORDS, WorkerState, options_of, runner_of

if TYPE_CHECKING:
    from locust.env import Environment

    from grill_locust.config import Scenario

log = logging.getLogger("grill")

# the demo beside the source tree (an editable install), else in the folder locust runs from (the
# Docker image installs the package into site-packages and keeps scenarios/ in /app)
DEFAULT_SCENARIOS = (
    Path(__file__).resolve().parents[2] / "scenarios" / "demo.yaml",
    Path("scenarios") / "demo.yaml",
)


@events.init_command_line_parser.add_listener
def add_options(parser: Any) -> None:
    # Locust shows these in the web UI's custom parameters; is_secret hides the token there
    parser.add_argument(
        "--scenario",
        env_var="LOCUST_SCENARIO",
        default=None,
        help="Scenario YAML (backends, models, conversations, targets, load). "
        "Default without --scenario or --host: scenarios/demo.yaml",
    )
    parser.add_argument(
        "--results-dir",
        env_var="LOCUST_RESULTS_DIR",
        default="results",
        help="Folder that receives results/<run_id>/ (default: results)",
    )
    parser.add_argument(
        "--tiers",
        env_var="LOCUST_TIERS",
        default=None,
        help="Override the tiers of concurrent users, e.g. 1,5,10",
    )
    parser.add_argument(
        "--iterations",
        env_var="LOCUST_ITERATIONS",
        type=int,
        default=None,
        help="Override conversations per user per tier",
    )
    parser.add_argument(
        "--pause",
        env_var="LOCUST_PAUSE",
        type=float,
        default=None,
        help="Override the pause at 0 users between tiers (seconds)",
    )
    parser.add_argument(
        "--think-time",
        env_var="LOCUST_THINK_TIME",
        type=float,
        default=None,
        help="Override the think time between requests of one user (seconds)",
    )
    parser.add_argument(
        "--model",
        env_var="LOCUST_MODEL",
        default=None,
        help="Model for the plain users (MultiTurnUser, ...) with --host; default: the first listed",
    )
    parser.add_argument(
        "--engine",
        env_var="LOCUST_ENGINE",
        default="openai",
        help="Engine behind --host for the plain users (vllm, sglang, llamacpp, sim, openai, ...)",
    )
    parser.add_argument(
        "--resume",
        env_var="LOCUST_RESUME",
        default=None,
        help="Continue an interrupted campaign in results/<run_id>, skipping tiers already complete",
    )
    parser.add_argument(
        "--telemetry-interval",
        env_var="LOCUST_TELEMETRY_INTERVAL",
        type=float,
        default=2.0,
        help="Seconds between scrapes of engine /metrics and GPU exporters (0: off)",
    )
    parser.add_argument(
        "--influx-url", env_var="INFLUX_URL", default=None, help="InfluxDB URL for live results"
    )
    parser.add_argument("--influx-org", env_var="INFLUX_ORG", default=None, help="InfluxDB organisation")
    parser.add_argument("--influx-bucket", env_var="INFLUX_BUCKET", default=None, help="InfluxDB bucket")
    parser.add_argument(
        "--influx-token",
        env_var="INFLUX_TOKEN",
        default=None,
        help="InfluxDB token (never logged)",
        is_secret=True,
    )


class CampaignShape(LoadTestShape):
    """Targets x tiers x iterations, with pauses: the shape asks the campaign (master or local runner)."""

    # Locust must not warn about -u/-r/-t itself: we print our own one-line warning when a scenario drives.
    use_common_options = True

    def tick(self) -> tuple[int, float, list[type[User]]] | None:
        campaign: Campaign | None = (
            getattr(self.runner.environment, "grill_campaign", None) if self.runner else None
        )
        step = campaign.tick() if campaign is not None else None
        return (*step, [CampaignUser]) if step is not None else None


def _fail(message: str) -> None:
    print(f"grill: {message}", file=sys.stderr)
    sys.exit(2)


def _check_options(options: Any) -> None:
    """Bad command-line values: one line naming the flag (exit 2), before anything starts."""
    for flag, value in (
        ("--pause", options.pause),
        ("--think-time", options.think_time),
        ("--telemetry-interval", options.telemetry_interval),
    ):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise GrillError(f"{flag}: expected a number of seconds >= 0, got {value}")
    if options.iterations is not None and options.iterations < 1:
        raise GrillError(f"--iterations: expected a whole number >= 1, got {options.iterations}")
    if options.influx_url and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", options.influx_url):
        raise GrillError(f"--influx-url: expected an http(s)://host[:port] URL, got {options.influx_url!r}")
    results = Path(options.results_dir)
    try:
        results.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise GrillError(f"--results-dir {results}: cannot create it ({error.strerror})") from None


def _load_scenario(options: Any) -> tuple[Scenario, str]:
    from grill_locust.config import load_scenario, parse_tiers

    path = options.scenario
    if options.resume and not path:
        meta_path = Path(options.resume) / "run.json"
        if not meta_path.exists():
            raise GrillError(
                f"--resume {options.resume}: no run.json there (is it a results/<run_id> folder?)"
            )
        path = json.loads(meta_path.read_text()).get("scenario_path")
    path = path or str(next((p for p in DEFAULT_SCENARIOS if p.is_file()), DEFAULT_SCENARIOS[0]))
    scenario = load_scenario(path)
    scenario = scenario.with_overrides(
        tiers=parse_tiers(options.tiers) if options.tiers is not None else None,
        iterations=options.iterations,
        pause_s=options.pause,
        think_time_s=options.think_time,
    )
    return scenario, path


@events.init.add_listener
def on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    options = environment.parsed_options
    if options is None:
        return
    try:
        _init(environment, options)
    except GrillError as error:
        _fail(str(error))


def _init(environment: Environment, options: Any) -> None:
    runner = runner_of(environment)
    if isinstance(runner, (WorkerRunner, LocalRunner)):
        worker = WorkerState(environment)
        environment.grill_worker = worker  # type: ignore[attr-defined]

        def on_phase(environment: Environment, msg: Any, **_: Any) -> None:
            worker.on_phase_message(msg.data)
            _open_worker_influx(environment)

        runner.register_message(MSG_PHASE, on_phase)
    if isinstance(runner, WorkerRunner):
        runner.send_message(MSG_HELLO, {})
        return
    _check_options(options)
    # listen before the (slow) start of simulated engines: workers of --processes say hello at once
    runner.register_message(
        MSG_RECORDS, lambda environment, msg, **kw: _on_records(environment, msg.data, msg.node_id)
    )
    runner.register_message(MSG_HELLO, lambda environment, msg, **kw: _on_hello(environment, msg.node_id))
    scenario_drives = bool(options.scenario or options.resume or not options.host)
    if scenario_drives:
        scenario, path = _load_scenario(options)
        given = [
            flag
            for flag, value in (
                ("-u", options.num_users),
                ("-r", options.spawn_rate),
                ("-t", options.run_time),
            )
            if value
        ]
        if given:
            log.warning("%s ignored: the scenario's load shape drives the run", "/".join(given))
            options.run_time = None
        # hide -u/-r in the web UI (the class attribute stays True so Locust does not warn a second time)
        environment.shape_class.use_common_options = False  # type: ignore[misc,union-attr]
        scenario = _start_simulated_backends(scenario)
    else:
        environment.shape_class = None  # plain Locust run: -u/-r/-t rule
        environment.user_classes = [c for c in environment.user_classes if c is not CampaignUser]
        scenario, path = (
            standalone_scenario(options.host, options.model, options.engine, options.think_time),
            "",
        )
    environment.grill_campaign = _new_campaign(environment, scenario, path, options)  # type: ignore[attr-defined]
    if options.headless:
        # Ctrl+C: stop the way a finished campaign stops (workers told, in-flight requests given
        # --stop-timeout, their records shipped), not by Locust's abrupt quit.
        # Locust installs its SIGTERM handler only after a shape run ends: until then SIGTERM would kill
        # the process on the spot, losing the last records and leaving simulated engines behind.
        gevent.signal_handler(signal.SIGINT, _interrupt, environment)
        gevent.signal_handler(signal.SIGTERM, _interrupt, environment)
    for client_id in _waiting_for_hello_reply:  # workers that said hello while the engines started
        _on_hello(environment, client_id)
    _waiting_for_hello_reply.clear()
    if environment.web_ui is not None:
        _extend_web_ui(environment)


def _new_campaign(environment: Environment, scenario: Scenario, path: str, options: Any) -> Campaign:
    from grill_locust.sinks.results import ResultsWriter, new_run_id, read_phases

    skip: set[tuple[str, int]] = set()
    if options.resume:
        run_dir = Path(options.resume)
        if not (run_dir / "phases.csv").exists():
            raise GrillError(f"--resume {run_dir}: no phases.csv there (is it a results/<run_id> folder?)")
        run_id = run_dir.name
        skip = {(p["target"], int(p["tier_index"])) for p in read_phases(run_dir) if p["complete"] == "True"}
        log.info("resuming %s: %d tiers already complete are skipped", run_id, len(skip))
    else:
        run_id = new_run_id(scenario.name)
        run_dir = run_dir_for(options.results_dir, run_id)
    meta: dict[str, Any] = {
        "run_id": run_id,
        "scenario": scenario.name,
        "scenario_path": str(Path(path).resolve()) if path else None,
        "started_wall": time.time(),
        "ended_wall": None,
        "slo": scenario.slo.model_dump(),
        "argv": _redacted_argv(sys.argv),
    }
    if options.resume:
        earlier = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
        meta = {**meta, "started_wall": earlier.get("started_wall", meta["started_wall"])}
        meta["resumed_wall"] = [*earlier.get("resumed_wall", []), time.time()]
    writer = ResultsWriter(run_dir, meta, scenario.redacted(), resume=bool(options.resume))
    walk_tiers = environment.shape_class is not None  # plain users (-u/-r/-t) have no tiers
    campaign = Campaign(environment, scenario, writer, run_id, skip=skip, walk_tiers=walk_tiers)
    campaign.influx = _influx_sink(options, scenario, "master", run_id=run_id)
    worker = getattr(environment, "grill_worker", None)
    if worker is not None:  # the local runner is its own worker
        worker.run_id = run_id
        worker.set_scenario(scenario)
        if worker.influx is None:
            worker.influx = _influx_sink(options, scenario, worker.worker_id)
    log.info("results of this run: %s", run_dir)
    return campaign


SECRET_FLAG_WORDS = ("token", "key", "password", "secret")


def _redacted_argv(argv: list[str]) -> list[str]:
    """The command line with the values of secret flags (--influx-token X, --x-key=Y) replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        secret_flag = arg.startswith("--") and any(w in arg.lower() for w in SECRET_FLAG_WORDS)
        if hide_next:
            out.append("***")
        elif secret_flag and "=" in arg:
            out.append(arg.split("=", 1)[0] + "=***")
        else:
            out.append(arg)
        hide_next = secret_flag and "=" not in arg
    return out


def _open_worker_influx(environment: Environment) -> None:
    """The worker's sink for its records, once it knows the scenario and the options. A worker started
    on its own gets the master's --influx-* options with the first spawn (just before test_start), after
    the first phase message: both call this."""
    worker: WorkerState | None = getattr(environment, "grill_worker", None)
    if worker is not None and worker.influx is None and worker.scenario is not None:
        worker.influx = _influx_sink(options_of(environment), worker.scenario, worker.worker_id)


def _close_worker_influx(environment: Environment) -> None:
    worker: WorkerState | None = getattr(environment, "grill_worker", None)
    if worker is not None and worker.influx is not None:
        worker.influx.close()
        worker.influx = None


def _influx_sink(options: Any, scenario: Scenario | None, worker_name: str, run_id: str | None = None) -> Any:
    settings = scenario.sinks.influx if scenario is not None else None
    url = options.influx_url or (settings.url if settings else None)
    if not url:
        return None
    from grill_locust.sinks.influx import InfluxSink

    token = options.influx_token or (settings.token.get_secret_value() if settings and settings.token else "")
    org = options.influx_org or (settings.org if settings else "")
    bucket = options.influx_bucket or (settings.bucket if settings else "")
    return InfluxSink(url=url, org=org, bucket=bucket, token=token, worker=worker_name, run_id=run_id)


_sim_processes: list[Any] = []


def _start_simulated_backends(scenario: Scenario) -> Scenario:
    """Start `engine: sim` backends on free loopback ports; stop them when Locust quits."""
    from grill_locust.sim import SimProcess

    urls: dict[str, str] = {}
    for backend in scenario.backends:
        if backend.engine != "sim":
            continue
        model = next((t.model.name for t in scenario.targets if t.backend.name == backend.name), "grill-sim")
        args = dict(backend.sim_args)
        api_key = args.pop("api_key", None)
        extra = [f"--{key.replace('_', '-')}={value}" for key, value in args.items()]
        sim = SimProcess.start(
            profile=backend.profile or "vllm", served_model_name=model, extra_args=extra, api_key=api_key
        )
        _sim_processes.append(sim)
        urls[backend.name] = sim.url
        log.info("simulated engine %s (profile %s) at %s", backend.name, backend.profile or "vllm", sim.url)
    if urls:
        atexit.register(_stop_simulated_backends)
    return scenario.with_backend_urls(urls) if urls else scenario


def _stop_simulated_backends() -> None:
    while _sim_processes:
        _sim_processes.pop().stop()


def _on_records(environment: Environment, data: dict[str, Any], msg_node: str) -> None:
    campaign: Campaign = environment.grill_campaign  # type: ignore[attr-defined]
    campaign.on_records(data["worker"], data["records"], data["iterations"], client_id=msg_node)


_waiting_for_hello_reply: list[str] = []


def _on_hello(environment: Environment, client_id: str) -> None:
    campaign: Campaign | None = getattr(environment, "grill_campaign", None)
    if campaign is None:
        _waiting_for_hello_reply.append(client_id)
        return
    runner_of(environment).send_message(
        MSG_PHASE, campaign.phase_message(with_scenario=True), client_id=client_id
    )


_progress_greenlet: gevent.Greenlet | None = None


@events.test_start.add_listener
def on_test_start(environment: Environment, **_: Any) -> None:
    global _progress_greenlet
    worker: WorkerState | None = getattr(environment, "grill_worker", None)
    if worker is not None:
        worker.start()
        _open_worker_influx(environment)
    campaign: Campaign | None = getattr(environment, "grill_campaign", None)
    if campaign is not None and not isinstance(environment.runner, WorkerRunner):
        if campaign.finished:  # a new run from the web UI after the last one ended
            _finish(environment)
            environment.grill_campaign = campaign = _new_campaign(  # type: ignore[attr-defined]
                environment,
                campaign.scenario,
                campaign.writer.meta.get("scenario_path") or "",
                environment.parsed_options,
            )
        if options_of(environment).headless and campaign.phases and _progress_greenlet is None:
            _progress_greenlet = gevent.spawn(progress_printer, campaign)
        _start_telemetry(environment, campaign)


def _start_telemetry(environment: Environment, campaign: Campaign) -> None:
    """Scrape each backend's /metrics and each GPU exporter while the run lasts (master or local only)."""
    interval = options_of(environment).telemetry_interval
    if not interval or getattr(campaign, "telemetry", None) is not None:
        return
    from grill_locust.telemetry import TelemetryScraper

    scraper = TelemetryScraper(
        campaign.scenario.backends, (), interval_s=interval, on_samples=campaign.on_telemetry
    )
    scraper.start()
    campaign.telemetry = scraper  # type: ignore[attr-defined]


@events.test_stopping.add_listener
def on_test_stopping(environment: Environment, **_: Any) -> None:
    """Locust's `Runner.stop()` holds the hub before it cuts the users (it formats the caller's stack
    for a debug line: tens of ms): lag from here on is the stop's, not the load's."""
    worker: WorkerState | None = getattr(environment, "grill_worker", None)
    if worker is not None:
        worker.stopping = True


@events.test_stop.add_listener
def on_test_stop(environment: Environment, **_: Any) -> None:
    worker: WorkerState | None = getattr(environment, "grill_worker", None)
    if worker is not None:
        worker.stop()  # the last records: to the master and to InfluxDB, then the sink closes
        _close_worker_influx(environment)
    campaign: Campaign | None = getattr(environment, "grill_campaign", None)
    if campaign is not None:
        campaign.end()


@events.quitting.add_listener
def on_quitting(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        # SIGTERM: Locust fires quitting before it stops the users; stop them first, so that their last
        # records are flushed (test_stop) while the sink is open
        _stop_runner(environment)
    _close_worker_influx(environment)
    if not isinstance(environment.runner, WorkerRunner):
        _finish(environment)
    _stop_simulated_backends()


def _interrupt(environment: Environment) -> None:
    log.warning(
        "interrupted: stopping; in-flight requests get --stop-timeout (%s s), then count as cut",
        environment.stop_timeout,
    )
    gevent.spawn(_stop_runner, environment)


def _stop_runner(environment: Environment) -> None:
    """Stop users everywhere and wait until their last records have reached this process."""
    runner = runner_of(environment)
    if runner is None or runner.state in (STATE_STOPPED, STATE_INIT):
        return
    runner.stop()
    if isinstance(runner, MasterRunner):
        gevent.sleep(FINAL_RECORDS_WAIT_S)  # workers flush before they report stopped; let the batch land


def _finish(environment: Environment) -> None:
    """Close the results folder: parquet files, summary.csv, the summary table on stdout."""
    campaign: Campaign | None = getattr(environment, "grill_campaign", None)
    if campaign is None or getattr(campaign, "closed", False):
        return
    _stop_runner(environment)  # SIGTERM reaches us here with the users still running
    campaign.closed = True  # type: ignore[attr-defined]
    campaign.end()
    scraper = getattr(campaign, "telemetry", None)
    if scraper is not None:
        scraper.stop()
    writer = campaign.writer
    writer.meta["ended_wall"] = time.time()
    writer.write_meta()
    writer.close()
    if campaign.influx is not None:
        campaign.influx.close()
    from grill_locust.report import format_table, summarize_run

    summary = summarize_run(writer.run_dir)  # also writes summary.csv
    _closing_words.append(
        f"{format_table(summary)}\n\n{writer.record_count} requests recorded. Results: {writer.run_dir}\n"
        f"Report: grill report {writer.run_dir}"
    )


_closing_words: list[str] = []


@events.quit.add_listener
def on_quit(**_: Any) -> None:
    """The summary table is the last thing a headless run prints, after Locust's own statistics."""
    while _closing_words:
        print(_closing_words.pop(0), flush=True)


def _extend_web_ui(environment: Environment) -> None:
    """A 'Campaign' tab: target, tier, iterations done / to do, errors, for every tier."""
    from flask import Response, request

    web_ui = environment.web_ui
    assert web_ui is not None and web_ui.app is not None
    web_ui.template_args["extendedTabs"] = [{"title": "Campaign", "key": "grill-campaign"}]
    web_ui.template_args["extendedTables"] = [
        {
            "key": "grill-campaign",
            "structure": [
                {"key": "tier", "title": "Tier"},
                {"key": "target", "title": "Target"},
                {"key": "users", "title": "Users"},
                {"key": "iterations", "title": "Iterations done / to do"},
                {"key": "requests", "title": "Requests"},
                {"key": "errors", "title": "Errors"},
                {"key": "state", "title": "State"},
            ],
        }
    ]

    @web_ui.app.after_request
    def add_campaign_stats(response: Response) -> Response:
        if request.path != "/stats/requests" or not response.is_json:
            return response
        campaign: Campaign | None = getattr(environment, "grill_campaign", None)
        rows = []
        if campaign is not None:
            for progress in campaign.progress.values():
                phase = progress.phase
                state = (
                    "running"
                    if progress is campaign.current
                    else ("done" if progress.complete else "incomplete")
                    if progress.ended_wall
                    else "waiting"
                )
                rows.append(
                    {
                        "tier": f"{phase.phase_id + 1}/{len(campaign.phases)}",
                        "target": phase.target,
                        "users": phase.tier_users,
                        "iterations": f"{progress.iterations_done}/{phase.iterations_target}",
                        "requests": progress.records,
                        "errors": progress.errors,
                        "state": state,
                    }
                )
        payload = response.get_json()
        payload["extended_stats"] = [{"key": "grill-campaign", "data": rows}]
        response.set_data(json.dumps(payload))
        return response


__all__ = ["CampaignShape"]
