"""The engine's wasted work on abandoned requests: aborted requests and the tokens generated for them, read
from /metrics in each engine's names (where it has them) and risen over each tier."""

from __future__ import annotations

import pandas as pd
import pytest
from telemetry_helpers import fixture_text

from grill_locust.engines import SIM_ABORTED_TOKENS
from grill_locust.samples import KIND_ENGINE, TELEMETRY_COLUMNS, empty_sample
from grill_locust.sim.engine import Engine
from grill_locust.sim.metrics import render_metrics
from grill_locust.sim.params import PROFILES
from grill_locust.sim.sequence import Sequence
from grill_locust.telemetry.engine_metrics import EngineSampler
from grill_locust.telemetry.tiers import tier_telemetry

MODEL = 'model_name="m"'


def sample(engine: str, text: str) -> dict[str, object]:
    return EngineSampler(engine, source="b", backend="b", host="h").sample(text, wall_time=1.0)


def vllm_text(aborted: float, tokens: float | None = None) -> str:
    """vLLM's per-reason success counter (one series per finish reason, as vLLM creates them all), plus
    the simulator's aborted-token counter when given."""
    lines = [
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{engine="0",finished_reason="stop",{MODEL}}} 151.0',
        f'vllm:request_success_total{{engine="0",finished_reason="length",{MODEL}}} 9.0',
        f'vllm:request_success_total{{engine="0",finished_reason="abort",{MODEL}}} {aborted}',
        f'vllm:request_success_total{{engine="1",finished_reason="abort",{MODEL}}} 1.0',
    ]
    if tokens is not None:
        lines += [
            f"# TYPE {SIM_ABORTED_TOKENS.removesuffix('_total')} counter",
            f"{SIM_ABORTED_TOKENS} {tokens}",
        ]
    return "\n".join(lines) + "\n"


def test_vllm_aborted_requests_are_the_abort_series_only_summed_over_engines() -> None:
    fields = sample("vllm", vllm_text(aborted=4.0))
    assert fields["aborted_requests_total"] == 5.0  # 4 + 1 of the abort series; stop and length left out
    assert fields["aborted_tokens_total"] is None  # vLLM itself has no such counter


def test_the_simulators_aborted_token_counter_is_read_beside_vllms_names() -> None:
    fields = sample("sim", vllm_text(aborted=2.0, tokens=37.0))
    assert fields["aborted_requests_total"] == 3.0 and fields["aborted_tokens_total"] == 37.0


def test_the_simulators_own_metrics_give_its_aborted_requests_and_their_tokens() -> None:
    engine = Engine(PROFILES["vllm"])
    seq = Sequence("a", list(range(100)), 500, 1 << 60, 0, 0.0)
    engine.add(seq)
    now = 0.0
    while seq.output_count < 3:  # a few tokens out, then the client goes away
        step = engine.schedule(now)
        now += step.duration_s
        engine.commit(step, now)
    engine.abort(seq, now)
    engine.commit(engine.schedule(now), now + 0.01)
    fields = sample("sim", render_metrics(engine, "m"))
    assert fields["aborted_requests_total"] == engine.counters.aborted_requests == 1
    assert fields["aborted_tokens_total"] == engine.counters.aborted_generation_tokens >= 3


def test_sglang_aborted_requests_and_engines_without_the_counters() -> None:
    sglang = fixture_text("sglang.txt") + "# TYPE sglang:num_aborted_requests counter\n"
    sglang += f"sglang:num_aborted_requests_total{{{MODEL}}} 7.0\n"
    assert sample("sglang", sglang)["aborted_requests_total"] == 7.0
    llamacpp = sample("llamacpp", fixture_text("llamacpp.txt"))  # llama-server exports no abort figure
    assert llamacpp["aborted_requests_total"] is None and llamacpp["aborted_tokens_total"] is None
    # a recorded vLLM scrape: its abort series is there, at 0 beside 151 stopped and 9 cut by length
    assert sample("vllm", fixture_text("vllm_v1.txt"))["aborted_requests_total"] == 0.0


def test_a_tiers_aborted_requests_and_tokens_are_the_counters_rise_over_it() -> None:
    samples = []
    for t, aborted, tokens in [(99, 10, 100), (101, 10, 100), (105, 14, 160), (109, 20, 250), (113, 24, 310)]:
        one = empty_sample(KIND_ENGINE, t, "sim", "sim", "127.0.0.1")
        one.update(aborted_requests_total=aborted, aborted_tokens_total=tokens)
        samples.append(one)
    phases = pd.DataFrame(
        [
            {
                "target": "sim/m/completions",
                "backend": "sim",
                "tier_index": 0,
                "start_wall": 101.0,
                "end_wall": 109.0,
            }
        ]
    )
    tier = tier_telemetry(pd.DataFrame(samples, columns=list(TELEMETRY_COLUMNS)), phases, None).iloc[0]
    assert tier["engine_aborted_requests"] == pytest.approx(10.0)  # 20 - 10 between the tier's bounds
    assert tier["engine_aborted_tokens"] == pytest.approx(150.0)
