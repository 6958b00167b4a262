"""Scenario files for the real-engine campaigns: the four workloads and an llm-grill `fixed`
conversation, sized to fit llama-server's 1024-token slots and to finish in a few minutes on 2 cores."""

from __future__ import annotations

from typing import Any

MAX_TOKENS = 16  # short replies; ignore_eos so the base model never stops at once (an `empty` record)

# kind -> conversation; sizes in the engine's tokens (calibrated through its /tokenize)
CONVERSATIONS: dict[str, dict[str, Any]] = {
    "multi-turn": {
        "name": "mt",
        "kind": "multi-turn",
        "system_tokens": 200,
        "user_turns": 3,
        "turn_tokens": 30,
    },
    "shared-prefix": {"name": "sp", "kind": "shared-prefix", "prefix_tokens": 300, "question_tokens": 30},
    "short-baseline": {"name": "sb", "kind": "short-baseline", "prompt_tokens": 50},
    "unique-prompts": {"name": "up", "kind": "unique-prompts", "prompt_tokens": 300},
    "fixed": {
        "name": "code-review",
        "description": "an llm-grill scripted conversation: scripted assistant turns are replaced by real replies",
        "turns": [
            {"role": "system", "content": "You are a meticulous senior Python reviewer. Be concise."},
            {
                "role": "user",
                "content": "Review this function:\n\ndef mean(values):\n    return sum(values) / len(values)\n",
            },
            {"role": "assistant", "content": "It fails on an empty list with ZeroDivisionError."},
            {"role": "user", "content": "Rewrite it to return None for an empty input, with type hints."},
        ],
    },
}
REQUESTS_PER_ITERATION = {"mt": 3, "sp": 1, "sb": 1, "up": 1, "code-review": 2}


def campaign_scenario(
    backend: dict[str, Any],
    model_name: str,
    tiers: list[int],
    kinds: list[str] | None = None,
    iterations: int = 1,
    max_tokens: int = MAX_TOKENS,
) -> dict[str, Any]:
    """A native scenario: one backend, one model, the chosen workloads (default all five) as targets."""
    conversations = [CONVERSATIONS[kind] for kind in (kinds or list(CONVERSATIONS))]
    return {
        "name": "real-engine",
        "description": "grill-locust end to end against a real engine (tests/real)",
        "backends": [backend],
        "models": [{"name": model_name, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}],
        "conversations": conversations,
        "targets": [
            {"backend": backend["name"], "model": model_name, "conversation": c["name"]}
            for c in conversations
        ],
        "load": {
            "tiers": tiers,
            "iterations": iterations,
            "pause_s": 0.5,
            "think_time_s": 0.1,
            "tier_timeout_s": 300,
        },
    }


# An agent session sized to the time a 2-CPU machine gives it (the 270M model prefills ~150-300 tokens/s
# there, so its whole 32k context would take minutes per step), not to the model's context: its last
# step holds about 4k tokens.
AGENT_STEPS = 10
AGENT_CONVERSATION: dict[str, Any] = {
    "name": "agent",
    "kind": "agentic",
    "steps": AGENT_STEPS,
    "system_tokens": 1200,  # the tools' JSON (~800 tokens on gemma's tokenizer) and the system message
    "tool_result_tokens": 200,
    "step_max_tokens": 32,  # room for a whole <tool_call> (llama-server streams none of a cut one)
    "final_max_tokens": 32,
}


def agent_scenario(backends: list[dict[str, Any]], model_name: str, **conversation: Any) -> dict[str, Any]:
    """One agent session per backend, one after the other (the engine has one slot); `conversation`
    overrides AGENT_CONVERSATION's keys."""
    return {
        "name": "real-engine-agent",
        "description": "agent sessions against a real engine (tests/real)",
        "backends": backends,
        "models": [{"name": model_name, "max_tokens": 32, "temperature": 0.0, "ignore_eos": True}],
        "conversations": [{**AGENT_CONVERSATION, **conversation}],
        "targets": [
            {
                "name": backend["name"],
                "backend": backend["name"],
                "model": model_name,
                "conversation": "agent",
            }
            for backend in backends
        ],
        "load": {"tiers": [1], "iterations": 1, "pause_s": 0.2, "think_time_s": 0.0, "tier_timeout_s": 300},
    }
