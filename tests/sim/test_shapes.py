"""The profiles reproduce the seed study's shapes in short closed-loop runs on loopback."""

from __future__ import annotations

import pytest
from sim_driver import LoopResult, chat_payload, closed_loop

from grill_locust.sim import SimProcess

pytestmark = pytest.mark.slow


def short_prompt(user: int, iteration: int) -> dict:
    return chat_payload(f"user {user} turn {iteration}: write a function that adds two numbers", max_tokens=8)


def ttft_at(profile: str, users: int, iterations: int) -> LoopResult:
    with SimProcess.start(profile) as sim:
        closed_loop(sim.port, 1, 1, short_prompt)  # warm up the connection path
        result = closed_loop(sim.port, users, iterations, short_prompt, deadline_s=20)
    assert result.failures == 0
    return result


def test_llamacpp_ttft_collapses_with_concurrent_users():
    one = ttft_at("llamacpp", 1, 5)
    twenty = ttft_at("llamacpp", 20, 2)
    assert twenty.ttft_p50_s >= 10 * one.ttft_p50_s, (one.ttft_p50_s, twenty.ttft_p50_s)


def test_vllm_ttft_stays_flat_with_concurrent_users():
    one = ttft_at("vllm", 1, 5)
    twenty = ttft_at("vllm", 20, 3)
    assert twenty.ttft_p50_s < 3 * one.ttft_p50_s, (one.ttft_p50_s, twenty.ttft_p50_s)


SHARED_PREFIX = "Project documentation, section on the storage layer and its invariants. " * 180


def shared_prefix_prompt(user: int, iteration: int) -> dict:
    return chat_payload(SHARED_PREFIX + f"\nQuestion {user}-{iteration}: where is the cache?", max_tokens=16)


def e2e_on_shared_prefix(profile: str) -> float:
    with SimProcess.start(profile) as sim:
        result = closed_loop(sim.port, 16, 3, shared_prefix_prompt, deadline_s=20)
    assert result.failures == 0
    return result.e2e_p50_s


def test_prefix_caching_pays_off_on_a_shared_long_prefix():
    cached = e2e_on_shared_prefix("vllm")
    uncached = e2e_on_shared_prefix("vllm-no-prefix-cache")
    assert uncached > 1.7 * cached, (cached, uncached)
