"""grill-locust's command-line options (also the web UI's custom parameters), their checks, and what
they select: the scenario, and the sinks besides the results folder."""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from locust import events

from grill_locust.errors import GrillError
from grill_locust.run.campaign import DISK_FULL_GIVE_UP_S

if TYPE_CHECKING:
    from grill_locust.scenario import Scenario
    from grill_locust.sinks import Sink

# the demo beside the source tree (an editable install), else in the folder locust runs from (the
# Docker image installs the package into site-packages and keeps scenarios/ in /app)
DEFAULT_SCENARIOS = (
    Path(__file__).resolve().parents[2] / "scenarios" / "demo.yaml",
    Path("scenarios") / "demo.yaml",
)
SECRET_FLAG_WORDS = ("token", "key", "password", "secret")


@events.init_command_line_parser.add_listener
def add_options(parser: Any) -> None:
    # Locust shows these in the web UI's custom parameters, except the token: a masked field still
    # holds the option's value as its default in the page
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
        "--repeat",
        env_var="LOCUST_REPEAT",
        type=int,
        default=None,
        help="Run the whole campaign (every target through every tier) N times into one results folder; "
        "records carry `repeat`, the report's intervals span the repeats (default 1)",
    )
    parser.add_argument(
        "--resume",
        env_var="LOCUST_RESUME",
        default=None,
        help="Continue an interrupted campaign in results/<run_id>, skipping tiers already complete",
    )
    parser.add_argument(
        "--force-resume",
        env_var="LOCUST_FORCE_RESUME",
        action="store_true",
        default=False,
        help="With --resume: continue even if the scenario (or its tiers) differs from the folder's",
    )
    parser.add_argument(
        "--telemetry-interval",
        env_var="LOCUST_TELEMETRY_INTERVAL",
        type=float,
        default=2.0,
        help="Seconds between scrapes of engine /metrics and GPU exporters (0: off)",
    )
    parser.add_argument(
        "--disk-full-give-up",
        env_var="LOCUST_DISK_FULL_GIVE_UP",
        type=float,
        default=DISK_FULL_GIVE_UP_S,
        help="Seconds the results folder may refuse writes (a full disk) before the run stops, exit 1; "
        "meanwhile records are held in memory",
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
        help="InfluxDB token (never logged, never sent to workers: give each its own INFLUX_TOKEN)",
        include_in_web_ui=False,
    )


def check_options(options: Any) -> None:
    """Bad command-line values: one line naming the flag (exit 2), before anything starts."""
    for flag, value in (
        ("--pause", options.pause),
        ("--think-time", options.think_time),
        ("--telemetry-interval", options.telemetry_interval),
        ("--disk-full-give-up", options.disk_full_give_up),
    ):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise GrillError(f"{flag}: expected a number of seconds >= 0, got {value}")
    if options.iterations is not None and options.iterations < 1:
        raise GrillError(f"--iterations: expected a whole number >= 1, got {options.iterations}")
    if options.repeat is not None and options.repeat < 1:
        raise GrillError(f"--repeat: expected a whole number >= 1, got {options.repeat}")
    if options.influx_url and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", options.influx_url):
        raise GrillError(f"--influx-url: expected an http(s)://host[:port] URL, got {options.influx_url!r}")
    results = Path(options.results_dir)
    try:
        results.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise GrillError(f"--results-dir {results}: cannot create it ({error.strerror})") from None
    try:  # a folder that exists may still refuse the run's folder (/proc, read-only mounts)
        os.rmdir(tempfile.mkdtemp(prefix=".grill-probe-", dir=results))
    except OSError as error:
        raise GrillError(f"--results-dir {results}: cannot write in it ({error.strerror})") from None


def load_scenario_of(options: Any) -> tuple[Scenario, str]:
    """The scenario the options name (--scenario, the one of --resume's folder, else the demo), with the
    options' overrides; and its path."""
    from grill_locust.scenario import load_scenario, parse_tiers

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


def redacted_argv(argv: list[str]) -> list[str]:
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


def live_sinks(
    options: Any, scenario: Scenario | None, worker: str, run_id: str | None = None, token: str | None = None
) -> list[Sink]:
    """The sinks besides the results folder that the options (else the scenario's `sinks:`) turn on.

    `worker` names this process in the points it writes; `run_id` tags telemetry (the master's); `token`
    is this process's own --influx-token (RunState.influx_token).
    """
    settings = scenario.sinks.influx if scenario is not None else None
    url = options.influx_url or (settings.url if settings else None)
    if not url:
        return []
    from grill_locust.sinks.influx import InfluxSink

    token = token or (settings.token.get_secret_value() if settings and settings.token else "")
    org = options.influx_org or (settings.org if settings else "")
    bucket = options.influx_bucket or (settings.bucket if settings else "")
    return [InfluxSink(url=url, org=org, bucket=bucket, token=token, worker=worker, run_id=run_id)]
