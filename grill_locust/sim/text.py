"""What the simulated engine reads and writes: the chat template, token ids, and deterministic output.

Prompts are tokenized with the shared tokenizer (`grill_locust.tokens`), so `/tokenize`,
`usage` and the workload agree exactly. Chat messages go through a fixed template so that a
conversation's history is a stable token prefix from one turn to the next (and can be cached).
Output is pseudo-code taken from a fixed corpus at an offset chosen by the seed; each output token's
JSON-escaped form is rendered once, so streaming only concatenates bytes.
"""

from __future__ import annotations

import json
from typing import Any

from grill_locust.fim_templates import FIM_TOKEN_PATTERN, FIM_TOKENS
from grill_locust.sim.tools import tool_functions
from grill_locust.tokens import token_id, tokenize

_ID_CACHE: dict[str, int] = {}
_ID_CACHE_MAX = 500_000


def prompt_tokens(text: str) -> list[str]:
    """The token strings of a prompt: every FIM family's tokens (`<|fim_prefix|>`, `[SUFFIX]`...) one
    token each, as engines read their special tokens in a prompt, the text between them tokenized
    on its own."""
    if not any(token in text for token in FIM_TOKENS):  # a tenth of the regular expression's time
        return tokenize(text)
    tokens: list[str] = []
    start = 0
    for match in FIM_TOKEN_PATTERN.finditer(text):
        tokens += tokenize(text[start : match.start()])
        tokens.append(match.group())
        start = match.end()
    tokens += tokenize(text[start:])
    return tokens


def token_ids(text: str) -> list[int]:
    """Token ids of `text`, read as a prompt (`prompt_tokens`); cached per distinct token string."""
    cache = _ID_CACHE
    if len(cache) > _ID_CACHE_MAX:
        cache.clear()
    ids: list[int] = []
    append = ids.append
    get = cache.get
    for token in prompt_tokens(text):
        value = get(token)
        if value is None:
            value = token_id(token)
            cache[token] = value
        append(value)
    return ids


def message_text(content: object) -> str:
    """Text of a chat message's content: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


def render_chat(messages: list[dict[str, Any]], tools: list[dict[str, object]] | None = None) -> str:
    """The deterministic chat template: the offered tools first (one JSON line each, as chat templates
    put them in the system prompt), then `<|role|>\\n content \\n` per message with an assistant's
    tool calls after its text (`<|tool_call|>` name arguments; ids are not rendered, as most
    templates leave them out), then the assistant tag."""
    pieces = []
    if tools:
        lines = [
            json.dumps(
                {
                    "name": f["name"],
                    "description": f.get("description", ""),
                    "parameters": f.get("parameters", {}),
                },
                ensure_ascii=False,
            )
            for f in tool_functions(tools)
        ]
        pieces.append("<|tools|>\n" + "\n".join(lines) + "\n")
    for message in messages:
        pieces.append(f"<|{message.get('role', 'user')}|>\n{message_text(message.get('content'))}\n")
        for call in message.get("tool_calls") or ():
            function = (call.get("function") if isinstance(call, dict) else None) or {}
            pieces.append(f"<|tool_call|>{function.get('name', '')} {function.get('arguments', '')}\n")
    pieces.append("<|assistant|>\n")
    return "".join(pieces)


_CORPUS = '''def handle_request(request, context):
    """Validate the request and route it to the right handler."""
    if request.method not in ("GET", "POST"):
        raise MethodNotAllowed(request.method)
    user = context.auth.current_user(request)
    cache_key = f"{user.id}:{request.path}"
    cached = context.cache.get(cache_key)
    if cached is not None:
        return cached
    for attempt in range(3):
        try:
            response = context.router.dispatch(request, user=user)
            break
        except TransientError as error:
            context.log.warning("retrying %s after %s", request.path, error)
            time.sleep(0.1 * (attempt + 1))
    else:
        return Response(status=503, body={"error": "unavailable"})
    context.cache.set(cache_key, response, ttl=30)
    return response


class LruCache:
    def __init__(self, capacity: int = 128) -> None:
        self.capacity = capacity
        self._items: dict[str, object] = {}

    def get(self, key: str) -> object | None:
        value = self._items.pop(key, None)
        if value is not None:
            self._items[key] = value
        return value

    def set(self, key: str, value: object) -> None:
        self._items.pop(key, None)
        self._items[key] = value
        while len(self._items) > self.capacity:
            oldest = next(iter(self._items))
            del self._items[oldest]
'''

OUTPUT_TOKENS: list[str] = tokenize(_CORPUS)
OUTPUT_IDS: list[int] = [token_id(t) for t in OUTPUT_TOKENS]
# each token as a JSON string literal (quotes included), ready to splice into a chunk
OUTPUT_JSON: list[bytes] = [json.dumps(t).encode() for t in OUTPUT_TOKENS]
VOCAB_SIZE = len(OUTPUT_TOKENS)


def output_text(start: int, count: int) -> str:
    """The `count` output tokens that begin at corpus offset `start`, joined."""
    return "".join(OUTPUT_TOKENS[(start + i) % VOCAB_SIZE] for i in range(count))


def output_ids(start: int, count: int) -> list[int]:
    return [OUTPUT_IDS[(start + i) % VOCAB_SIZE] for i in range(count)]
