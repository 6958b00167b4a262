"""How requests are sent and timed: a sans-IO HTTP/1.1 + SSE parser, the metric contract's timers
(OpenAI's chunks, Anthropic's Messages events), `EngineClient`, a keep-alive streaming client for
OpenAI- and Anthropic-compatible engines, and `backend_http`, the backend's plain calls (models,
tokenize, health, /metrics)."""

from grill_locust.client._engine import EngineClient, StreamResult
from grill_locust.client._http import End, Head, ProtocolError, ResponseParser
from grill_locust.client._messages import MessagesTimer
from grill_locust.client._reader import StreamReader
from grill_locust.client._sse import NamedEvent, SSEParser
from grill_locust.client._timer import StreamTimer, ToolCall
from grill_locust.client.backend_http import HttpReply, NoReply, TokenizeError, request_once
from grill_locust.client.payloads import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    INFILL_PATH,
    MESSAGES_PATH,
    chat_payload,
    completion_prompt,
    completions_payload,
    fim_request,
    messages_payload,
    request_for,
)

__all__ = [
    "CHAT_PATH",
    "COMPLETIONS_PATH",
    "INFILL_PATH",
    "MESSAGES_PATH",
    "End",
    "EngineClient",
    "Head",
    "HttpReply",
    "MessagesTimer",
    "NamedEvent",
    "NoReply",
    "ProtocolError",
    "ResponseParser",
    "SSEParser",
    "StreamReader",
    "StreamResult",
    "StreamTimer",
    "TokenizeError",
    "ToolCall",
    "chat_payload",
    "completion_prompt",
    "completions_payload",
    "fim_request",
    "messages_payload",
    "request_for",
    "request_once",
]
