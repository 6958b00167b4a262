"""Streaming request bodies: OpenAI's `/v1/chat/completions` and `/v1/completions`, Anthropic's
`/v1/messages`, and fill-in-the-middle requests (`fim_request`: a completions prompt or llama.cpp's
`/infill`).

Every OpenAI body asks for a stream with usage (`stream_options.include_usage`), so output tokens
come from the engine itself wherever it supports it (Anthropic streams always carry usage). `model` is a `grill_locust.config.Model` (or any
object with its attributes: name, max_tokens, min_tokens, temperature, top_p, top_k, ignore_eos)
or just the served model name; `engine` (a name of the engine table) says what its ignore-EOS
parameter is called, if it has one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, Required, TypedDict

from grill_locust.engines import engine_facts
from grill_locust.fim_templates import choose_fim

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
MESSAGES_PATH = "/v1/messages"
INFILL_PATH = "/infill"
# Anthropic requires max_tokens in every body: this one is sent for a model given by name only
MESSAGES_DEFAULT_MAX_TOKENS = 256


class MessageFunction(TypedDict):
    name: str
    arguments: str  # JSON text


class MessageToolCall(TypedDict):
    """A tool call an assistant message carries, in OpenAI's form."""

    id: str
    type: str  # "function"
    function: MessageFunction


class ChatMessage(TypedDict, total=False):
    """One message of a conversation in OpenAI's chat form, as the workloads write it: every API's
    body is built from these (`request_for`)."""

    role: Required[str]  # "system", "user", "assistant" or "tool"
    content: str | None
    tool_calls: list[MessageToolCall]  # an assistant's
    tool_call_id: str  # a tool result's: the call it answers


class NamedModel(Protocol):
    """A model as the bodies read it (`config.Model`): its served name; its sampling settings where it
    has them (max_tokens, min_tokens, temperature, top_p, top_k, ignore_eos)."""

    @property
    def name(self) -> str: ...


class Api(Protocol):
    """A backend as the bodies read it (`config.Backend`): which API it speaks ("chat", "completions"
    or "messages"); its engine and extra_body where it has them."""

    @property
    def api(self) -> str: ...


def _sampling(model: NamedModel | str, engine: str) -> dict[str, object]:
    if isinstance(model, str):
        return {"model": model}
    body: dict[str, object] = {"model": model.name}
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


def _streaming(body: dict[str, object], extra_body: dict[str, object] | None) -> dict[str, object]:
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    if extra_body:
        body.update(extra_body)
        options = extra_body.get("stream_options")
        if isinstance(options, dict):  # adds to ours (vLLM's continuous_usage_stats...); may turn usage off
            body["stream_options"] = {"include_usage": True, **options}
    return body


def chat_payload(
    model: NamedModel | str,
    messages: Sequence[ChatMessage],
    extra_body: dict[str, object] | None = None,
    *,
    engine: str = "openai",
    tools: list[dict[str, object]] | None = None,
) -> dict[str, object]:
    """A streaming chat completion request body; with `tools` (OpenAI's function schemas), the model
    chooses whether to call them (`tool_choice: auto`)."""
    body = _sampling(model, engine)
    body["messages"] = messages
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "auto"
    return _streaming(body, extra_body)


def completions_payload(
    model: NamedModel | str,
    prompt: str,
    extra_body: dict[str, object] | None = None,
    *,
    engine: str = "openai",
) -> dict[str, object]:
    """A streaming (legacy) completion request body."""
    body = _sampling(model, engine)
    body["prompt"] = prompt
    return _streaming(body, extra_body)


def completion_prompt(messages: Sequence[ChatMessage]) -> str:
    """Chat messages as one plain-text prompt (completions API): each labelled with its role, then the
    cue for the answer, so that a base model answers instead of carrying on the last message."""
    parts = [f"{message['role'].capitalize()}: {message['content']}" for message in messages]
    parts.append("Assistant:")
    return "\n\n".join(parts)


def messages_payload(
    model: NamedModel | str,
    messages: Sequence[ChatMessage],
    extra_body: dict[str, object] | None = None,
    *,
    engine: str = "openai",
    tools: list[dict[str, object]] | None = None,
) -> dict[str, object]:
    """A streaming Anthropic Messages body from OpenAI-form `messages` and `tools`: the system prompt
    apart, tool calls as `tool_use` blocks, each run of tool results as one user message of
    `tool_result` blocks, sampling as in the chat body, `max_tokens` always."""
    body = _sampling(model, engine)
    body.setdefault("max_tokens", MESSAGES_DEFAULT_MAX_TOKENS)
    system = [str(m["content"]) for m in messages if m["role"] == "system" and m.get("content")]
    if system:
        body["system"] = "\n\n".join(system)
    body["messages"] = anthropic_messages(messages)
    if tools:
        body["tools"] = [anthropic_tool(tool) for tool in tools]
        body["tool_choice"] = {"type": "auto"}
    body["stream"] = True
    if extra_body:
        body.update(extra_body)
    return body


def anthropic_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The `messages` of an Anthropic body (system messages left out: they go to `system`)."""
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None  # the tool_result blocks of the run in progress
    for message in messages:
        role = message["role"]
        if role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id", ""),
                "content": message.get("content") or "",
            }
            if results is None:
                results = []
                out.append({"role": "user", "content": results})
            results.append(block)
            continue
        results = None
        if role == "system":
            continue
        if role == "assistant" and message.get("tool_calls"):
            blocks: list[dict[str, object]] = []
            if message.get("content"):
                blocks.append({"type": "text", "text": message["content"]})
            blocks += [_tool_use(call) for call in message["tool_calls"]]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": role, "content": message.get("content") or ""})
    return out


def _tool_use(call: MessageToolCall) -> dict[str, object]:
    function = call["function"]
    return {
        "type": "tool_use",
        "id": call["id"],
        "name": function["name"],
        "input": tool_input(function["arguments"]),
    }


def tool_input(arguments: str) -> dict[str, object]:
    """A tool call's arguments (JSON text) as the object Anthropic's `input` must be. Text that is
    not a JSON object (arguments cut by max_tokens, a model's slip) is kept whole under
    `raw_arguments`: an empty input would send the engine a call it never made, and a context
    shorter than the same conversation has over the chat API."""
    if not arguments.strip():
        return {}
    try:
        parsed = json.loads(arguments)
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"raw_arguments": arguments}


def anthropic_tool(tool: dict[str, Any]) -> dict[str, object]:
    """An OpenAI function schema (`{"type": "function", "function": {...}}`) in Anthropic's shape."""
    function = tool.get("function", tool)
    converted: dict[str, object] = {"name": function["name"]}
    if function.get("description"):
        converted["description"] = function["description"]
    converted["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
    return converted


def request_for(
    backend: Api,
    model: NamedModel | str,
    messages: Sequence[ChatMessage],
    *,
    tools: list[dict[str, object]] | None = None,
    ignore_eos: bool = False,
) -> tuple[str, dict[str, object]]:
    """The path and streaming body that send `messages` (OpenAI chat form) over `backend.api`: the one
    place that chooses the wire format of a conversation's request. `ignore_eos`: the script asks for
    generation to run to max_tokens (a trace row's output length), sent where the engine takes it,
    as a model's own `ignore_eos` is."""
    extra_body = getattr(backend, "extra_body", None)
    engine = getattr(backend, "engine", "openai")
    if backend.api == "completions":
        path, body = (
            COMPLETIONS_PATH,
            completions_payload(model, completion_prompt(messages), extra_body, engine=engine),
        )
    elif backend.api == "messages":
        path, body = MESSAGES_PATH, messages_payload(model, messages, extra_body, engine=engine, tools=tools)
    else:
        path, body = CHAT_PATH, chat_payload(model, messages, extra_body, engine=engine, tools=tools)
    ignore_eos_param = engine_facts(engine).ignore_eos_param
    if ignore_eos and ignore_eos_param:
        body.setdefault(ignore_eos_param, True)  # an `extra_body` that sets it says otherwise on purpose
    return path, body


def fim_request(
    backend: object,
    model: NamedModel | str,
    conversation: object,
    prefix: str,
    suffix: str,
    extra_files: Sequence[tuple[str, str]] = (),
) -> tuple[str, dict[str, object]]:
    """The path and streaming body of one fill-in-the-middle request for a cursor between `prefix`
    and `suffix`, over the transport `choose_fim` picks for the conversation and model:
    `template` (the family's FIM tokens around them, to /v1/completions), `suffix` (OpenAI's field,
    the prompt being the prefix) or `infill` (llama.cpp's /infill, with `extra_files`, pairs of
    (file name, text), as its `input_extra`; the other transports send the open file alone). The
    conversation's `max_tokens`, when it has one, replaces the model's. No stop sequences are sent:
    where a completion ends is the model's choice (its end-of-text token), as an editor leaves it."""
    extra_body = getattr(backend, "extra_body", None)
    engine = getattr(backend, "engine", "openai")
    choice = choose_fim(engine, model, conversation)
    body = _sampling(model, engine)
    max_tokens = getattr(conversation, "max_tokens", None)
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if choice.transport == "infill":
        if "max_tokens" in body:
            body["n_predict"] = body.pop("max_tokens")  # llama.cpp's own name (it reads both)
        body["input_prefix"] = prefix
        body["input_suffix"] = suffix
        body["input_extra"] = [{"filename": name, "text": text} for name, text in extra_files]
        body["prompt"] = ""
        body["stream"] = True  # its own stream: no usage object, `timings` on the last chunk
        if extra_body:
            body.update(extra_body)
        return INFILL_PATH, body
    if choice.template is not None:
        body["prompt"] = choice.template.render(prefix, suffix)
    else:
        body["prompt"] = prefix
        body["suffix"] = suffix
    return COMPLETIONS_PATH, _streaming(body, extra_body)
