"""How long `grill report` takes on a big run: 1,000,000 synthetic records, target <= 10 s.

Writes a results folder (the seed's protocol: 4 engines x 4 conversations x 8 tiers), then times what
`grill report RUN --out DIR` does: load, tier statistics, capacity, figures, report.html.

    python bench/report_speed.py [--records 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the suite's synthetic records (tests/synthetic.py)

TARGET_S = 10.0
BACKENDS = ("vllm", "vllm-no-prefix-cache", "sglang", "llamacpp")
CONVERSATIONS = ("multi-turn-session", "shared-prefix", "short-baseline", "unique-prompts")
TIERS = (1, 5, 10, 20, 50, 100, 150, 200)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument(
        "--keep", metavar="DIR", help="write the run and report here instead of a temp folder"
    )
    args = parser.parse_args()

    from tests.synthetic import synthetic_records, write_results_folder

    with tempfile.TemporaryDirectory(prefix="grill-report-bench-") as scratch:
        root = Path(args.keep) if args.keep else Path(scratch)
        started = time.perf_counter()
        records = synthetic_records(args.records, backends=BACKENDS, conversations=CONVERSATIONS, tiers=TIERS)
        run_dir = write_results_folder(root / "run", records)
        prepared_s = time.perf_counter() - started
        print(f"prepared {len(records):,} records in {prepared_s:.1f} s (not counted)")
        del records

        timings = time_report(run_dir, root / "report")
        total_s = sum(timings.values())
        for step, seconds in timings.items():
            print(f"  {step:<22} {seconds:6.2f} s")
        verdict = "within" if total_s <= TARGET_S else "OVER"
        print(f"report of {args.records:,} records: {total_s:.2f} s ({verdict} the {TARGET_S:g} s target)")
    return 0 if total_s <= TARGET_S else 1


def time_report(run_dir: Path, out_dir: Path) -> dict[str, float]:
    """The steps of `grill report`, timed one by one (imports included: a user pays for them too)."""
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[step] = now - clock
        clock = now

    from grill_locust.report.build import assemble, load_runs
    from grill_locust.report.capacity import slo_of_run
    from grill_locust.report.write import write_report

    runs = load_runs([(None, run_dir)])
    lap("load records.parquet")
    report = assemble(runs, slo_of_run(runs[0].run.meta), compare=False)
    lap("tier statistics")
    write_report(report, out_dir)
    lap("figures + report.html")
    return timings


if __name__ == "__main__":
    sys.exit(main())
