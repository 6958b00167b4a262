"""The simulated engine's tool calls: which of the request's tools it calls and with what arguments.

A request that offers tools (OpenAI's function schemas) gets one call, chosen by its seed (or, without
one, by its prompt), with arguments that are valid JSON for the tool's `parameters` schema. The call's
output tokens are one for its header (id and name), then the tokens of its arguments text, so that
usage counts exactly what is streamed.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from grill_locust.tokens import tokenize

PREAMBLE_TOKENS_MAX = 8  # a short text some answers give before their call (not with ignore_eos)
_STRINGS = (
    "src/app/handlers.py",
    "handle_request",
    "tests/test_cache.py",
    "LruCache",
    "retry after a transient error",
    "context.cache",
    "pytest -q tests",
    "def set(",
)


class ToolError(ValueError):
    """The request's tools or tool_choice are malformed; the message names the field."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The one call an answer makes: `token_count` output tokens, the header first."""

    call_hex: str  # the random part of the call's id (each wire format adds its own prefix)
    name: str
    arguments: str  # JSON text, as the model writes it
    argument_pieces: tuple[str, ...]  # the arguments text, one output token each
    preamble_tokens: int  # text tokens before the call when the answer stops by itself

    @property
    def token_count(self) -> int:
        return 1 + len(self.argument_pieces)

    def arguments_so_far(self, tokens: int) -> str:
        """The arguments text the first `tokens` tokens of the call (header included) carried."""
        return "".join(self.argument_pieces[: max(0, tokens - 1)])


def tool_functions(tools: object) -> list[dict[str, Any]]:
    """The `function` objects of an OpenAI `tools` list (each with a name); ToolError when malformed."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ToolError("tools: expected a list of tools")
    functions = []
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not function["name"]
        ):
            raise ToolError(f"tools[{index}]: expected {{type: function, function: {{name, parameters}}}}")
        functions.append(function)
    return functions


def answers_with_a_call(messages: object) -> bool:
    """Whether a model offered tools calls one: at the start of a task (no assistant turn yet) and
    after a tool's result; a user's message after the work began (asking for the final answer or a
    summary) gets text, as an agent's model answers it."""
    if not isinstance(messages, list) or not messages:
        return True
    last = messages[-1]
    if isinstance(last, dict) and last.get("role") == "tool":
        return True
    return not any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages)


def plan_tool_call(tools: object, tool_choice: object, seed: int) -> ToolCall | None:
    """The call an answer makes, or None when no tools are offered or `tool_choice` is "none"."""
    functions = tool_functions(tools)
    if not functions or tool_choice == "none":
        return None
    rng = random.Random(seed)
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        chosen = [f for f in functions if f["name"] == wanted]
        if not chosen:
            raise ToolError(f"tool_choice: no tool named {wanted!r} among the request's tools")
        function = chosen[0]
    elif tool_choice in (None, "auto", "required"):
        function = rng.choice(functions)
    else:
        raise ToolError(
            'tool_choice: expected "none", "auto", "required" or {type: function, function: {name}}'
        )
    schema = function.get("parameters")
    arguments = json.dumps(value_for(schema if isinstance(schema, dict) else {}, rng), ensure_ascii=False)
    return ToolCall(
        call_hex=f"{rng.getrandbits(128):032x}",
        name=function["name"],
        arguments=arguments,
        argument_pieces=tuple(tokenize(arguments)),
        preamble_tokens=rng.randrange(PREAMBLE_TOKENS_MAX + 1),
    )


def value_for(schema: dict[str, Any], rng: random.Random) -> object:
    """A short value valid against a JSON schema's common keywords: type, enum, required, items, bounds."""
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return rng.choice(schema["enum"])
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties") or {}
        required = schema.get("required") or []
        return {name: value_for(properties.get(name) or {}, rng) for name in required}
    if kind == "array":
        items = schema.get("items")
        count = max(int(schema.get("minItems", 1)), 1)
        return [value_for(items if isinstance(items, dict) else {}, rng) for _ in range(count)]
    if kind == "integer":
        low = int(schema.get("minimum", 1))
        return rng.randint(low, int(schema.get("maximum", low + 199)))
    if kind == "number":
        lowest = float(schema.get("minimum", 0.0))
        return round(rng.uniform(lowest, float(schema.get("maximum", lowest + 100.0))), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return rng.choice(_STRINGS)
