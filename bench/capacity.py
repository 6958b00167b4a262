"""Load-generator capacity: output events per CPU-second through grill's full user path, and accuracy.

For each concurrency level (streams) it runs, one after the other, against a fresh simulated engine
with its truth log on:
  1. grill: `locust -f locustfiles/coding.py --headless --scenario S` (one process: the local runner is
     worker and master, so CampaignUser, EngineClient, record building, batching and the results
     writer all run in it), one tier of N users, high max_tokens with ignore_eos, no think time;
  2. the baselines, each with the same N streams, prompts, max_tokens and requests:
     bench/aiohttp_baseline.py (asyncio + aiohttp, as `vllm bench serve`) and bench/locust_baseline.py
     (bare Locust: HttpSession, `iter_lines()`, `json.loads`);
  3. the floor: bench/io_floor.c (built here with `cc`), a C client that only reads the same streams
     (one stamped recvmsg per readiness, as grill's poller): what this machine's kernel charges for
     the I/O itself. It measures no latencies; its row says how far above the machine's floor each
     client is.
The CPU time of the client process (user + system, from /proc via psutil) is sampled every
SAMPLE_INTERVAL_S; figures are taken over the steady window, while at least 95 % of the N streams
are open (from the truth log), so start-up and ramps are left out. Events are the simulator's own
count of output events written in that window. TTFT error = measured TTFT - (truth first_token -
wall_start); ITL error = measured per-request ITL p99 - the truth's. The baseline's requests carry an
x-request-id and match the truth exactly; so do grill's when the user sends each record's id as
`X-Request-Id` (`EngineClient.stream(..., request_id=record_id)`); records without it are matched by
timing (`match_by_timing`), a matcher checked against the exact ids on the baseline's requests.

    python bench/capacity.py --quick                 # 50, 200, 500 streams, shorter
    python bench/capacity.py --max-streams 1000      # 50, 100, 200, 500, 1000
    python bench/capacity.py --python-read           # grill twice: as installed, and as grill-py with
                                                     # its C read left out (GRILL_NO_EXTENSIONS=1)
Targets: <= 15 µs CPU per output event; TTFT error p99 <= 2 ms up to 20,000 events/s on one worker;
>= 1.5x the baseline's events per CPU-second.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
LOCUSTFILE = ROOT / "locustfiles" / "coding.py"
# grill as it installs (the C read where it was built), and with the C read left out
GRILL_CLIENTS = {"grill": {}, "grill-py": {"GRILL_NO_EXTENSIONS": "1"}}
BASELINES = {
    "aiohttp": ROOT / "bench" / "aiohttp_baseline.py",
    "locust": ROOT / "bench" / "locust_baseline.py",
}
FLOOR = "floor"
FLOOR_SOURCE = ROOT / "bench" / "io_floor.c"
MODEL = "grill-sim"
SAMPLE_INTERVAL_S = 0.2
STEADY_SHARE = 0.95  # the window where at least this share of the streams is open
TARGET_US_PER_EVENT = 15.0
TARGET_TTFT_P99_MS = 2.0
TARGET_EVENTS_PER_S = 20000.0
TARGET_RATIO = 1.5
# The simulated engine's step: a + b * running streams (ms), no KV term, no spinning (CPU is shared).
STEP_A_MS = 10.0
STEP_B_MS = 0.03
PROMPT_TOKENS = 100
RUN_TIMEOUT_S = 600.0
MATCH_BLOCK = 4000  # records per assignment problem (a 4000 x ~4000 cost matrix: 128 MB)
MATCH_SLACK_S = 5.0  # truth rows this far beyond a block's end times are candidates too


@dataclass(frozen=True)
class Level:
    streams: int
    max_tokens: int
    requests_per_stream: int
    ramp_s: float


@dataclass
class PathResult:
    """One client at one level: what it cost and how accurate it was, over the steady window."""

    client: str
    streams: int
    window_s: float
    events: int
    requests_done: int
    cpu_s: float
    ttft_err_ms: np.ndarray
    itl_err_ms: np.ndarray
    e2e_err_ms: np.ndarray  # matching check
    failed: int
    load_1m: float = math.nan  # the host's 1-minute load average when the run ended (others' work too)
    note: str = ""

    @property
    def events_per_s(self) -> float:
        return self.events / self.window_s if self.window_s > 0 else 0.0

    @property
    def cpu_share(self) -> float:
        return self.cpu_s / self.window_s if self.window_s > 0 else 0.0

    @property
    def us_per_event(self) -> float:
        return self.cpu_s / self.events * 1e6 if self.events else math.nan

    @property
    def events_per_cpu_s(self) -> float:
        return self.events / self.cpu_s if self.cpu_s > 0 else math.nan

    @property
    def us_per_request(self) -> float:
        return self.cpu_s / self.requests_done * 1e6 if self.requests_done else math.nan


class CpuSampler:
    """Samples a process's CPU seconds (user + system) with the wall time, in a thread."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                times = self.process.cpu_times()
            except psutil.Error:
                return
            self.samples.append((time.time(), times.user + times.system))
            self._stop.wait(SAMPLE_INTERVAL_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def save(self, path: Path) -> None:
        pd.DataFrame(self.samples, columns=["wall", "cpu_s"]).to_csv(path, index=False)

    @classmethod
    def load(cls, path: Path) -> CpuSampler:
        sampler = cls.__new__(cls)
        sampler.samples = list(pd.read_csv(path).itertuples(index=False, name=None))
        return sampler

    def cpu_between(self, start: float, end: float) -> float:
        walls = np.array([s[0] for s in self.samples])
        cpus = np.array([s[1] for s in self.samples])
        return float(np.interp(end, walls, cpus) - np.interp(start, walls, cpus))


# --- the simulated engine's truth ----------------------------------------------------------------


def sim_args(level: Level, truth_path: Path) -> dict[str, Any]:
    kv_blocks = level.streams * (PROMPT_TOKENS * 2 + level.max_tokens + 64) // 16 + 4096
    return {
        "truth_log": str(truth_path),
        "max_num_seqs": level.streams + 8,
        "kv_blocks": kv_blocks,
        "max_model_len": 32768,  # short prompts: the KV above need not hold a 128k context
        "step_a_ms": STEP_A_MS,
        "step_b_ms": STEP_B_MS,
        "step_c_ms": 0.001,
        "step_d_ms": 0,
        "reasoning_tokens": 0,
        "spin_ms": 0,
    }


def read_truth(path: Path) -> pd.DataFrame:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    frame = pd.DataFrame(rows)
    return frame[frame["endpoint"].str.contains("chat")].sort_values("arrival").reset_index(drop=True)


def steady_window(truth: pd.DataFrame, streams: int) -> tuple[float, float]:
    """First and last moment at which at least STEADY_SHARE of the streams were open."""
    moments = np.concatenate([truth["arrival"].to_numpy(), truth["end"].to_numpy()])
    steps = np.concatenate([np.ones(len(truth)), -np.ones(len(truth))])
    order = np.argsort(moments, kind="stable")
    open_streams = np.cumsum(steps[order])
    above = np.nonzero(open_streams >= STEADY_SHARE * streams)[0]
    if len(above) == 0:
        raise SystemExit(f"capacity: never {STEADY_SHARE:.0%} of {streams} streams open at once")
    return float(moments[order][above[0]]), float(moments[order][above[-1]])


def events_between(truth: pd.DataFrame, start: float, end: float) -> int:
    times = np.concatenate([np.asarray(t, dtype=float) for t in truth["event_times"] if len(t)])
    return int(((times >= start) & (times < end)).sum())


def window_cost(truth: pd.DataFrame, sampler: CpuSampler, start: float, end: float) -> dict[str, Any]:
    """What every client's result counts over the steady window: its length, the events the simulator
    wrote and the requests it ended in it, and the client's CPU seconds."""
    return {
        "window_s": end - start,
        "events": events_between(truth, start, end),
        "requests_done": int(((truth["end"] >= start) & (truth["end"] < end)).sum()),
        "cpu_s": sampler.cpu_between(start, end),
    }


def truth_itl_p99_s(event_times: list[float]) -> float:
    gaps = np.diff(np.asarray(event_times))
    return float(np.percentile(gaps, 99)) if len(gaps) else math.nan


def match_by_id(records: pd.DataFrame, truth: pd.DataFrame) -> np.ndarray | None:
    """For each record, the index of the truth row with its id (`X-Request-Id` = record_id), -1 when
    the truth has none; None when the records were not sent with their ids (fewer than half match)."""
    if "record_id" not in records or "request_id" not in truth:
        return None
    position = pd.Series(np.arange(len(truth)), index=truth["request_id"].to_numpy())
    position = position[~position.index.duplicated()]
    found = position.reindex(records["record_id"].to_numpy())
    if found.notna().mean() < 0.5:
        return None
    return found.fillna(-1).to_numpy(dtype=int)


def match_by_timing(measured: pd.DataFrame, truth: pd.DataFrame) -> np.ndarray:
    """For each measured request, the index of its truth row (grill's records carry no request id).

    A one-to-one assignment that minimises the distance between what the client saw and what the
    engine wrote: |client first event - truth first_token| + |client end - truth end|, with truth
    arriving before the client sent forbidden. Where requests are alike (admitted in the same step,
    same length) it may swap them; their truth times then differ by microseconds. In send order
    matching breaks as soon as a starved process delays sends by more than the gap between them.
    """
    from scipy.optimize import linear_sum_assignment

    wall = measured["wall_start"].to_numpy()
    first = wall + measured["ttft_s"].to_numpy()
    end = wall + measured["e2e_s"].to_numpy()
    truth_first = truth["first_token"].to_numpy(dtype=float)
    truth_end = truth["end"].to_numpy(dtype=float)
    truth_arrival = truth["arrival"].to_numpy(dtype=float)
    order = np.argsort(end, kind="stable")
    result = np.full(len(measured), -1, dtype=int)
    taken = np.zeros(len(truth), dtype=bool)
    # blocks keep the cost matrix small; neighbours in end time are the only candidates anyway
    for block in np.array_split(order, max(1, math.ceil(len(order) / MATCH_BLOCK))):
        near = np.abs(truth_end - np.clip(truth_end, end[block].min(), end[block].max())) <= MATCH_SLACK_S
        candidates = np.nonzero(near & ~taken)[0]
        if len(candidates) == 0:
            continue
        cost = np.abs(first[block][:, None] - truth_first[candidates][None, :]) + np.abs(
            end[block][:, None] - truth_end[candidates][None, :]
        )
        cost[truth_arrival[candidates][None, :] < wall[block][:, None] - 0.001] += 1e6
        rows, cols = linear_sum_assignment(cost)
        result[block[rows]] = candidates[cols]
        taken[candidates[cols]] = True
    return result


# --- grill's path --------------------------------------------------------------------------------


def grill_scenario(level: Level, truth_path: Path) -> dict[str, Any]:
    return {
        "name": f"capacity-{level.streams}",
        "backends": [
            {"name": "sim", "engine": "sim", "profile": "vllm", "sim_args": sim_args(level, truth_path)}
        ],
        "models": [{"name": MODEL, "max_tokens": level.max_tokens, "ignore_eos": True}],
        "conversations": [{"name": "short", "kind": "short-baseline", "prompt_tokens": PROMPT_TOKENS}],
        "targets": [{"backend": "sim", "model": MODEL, "conversation": "short"}],
        "load": {
            "tiers": [level.streams],
            "iterations": level.requests_per_stream,
            "pause_s": 0,
            "think_time_s": 0,
            "spawn_rate": level.streams / level.ramp_s,
            "tier_timeout_s": RUN_TIMEOUT_S,
        },
    }


def run_grill(level: Level, workdir: Path, client: str = "grill") -> PathResult:
    """`client` "grill-py": the same run with the client's C read left out (GRILL_NO_EXTENSIONS=1)."""
    truth_path = workdir / f"{client}-truth.jsonl"
    scenario = workdir / f"{client}-scenario.yaml"
    scenario.write_text(yaml.safe_dump(grill_scenario(level, truth_path), sort_keys=False))
    results = workdir / f"{client}-results"
    command = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
        "--scenario", str(scenario), "--results-dir", str(results),
    ]  # fmt: skip
    _run_sampled(command, workdir / client, GRILL_CLIENTS[client])
    return analyze_grill(level.streams, workdir, client)


def analyze_grill(streams: int, workdir: Path, client: str = "grill") -> PathResult:
    sampler = CpuSampler.load(workdir / f"{client}.cpu.csv")
    truth_path = workdir / f"{client}-truth.jsonl"
    run_dir = next(p for p in (workdir / f"{client}-results").iterdir() if p.is_dir())
    records = pd.read_parquet(run_dir / "records.parquet").sort_values("wall_start").reset_index(drop=True)
    truth = read_truth(truth_path)
    start, end = steady_window(truth, streams)
    failed = int((records["status"] != "ok").sum())
    if len(records) != len(truth):
        print(
            f"  {client}: {len(records)} records but {len(truth)} requests in the truth log", file=sys.stderr
        )
    records = records[records["status"] == "ok"].reset_index(drop=True)
    truth_ok = truth[truth["outcome"] == "ok"].reset_index(drop=True)
    matched = match_by_id(records, truth_ok)
    how = "by X-Request-Id"
    if matched is None:
        matched, how = match_by_timing(records, truth_ok), "by timing (records sent without their ids)"
    records = records[matched >= 0].reset_index(drop=True)
    truth_matched = truth_ok.iloc[matched[matched >= 0]].reset_index(drop=True)
    wall_start = records["wall_start"].to_numpy()
    ttft_err = records["ttft_s"].to_numpy() - (truth_matched["first_token"].to_numpy() - wall_start)
    e2e_err = records["e2e_s"].to_numpy() - (truth_matched["end"].to_numpy() - wall_start)
    truth_itl = np.array([truth_itl_p99_s(t) for t in truth_matched["event_times"]])
    itl_err = records["itl_p99_s"].to_numpy() - truth_itl
    in_window = (truth_matched["first_token"].to_numpy() >= start) & (truth_matched["end"].to_numpy() <= end)
    return PathResult(
        client=client,
        streams=streams,
        **window_cost(truth, sampler, start, end),
        ttft_err_ms=ttft_err[in_window] * 1e3,
        itl_err_ms=itl_err[in_window] * 1e3,
        e2e_err_ms=e2e_err[in_window] * 1e3,
        failed=failed,
        load_1m=host_load(workdir / f"{client}.load.txt"),
        note=f"records matched to the truth {how}",
    )


# --- the baselines ---------------------------------------------------------------------------------


def baseline_prompts(level: Level, path: Path) -> None:
    """The same kind and size of prompts grill sends (its own workload generator), one per request."""
    from grill_locust.scenario import parse_scenario
    from grill_locust.workload import build_workload

    scenario = parse_scenario(grill_scenario(level, Path("unused")), source="capacity")
    target = scenario.targets[0]
    workload = build_workload(target.conversation, target.model, None)
    prompts = []
    for index in range(level.streams * level.requests_per_stream):
        script = workload.script(f"aio-{index}", 0)
        messages = [{"role": "system", "content": script.system}] if script.system else []
        prompts.append([*messages, {"role": "user", "content": script.user_turns[0]}])
    path.write_text(json.dumps(prompts))


def run_baseline(level: Level, workdir: Path, client: str) -> PathResult:
    from grill_locust.sim import SimProcess

    truth_path = workdir / f"{client}-truth.jsonl"
    prompts = workdir / "prompts.json"
    baseline_prompts(level, prompts)
    args = sim_args(level, truth_path)
    truth_log = args.pop("truth_log")
    extra = [f"--{key.replace('_', '-')}={value}" for key, value in args.items()]
    out = workdir / f"{client}.jsonl"
    with SimProcess.start("vllm", served_model_name=MODEL, truth_log=truth_log, extra_args=extra) as sim:
        command = [
            sys.executable, str(BASELINES[client]), "--url", sim.url, "--streams", str(level.streams),
            "--requests", str(level.requests_per_stream), "--prompts", str(prompts),
            "--max-tokens", str(level.max_tokens), "--ramp-s", str(level.ramp_s), "--out", str(out),
        ]  # fmt: skip
        _run_sampled(command, workdir / client)
    return analyze_baseline(level.streams, workdir, client)


def analyze_baseline(streams: int, workdir: Path, client: str) -> PathResult:
    sampler = CpuSampler.load(workdir / f"{client}.cpu.csv")
    truth_path, out = workdir / f"{client}-truth.jsonl", workdir / f"{client}.jsonl"
    results = pd.DataFrame([json.loads(line) for line in out.read_text().splitlines()])
    truth = read_truth(truth_path)
    start, end = steady_window(truth, streams)
    joined = results.merge(truth, on="request_id", how="inner", suffixes=("", "_truth"))
    if len(joined) != len(results):
        print(f"  {client}: {len(results) - len(joined)} requests not in the truth log", file=sys.stderr)
    joined = joined[joined["ok"]]
    ttft_err = joined["ttft_s"] - (joined["first_token"] - joined["wall_start"])
    e2e_err = joined["e2e_s"] - (joined["end"] - joined["wall_start"])
    measured_itl = np.array([np.percentile(gaps, 99) if gaps else math.nan for gaps in joined["itl_s"]])
    truth_itl = np.array([truth_itl_p99_s(t) for t in joined["event_times"]])
    in_window = ((joined["first_token"] >= start) & (joined["end"] <= end)).to_numpy()
    # the check of grill's matcher: on these requests, whose ids are known, does it find the same errors?
    joined = joined.reset_index(drop=True)
    truth_ok = truth[truth["outcome"] == "ok"].reset_index(drop=True)
    by_timing = truth_ok.iloc[match_by_timing(joined, truth_ok)].reset_index(drop=True)
    matcher_err = joined["ttft_s"] - (by_timing["first_token"] - joined["wall_start"])
    note = (
        f"matcher check ({client}, ids known): TTFT error p50/p99 {pct(ttft_err.to_numpy()[in_window] * 1e3, 50):.3f}"
        f" / {pct(ttft_err.to_numpy()[in_window] * 1e3, 99):.3f} ms exact, "
        f"{pct(matcher_err.to_numpy()[in_window] * 1e3, 50):.3f} / {pct(matcher_err.to_numpy()[in_window] * 1e3, 99):.3f}"
        " ms by timing"
    )
    return PathResult(
        client=client,
        streams=streams,
        **window_cost(truth, sampler, start, end),
        ttft_err_ms=ttft_err.to_numpy()[in_window] * 1e3,
        itl_err_ms=(measured_itl - truth_itl)[in_window] * 1e3,
        e2e_err_ms=e2e_err.to_numpy()[in_window] * 1e3,
        failed=int((~results["ok"]).sum()),
        load_1m=host_load(workdir / f"{client}.load.txt"),
        note=note,
    )


# --- the floor ------------------------------------------------------------------------------------


def build_floor(workdir: Path) -> Path | None:
    """bench/io_floor.c compiled into `workdir`; None (said on stderr) where no C compiler is."""
    binary = workdir / "io_floor"
    try:
        subprocess.run(["cc", "-O2", "-o", str(binary), str(FLOOR_SOURCE)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"  floor: not built ({error}); its rows are left out", file=sys.stderr)
        return None
    return binary


def run_floor(level: Level, workdir: Path, binary: Path | str) -> PathResult:
    from grill_locust.sim import SimProcess

    args = sim_args(level, workdir / f"{FLOOR}-truth.jsonl")
    truth_log = args.pop("truth_log")
    extra = [f"--{key.replace('_', '-')}={value}" for key, value in args.items()]
    with SimProcess.start("vllm", served_model_name=MODEL, truth_log=truth_log, extra_args=extra) as sim:
        port = sim.url.rsplit(":", 1)[1]
        command = [
            str(binary), port, MODEL, str(level.streams), str(level.requests_per_stream),
            str(level.max_tokens), str(level.ramp_s),
        ]  # fmt: skip
        _run_sampled(command, workdir / FLOOR)
    return analyze_floor(level.streams, workdir)


def analyze_floor(streams: int, workdir: Path) -> PathResult:
    sampler = CpuSampler.load(workdir / f"{FLOOR}.cpu.csv")
    truth = read_truth(workdir / f"{FLOOR}-truth.jsonl")
    start, end = steady_window(truth, streams)
    none = np.array([])
    return PathResult(
        client=FLOOR,
        streams=streams,
        **window_cost(truth, sampler, start, end),
        ttft_err_ms=none,
        itl_err_ms=none,
        e2e_err_ms=none,
        failed=int((truth["outcome"] != "ok").sum()),
        load_1m=host_load(workdir / f"{FLOOR}.load.txt"),
        note=(workdir / f"{FLOOR}.out").read_text().strip() if (workdir / f"{FLOOR}.out").exists() else "",
    )


def _run_sampled(command: list[str], log_prefix: Path, extra_env: dict[str, str] | None = None) -> CpuSampler:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    with open(f"{log_prefix}.out", "w") as out, open(f"{log_prefix}.err", "w") as err:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err)
        sampler = CpuSampler(process.pid).start()
        try:
            code = process.wait(timeout=RUN_TIMEOUT_S)
        finally:
            sampler.stop()
            sampler.save(Path(f"{log_prefix}.cpu.csv"))
            Path(f"{log_prefix}.load.txt").write_text(f"{os.getloadavg()[0]}\n")
            if process.poll() is None:
                process.kill()
    if code != 0:  # the records may still be complete (an error after they were written): say so, go on
        errors = [line for line in Path(f"{log_prefix}.err").read_text().splitlines() if "Error" in line]
        print(f"  {log_prefix.name}: exited {code}: {(errors or ['?'])[-1][:160]}", file=sys.stderr)
    return sampler


def host_load(path: Path) -> float:
    return float(path.read_text()) if path.exists() else math.nan


# --- the table -----------------------------------------------------------------------------------


def pct(values: np.ndarray, q: float) -> float:
    values = values[~np.isnan(values)]
    return float(np.percentile(np.abs(values), q)) if len(values) else math.nan


HEADER = (
    f"{'streams':>7} {'client':>8} {'events/s':>9} {'CPU %':>6} {'µs/event':>9} {'ev/CPU-s':>9} "
    f"{'µs/req':>8} {'TTFT err p50/p99 ms':>20} {'ITL99 err p50/p99 ms':>21} {'E2E p99':>8} {'fail':>4} {'load':>5}"
)


def row(result: PathResult) -> str:
    return (
        f"{result.streams:>7} {result.client:>8} {result.events_per_s:>9.0f} {100 * result.cpu_share:>6.1f} "
        f"{result.us_per_event:>9.2f} {result.events_per_cpu_s:>9.0f} {result.us_per_request:>8.0f} "
        f"{_ms(result.ttft_err_ms, 50, 9)} / {_ms(result.ttft_err_ms, 99, 7)} "
        f"{_ms(result.itl_err_ms, 50, 9)} / {_ms(result.itl_err_ms, 99, 8)} "
        f"{_ms(result.e2e_err_ms, 99, 8)} {result.failed:>4} {result.load_1m:>5.1f}"
    )


def _ms(values: np.ndarray, q: float, width: int) -> str:
    """A percentile of errors in ms, or "-" for a client that measures none (the floor)."""
    return f"{pct(values, q):>{width}.3f}" if len(values) else f"{'-':>{width}}"


def levels_for(args: argparse.Namespace) -> list[Level]:
    streams = [s for s in args.streams if s <= args.max_streams]
    levels = []
    for count in streams:
        step_s = (STEP_A_MS + STEP_B_MS * count) / 1000.0
        request_s = args.max_tokens * step_s
        requests = max(2, math.ceil((args.window_s + args.ramp_s) / request_s) + 1)
        levels.append(Level(count, args.max_tokens, requests, args.ramp_s))
    return levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[50, 100, 200, 500, 1000])
    parser.add_argument("--max-streams", type=int, default=1000, help="leave out levels above this")
    parser.add_argument("--max-tokens", type=int, default=200, help="output events per request")
    parser.add_argument("--window-s", type=float, default=12.0, help="aim for this much steady load")
    parser.add_argument("--ramp-s", type=float, default=2.0, help="streams start spread over this time")
    parser.add_argument("--quick", action="store_true", help="50, 200, 500 streams, 6 s windows")
    parser.add_argument(
        "--only", choices=[*GRILL_CLIENTS, *BASELINES, FLOOR], default=None, help="run one client only"
    )
    parser.add_argument(
        "--python-read",
        action="store_true",
        help="also run grill with its C read left out (GRILL_NO_EXTENSIONS=1), as client grill-py",
    )
    parser.add_argument("--keep", default=None, help="keep the run folders here")
    parser.add_argument(
        "--analyze", default=None, help="no runs: analyse the folders kept by an earlier --keep"
    )
    args = parser.parse_args()
    if args.quick:
        args.streams, args.window_s = [s for s in (50, 200, 500) if s <= args.max_streams], 6.0
    print(
        f"simulated engine: step {STEP_A_MS:g} + {STEP_B_MS:g} ms x streams; {args.max_tokens} output events "
        f"per request, {PROMPT_TOKENS}-token prompts; CPU = client process (user + system) over the steady window"
    )
    print(f"host: {os.cpu_count()} CPUs; load = 1-minute load average at the end of each run")
    print(HEADER, flush=True)
    ratios = []
    work: list[tuple[int, Path, Level | None]] = []  # level None: analyse a kept folder
    if args.analyze:
        runs = sorted(Path(args.analyze).glob("s*"), key=lambda p: int(p.name[1:]))
        work = [(int(p.name[1:]), p, None) for p in runs]
    else:
        for planned in levels_for(args):
            workdir = Path(args.keep or tempfile.mkdtemp(prefix="grill-capacity-")) / f"s{planned.streams}"
            workdir.mkdir(parents=True, exist_ok=True)
            work.append((planned.streams, workdir, planned))
    floor_binary: Path | str | None = None
    for streams, workdir, level in work:
        results = {}
        for name in GRILL_CLIENTS:
            wanted = args.only == name or (args.only is None and (name == "grill" or args.python_read))
            if not wanted:
                continue
            grill_done = level is None and (workdir / f"{name}.cpu.csv").exists()
            if level is not None or grill_done:
                results[name] = (
                    run_grill(level, workdir, name) if level else analyze_grill(streams, workdir, name)
                )
                print(row(results[name]), flush=True)
                print(f"{'':>16}{results[name].note}", flush=True)
        for client in BASELINES:
            if args.only not in (None, client):
                continue
            base_done = level is None and (workdir / f"{client}.cpu.csv").exists()
            if level is not None or base_done:
                results[client] = (
                    run_baseline(level, workdir, client)
                    if level
                    else analyze_baseline(streams, workdir, client)
                )
                print(row(results[client]), flush=True)
                print(f"{'':>16}{results[client].note}", flush=True)
        if args.only in (None, FLOOR):
            if level is not None:
                if floor_binary is None:  # built once, on first use ("" where there is no compiler)
                    floor_binary = build_floor(workdir.parent) or ""
                if floor_binary:
                    results[FLOOR] = run_floor(level, workdir, floor_binary)
            elif (workdir / f"{FLOOR}.cpu.csv").exists():
                results[FLOOR] = analyze_floor(streams, workdir)
            if FLOOR in results:
                print(row(results[FLOOR]), flush=True)
                print(f"{'':>16}{results[FLOOR].note}", flush=True)
        if "grill" in results and FLOOR in results:
            above = results["grill"].us_per_event - results[FLOOR].us_per_event
            print(
                f"{'':>16}grill costs {above:.2f} µs/event above the machine's floor at {streams} streams",
                flush=True,
            )
        if "grill" in results and "grill-py" in results:
            saved = results["grill-py"].us_per_event - results["grill"].us_per_event
            print(f"{'':>16}the C read saves {saved:.2f} µs/event at {streams} streams", flush=True)
        for client in BASELINES:
            if "grill" in results and client in results:
                grill, base = results["grill"], results[client]
                ratios.append(
                    (
                        client,
                        streams,
                        grill.events_per_cpu_s / base.events_per_cpu_s,
                        pct(base.ttft_err_ms, 99) / pct(grill.ttft_err_ms, 99),
                    )
                )
    if ratios:
        print(
            "\ngrill / baseline: events per CPU-second ratio; TTFT error p99 ratio (baseline / grill, > 1: grill closer)"
        )
        for client, streams, cpu_ratio, ttft_ratio in ratios:
            print(
                f"{streams:>7} streams: {cpu_ratio:5.2f}x {client}'s events per CPU-s, {ttft_ratio:8.2f}x its TTFT error p99"
            )
    print(
        f"targets: <= {TARGET_US_PER_EVENT:g} µs/event; TTFT error p99 <= {TARGET_TTFT_P99_MS:g} ms up to "
        f"{TARGET_EVENTS_PER_S:,.0f} events/s; >= {TARGET_RATIO:g}x aiohttp events per CPU-s"
    )


if __name__ == "__main__":
    main()
