"""tier_telemetry: per (target, tier) GPU and engine figures from samples, phases and records."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from grill_locust.samples import KIND_ENGINE, KIND_GPU, TELEMETRY_COLUMNS, empty_sample
from grill_locust.telemetry.tiers import TIER_TELEMETRY_COLUMNS, tier_telemetry

TARGET = "vllm-a/devstral/shared-prefix"


def gpu(t: float, backend: str, uuid: str, **values: Any) -> dict[str, Any]:
    sample = empty_sample(KIND_GPU, t, "gpu-node-1:9835", backend, "gpu-node-1")
    sample.update(gpu_uuid=uuid, gpu_index=int(uuid[-1]), gpu_name="NVIDIA H100 80GB HBM3", **values)
    return sample


def engine(t: float, **values: Any) -> dict[str, Any]:
    sample = empty_sample(KIND_ENGINE, t, "vllm-a", "vllm-a", "10.0.0.5")
    sample.update(values)
    return sample


def telemetry() -> pd.DataFrame:
    samples = []
    # tier 0, [100, 110]: two GPUs of vllm-a with energy counters
    for t, util, mem, power, energy_mj in [
        (100, 50, 10e9, 300, 1_000_000),
        (105, 70, 12e9, 400, 3_000_000),
        (110, 90, 11e9, 500, 5_500_000),
    ]:
        samples.append(
            gpu(
                t,
                "vllm-a",
                "GPU-0",
                gpu_util_pct=util,
                mem_used_bytes=mem,
                power_w=power,
                energy_mj=energy_mj,
            )
        )
    for t, energy_mj in [(100, 0), (105, 500_000), (110, 1_000_000)]:
        samples.append(
            gpu(t, "vllm-a", "GPU-1", gpu_util_pct=10, mem_used_bytes=5e9, power_w=100, energy_mj=energy_mj)
        )
    samples.append(
        gpu(105, "other-backend", "GPU-7", gpu_util_pct=100, mem_used_bytes=70e9, power_w=700, energy_mj=9e9)
    )
    samples.append(
        gpu(99, "vllm-a", "GPU-0", gpu_util_pct=0, mem_used_bytes=99e9, power_w=0, energy_mj=0)
    )  # before the tier
    for t, kv, waiting, cached, queried in [
        (101, 0.2, 0, 0, 0),
        (103, 0.4, 2, 100, 200),
        (105, 0.6, 4, 300, 500),
        (107, 0.4, 2, 300, 600),
    ]:
        samples.append(
            engine(
                t,
                kv_cache_usage=kv,
                requests_waiting=waiting,
                cached_tokens_total=cached,
                prefix_queries_total=queried,
            )
        )
    # tier 1, [120, 130]: no energy counter (power is integrated), an exporter no backend lists, an engine restart
    for t in (120, 125, 130):
        samples.append(gpu(t, "vllm-a", "GPU-0", gpu_util_pct=60, mem_used_bytes=20e9, power_w=200))
    samples.append(gpu(125, "", "GPU-3", gpu_util_pct=0, mem_used_bytes=1e9))
    for t, cached, queried in [(121, 1000, 2000), (123, 50, 100), (125, 150, 300)]:
        samples.append(
            engine(
                t,
                kv_cache_usage=0.1,
                requests_waiting=1,
                cached_tokens_total=cached,
                prefix_queries_total=queried,
            )
        )
    return pd.DataFrame(samples, columns=list(TELEMETRY_COLUMNS))


def phases() -> pd.DataFrame:
    rows = [
        {
            "target": TARGET,
            "backend": "vllm-a",
            "tier_index": 0,
            "tier_users": 1,
            "start_wall": 100.0,
            "end_wall": 110.0,
        },
        {
            "target": TARGET,
            "backend": "vllm-a",
            "tier_index": 1,
            "tier_users": 5,
            "start_wall": 120.0,
            "end_wall": 130.0,
        },
        {
            "target": "quiet/m/x",
            "backend": "quiet",
            "tier_index": 0,
            "tier_users": 1,
            "start_wall": 200.0,
            "end_wall": 210.0,
        },
    ]
    return pd.DataFrame(rows)


def records() -> pd.DataFrame:
    rows = [{"target": TARGET, "tier_index": 0, "output_tokens": 55, "wall_start": 101.0}] * 10
    rows += [{"target": TARGET, "tier_index": 1, "output_tokens": 50, "wall_start": 121.0}] * 2
    return pd.DataFrame(rows)


def test_tier_figures_from_gpu_and_engine_samples() -> None:
    result = tier_telemetry(telemetry(), phases(), records())
    assert list(result.columns) == list(TIER_TELEMETRY_COLUMNS)
    tier0, tier1, quiet = result.to_dict("records")
    assert (tier0["target"], tier0["tier_index"]) == (TARGET, 0)
    assert tier0["gpu_util_mean"] == pytest.approx(40.0)  # (50 + 70 + 90 + 3 x 10) / 6
    assert tier0["vram_peak_bytes"] == pytest.approx(17e9)  # 12e9 + 5e9
    assert tier0["power_mean_w"] == pytest.approx(500.0)  # 400 + 100
    assert tier0["energy_per_token_j"] == pytest.approx(5500.0 / 550)  # 4500 J + 1000 J over 550 tokens
    assert tier0["kv_cache_mean"] == pytest.approx(0.4) and tier0["kv_cache_peak"] == pytest.approx(0.6)
    assert tier0["prefix_hit_rate"] == pytest.approx(300 / 600)
    assert tier0["waiting_mean"] == pytest.approx(2.0)

    assert tier1["gpu_util_mean"] == pytest.approx(45.0)  # the unlisted exporter's GPU counts too
    assert tier1["vram_peak_bytes"] == pytest.approx(21e9)
    assert tier1["power_mean_w"] == pytest.approx(200.0)
    assert tier1["energy_per_token_j"] == pytest.approx(200.0 * 10 / 100)  # 200 W for 10 s over 100 tokens
    assert tier1["prefix_hit_rate"] == pytest.approx(100 / 200)  # the reset interval is skipped

    assert quiet["target"] == "quiet/m/x"
    assert all(pd.isna(quiet[c]) for c in TIER_TELEMETRY_COLUMNS[2:])


def test_hit_rate_falls_back_to_per_scrape_rates_without_counters() -> None:
    samples = [engine(101, prefix_cache_hit_rate=0.3), engine(103, prefix_cache_hit_rate=0.5)]
    frame = pd.DataFrame(samples, columns=list(TELEMETRY_COLUMNS))
    (row,) = tier_telemetry(frame, phases().iloc[:1], None).to_dict("records")
    assert row["prefix_hit_rate"] == pytest.approx(0.4)
    assert pd.isna(row["energy_per_token_j"])


def test_no_telemetry_gives_an_empty_frame_with_the_columns() -> None:
    assert list(tier_telemetry(None, phases(), records()).columns) == list(TIER_TELEMETRY_COLUMNS)
    assert tier_telemetry(pd.DataFrame(columns=list(TELEMETRY_COLUMNS)), phases(), records()).empty


def test_a_tier_with_one_scrape_inside_gets_its_own_hit_rate_not_the_previous_tiers() -> None:
    # tier A [0, 10] hits 90 % of its prefix tokens, tier B [20, 30] 10 %; scrapes at 0, 8, 21 and 40:
    # the only scrape inside B mostly covers A's last seconds
    samples = [
        engine(0, cached_tokens_total=0, prefix_queries_total=0),
        engine(8, cached_tokens_total=720, prefix_queries_total=800, prefix_cache_hit_rate=0.9),
        engine(21, cached_tokens_total=910, prefix_queries_total=1100, prefix_cache_hit_rate=190 / 300),
        engine(40, cached_tokens_total=1000, prefix_queries_total=2000, prefix_cache_hit_rate=0.1),
    ]
    frame = pd.DataFrame(samples, columns=list(TELEMETRY_COLUMNS))
    tiers = pd.DataFrame(
        [
            {
                "target": TARGET,
                "backend": "vllm-a",
                "tier_index": i,
                "tier_users": 1,
                "start_wall": s,
                "end_wall": e,
            }
            for i, (s, e) in enumerate([(0.0, 10.0), (20.0, 30.0)])
        ]
    )
    a, b = tier_telemetry(frame, tiers, None).to_dict("records")
    assert a["prefix_hit_rate"] == pytest.approx(0.9, abs=0.02)  # an interval spanning both counts pro rata
    assert b["prefix_hit_rate"] == pytest.approx(0.1, abs=0.05)  # was 0.63, the one in-tier scrape's rate


def test_an_exporter_two_backends_list_counts_for_the_tiers_of_both() -> None:
    from grill_locust.config import Backend
    from grill_locust.telemetry.scraper import build_targets

    shared = "http://10.0.0.5:9835"
    backends = [
        Backend(name=name, url="http://10.0.0.5:8000", engine="vllm", gpu_exporters=[shared])
        for name in ("vllm", "vllm-nocache")
    ]
    gpu_targets = [t for t in build_targets(backends, []) if t.kind == KIND_GPU]
    assert [(t.url, t.backend) for t in gpu_targets] == [("http://10.0.0.5:9835/metrics", "")]
    samples = [gpu(t, "", "GPU-0", gpu_util_pct=90.0, mem_used_bytes=7e10) for t in (1, 5, 21, 25)]
    tiers = pd.DataFrame(
        [
            {
                "target": f"{name}/m/c",
                "backend": name,
                "tier_index": 0,
                "tier_users": 1,
                "start_wall": s,
                "end_wall": s + 8,
            }
            for name, s in (("vllm", 0.0), ("vllm-nocache", 20.0))
        ]
    )
    rows = tier_telemetry(pd.DataFrame(samples, columns=list(TELEMETRY_COLUMNS)), tiers, None).to_dict(
        "records"
    )
    assert [row["gpu_util_mean"] for row in rows] == [90.0, 90.0]
