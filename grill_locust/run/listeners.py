"""grill-locust's listeners on Locust's events: init, test start/stop, quitting, and the messages
between master and workers.

Only Locust's extension points are used (events, register_message); Locust itself is never patched.
Importing this module registers the listeners and the options (`locustfiles/coding.py` does).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
from locust import events
from locust.runners import STATE_INIT, STATE_STOPPED, LocalRunner, MasterRunner, WorkerRunner

from grill_locust.errors import GrillError
from grill_locust.run import exit_codes
from grill_locust.run.campaign import FINAL_RECORDS_WAIT_S, Campaign, progress_printer, run_dir_for
from grill_locust.run.openloop import OpenLoopUser
from grill_locust.run.options import check_options, live_sinks, load_scenario_of, redacted_argv
from grill_locust.run.search import check_search_runnable
from grill_locust.run.state import run_state
from grill_locust.run.user import CampaignUser, standalone_scenario
from grill_locust.run.web_ui import extend_web_ui
from grill_locust.run.worker import (
    MSG_CLAIM,
    MSG_DEVELOPER,
    MSG_HELLO,
    MSG_PHASE,
    MSG_RECORDS,
    MSG_REFUSED,
    MSG_RELEASE,
    WorkerState,
    die_with_forking_parent,
    options_of,
    runner_of,
    watch_master,
)

if TYPE_CHECKING:
    from locust.env import Environment

    from grill_locust.scenario import Scenario

log = logging.getLogger("grill")


die_with_forking_parent()  # before Locust forks its --processes workers (after importing the locustfile)


@events.init.add_listener
def on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    options = environment.parsed_options
    if options is None:
        return
    try:
        _init(environment, options)
    except GrillError as error:
        print(f"grill: {error}", file=sys.stderr)
        sys.exit(2)


def _init(environment: Environment, options: Any) -> None:
    state = run_state(environment)
    runner = runner_of(environment)
    # Locust sends the master's options to every worker with each spawn: the token stays in this process
    state.influx_token, options.influx_token = options.influx_token, None
    if isinstance(runner, (WorkerRunner, LocalRunner)):
        worker = state.worker = WorkerState(environment)

        def on_phase(environment: Environment, msg: Any, **_: Any) -> None:
            worker.on_phase_message(msg.data)
            _open_worker_sinks(environment)

        runner.register_message(MSG_PHASE, on_phase)
        runner.register_message(
            MSG_DEVELOPER, lambda environment, msg, **kw: worker.on_developer_message(msg.data)
        )
    if isinstance(runner, WorkerRunner):
        runner.send_message(MSG_HELLO, {})
        gevent.spawn(watch_master, runner)
        return
    check_options(options)
    # listen before the (slow) start of simulated engines: workers of --processes say hello at once
    runner.register_message(
        MSG_RECORDS, lambda environment, msg, **kw: on_records(environment, msg.data, msg.node_id)
    )
    runner.register_message(MSG_HELLO, lambda environment, msg, **kw: _on_hello(environment, msg.node_id))
    runner.register_message(MSG_REFUSED, lambda environment, msg, **kw: _on_refused(environment, msg.data))
    runner.register_message(
        MSG_CLAIM,
        lambda environment, msg, **kw: _campaign_of(environment).on_developer_claim(msg.node_id, msg.data),
    )
    runner.register_message(
        MSG_RELEASE,
        lambda environment, msg, **kw: _campaign_of(environment).on_developer_release(msg.node_id, msg.data),
    )
    scenario_drives = bool(options.scenario or options.resume or not options.host)
    if scenario_drives:
        scenario, path = load_scenario_of(options)
        check_search_runnable(
            scenario.load.search, bool(options.resume), scenario.targets, repeats=options.repeat
        )
        if options.resume and not options.force_resume:
            check_resumable(Path(options.resume), scenario)  # before engines start, before any request
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
        scenario = state.start_simulated_backends(scenario)
    else:
        environment.shape_class = None  # plain Locust run: -u/-r/-t rule
        environment.user_classes = [
            c for c in environment.user_classes if c not in (CampaignUser, OpenLoopUser)
        ]
        scenario, path = (
            standalone_scenario(options.host, options.model, options.engine, options.think_time),
            "",
        )
    state.campaign = _new_campaign(environment, scenario, path, options)
    if options.headless:
        # Ctrl+C: stop the way a finished campaign stops (workers told, in-flight requests given
        # --stop-timeout, their records shipped), not by Locust's abrupt quit.
        # Locust installs its SIGTERM handler only after a shape run ends: until then SIGTERM would kill
        # the process on the spot, losing the last records and leaving simulated engines behind.
        gevent.signal_handler(signal.SIGINT, _interrupt, environment)
        gevent.signal_handler(signal.SIGTERM, _interrupt, environment)
    for client_id in state.hello_waiters:  # workers that said hello while the engines started
        _on_hello(environment, client_id)
    state.hello_waiters.clear()
    if environment.web_ui is not None:
        extend_web_ui(environment, on_start=_next_campaign)

    def print_closing_words(**_: Any) -> None:
        """The summary table is the last thing a headless run prints, after Locust's own statistics."""
        while state.closing_words:
            print(state.closing_words.pop(0), flush=True)

    environment.events.quit.add_listener(print_closing_words)


def _run_folder(scenario: Scenario, options: Any) -> tuple[Path, set[tuple[str, int, int]]]:
    """The run's results folder, and the tiers (target, tier_index, repeat) a resumption skips as complete."""
    from grill_locust.sinks.results import new_run_id, read_phases

    if options.resume:
        run_dir = Path(options.resume)
        if not (run_dir / "phases.csv").exists():
            raise GrillError(f"--resume {run_dir}: no phases.csv there (is it a results/<run_id> folder?)")
        skip = {
            (p["target"], int(p["tier_index"]), int(p.get("repeat") or 0))
            for p in read_phases(run_dir)
            if p["complete"] == "True"
        }
        log.info("resuming %s: %d tiers already complete are skipped", run_dir.name, len(skip))
        return run_dir, skip
    run_dir = run_dir_for(options.results_dir, new_run_id(scenario.name))
    for again in range(2, 100):  # a second campaign from the web UI within the same second
        if not run_dir.exists():
            break
        run_dir = run_dir_for(options.results_dir, f"{new_run_id(scenario.name)}-{again}")
    return run_dir, set()


def _new_campaign(environment: Environment, scenario: Scenario, path: str, options: Any) -> Campaign:
    from grill_locust.sinks.results import ResultsWriter

    run_dir, skip = _run_folder(scenario, options)
    run_id = run_dir.name
    repeats = options.repeat
    meta: dict[str, Any] = {
        "run_id": run_id,
        "scenario": scenario.name,
        "scenario_path": str(Path(path).resolve()) if path else None,
        "started_wall": time.time(),
        "ended_wall": None,
        "slo": scenario.slo.model_dump(),
        "conversation_slo": scenario.conversation_slos(),
        "argv": redacted_argv(sys.argv),
    }
    if options.resume:
        earlier = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
        meta = {**meta, "started_wall": earlier.get("started_wall", meta["started_wall"])}
        meta["resumed_wall"] = [*earlier.get("resumed_wall", []), time.time()]
        repeats = repeats or earlier.get("repeats")
    meta["repeats"] = repeats = int(repeats or 1)
    walk_tiers = environment.shape_class is not None  # plain users (-u/-r/-t) have no tiers
    if walk_tiers and scenario.load.warmup_requests:
        # the report leaves out each tier's first this many by send time (report/aggregate.py)
        meta["warmup_requests"] = scenario.load.warmup_requests
    results = ResultsWriter(run_dir, meta, scenario.redacted(), resume=bool(options.resume))
    campaign = Campaign(
        environment,
        scenario,
        results,
        run_id,
        sinks=live_sinks(
            options, scenario, "master", run_id=run_id, token=run_state(environment).influx_token
        ),
        skip=skip,
        walk_tiers=walk_tiers,
        disk_full_give_up_s=options.disk_full_give_up,
        repeats=repeats,
    )
    worker = run_state(environment).worker
    if worker is not None:  # the local runner is its own worker
        worker.run_id = run_id
        worker.session = campaign.session
        worker.set_scenario(scenario)
        _open_worker_sinks(environment)
    log.info("results of this run: %s", run_dir)
    return campaign


def check_resumable(run_dir: Path, scenario: Scenario) -> None:
    """--resume continues the campaign its folder was made from: the same scenario (secrets aside, the
    addresses of simulated engines the run starts aside) with the same overrides; else one line, exit 2."""
    import yaml

    from grill_locust.sinks.results import CONFIG_YAML

    def comparable(config: Any) -> Any:
        config = json.loads(json.dumps(config, default=str))  # tuples and lists alike
        config.pop("source", None)  # the path it was read from
        for backend in [
            *config.get("backends", []),
            *(t.get("backend", {}) for t in config.get("targets", [])),
        ]:
            if backend.get("engine") == "sim" and backend.get("name") in managed:
                for key in ("url", "metrics_url", "tokenize_url"):
                    backend.pop(key, None)
        return config

    managed = {backend.name for backend in scenario.backends if backend.managed}
    path = run_dir / CONFIG_YAML
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise GrillError(
            f"--resume {run_dir}: cannot read {CONFIG_YAML} ({error}) to check the scenario; "
            "--force-resume continues without the check"
        ) from None
    differences = _differences(comparable(saved), comparable(scenario.redacted()))
    if differences:
        where = ", ".join(differences[:3])
        raise GrillError(
            f"--resume {run_dir}: made from another scenario or other tiers ({where}); resume with the "
            "scenario and overrides it was made with, or pass --force-resume"
        )


def _differences(earlier: Any, now: Any, path: str = "") -> list[str]:
    """Where two plain-data configs differ, as `path: before -> now`. A key the earlier config lacks is
    one added to the schema since that folder was written: not a difference."""
    if isinstance(earlier, dict) and isinstance(now, dict):
        found: list[str] = []
        for key in earlier:
            found += _differences(earlier.get(key), now.get(key), f"{path}.{key}" if path else str(key))
        return found
    if isinstance(earlier, list) and isinstance(now, list) and len(earlier) == len(now):
        return [
            d
            for i, (a, b) in enumerate(zip(earlier, now, strict=True))
            for d in _differences(a, b, f"{path}[{i}]")
        ]
    return [] if earlier == now else [f"{path or 'scenario'}: {earlier!r} in the folder, {now!r} now"]


def _open_worker_sinks(environment: Environment) -> None:
    """The worker's sinks for its records, once it knows the scenario and the options. A worker started
    on its own gets the master's --influx-* options with the first spawn (just before test_start), after
    the first phase message: both call this."""
    state = run_state(environment)
    worker = state.worker
    if worker is not None and not worker.sinks and worker.scenario is not None:
        options = options_of(environment)
        worker.sinks = live_sinks(options, worker.scenario, worker.worker_id, token=state.influx_token)


def _close_worker_sinks(environment: Environment) -> None:
    worker = run_state(environment).worker
    if worker is not None:
        for sink in worker.sinks:
            sink.close()
        worker.sinks = []


def on_records(environment: Environment, data: dict[str, Any], msg_node: str) -> None:
    """A worker's batch of records (MSG_RECORDS) reaches the campaign."""
    campaign = run_state(environment).campaign
    assert campaign is not None, "records before the campaign: workers send none before its phase message"
    campaign.on_records(
        data["worker"],
        data["records"],
        data["iterations"],
        client_id=msg_node,
        dispatched=data.get("dispatched"),
    )


def _campaign_of(environment: Environment) -> Campaign:
    campaign = run_state(environment).campaign
    assert campaign is not None, "a user asks for its developer index only once the campaign runs"
    return campaign


def _on_hello(environment: Environment, client_id: str) -> None:
    state = run_state(environment)
    if state.campaign is None:
        state.hello_waiters.append(client_id)
        return
    runner_of(environment).send_message(
        MSG_PHASE, state.campaign.phase_message(with_scenario=True), client_id=client_id
    )


def _on_refused(environment: Environment, data: dict[str, Any]) -> None:
    """A worker that cannot run the scenario (MSG_REFUSED) ends the campaign, saying why."""
    campaign = run_state(environment).campaign
    if campaign is not None:
        campaign.refuse(data["worker"], data["reason"])


@events.test_start.add_listener
def on_test_start(environment: Environment, **_: Any) -> None:
    state = run_state(environment)
    if state.worker is not None:
        state.worker.start()
        _open_worker_sinks(environment)
    campaign = state.campaign
    if campaign is not None and not isinstance(environment.runner, WorkerRunner):
        if options_of(environment).headless and campaign.phases and state.progress_greenlet is None:
            state.progress_greenlet = gevent.spawn(progress_printer, campaign)
        _start_telemetry(environment, campaign)


def _next_campaign(environment: Environment) -> None:
    """Start in the web UI once the campaign has ended (finished, or stopped): close it and begin a new
    one into a new results folder, as Start begins a new test in Locust."""
    state = run_state(environment)
    campaign = state.campaign
    if campaign is None or not campaign.ended:
        return
    _finish(environment)
    path = campaign.results.meta.get("scenario_path") or ""
    state.campaign = _new_campaign(environment, campaign.scenario, path, options_of(environment))


def _start_telemetry(environment: Environment, campaign: Campaign) -> None:
    """Scrape each backend's /metrics and each GPU exporter while the run lasts (master or local only)."""
    state = run_state(environment)
    interval = options_of(environment).telemetry_interval
    if not interval or state.telemetry is not None:
        return
    from grill_locust.telemetry import TelemetryScraper

    state.telemetry = TelemetryScraper(
        campaign.scenario.backends, (), interval_s=interval, on_samples=campaign.on_telemetry
    )
    state.telemetry.start()


@events.test_stopping.add_listener
def on_test_stopping(environment: Environment, **_: Any) -> None:
    """Locust's `Runner.stop()` holds the hub before it cuts the users (it formats the caller's stack
    for a debug line: tens of ms): lag from here on is the stop's, not the load's."""
    worker = run_state(environment).worker
    if worker is not None:
        worker.stopping = True


@events.test_stop.add_listener
def on_test_stop(environment: Environment, **_: Any) -> None:
    state = run_state(environment)
    if state.worker is not None:
        state.worker.stop()  # the last records: to the master and to the sinks, then the sinks close
        _close_worker_sinks(environment)
    if state.campaign is not None:
        state.campaign.end()


@events.quitting.add_listener
def on_quitting(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        # SIGTERM: Locust fires quitting before it stops the users; stop them first, so that their last
        # records are flushed (test_stop) while the sink is open
        _stop_runner(environment)
    _close_worker_sinks(environment)
    if not isinstance(environment.runner, WorkerRunner):
        _finish(environment)
    run_state(environment).stop_simulated_backends()


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
    """Close the run: its sinks (the results folder: parquet files, summary.csv), the summary on stdout."""
    state = run_state(environment)
    campaign = state.campaign
    if campaign is None or campaign.closed:
        return
    _stop_runner(environment)  # SIGTERM reaches us here with the users still running
    state.stop_telemetry()
    campaign.close()
    from grill_locust.report import format_table, summarize_run

    results = campaign.results
    try:
        summary = summarize_run(results.run_dir)  # also writes summary.csv
    except OSError as error:
        log.error("summary.csv not written: %s", error)
        summary = summarize_run(results.run_dir, write=False)
    unwritten = ""
    if results.unwritten_record_count or campaign.gave_up_on_disk:
        environment.process_exit_code = exit_codes.RECORDS_NOT_WRITTEN
        unwritten = f"\n{results.unwritten_record_count} requests NOT written: {results.unwritable_reason}"
    state.closing_words.append(
        f"{format_table(summary)}\n\n{results.record_count} requests recorded. Results: {results.run_dir}"
        f"{unwritten}\nReport: grill report {results.run_dir}"
    )
    state.closing_words.extend(campaign.final_lines)  # what to change, after the table


__all__ = ["on_records"]
