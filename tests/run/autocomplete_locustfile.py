"""locustfiles/coding.py, plus a stand-in for `payloads.fim_request` while the FIM transports are not
in this tree: OpenAI's `suffix` field on /v1/completions (the prompt is the prefix). Once the real
function is there, this file runs it untouched."""

from typing import Any

import locust  # noqa: F401  (gevent's monkey patching first, as in coding.py)

import grill_locust.run.listeners  # noqa: F401
from grill_locust.client import payloads
from grill_locust.run.shape import CampaignShape  # noqa: F401
from grill_locust.run.user import CampaignUser  # noqa: F401


def _suffix_request(
    backend: Any, model: Any, conversation: Any, prefix: str, suffix: str, extra_files: Any = ()
) -> tuple[str, dict[str, Any]]:
    body = payloads.completions_payload(model, prefix, backend.extra_body, engine=backend.engine)
    body["suffix"] = suffix
    return payloads.COMPLETIONS_PATH, body


if not hasattr(payloads, "fim_request"):
    payloads.fim_request = _suffix_request  # type: ignore[attr-defined]
