"""What goes wrong, told to users: the one exception type for bad input (a one-line message naming the
place, exit status 2), and which engine answers are a refusal of the request rather than an outage."""

from __future__ import annotations


class GrillError(Exception):
    """An error in the user's input (scenario, flags) or environment, reported as one line."""

    exit_code = 2


# 4xx says the request is wrong for this engine; 408 and 429 say "not now", which an outage or an
# overload answers. 501: the engine lacks the feature (llama-server's /infill on a model without FIM tokens).
_NOT_NOW = (408, 429)
# 5xx that say "not now" (a gateway's backend gone, overloaded, loading): an outage, even when every
# request gets the same message
RETRY_LATER_STATUSES = (502, 503, 504, 529)
# What to change for a refusal whose message is known (a piece of the engine's message -> advice).
REFUSAL_ADVICE = (
    ("--jinja", "start llama-server with --jinja, or drop tools from the conversation"),
    (
        "Infill is not supported",
        "use a model with FIM tokens, or fim: suffix or fim: template in the conversation",
    ),
)


def http_code(status: str) -> int | None:
    """The HTTP status of a record's `http_<code>` status, else None."""
    code = status.removeprefix("http_")
    return int(code) if code != status and code.isdigit() else None


def is_refusal(status: str) -> bool:
    """Whether a record's status is the engine refusing the request as sent (it will never serve it)."""
    code = http_code(status)
    return code is not None and ((400 <= code < 500 and code not in _NOT_NOW) or code == 501)


def is_known_refusal(message: str) -> bool:
    """Whether an engine's message is one it sends only to refuse a request (REFUSAL_ADVICE): one such
    failure is evidence enough, whatever its status."""
    return any(piece in message for piece, _ in REFUSAL_ADVICE)


def refusal_advice(message: str, status: str) -> str:
    """What to change so that the engine serves the request, for a refusal with this message."""
    for piece, advice in REFUSAL_ADVICE:
        if piece in message:
            return advice
    code = http_code(status)
    if code in (401, 403):
        return "check the backend's api_key (or headers)"
    if code == 404:
        return "check the backend's url and api, and the model's name"
    return "change the engine's settings or the conversation so that it serves this request"
