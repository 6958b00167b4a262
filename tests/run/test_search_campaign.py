"""A capacity search run end to end: real Locust against a simulated engine whose knee is known."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.run.conftest import only_run_dir, run_locust, sim_scenario, write_scenario

pytestmark = pytest.mark.slow

SHORT = {"name": "short", "kind": "short-baseline", "prompt_tokens": 10}
OUTPUT_TOKENS = 6
# Every step costs 20 ms + 40 ms per sequence decoding: among N users a request of 6 tokens takes its
# first token plus 5 x (20 + 40 N) ms; measured E2E p50: 0.32 s alone, 0.54 at 2 users, 0.74 at 3, 0.94
# at 4, 1.14 at 5. A bound of 0.84 s lies between 3 and 4 users, 0.1 s from either.
KNEE_SIM = {"step_a_ms": 20.0, "step_b_ms": 40.0, "step_c_ms": 0.0, "step_d_ms": 0.0}
E2E_P50_BOUND_S = 0.84


def searched(tmp_path: Path, load: dict) -> Path:
    """The results folder of a search run with `load` on the knee profile, judged by the E2E p50 bound."""
    data = sim_scenario(conversation=SHORT, tiers=[1], max_tokens=OUTPUT_TOKENS, sim_args=KNEE_SIM)
    data["load"] = load
    data["slo"] = {"ttft_p50_s": 5, "e2e_p50_s": E2E_P50_BOUND_S}
    scenario = write_scenario(tmp_path / "s.yaml", data)
    done = run_locust(["--scenario", str(scenario), "--results-dir", str(tmp_path / "results")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return only_run_dir(tmp_path / "results")


def test_a_users_search_finds_the_simulators_knee_and_records_every_probe_as_a_tier(tmp_path: Path) -> None:
    run_dir = searched(
        tmp_path, {"search": {"users": [1, 8], "probe_s": 3}, "pause_s": 0.2, "think_time_s": 0}
    )

    # doubling from the low end to the first failure, then bisecting: 1, 2, 4 (fails), 3
    search = json.loads((run_dir / "run.json").read_text())["search"]
    assert (search["by"], search["bracket"], search["probe_s"], search["precision"]) == (
        "users",
        [1, 8],
        3,
        1,
    )
    (found,) = search["targets"]
    assert (found["target"], found["largest_passing"], found["smallest_failing"], found["done"]) == (
        "sim/grill-sim/short",
        3,
        4,
        True,
    )
    probes = [(p["tier_index"], p["users"], p["passed"], p["binding_metric"]) for p in found["probes"]]
    assert probes == [(0, 1, True, ""), (1, 2, True, ""), (2, 4, False, "e2e_p50_s"), (3, 3, True, "")]

    # every probe is a tier of its own, in the order probed, complete at its time
    phases = pd.read_csv(run_dir / "phases.csv")
    assert list(phases["tier_users"]) == [1, 2, 4, 3] and list(phases["tier_index"]) == [0, 1, 2, 3]
    assert phases["complete"].all()
    assert ((phases["end_wall"] - phases["start_wall"]).between(3.0, 5.0)).all()
    records = pd.read_parquet(run_dir / "records.parquet")
    assert records.groupby("tier_index")["tier_users"].first().to_list() == [1, 2, 4, 3]
    summary = pd.read_csv(run_dir / "summary.csv")  # a row per probe (in users' order, as any run's)
    assert sorted(zip(summary["tier_index"], summary["tier_users"], strict=True)) == [
        (0, 1),
        (1, 2),
        (2, 4),
        (3, 3),
    ]
    judged = summary.set_index("tier_users")["e2e_p50_s"]
    assert judged[3] <= E2E_P50_BOUND_S < judged[4]  # the summary agrees with the verdicts in run.json

    # grill report shows the search
    shown = subprocess.run(
        [sys.executable, "-m", "grill_locust.cli", "report", str(run_dir), "--format", "table"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    table = shown.stdout.split("Capacity search\n", 1)[1]
    assert "users 1 to 8" in table and "3 users" in table and "4 users" in table
    assert "1 meets, 2 meets, 4 misses (E2E p50), 3 meets" in table


def test_a_rate_search_probes_open_loop_tiers_and_brackets_the_knee(tmp_path: Path) -> None:
    """Rates double from the low end to the first failure, then bisect geometrically until the bracket
    is within its precision; each probe is an open-loop tier of its rate, judged by its own summary row."""
    # at most 5 req/s complete on this profile (E2E 0.32 s + 0.2 s per other request in flight): the E2E
    # bound is crossed near 4 req/s; probes of 4 s give each rate 8 sends or more
    run_dir = searched(
        tmp_path, {"search": {"rate": [2, 16], "probe_s": 4, "precision": 0.5}, "pause_s": 0.2}
    )

    search = json.loads((run_dir / "run.json").read_text())["search"]
    assert search["by"] == "rate" and search["bracket"] == [2, 16]
    (found,) = search["targets"]
    assert found["done"] and found["unit"] == "req/s"
    loads = [p["rate"] for p in found["probes"]]
    assert loads[:2] == [2, 4]  # the low end, then doubling
    passing = [p["rate"] for p in found["probes"] if p["passed"]]
    failing = [p["rate"] for p in found["probes"] if not p["passed"]]
    assert found["largest_passing"] == max(passing)
    if failing:  # the knee inside the bracket: found within the precision
        assert found["smallest_failing"] == min(failing) > max(passing)
        assert found["smallest_failing"] / found["largest_passing"] <= 1.5 + 1e-9

    # every probe is an open-loop tier at its rate, its records scheduled by the arrival process
    phases = pd.read_csv(run_dir / "phases.csv")
    assert list(phases["tier_rate"]) == loads and (phases["tier_users"] == 0).all()
    records = pd.read_parquet(run_dir / "records.parquet")
    assert records.groupby("tier_index")["tier_rate"].first().to_list() == loads
    assert records["scheduled_wall"].notna().all()
    summary = pd.read_csv(run_dir / "summary.csv").set_index("tier_index")
    for probe in found["probes"]:  # each verdict is its summary row's
        assert (summary.loc[probe["tier_index"], "e2e_p50_s"] <= E2E_P50_BOUND_S) == probe["passed"]
