"""Open-loop send accuracy: how late one Locust worker's sends leave against their arrival schedule.

    python bench/openloop.py                        # Poisson tiers of 100, 500 and 2,000 req/s, 10 s each
    python bench/openloop.py --rates 100,500 --duration 5

One headless Locust process (master and worker at once) sends short requests (short-baseline, 40
prompt tokens, 4 output tokens) to `grill sim` with near-free steps, each tier's sends drawn from a Poisson
process. Per tier: the schedule lag (record `schedule_lag_s`) p50/p99/max, the sends that went out, and
the worker's CPU per send. Beside each tier, the machine's floor: an idle gevent process sleeping until
the same send times (the tier's recorded `scheduled_wall`s, shifted to now) and measuring how late each
wake-up is: no dispatcher, no request, just the event loop's own lateness. The load average is printed
with each line: on a shared machine the figures move with it.
"""

from __future__ import annotations

import gevent
from gevent import monkey

monkey.patch_all()  # the floor sleeps in gevent, as the dispatcher does

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from autocomplete import CpuSampler, run_headless  # noqa: E402

from grill_locust.sim import SimProcess  # noqa: E402

# every engine step nearly free, room for every send in flight: the engine never holds a send back
SIM_ARGS = ["--spin-ms=0", "--reasoning-tokens=0", "--max-num-seqs=4096"]
SIM_STEP_ARGS = ["--step-a-ms=0.2", "--step-b-ms=0", "--step-c-ms=0", "--step-d-ms=0"]
OUTPUT_TOKENS = 4
PROMPT_TOKENS = 40
MAX_IN_FLIGHT = 8192
RUN_TIMEOUT_S = 900


def scenario(url: str, rates: list[float], duration_s: float) -> dict[str, Any]:
    return {
        "name": "openloop-bench",
        "backends": [{"name": "sim", "engine": "sim", "url": url}],
        "models": [{"name": "grill-sim", "max_tokens": OUTPUT_TOKENS, "ignore_eos": True}],
        "conversations": [{"name": "short", "kind": "short-baseline", "prompt_tokens": PROMPT_TOKENS}],
        "targets": [{"backend": "sim", "conversation": "short"}],
        "load": {
            "rates": rates,
            "arrival": "poisson",
            "duration_s": duration_s,
            "max_in_flight": MAX_IN_FLIGHT,
            "pause_s": 2,
            "engine_wait_s": 0,
        },
    }


def run_tiers(rates: list[float], duration_s: float) -> tuple[pd.DataFrame, CpuSampler]:
    """The records of one headless run of the rate tiers, and the Locust process's CPU samples."""
    with (
        tempfile.TemporaryDirectory(prefix="openloop-bench-") as folder,
        SimProcess.start("vllm", extra_args=[*SIM_ARGS, *SIM_STEP_ARGS]) as sim,
    ):
        returncode, stderr, sampler = run_headless(
            scenario(sim.url, rates, duration_s), Path(folder), RUN_TIMEOUT_S
        )
        parquet = list(Path(folder).glob("results/*/records.parquet"))
        if returncode not in (0, 1) or not parquet:
            print(stderr[-3000:])
            raise SystemExit(f"locust exited {returncode}")
        return pd.read_parquet(parquet[0]), sampler


def floor_lateness_s(scheduled_wall: np.ndarray) -> np.ndarray:
    """How late an idle gevent loop wakes for each of these send times (shifted to start now)."""
    offsets = np.sort(scheduled_wall) - scheduled_wall.min()
    start = time.perf_counter() + 0.1
    late = np.empty(len(offsets))
    for index, offset in enumerate(offsets):
        gevent.sleep(max(0.0, start + offset - time.perf_counter()))
        late[index] = time.perf_counter() - (start + offset)
    return late


def lag_ms(values: np.ndarray) -> tuple[float, float, float]:
    ms = values * 1000.0
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99)), float(ms.max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default="100,500,2000", help="requests/s of each tier, comma-separated")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds each tier sends")
    args = parser.parse_args(argv)
    rates = [float(rate) for rate in args.rates.split(",")]
    records, sampler = run_tiers(rates, args.duration)
    print(
        f"one Locust worker, Poisson tiers of {args.duration:g} s, short requests ({PROMPT_TOKENS} prompt, "
        f"{OUTPUT_TOKENS} output tokens) against grill sim; {os.cpu_count()} CPUs; lag in ms (p50 / p99 / max)"
    )
    header = f"{'rate/s':>7} {'sends':>6} {'sent/s':>7} {'ok %':>6} {'lag p50/p99/max':>22} {'floor p50/p99/max':>20}"
    print(header + f" {'CPU µs/send':>11} {'CPU %':>6} {'load':>5}")
    for rate, tier in records.groupby("tier_rate", sort=True):
        sends = tier[tier["schedule_lag_s"].notna()]
        scheduled = sends["scheduled_wall"].to_numpy()
        # the CPU while the sends actually left (late sends leave after the schedule's window)
        first_sent, last_sent = float(sends["wall_start"].min()), float(sends["wall_start"].max())
        sent_s = last_sent - first_sent
        cpu_s = sampler.cpu_between(first_sent, last_sent)
        lag = lag_ms(sends["schedule_lag_s"].to_numpy())
        load = os.getloadavg()[0]  # the machine while the tier ran (the floor runs after it)
        floor = lag_ms(floor_lateness_s(scheduled))
        print(
            f"{rate:>7g} {len(sends):>6} {len(sends) / sent_s:>7.0f} "
            f"{100.0 * (tier['status'] == 'ok').mean():>6.1f} "
            f"{lag[0]:>7.2f} /{lag[1]:>7.2f} /{lag[2]:>6.1f} {floor[0]:>6.2f} /{floor[1]:>5.2f} /{floor[2]:>5.1f} "
            f"{cpu_s / len(sends) * 1e6:>11.0f} {100.0 * cpu_s / sent_s:>6.0f} {load:>5.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
