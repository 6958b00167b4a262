"""A target's mix of personas: Tijdeman's assignment of developers, and the bad inputs it refuses."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import pytest

from grill_locust.config import ConfigError, Slo
from grill_locust.config._apportion import persona_counts, persona_index, tijdeman_bound
from grill_locust.scenario import parse_scenario

WEIGHT_SETS = [
    (70, 25, 5),
    (1, 1, 1),
    (1, 1),
    (5,),
    (1, 2, 3, 4),
    (0.5, 0.3, 0.2),
    (99, 1),
    (10, 1, 1, 1, 1, 1, 1),
    (1, 1, 1, 1, 1, 1, 1, 1, 1, 1),
    (7.3, 2.9, 0.11),
]


@pytest.mark.parametrize("weights", WEIGHT_SETS, ids=str)
def test_each_persona_count_is_within_tijdeman_bound_of_its_share_at_every_tier_size(
    weights: tuple[float, ...],
) -> None:
    exact = [Fraction(str(weight)) for weight in weights]
    bound = tijdeman_bound(len(weights))
    assert bound < 1
    counts = [0] * len(weights)
    for developers in range(1, 501):
        counts[persona_index(weights, developers - 1)] += 1
        if developers % 100 == 0:
            assert persona_counts(weights, developers) == counts  # the same whatever way it is asked
        for count, weight in zip(counts, exact, strict=True):
            share = developers * weight / sum(exact)
            assert abs(count - share) <= bound, (developers, counts)
            if share.denominator == 1:
                assert count == share


def test_seventy_twenty_five_five_at_twenty_developers_is_exact_and_grows_by_adding() -> None:
    assert persona_counts((70, 25, 5), 20) == [14, 5, 1]
    assert persona_counts((70, 25, 5), 4) == [3, 1, 0]
    first_seven = [persona_index((70, 25, 5), k) for k in range(7)]
    assert [persona_index((70, 25, 5), k) for k in range(20)][:7] == first_seven


def reference_personas(weights: tuple[float, ...], developers: int) -> list[int]:
    """The assignment as the module states it, in fractions, recounted at every step: the result the
    kept sequence and its whole-number steps must give."""
    exact = [Fraction(str(weight)) for weight in weights]
    shares = [weight / sum(exact) for weight in exact]
    bound = tijdeman_bound(len(weights))
    counts, sequence = [0] * len(weights), []
    for n in range(1, developers + 1):
        allowed = [i for i, share in enumerate(shares) if counts[i] + 1 <= n * share + bound]
        chosen = min(allowed, key=lambda i: ((counts[i] + bound) / shares[i], i))
        counts[chosen] += 1
        sequence.append(chosen)
    return sequence


@pytest.mark.parametrize("weights", WEIGHT_SETS, ids=str)
def test_the_assignment_is_the_stated_one_however_it_is_asked(weights: tuple[float, ...]) -> None:
    expected = reference_personas(weights, 300)
    # asked out of order (a tier of users asks any developer; a rate tier one send after another)
    assert persona_index(weights, 299) == expected[299]
    assert [persona_index(weights, k) for k in range(300)] == expected
    for developers in (0, 1, 7, 50, 299, 300):
        counts = [expected[:developers].count(i) for i in range(len(weights))]
        assert persona_counts(weights, developers) == counts


def test_the_first_developers_personas_are_those_of_earlier_versions() -> None:
    first = {
        (70, 25, 5): "0010010001001020001000100100010010200010",
        (1, 2, 3, 4): "3213230123321323012332132301233213230123",
        (0.3, 0.7): "1011011101101101110110110111011011011101",
    }
    for weights, personas in first.items():
        assert "".join(str(persona_index(weights, k)) for k in range(40)) == personas


def scenario_data(target: dict[str, Any]) -> dict[str, Any]:
    return {
        "backends": [{"name": "sim", "engine": "sim"}],
        "models": [{"name": "m"}],
        "conversations": [
            {"name": "chat", "kind": "multi-turn", "slo": {"ttft_p90_s": 0.4}},
            {"name": "agent", "kind": "agentic"},
        ],
        "targets": [target],
    }


MIX = [
    {"conversation": "short-baseline", "weight": 70},
    {"conversation": "chat", "weight": 25},
    {"conversation": "agent", "weight": 5},
]


def test_a_mix_target_names_its_personas_and_their_weights() -> None:
    scenario = parse_scenario(scenario_data({"backend": "sim", "mix": MIX}), "t.yaml")
    target = scenario.targets[0]
    assert target.mix and target.name == "sim/m/mix"
    assert [p.conversation.name for p in target.personas] == ["short-baseline", "chat", "agent"]
    assert target.persona_counts(20) == {"short-baseline": 14, "chat": 5, "agent": 1}
    assert target.for_developer(2).conversation.name == "chat"
    with pytest.raises(ValueError, match="is a mix"):
        _ = target.conversation
    # the wire keeps it a mix
    assert type(scenario).from_wire(scenario.to_wire()).targets[0] == target


def test_a_conversation_slo_wins_over_the_scenario_slo_for_that_conversation() -> None:
    scenario = parse_scenario(scenario_data({"backend": "sim", "mix": MIX}), "t.yaml")
    assert scenario.conversation_slos() == {"chat": {"ttft_p90_s": 0.4}}
    chat = next(c for c in scenario.conversations if c.name == "chat")
    assert chat.slo is not None
    merged = chat.slo.over(Slo(ttft_p50_s=1.0))
    assert (merged.ttft_p50_s, merged.ttft_p90_s, merged.e2e_p50_s) == (1.0, 0.4, 10.0)


@pytest.mark.parametrize(
    ("mix", "place", "message"),
    [
        ([], "targets[0].mix", "empty mix"),
        (
            [{"conversation": "nope", "weight": 1}],
            "targets[0].mix[0].conversation",
            "unknown conversation 'nope'",
        ),
        ([{"conversation": "chat", "weight": 0}], "targets[0].mix[0].weight", "positive number, got 0"),
        ([{"conversation": "chat", "weight": -2}], "targets[0].mix[0].weight", "positive number, got -2"),
        ([{"conversation": "chat", "weight": "lots"}], "targets[0].mix[0].weight", "got 'lots'"),
        ([{"conversation": "chat", "weight": True}], "targets[0].mix[0].weight", "got True"),
        (
            [{"conversation": "chat", "weight": 1}, {"conversation": "chat", "weight": 2}],
            "targets[0].mix[1].conversation",
            "already in this mix",
        ),
    ],
)
def test_a_bad_mix_is_one_line_naming_its_key(mix: list[Any], place: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_scenario(scenario_data({"backend": "sim", "mix": mix}), "t.yaml")
    text = str(error.value)
    assert text.startswith(f"t.yaml: {place}: ") and message in text and "\n" not in text


def test_a_target_gives_a_conversation_or_a_mix_not_both() -> None:
    data = scenario_data({"backend": "sim", "conversation": "chat", "mix": copy.deepcopy(MIX)})
    with pytest.raises(ConfigError, match=r"targets\[0\]\.mix: give either conversation or mix, not both"):
        parse_scenario(data, "t.yaml")


def test_an_agentic_persona_on_a_completions_backend_is_refused_at_its_mix_entry() -> None:
    data = scenario_data({"backend": "sim", "mix": MIX})
    data["backends"][0]["api"] = "completions"
    with pytest.raises(
        ConfigError, match=r"targets\[0\]\.mix\[2\]\.conversation: conversation 'agent' is agentic"
    ):
        parse_scenario(data, "t.yaml")


def test_validate_lists_each_persona_and_its_developers_at_every_tier() -> None:
    from grill_locust.run.estimate import estimate_campaign, format_estimate

    data = scenario_data({"backend": "sim", "mix": MIX})
    data["load"] = {"tiers": [4, 20], "iterations": 1}
    scenario = parse_scenario(data, "t.yaml")
    estimate = estimate_campaign(scenario)
    text = format_estimate(estimate, 0.5, 20.0)
    assert (
        "mix of sim/m/mix (short-baseline 70, chat 25, agent 5): developers per persona at each tier" in text
    )
    assert "  4 users: short-baseline 3, chat 1, agent 0" in text
    assert "  20 users: short-baseline 14, chat 5, agent 1" in text
    by_persona = {e.target.conversation.name: e.requests for e in estimate.targets}
    assert by_persona["short-baseline"] == 3 + 14 and by_persona["chat"] == 4 * (1 + 5)
