"""Short, secret-free one-line summaries of what an engine said when it did not stream as asked."""

from __future__ import annotations

import json
import re

MAX_ERROR_CHARS = 200
# what `scrub` reads of a text: a secret cut at this bound could only show past what it keeps
_SCRUBBED_CHARS = 16 * 1024
_SECRET_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[^\s\"',;]+"),
    re.compile(r"\b(sk|pk|rk|hf|gsk|xai)[-_][A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)((?:api[_-]?key|token|secret|password)[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&]+"),
)
_HTML_TITLE = re.compile(r"(?is)<title[^>]*>(.*?)</title>")
_HTML_TAG = re.compile(r"(?s)<[^>]+>")
_SPACES = re.compile(r"\s+")


def scrub(text: str, secrets: tuple[str, ...] = (), limit: int = MAX_ERROR_CHARS) -> str:
    """Remove known secrets and anything shaped like a key or bearer token; one line of at most
    `limit` characters. Callers pass the whole text: cut first, a secret's first half would stay."""
    text = text[:_SCRUBBED_CHARS]
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = _SECRET_PATTERNS[0].sub(r"\1***", text)
    text = _SECRET_PATTERNS[1].sub("***", text)
    text = _SECRET_PATTERNS[2].sub(r"\1***", text)
    text = _SPACES.sub(" ", text).strip()
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def error_message(payload: object) -> str | None:
    """The human message inside an OpenAI-, vLLM-, TGI-, FastAPI- or llama.cpp-shaped error object."""
    if isinstance(payload, str):
        return payload
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):
        return error_message(error) or json.dumps(error)
    if isinstance(error, str) and error:
        return error
    for key in ("message", "detail", "msg"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value
        if value:  # FastAPI validation errors: a list of dicts
            return json.dumps(value)
    return None


# Anthropic's error types and the HTTP status each stands for, as its API documents them
ANTHROPIC_ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


def error_code(payload: object) -> int | None:
    """An HTTP-like status code inside an error object (vLLM `code`, llama.cpp `code`, LiteLLM "500",
    the type of Anthropic's `{"type": "error", "error": {"type": ...}}`)."""
    if not isinstance(payload, dict):
        return None
    inner = payload.get("error")
    if isinstance(inner, dict):
        found = error_code(inner)
        if found is not None:
            return found
        if payload.get("type") == "error":
            found = ANTHROPIC_ERROR_STATUS.get(str(inner.get("type")))
            if found is not None:
                return found
    for key in ("code", "status", "status_code"):
        value = payload.get(key)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, int) and 400 <= value <= 599:
            return value
    return None


def summarize_body(body: bytes, content_type: str) -> str:
    """What a non-stream body says, in one line: the JSON error message, an HTML page's title, or
    the start of the text."""
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        return "empty body"
    if text[:1] in "{[":
        try:
            payload = json.loads(text)
        except ValueError:
            pass
        else:
            message = error_message(payload)
            if message:
                return message
            return text
    if "html" in content_type.lower() or text[:1] == "<":
        title = _HTML_TITLE.search(text)
        if title and title.group(1).strip():
            return "HTML page: " + title.group(1).strip()
        return "HTML page: " + _HTML_TAG.sub(" ", text)
    return text
