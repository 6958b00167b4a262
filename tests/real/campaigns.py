"""Scenario files for the real-engine campaigns: the four workloads and an llm-grill `fixed`
conversation, sized to fit llama-server's 1024-token slots and to finish in a few minutes on 2 cores."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.real.conftest import ServerProcess

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


def llama_backend(server: ServerProcess) -> dict[str, Any]:
    return {
        "name": "llamacpp",
        "engine": "llamacpp",
        "url": server.url,
        "timeouts": {"connect_s": 10, "first_token_s": 300, "total_s": 600},
    }


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
    "tool_result_tokens": 550,  # ten steps fill ~85 % of the agent server's 8k context
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


# Autocomplete: gemma3-270m has no FIM tokens, so `template` names a family (its tokens are text to this
# model) and `infill` is refused. llama-server notices a closed stream only when it writes a token, so
# every abandoned request costs its whole prefill, waiting ones too; and on a 2-CPU machine shared with
# other work its two threads slow down several times over: the prompts and completions stay small.
FIM_PREFIX_TOKENS = 128
FIM_SUFFIX_TOKENS = 32
FIM_MAX_TOKENS = 4
FIM_BUDGET_MS = 1500  # about what a completion takes on a quiet 2-CPU machine: either answer occurs
# nearly every request sent within a burst of keystrokes ~170 ms apart: the next one cancels it
FAST_TYPIST: dict[str, Any] = {"typing_cps": 6, "debounce_ms": 150, "requests": 4}
# keystrokes ~10 s apart (over 5.6 s in 19 of 20 gaps): a developer reading on after each pause, whose
# completions arrive in time even on a loaded machine (~1 s on a quiet one, ~5 s on a busy one); one
# request an iteration, sent at the first pause, and the iteration ends with it
SLOW_TYPIST: dict[str, Any] = {"typing_cps": 0.1, "debounce_ms": 150, "requests": 1}


def autocomplete_conversation(name: str, fim: str, typist: dict[str, Any]) -> dict[str, Any]:
    """A developer typing at `typist`'s pace, FIM requests over transport `fim`."""
    conversation: dict[str, Any] = {
        "name": name,
        "kind": "autocomplete",
        "prefix_tokens": FIM_PREFIX_TOKENS,
        "suffix_tokens": FIM_SUFFIX_TOKENS,
        "max_tokens": FIM_MAX_TOKENS,
        "budget_ms": FIM_BUDGET_MS,
        "fim": fim,
        **typist,
    }
    if fim == "template":
        conversation["fim_template"] = "qwen-coder"
    return conversation


def autocomplete_scenario(
    backend: dict[str, Any], model_name: str, conversations: list[dict[str, Any]], users: int, iterations: int
) -> dict[str, Any]:
    """One tier of `users` typing developers per conversation, one target each, in their order. No
    hold after a tier that measured an outage, so that a re-run never hides a count."""
    return {
        "name": "real-engine-autocomplete",
        "description": "typing developers against a real engine (tests/real)",
        "backends": [backend],
        "models": [
            {"name": model_name, "max_tokens": FIM_MAX_TOKENS, "temperature": 0.0, "ignore_eos": True}
        ],
        "conversations": conversations,
        "targets": [
            {"name": c["name"], "backend": backend["name"], "model": model_name, "conversation": c["name"]}
            for c in conversations
        ],
        "load": {
            "tiers": [users],
            "iterations": iterations,
            "pause_s": 0.5,
            "think_time_s": 0.1,
            "tier_timeout_s": 120,
            "engine_wait_s": 0,
        },
    }


def mix_scenario(
    backend: dict[str, Any],
    model_name: str,
    mix: list[tuple[dict[str, Any], float]],
    tiers: list[int],
    max_tokens: int = MAX_TOKENS,
) -> dict[str, Any]:
    """A team in one target: `mix` pairs each conversation with its weight; `max_tokens` is the model's,
    which chat replies take (an autocomplete conversation gives its own)."""
    return {
        "name": "real-engine-team",
        "description": "a team's mix of personas against a real engine (tests/real)",
        "backends": [backend],
        "models": [{"name": model_name, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}],
        "conversations": [conversation for conversation, _ in mix],
        "targets": [
            {
                "name": "team",
                "backend": backend["name"],
                "model": model_name,
                "mix": [{"conversation": c["name"], "weight": weight} for c, weight in mix],
            }
        ],
        "load": {
            "tiers": tiers,
            "iterations": 1,
            "pause_s": 0.5,
            "think_time_s": 0.1,
            "tier_timeout_s": 120,
            "engine_wait_s": 0,
        },
    }
