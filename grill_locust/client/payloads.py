"""Request bodies for OpenAI-compatible streaming: `/v1/chat/completions` and `/v1/completions`.

Every body asks for a stream with usage (`stream_options.include_usage`), so output tokens come
from the engine itself wherever it supports it. `model` is a `grill_locust.config.Model` (or any
object with its attributes: name, max_tokens, min_tokens, temperature, top_p, top_k, ignore_eos)
or just the served model name; `engine` (a name of the engine table) says what its ignore-EOS
parameter is called, if it has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grill_locust.engines import engine_facts

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


def _sampling(model: Any, engine: str) -> dict[str, Any]:
    if isinstance(model, str):
        return {"model": model}
    body: dict[str, Any] = {"model": model.name}
    max_tokens = getattr(model, "max_tokens", None)
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    temperature = getattr(model, "temperature", None)
    if temperature is not None:
        body["temperature"] = temperature
    # the next ones are not OpenAI's: send them only when set, so strict gateways accept the body
    for name in ("top_p", "top_k", "min_tokens"):
        value = getattr(model, name, None)
        if value is not None:
            body[name] = value
    ignore_eos_param = engine_facts(engine).ignore_eos_param
    if getattr(model, "ignore_eos", False) and ignore_eos_param:
        body[ignore_eos_param] = True
    return body


def _streaming(body: dict[str, Any], extra_body: dict[str, Any] | None) -> dict[str, Any]:
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    if extra_body:
        body.update(extra_body)
        options = extra_body.get("stream_options")
        if isinstance(options, dict):  # adds to ours (vLLM's continuous_usage_stats...); may turn usage off
            body["stream_options"] = {"include_usage": True, **options}
    return body


def chat_payload(
    model: Any,
    messages: list[dict[str, Any]],
    extra_body: dict[str, Any] | None = None,
    *,
    engine: str = "openai",
    tools: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A streaming chat completion request body; with `tools` (OpenAI's function schemas), the model
    chooses whether to call them (`tool_choice: auto`)."""
    body = _sampling(model, engine)
    body["messages"] = messages
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "auto"
    return _streaming(body, extra_body)


def completions_payload(
    model: Any, prompt: str, extra_body: dict[str, Any] | None = None, *, engine: str = "openai"
) -> dict[str, Any]:
    """A streaming (legacy) completion request body."""
    body = _sampling(model, engine)
    body["prompt"] = prompt
    return _streaming(body, extra_body)


def completion_prompt(messages: Sequence[dict[str, Any]]) -> str:
    """Chat messages as one plain-text prompt (completions API): each labelled with its role, then the
    cue for the answer, so that a base model answers instead of carrying on the last message."""
    parts = [f"{message['role'].capitalize()}: {message['content']}" for message in messages]
    parts.append("Assistant:")
    return "\n\n".join(parts)


def request_for(
    backend: Any, model: Any, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
) -> tuple[str, dict[str, Any]]:
    """The path and streaming body that send `messages` (OpenAI chat form) over `backend.api`: the one
    place that chooses the wire format of a conversation's request."""
    extra_body = getattr(backend, "extra_body", None)
    engine = getattr(backend, "engine", "openai")
    if backend.api == "completions":
        return COMPLETIONS_PATH, completions_payload(
            model, completion_prompt(messages), extra_body, engine=engine
        )
    return CHAT_PATH, chat_payload(model, messages, extra_body, engine=engine, tools=tools)
