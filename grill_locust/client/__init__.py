"""How requests are sent and timed: a sans-IO HTTP/1.1 + SSE parser, the metric contract's timer,
and `EngineClient`, a keep-alive streaming client for OpenAI-compatible engines."""

from grill_locust.client._engine import EngineClient, Reply, StreamResult, request_once
from grill_locust.client._http import End, Head, ProtocolError, ResponseParser
from grill_locust.client._reader import StreamReader
from grill_locust.client._sse import NamedEvent, SSEParser
from grill_locust.client._timer import StreamTimer
from grill_locust.client.payloads import CHAT_PATH, COMPLETIONS_PATH, chat_payload, completions_payload

__all__ = [
    "CHAT_PATH",
    "COMPLETIONS_PATH",
    "End",
    "EngineClient",
    "Head",
    "NamedEvent",
    "ProtocolError",
    "Reply",
    "ResponseParser",
    "SSEParser",
    "StreamReader",
    "StreamResult",
    "StreamTimer",
    "chat_payload",
    "completions_payload",
    "request_once",
]
