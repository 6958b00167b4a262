"""The load section's warmup and ramp: which request is warmup, and each tier's spawn rate."""

from __future__ import annotations

from typing import Any

import pytest

from grill_locust.config import ConfigError
from grill_locust.scenario import parse_scenario

BASE = {
    "name": "t",
    "backends": [{"name": "sim", "engine": "sim"}],
    "models": [{"name": "m"}],
    "targets": [{"backend": "sim", "model": "m", "conversation": "short-baseline"}],
}


def load_of(**keys: object) -> Any:
    """The scenario's parsed load section for these keys."""
    return parse_scenario({**BASE, "load": keys}, source="s.yaml").load


def test_no_warmup_configured_judges_no_request() -> None:
    assert load_of().warmup(since_tier_start_s=0.0, request_ordinal=0) is None


def test_a_request_is_warmup_when_either_rule_its_worker_knows_holds() -> None:
    load = load_of(warmup_s=2.0, warmup_requests_per_user=3)
    assert load.warmup(1.9, 10) is True  # in time
    assert load.warmup(5.0, 2) is True  # among the developer's first three
    assert load.warmup(2.0, 3) is False
    assert load_of(warmup_s=2.0).warmup(5.0, 0) is False
    assert load_of(warmup_requests_per_user=1).warmup(0.0, 1) is False


def test_the_tiers_first_requests_are_not_a_developers_count() -> None:
    # warmup_requests counts the whole tier by send time (the report picks them): no worker judges them
    load = load_of(warmup_requests=4)
    assert load.warmup(0.0, 0) is False and load.warmup(0.0, 3) is False


def test_ramp_s_gives_each_tier_its_own_spawn_rate() -> None:
    load = load_of(tiers=[4, 10], ramp_s=2.0)
    assert [load.spawn_rate_for(users) for users in load.tiers] == [2.0, 5.0]
    assert load_of(spawn_rate=3.0).spawn_rate_for(10) == 3.0
    assert load_of().spawn_rate_for(10) is None


@pytest.mark.parametrize(
    ("load", "message"),
    [
        ({"ramp_s": 5, "spawn_rate": 1}, "load.ramp_s: give spawn_rate or ramp_s, not both"),
        ({"ramp_s": -1}, "load.ramp_s: expected a value > 0"),
        ({"warmup_s": 0}, "load.warmup_s: expected a value > 0"),
        ({"warmup_requests": 0}, "load.warmup_requests: expected a value >= 1"),
        ({"warmup_requests": "two"}, "load.warmup_requests: expected a whole number"),
        ({"warmup_requests_per_user": 0}, "load.warmup_requests_per_user: expected a value >= 1"),
    ],
)
def test_bad_warmup_or_ramp_is_one_line_naming_the_key(load: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_scenario({**BASE, "load": load}, source="s.yaml")
    assert str(raised.value).startswith(f"s.yaml: {message}")
    assert "\n" not in str(raised.value)
