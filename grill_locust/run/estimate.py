"""`grill validate FILE…`: check scenario files and print an estimate of each campaign, sending nothing.

The estimate is targets × tiers × iterations (or × rate tiers, each rate × duration_s sends; a trace
target: one replay of its rows), the requests that makes, and a duration estimate from stated
assumptions (time to first token, time per output token), since the engines' speed is exactly what the
campaign is there to measure. An agentic session's requests are an expectation (its steps are drawn per
session), and so are a rate tier's (its sends are drawn), shown with `~`. An autocomplete iteration sends `requests`
requests and lasts as long as its typing (the first plan's, drawn like every other).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TextIO

from grill_locust.config import Search
from grill_locust.errors import GrillError
from grill_locust.run.phase import replays_trace, trace_rate
from grill_locust.run.search import check_search_runnable
from grill_locust.scenario import Scenario, Target, load_scenario, parse_tiers
from grill_locust.workload.generators import build_workload
from grill_locust.workload.kinds import rate_unit
from grill_locust.workload.trace import TraceRow, conversation_trace

# assumptions of the duration estimate (overridable on the command line)
ASSUMED_TTFT_S = 0.5
ASSUMED_TPOT_MS = 20.0


@dataclass(frozen=True)
class TargetEstimate:
    """One conversation of a target (each persona of a mix has its own)."""

    target: Target  # as its developers send it: one conversation
    requests_per_iteration: float  # expected, for agentic sessions (see `expected`)
    first_prompt_tokens: int  # approximate tokens of the first request's messages (system + first turn)
    requests: int  # over all tiers and iterations
    tier_durations_s: list[float]  # each tier's, for its developers (or sends) of this conversation
    developers: list[int]  # of each tier: all of them, or a mix's persona's share; a rate tier's sends
    # the request count is an expectation, not exact: an agent session draws its steps, an arrival
    # process its sends
    expected: bool = False
    replay: tuple[TraceRow, ...] | None = None  # a trace target's rows, sent once at their own times


@dataclass(frozen=True)
class CampaignEstimate:
    scenario: Scenario
    targets: list[TargetEstimate]
    phases: int  # target × tier pairs, and one per trace replay
    requests: int
    duration_s: float  # including pauses between phases


def estimate_campaign(
    scenario: Scenario, ttft_s: float = ASSUMED_TTFT_S, tpot_ms: float = ASSUMED_TPOT_MS
) -> CampaignEstimate:
    """The campaign's size and an estimate of its length (every tier waits for its slowest user; a rate
    tier sends for its duration and waits for its last sends; a trace replay lasts as long as its trace)."""
    load = scenario.load
    check_search_runnable(load.search, resuming=False, targets=scenario.targets)
    estimates = []
    duration_s = 0.0
    phases = 0
    for target in scenario.targets:
        if replays_trace(target):
            replay = _replay_estimate(target, ttft_s, tpot_ms)
            estimates.append(replay)
            duration_s += replay.tier_durations_s[0]
            phases += 1
            continue
        tier_loads = load.rates if load.rates is not None else load.tiers
        if load.rates is not None:  # a mix's persona plays a send by its index, as a developer by its own
            counts = [target.persona_counts(round(rate * load.duration_s)) for rate in load.rates]
        else:
            counts = [target.persona_counts(users) for users in load.tiers]
        personas = [
            _conversation_estimate(
                scenario, sent, [count[sent.conversation.name] for count in counts], ttft_s, tpot_ms
            )
            for sent in target.persona_targets()
        ]
        estimates += personas
        for tier, _ in enumerate(tier_loads):  # a mix's tier lasts as long as its slowest persona's
            tier_s = max(p.tier_durations_s[tier] for p in personas if p.developers[tier])
            duration_s += min(tier_s, load.tier_timeout_s)
        phases += len(tier_loads)
    pauses_s = max(0, phases - 1) * load.pause_s
    return CampaignEstimate(
        scenario=scenario,
        targets=estimates,
        phases=phases,
        requests=sum(estimate.requests for estimate in estimates),
        duration_s=duration_s + pauses_s,
    )


def _replay_estimate(target: Target, ttft_s: float, tpot_ms: float) -> TargetEstimate:
    """A trace target's one replay: its rows, sent over the trace's span, and the last row's request."""
    rows = conversation_trace(target.conversation)
    last_request_s = ttft_s + rows[-1].output_tokens * tpot_ms / 1000.0
    return TargetEstimate(
        target, 1.0, rows[0].input_tokens, len(rows), [rows[-1].at_s + last_request_s], [0], replay=rows
    )


def _conversation_estimate(
    scenario: Scenario, target: Target, developers: list[int], ttft_s: float, tpot_ms: float
) -> TargetEstimate:
    """The requests and tier durations of `developers` users of each tier sending `target`'s conversation
    (in a rate tier: that many sends of it)."""
    load = scenario.load
    workload = build_workload(target.conversation, target.model)
    first = workload.script("validate", 0)
    kind = target.conversation.workload_kind
    first_prompt_tokens = kind.first_prompt_tokens(first)
    per_iteration = workload.requests_per_iteration
    request_s = ttft_s + kind.max_tokens(target)[0] * tpot_ms / 1000.0
    iteration_s = kind.iteration_s(first, per_iteration, request_s, load.think_time_s)
    expected = kind.expected_requests is not None
    if load.rates is not None:  # each tier sends for duration_s, then its last sends play out
        requests = round(sum(developers) * per_iteration)
        durations = [load.duration_s + iteration_s for _ in load.rates]
        return TargetEstimate(
            target, per_iteration, first_prompt_tokens, requests, durations, developers, expected=True
        )
    durations = []
    requests = 0
    for users, tier_users in zip(developers, load.tiers, strict=True):
        spawn_rate = load.spawn_rate_for(tier_users)
        spawn_s = tier_users / spawn_rate if spawn_rate else 0.0
        think_s = max(0, load.iterations - 1) * load.think_time_s
        durations.append(spawn_s + load.iterations * iteration_s + think_s)
        requests += round(users * load.iterations * per_iteration)
    return TargetEstimate(
        target, per_iteration, first_prompt_tokens, requests, durations, developers, expected=expected
    )


def format_estimate(estimate: CampaignEstimate, ttft_s: float, tpot_ms: float) -> str:
    scenario = estimate.scenario
    load = scenario.load
    if load.search is not None:
        return _search_estimate(scenario, load.search)
    tiered = [target for target in scenario.targets if not replays_trace(target)]
    traces = len(scenario.targets) - len(tiered)
    iterations = f"{load.iterations} iteration{'s' if load.iterations != 1 else ''}"
    parts = []
    if tiered and load.rates is not None:
        parts.append(f"{len(tiered)} targets x {len(load.rates)} rate tiers of {load.duration_s:g} s")
    elif tiered:
        parts.append(f"{len(tiered)} targets x {len(load.tiers)} tiers x {iterations}")
    if traces:
        parts.append(f"{traces} trace replay{'s' if traces != 1 else ''}")
    tiers = f"{estimate.phases} tier{'s' if estimate.phases != 1 else ''}"
    lines = [f"scenario {scenario.name} ({scenario.source}): {' + '.join(parts)} = {tiers} to run"]
    header = (
        "target",
        "engine",
        "model",
        "conversation",
        "req/iter",
        "1st prompt tok",
        "max_tokens",
        "requests",
    )
    rows = [header]
    for target_estimate in estimate.targets:
        target = target_estimate.target
        engine = target.backend.engine
        if target.backend.profile:
            engine += f" ({target.backend.profile})"
        expected = target.conversation.workload_kind.expected_requests is not None
        rows.append(
            (
                target.name,
                engine,
                target.model.name,
                f"{target.conversation.name} [{target.conversation.kind}]",
                f"~{target_estimate.requests_per_iteration:.1f}"
                if expected
                else f"{target_estimate.requests_per_iteration:g}",
                str(target_estimate.first_prompt_tokens),
                _max_tokens(target, target_estimate.replay)[1],
                f"{'~' if target_estimate.expected else ''}{target_estimate.requests:,}",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    numeric = {4, 5, 6, 7}
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i]) for i, cell in enumerate(row)
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    lines += [line for t in estimate.targets if (line := _settings_line(t.target, t.replay))]
    lines += _mix_lines(scenario)
    if tiered:
        lines.append(_load_line(scenario, tiered, iterations))
    for target_estimate in estimate.targets:
        if target_estimate.replay is not None:
            lines.append(_replay_line(target_estimate.target.name, target_estimate.replay))
    expected = any(target_estimate.expected for target_estimate in estimate.targets)
    lines.append(f"requests to send: {'~' if expected else ''}{estimate.requests:,}")
    if expected:
        reasons = []
        for reason in dict.fromkeys(
            t.target.conversation.workload_kind.expected_requests for t in estimate.targets if t.expected
        ):
            if reason is not None:
                reasons.append(reason)
        if tiered and load.rates is not None:
            reasons.append(
                "a rate tier's sends are drawn by its arrival process: rate x duration_s on average"
            )
        lines.append(f"~: {'; '.join(reasons)}")
    lines.append(
        f"duration estimate: ~{format_duration(estimate.duration_s)} (assuming {ttft_s:g} s to first token and "
        f"{tpot_ms:g} ms per output token at max_tokens, and engines that keep up; more when they queue)"
    )
    return "\n".join(lines)


def _load_line(scenario: Scenario, tiered: list[Target], iterations: str) -> str:
    """How the targets that are not trace replays are loaded: their tiers of users, or of rates."""
    load = scenario.load
    limits = f"pause {load.pause_s:g} s; tier time cap {load.tier_timeout_s:g} s"
    if load.rates is not None:
        units = " or ".join(sorted({rate_unit(target.kind_label) for target in tiered}))
        arrival = f"{load.arrival} arrivals" + (
            f" (burstiness {load.burstiness:g})" if load.arrival == "gamma" else ""
        )
        return (
            f"rate tiers ({units}): {', '.join(f'{rate:g}' for rate in load.rates)}; {arrival}; "
            f"{load.duration_s:g} s of sends each; max_in_flight {load.max_in_flight}; {limits}"
        )
    if load.ramp_s is not None:
        spawn = f"each tier's users over {load.ramp_s:g} s"
    else:
        spawn = f"{load.spawn_rate:g} users/s" if load.spawn_rate else "all users of a tier at once"
    return (
        f"tiers (users): {', '.join(str(users) for users in load.tiers)}; {iterations} per user and tier; "
        f"pause {load.pause_s:g} s; think time {load.think_time_s:g} s; spawn: {spawn}; "
        f"tier time cap {load.tier_timeout_s:g} s"
    )


def _replay_line(target: str, rows: tuple[TraceRow, ...]) -> str:
    span_s = rows[-1].at_s
    return (
        f"trace replay of {target}: {len(rows):,} rows over {format_duration(span_s)}, once, at the "
        f"trace's own times (mean {trace_rate(rows):.4g} req/s)"
    )


def _search_estimate(scenario: Scenario, search: Search) -> str:
    """A capacity search's probes are picked by their verdicts: its bounds, not its requests."""
    from grill_locust.run.search import probes_at_most

    low, high = search.bracket
    probes = probes_at_most(search) * len(scenario.targets)
    longest_s = probes * search.probe_s + max(0, probes - 1) * scenario.load.pause_s
    return (
        f"scenario {scenario.name} ({scenario.source}): capacity search of {search.by} {low:g} to {high:g} "
        f"on {len(scenario.targets)} targets ({', '.join(scenario.target_names())}), probes of "
        f"{search.probe_s:g} s, precision {search.stop_precision:g}\n"
        f"at most {probes} probes: ~{format_duration(longest_s)} at most with pauses; the requests depend on "
        "the engine's speed"
    )


def _mix_lines(scenario: Scenario) -> list[str]:
    """Each mix target's developers per persona at each tier (developer k plays the same persona at
    every tier); in rate tiers, its sends per persona (send k plays the persona developer k would)."""
    load = scenario.load
    lines = []
    for target in scenario.targets:
        if not target.mix:
            continue
        weights = ", ".join(f"{p.conversation.name} {p.weight:g}" for p in target.personas)
        if load.rates is not None:
            lines.append(f"mix of {target.name} ({weights}): sends per persona at each rate tier (expected)")
            tiers = [(f"{rate:g}/s", round(rate * load.duration_s)) for rate in load.rates]
        else:
            lines.append(f"mix of {target.name} ({weights}): developers per persona at each tier")
            tiers = [(f"{users} users", users) for users in load.tiers]
        for label, count in tiers:
            counts = ", ".join(f"{name} {n}" for name, n in target.persona_counts(count).items())
            lines.append(f"  {label}: {counts}")
    return lines


def _max_tokens(target: Target, replay: tuple[TraceRow, ...] | None = None) -> tuple[int, str]:
    """max_tokens of most requests, and as the table shows it (an agent's steps / its final answer; a
    trace's rows, from the shortest output to the longest)."""
    if replay is not None:
        lengths = sorted(row.output_tokens for row in replay)
        return lengths[len(lengths) // 2], f"{lengths[0]}..{lengths[-1]}"
    return target.conversation.workload_kind.max_tokens(target)


def _settings_line(target: Target, replay: tuple[TraceRow, ...] | None) -> str:
    """The settings this target's requests send that differ from its model's (the conversation's or the
    kind's win over it: Conversation.settled), or "" when they send the model's."""
    model, sent = target.model, target.sent_model
    differ = [
        (name, getattr(sent, name), getattr(model, name))
        for name in ("temperature", "ignore_eos")
        if getattr(sent, name) != getattr(model, name)
    ]
    if replay is None:  # a trace's rows send their own
        differ += [
            (name, value, model.max_tokens)
            for name, value in target.conversation.workload_kind.sent_max_tokens(target).items()
            if value != model.max_tokens
        ]
    if not differ:
        return ""
    shown = ", ".join(
        f"{name} {str(value).lower()} (model: {str(was).lower()})" for name, value, was in differ
    )
    return f"{target.name} sends {shown}"


def format_duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


# each subcommand this module serves, with its one-line help (grill_locust/command.py)
COMMANDS = {"validate": "check a scenario file and print an estimate of the campaign"}


def configure_parser(parser: argparse.ArgumentParser, name: str = "validate") -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="scenario YAML file(s)")
    parser.add_argument("--tiers", help="override the tiers, e.g. 1,5,10")
    parser.add_argument("--iterations", help="override the iterations per user and tier")
    parser.add_argument("--pause", help="override the pause between tiers (seconds)")
    parser.add_argument("--think-time", help="override the think time between requests (seconds)")
    parser.add_argument(
        "--assume-ttft", default=str(ASSUMED_TTFT_S), help="seconds to first token, for the estimate"
    )
    parser.add_argument(
        "--assume-tpot-ms",
        default=str(ASSUMED_TPOT_MS),
        help="milliseconds per output token, for the estimate",
    )


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Validate every file; print its estimate or one error line. Exit 2 if any file is bad."""
    out = out or sys.stdout
    err = err or sys.stderr
    tiers = parse_tiers(args.tiers) if args.tiers else None
    iterations_number = _number(args.iterations, "--iterations", int, minimum=1)
    iterations = None if iterations_number is None else int(iterations_number)
    pause_s = _number(args.pause, "--pause", float, minimum=0)
    think_time_s = _number(args.think_time, "--think-time", float, minimum=0)
    ttft_s = _number(args.assume_ttft, "--assume-ttft", float, minimum=0) or 0.0
    tpot_ms = _number(args.assume_tpot_ms, "--assume-tpot-ms", float, minimum=0) or 0.0
    status = 0
    for index, path in enumerate(args.files):
        try:
            scenario = load_scenario(path).with_overrides(tiers, iterations, pause_s, think_time_s)
            text = format_estimate(estimate_campaign(scenario, ttft_s, tpot_ms), ttft_s, tpot_ms)
        except GrillError as error:
            print(f"grill validate: {error}", file=err)
            status = error.exit_code
            continue
        for secret in scenario.literal_secrets():
            print(f"grill validate: warning: {secret.describe_literal(scenario.source)}", file=err)
        if index:
            print(file=out)
        print(text, file=out)
    return status


def _number(text: str | None, option: str, kind: type[int] | type[float], minimum: float) -> float | None:
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        what = "a whole number" if kind is int else "a number"
        raise GrillError(f"{option}: expected {what} >= {minimum:g}, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """`python -m grill_locust.run.estimate`: the same as `grill validate`."""
    from grill_locust.command import run_alone

    return run_alone(sys.modules[__name__], "validate", argv)


if __name__ == "__main__":
    sys.exit(main())
