"""`grill validate` time for long rate tiers, and the per-send cost of a persona mix in a rate tier.

`grill validate` counts a rate tier's sends per persona (send k plays the persona developer k would);
a rate tier of a mix picks each send's persona as it dispatches it (run/openloop.py). Both should be
linear in the sends: validate's time about doubles with the tier's length, and a send's persona costs
the same after 20,000 sends as after 1,000.

    python bench/apportion.py [--rate 10] [--durations 3200 6400] [--sends 1000 20000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from grill_locust.run.estimate import estimate_campaign, format_estimate
from grill_locust.scenario import load_scenario

MIX = [
    {"conversation": "short-baseline", "weight": 70},
    {"conversation": "multi-turn-session", "weight": 25},
    {"conversation": "shared-prefix", "weight": 5},
]
WINDOW = 1000  # sends timed at each point of --sends


def scenario_file(folder: Path, rate: float, duration_s: float, mix: bool) -> Path:
    target = {"name": "t", "backend": "sim", "model": "grill-sim"}
    target.update({"mix": MIX} if mix else {"conversation": "short-baseline"})
    data = {
        "name": "bench",
        "backends": [{"name": "sim", "engine": "sim", "profile": "vllm"}],
        "models": [{"name": "grill-sim"}],
        "targets": [target],
        "load": {"rates": [rate], "duration_s": duration_s},
    }
    path = folder / f"{'mix' if mix else 'one'}-{duration_s:g}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def validate_s(path: Path) -> float:
    """Seconds `grill validate` takes for the file (its parse, estimate and text), in a fresh mix cache."""
    from grill_locust.config import _apportion

    _apportion._sequences.clear()
    start = time.perf_counter()
    format_estimate(estimate_campaign(load_scenario(path)), 0.5, 20.0)
    return time.perf_counter() - start


def per_send_us(path: Path, points: list[int]) -> list[float]:
    """Microseconds per send of `Target.for_developer` (a mix's persona, as run/openloop.py takes it)
    over WINDOW sends ending at each of `points` sends, in a fresh mix cache."""
    from grill_locust.config import _apportion

    _apportion._sequences.clear()
    target = load_scenario(path).targets[0]
    costs, sent = [], 0
    for point in points:
        for send in range(sent, max(sent, point - WINDOW)):
            target.for_developer(send)
        start = time.perf_counter()
        for send in range(max(sent, point - WINDOW), point):
            target.for_developer(send)
        costs.append((time.perf_counter() - start) / min(WINDOW, point - sent) * 1e6)
        sent = point
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--durations", type=float, nargs="+", default=[3200.0, 6400.0])
    parser.add_argument("--sends", type=int, nargs="+", default=[1000, 20000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        validate_s(scenario_file(Path(folder), 1.0, 10.0, mix=True))  # the corpus and workloads, read once
        for mix in (False, True):
            times = [validate_s(scenario_file(Path(folder), args.rate, d, mix)) for d in args.durations]
            what = "a mix of 3 personas" if mix else "one conversation"
            figures = ", ".join(
                f"{d:g} s: {t * 1000:.1f} ms" for d, t in zip(args.durations, times, strict=True)
            )
            print(
                f"grill validate, {args.rate:g} req/s, {what}: {figures} (ratio {times[-1] / times[0]:.2f})"
            )
        costs = per_send_us(scenario_file(Path(folder), args.rate, 60.0, mix=True), sorted(args.sends))
        figures = ", ".join(
            f"after {n} sends {c:.1f} µs" for n, c in zip(sorted(args.sends), costs, strict=True)
        )
        print(f"a mix's persona per send (mean of the last {WINDOW}): {figures}")


if __name__ == "__main__":
    main()
