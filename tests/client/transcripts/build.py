"""Writes the `*.http` transcripts: raw bytes of one streamed reply as each server puts them on the wire.

The events are the shapes these servers send (field order, nulls, `data:` spacing, framing), taken
from their sources and captured streams; ids and timestamps are made up. Each server's framing:
uvicorn (vLLM, SGLang, LiteLLM) and axum (TGI) and Go net/http (Ollama) and cpp-httplib
(llama.cpp) and OpenAI's API all use chunked transfer encoding, one HTTP chunk per write; Go's
flush may carry two events in one chunk. A transcript is named after its engine in the engine table
(`<engine>_<what>.http`). Run `python tests/client/transcripts/build.py` to regenerate.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent

UVICORN_HEAD = (
    "HTTP/1.1 200 OK\r\ndate: Tue, 03 Jun 2025 10:00:00 GMT\r\nserver: uvicorn\r\n"
    "content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
)
LITELLM_HEAD = (
    "HTTP/1.1 200 OK\r\ndate: Tue, 03 Jun 2025 10:00:00 GMT\r\nserver: uvicorn\r\n"
    "x-litellm-call-id: 5c1e0f0e-2b7a-4c55-9a43-0f3b8a5d2e11\r\nx-litellm-model-api-base: http://vllm:8000/v1\r\n"
    "content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
)
LLAMACPP_HEAD = (
    "HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: \r\nContent-Type: text/event-stream\r\n"
    "Keep-Alive: timeout=5, max=5\r\nServer: llama.cpp\r\nTransfer-Encoding: chunked\r\n\r\n"
)
TGI_HEAD = (
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    "x-compute-type: gpu+optimized\r\nx-accel-buffering: no\r\naccess-control-allow-origin: *\r\n"
    "transfer-encoding: chunked\r\ndate: Tue, 03 Jun 2025 10:00:00 GMT\r\n\r\n"
)
OLLAMA_HEAD = (
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nDate: Tue, 03 Jun 2025 10:00:00 GMT\r\n"
    "Transfer-Encoding: chunked\r\n\r\n"
)
OPENAI_HEAD = (
    "HTTP/1.1 200 OK\r\nDate: Tue, 03 Jun 2025 10:00:00 GMT\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
    "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\naccess-control-expose-headers: X-Request-ID\r\n"
    "openai-processing-ms: 183\r\nopenai-version: 2020-10-01\r\nx-request-id: req_4f1c0e9a7b2d\r\n"
    "cf-cache-status: DYNAMIC\r\nServer: cloudflare\r\n\r\n"
)

V = '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1748944800,"model":"devstral"'
VLLM_CHAT = [
    V
    + ',"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}',
    V + ',"choices":[{"index":0,"delta":{"content":"def"},"logprobs":null,"finish_reason":null}]}',
    V + ',"choices":[{"index":0,"delta":{"content":" add"},"logprobs":null,"finish_reason":null}]}',
    V + ',"choices":[{"index":0,"delta":{"content":"(a"},"logprobs":null,"finish_reason":null}]}',
    V + ',"choices":[{"index":0,"delta":{"content":", b"},"logprobs":null,"finish_reason":null}]}',
    V + ',"choices":[{"index":0,"delta":{"content":"):"},"logprobs":null,"finish_reason":null}]}',
    V
    + ',"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}',
    V + ',"choices":[],"usage":{"prompt_tokens":1534,"total_tokens":1539,"completion_tokens":5,'
    '"prompt_tokens_details":{"cached_tokens":1520}}}',
    "[DONE]",
]
VLLM_REASONING = [
    V
    + ',"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}',
    V + ',"choices":[{"index":0,"delta":{"reasoning":"The"},"logprobs":null,"finish_reason":null}]}',
    V + ',"choices":[{"index":0,"delta":{"reasoning":" user"},"logprobs":null,"finish_reason":null}]}',
    V + ',"choices":[{"index":0,"delta":{"content":"Use"},"logprobs":null,"finish_reason":null}]}',
    V
    + ',"choices":[{"index":0,"delta":{"content":" sorted"},"logprobs":null,"finish_reason":"length","stop_reason":null}]}',
    V + ',"choices":[],"usage":{"prompt_tokens":40,"total_tokens":44,"completion_tokens":4}}',
    "[DONE]",
]
VLLM_ERROR = [
    V
    + ',"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}',
    V + ',"choices":[{"index":0,"delta":{"content":"import"},"logprobs":null,"finish_reason":null}]}',
    V + ',"choices":[{"index":0,"delta":{"content":" os"},"logprobs":null,"finish_reason":null}]}',
    '{"error":{"object":"error","message":"EngineCore encountered an issue.","type":"InternalServerError","param":null,"code":500}}',
    "[DONE]",
]
C = '{"id":"cmpl-77a1","object":"text_completion","created":1748944800,"model":"devstral"'
# the model's first token is its end-of-text: vLLM streams the finish with no text and counts the token
VLLM_FIRST_TOKEN_STOP = [
    V
    + ',"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}',
    V
    + ',"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}',
    V + ',"choices":[],"usage":{"prompt_tokens":1534,"total_tokens":1535,"completion_tokens":1}}',
    "[DONE]",
]
VLLM_COMPLETIONS = [
    C
    + ',"choices":[{"index":0,"text":"    return","logprobs":null,"finish_reason":null,"stop_reason":null}]}',
    C + ',"choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null,"stop_reason":null}]}',
    C + ',"choices":[{"index":0,"text":" + b","logprobs":null,"finish_reason":"stop","stop_reason":null}]}',
    C + ',"choices":[],"usage":{"prompt_tokens":12,"total_tokens":16,"completion_tokens":4}}',
    "[DONE]",
]
S = '{"id":"4e0b3c0d9a8f4f6e","object":"chat.completion.chunk","created":1748944800,"model":"default"'
SGLANG_CHAT = [
    S
    + ',"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":null,"tool_calls":null},'
    '"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
    S
    + ',"choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":"Okay","tool_calls":null},'
    '"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
    S
    + ',"choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":",","tool_calls":null},'
    '"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
    S
    + ',"choices":[{"index":0,"delta":{"role":null,"content":"return","reasoning_content":null,"tool_calls":null},'
    '"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
    S
    + ',"choices":[{"index":0,"delta":{"role":null,"content":" x","reasoning_content":null,"tool_calls":null},'
    '"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
    S
    + ',"choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":null},'
    '"logprobs":null,"finish_reason":"stop","matched_stop":151645}],"usage":null}',
    S + ',"choices":[],"usage":{"prompt_tokens":4120,"total_tokens":4124,"completion_tokens":4,'
    '"prompt_tokens_details":{"cached_tokens":4096}}}',
    "[DONE]",
]
L = ',"created":1748944800,"id":"chatcmpl-X6urH4f6","model":"devstral","system_fingerprint":"b6097-9515c613","object":"chat.completion.chunk"'
LLAMACPP_CHAT = [
    '{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}]' + L + "}",
    '{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"for"}}]' + L + "}",
    '{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" i"}}]' + L + "}",
    '{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" in"}}]' + L + "}",
    '{"choices":[{"finish_reason":"stop","index":0,"delta":{}}]' + L + ',"usage":{"completion_tokens":3,'
    '"prompt_tokens":1085,"total_tokens":1088},"timings":{"cache_n":1024,"prompt_n":61,"prompt_ms":203.378,'
    '"prompt_per_token_ms":3.334,"prompt_per_second":299.9,"predicted_n":3,"predicted_ms":80.2,'
    '"predicted_per_token_ms":26.7,"predicted_per_second":37.4}}',
    "[DONE]",
]
LC = ',"created":1748944800,"model":"devstral","system_fingerprint":"b6097-9515c613","object":"text_completion","id":"chatcmpl-Qa1"'
LLAMACPP_COMPLETIONS_NO_USAGE = [
    '{"choices":[{"text":"x","index":0,"logprobs":null,"finish_reason":null}]' + LC + "}",
    '{"choices":[{"text":" =","index":0,"logprobs":null,"finish_reason":null}]' + LC + "}",
    '{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}]'
    + LC
    + ',"timings":{"cache_n":0,'
    '"prompt_n":48,"prompt_ms":20.1,"prompt_per_token_ms":0.42,"prompt_per_second":2388.1,"predicted_n":2,'
    '"predicted_ms":52.0,"predicted_per_token_ms":26.0,"predicted_per_second":38.5}}',
    "[DONE]",
]
# llama.cpp's own stream (/infill, /completion; as b11434 writes it): no `choices`, no usage, no
# [DONE]; the last chunk has `stop: true`, the counts and `timings`, and the body ends after it
LLAMACPP_INFILL_HEAD = (
    "HTTP/1.1 200 OK\r\nServer: llama.cpp\r\nAccess-Control-Allow-Origin: \r\nX-Accel-Buffering: no\r\n"
    "Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nKeep-Alive: timeout=5, max=100\r\n\r\n"
)
LLAMACPP_INFILL = [
    '{"index":0,"content":"    return","tokens":[262,470],"stop":false,"id_slot":-1,"tokens_predicted":1,'
    '"tokens_evaluated":1534}',
    '{"index":0,"content":" a","tokens":[264],"stop":false,"id_slot":-1,"tokens_predicted":2,"tokens_evaluated":1534}',
    '{"index":0,"content":" +","tokens":[488],"stop":false,"id_slot":-1,"tokens_predicted":3,"tokens_evaluated":1534}',
    '{"index":0,"content":" b","tokens":[293],"stop":false,"id_slot":-1,"tokens_predicted":4,"tokens_evaluated":1534}',
    '{"index":0,"content":"","tokens":[],"id_slot":2,"stop":true,"model":"qwen2.5-coder-1.5b","tokens_predicted":4,'
    '"tokens_evaluated":1534,"generation_settings":{"seed":4294967295,"temperature":0.0,"top_k":40,"top_p":0.95,'
    '"min_p":0.05,"stop":[],"max_tokens":64,"n_predict":64,"n_keep":0,"n_discard":0,"ignore_eos":false,"stream":true,'
    '"n_probs":0,"min_keep":0,"chat_format":"Content-only","samplers":["penalties","dry","top_k","typ_p","top_p",'
    '"min_p","xtc","temperature"],"timings_per_token":false,"lora":[]},"prompt":"<|repo_name|>myproject\\n'
    "<|file_sep|>util.py\\ndef add(a, b):\\n<|file_sep|>filename\\n<|fim_prefix|>def add(a, b):\\n<|fim_suffix|>"
    '\\n<|fim_middle|>","has_new_line":false,"truncated":false,"stop_type":"eos","stopping_word":"",'
    '"tokens_cached":1537,"timings":{"cache_n":1520,"prompt_n":14,"prompt_ms":31.2,"prompt_per_token_ms":2.23,'
    '"prompt_per_second":448.7,"predicted_n":4,"predicted_ms":61.5,"predicted_per_token_ms":15.4,'
    '"predicted_per_second":65.0}}',
]
LLAMACPP_ERROR_EVENTS = [
    (
        "data",
        '{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}]' + L + "}",
    ),
    ("data", '{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"def"}}]' + L + "}"),
    ("error", '{"code":500,"message":"Failed to parse tool call arguments","type":"server_error"}'),
]
T = '{"object":"chat.completion.chunk","id":"","created":1748944800,"model":"Qwen/Qwen2.5-Coder-7B-Instruct","system_fingerprint":"3.3.4-sha-9f38d93"'
TGI_CHAT = [
    T
    + ',"choices":[{"index":0,"delta":{"role":"assistant","content":"while"},"logprobs":null,"finish_reason":null}],"usage":null}',
    ":",  # axum keep-alive comment, sent while the engine is busy
    T
    + ',"choices":[{"index":0,"delta":{"role":"assistant","content":" True"},"logprobs":null,"finish_reason":null}],"usage":null}',
    T
    + ',"choices":[{"index":0,"delta":{"role":"assistant","content":":"},"logprobs":null,"finish_reason":"stop"}],"usage":null}',
    T + ',"choices":[],"usage":{"prompt_tokens":52,"completion_tokens":3,"total_tokens":55}}',
    "[DONE]",
]
TGI_ERROR = [
    T
    + ',"choices":[{"index":0,"delta":{"role":"assistant","content":"while"},"logprobs":null,"finish_reason":null}],"usage":null}',
    '{"error":"Request failed during generation: Server error: CUDA out of memory.","error_type":"generation"}',
]
OL = '{"id":"chatcmpl-512","object":"chat.completion.chunk","created":1748944800,"model":"qwen3:8b","system_fingerprint":"fp_ollama"'
OLLAMA_CHAT = [
    OL
    + ',"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"Hmm"},"finish_reason":null}]}',
    OL + ',"choices":[{"index":0,"delta":{"role":"assistant","content":"print"},"finish_reason":null}]}',
    OL + ',"choices":[{"index":0,"delta":{"role":"assistant","content":"(1)"},"finish_reason":null}]}',
    OL + ',"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop"}]}',
    OL + ',"choices":[],"usage":{"prompt_tokens":26,"completion_tokens":3,"total_tokens":29}}',
    "[DONE]",
]
A = '{"id": "chatcmpl-2f1e", "created": 1748944800, "model": "hosted_vllm/devstral", "object": "chat.completion.chunk", "system_fingerprint": null'
LITELLM_CHAT = [
    A
    + ', "choices": [{"index": 0, "delta": {"content": "", "role": "assistant", "function_call": null, "tool_calls": null, "audio": null}}]}',
    A
    + ', "choices": [{"index": 0, "delta": {"content": null, "role": null, "function_call": null, "tool_calls": '
    '[{"id": "call_1", "function": {"arguments": "", "name": "read_file"}, "type": "function", "index": 0}], "audio": null}}]}',
    A
    + ', "choices": [{"index": 0, "delta": {"content": null, "role": null, "function_call": null, "tool_calls": '
    '[{"id": null, "function": {"arguments": "{\\"path\\": \\"a.py\\"}", "name": null}, "type": "function", "index": 0}], "audio": null}}]}',
    A
    + ', "choices": [{"finish_reason": "tool_calls", "index": 0, "delta": {"content": null, "role": null, "function_call": null, "tool_calls": null, "audio": null}}]}',
    A + ', "choices": [], "usage": {"completion_tokens": 11, "prompt_tokens": 310, "total_tokens": 321, '
    '"completion_tokens_details": null, "prompt_tokens_details": {"audio_tokens": null, "cached_tokens": 256}}}',
    "[DONE]",
]
LITELLM_ERROR = [
    A + ', "choices": [{"index": 0, "delta": {"content": "class", "role": "assistant"}}]}',
    '{"error": {"message": "litellm.APIConnectionError: Hosted_vllmException - Connection reset by peer", "type": null, "param": null, "code": "500"}}',
]

# OpenAI's own API: `usage: null` in every chunk until the last, `service_tier`, `refusal`, an
# `obfuscation` pad on each chunk, a finish chunk with an empty delta, then usage with details
OA = '{"id":"chatcmpl-BXz1","object":"chat.completion.chunk","created":1748944800,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_6f2eabb9a5"'
OPENAI_CHAT = [
    OA
    + ',"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"q3L"}',
    OA
    + ',"choices":[{"index":0,"delta":{"content":"def"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x1Yz9"}',
    OA
    + ',"choices":[{"index":0,"delta":{"content":" add"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Pq0"}',
    OA
    + ',"choices":[{"index":0,"delta":{"content":"():"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"7Hd2"}',
    OA
    + ',"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null,"obfuscation":"a9"}',
    OA + ',"choices":[],"usage":{"prompt_tokens":1100,"completion_tokens":3,"total_tokens":1103,'
    '"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":'
    '{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},'
    '"obfuscation":"Zk"}',
    "[DONE]",
]

# Anthropic's Messages API (`/v1/messages`): every event an `event:` line naming its JSON `type`.
# llama-server's (b11434, captured): input_tokens leaves out the cached tokens it reports apart; it
# writes message_start, the block start and the first delta in one chunk, the last three in one.
LLAMACPP_MESSAGES = [
    (
        "message_start",
        '{"type":"message_start","message":{"id":"chatcmpl-Qm3vT8","type":"message","role":"assistant",'
        '"content":[],"model":"devstral","stop_reason":null,"stop_sequence":null,"usage":'
        '{"cache_read_input_tokens":1024,"input_tokens":61,"output_tokens":0}}}',
    ),
    (
        "content_block_start",
        '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
    ),
    (
        "content_block_delta",
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"for"}}',
    ),
    (
        "content_block_delta",
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" i"}}',
    ),
    (
        "content_block_delta",
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" in"}}',
    ),
    ("content_block_stop", '{"type":"content_block_stop","index":0}'),
    (
        "message_delta",
        '{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}',
    ),
    ("message_stop", '{"type":"message_stop"}'),
]
# vLLM's (its OpenAI stream converted): a thinking block closed by a signature_delta, then the text;
# usage without cache fields, input_tokens again in message_delta
VM = '{"type":"content_block_delta","index":'
VLLM_MESSAGES_THINKING = [
    (
        "message_start",
        '{"type":"message_start","message":{"id":"chatcmpl-8c1d","content":[],"model":"Qwen/Qwen3-8B",'
        '"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":40,"output_tokens":0}}}',
    ),
    (
        "content_block_start",
        '{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}',
    ),
    ("content_block_delta", VM + '0,"delta":{"type":"thinking_delta","thinking":"The"}}'),
    ("content_block_delta", VM + '0,"delta":{"type":"thinking_delta","thinking":" user"}}'),
    ("content_block_delta", VM + '0,"delta":{"type":"signature_delta","signature":"5e0c2b9f41a74d0c"}}'),
    ("content_block_stop", '{"type":"content_block_stop","index":0}'),
    (
        "content_block_start",
        '{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}',
    ),
    ("content_block_delta", VM + '1,"delta":{"type":"text_delta","text":"Use"}}'),
    ("content_block_delta", VM + '1,"delta":{"type":"text_delta","text":" sorted"}}'),
    ("content_block_stop", '{"type":"content_block_stop","index":1}'),
    (
        "message_delta",
        '{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"input_tokens":40,"output_tokens":4}}',
    ),
    ("message_stop", '{"type":"message_stop"}'),
]
# Anthropic's own stream as LiteLLM passes it through: a ping, text, then a tool_use block whose
# input arrives as JSON pieces (the first one empty); all three input counts in the usage
AM = '{"type": "content_block_delta", "index": '
LITELLM_MESSAGES_TOOL_USE = [
    (
        "message_start",
        '{"type": "message_start", "message": {"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", '
        '"role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, '
        '"stop_sequence": null, "usage": {"input_tokens": 54, "cache_creation_input_tokens": 0, '
        '"cache_read_input_tokens": 256, "output_tokens": 1}}}',
    ),
    ("ping", '{"type": "ping"}'),
    (
        "content_block_start",
        '{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}',
    ),
    ("content_block_delta", AM + '0, "delta": {"type": "text_delta", "text": "Reading it."}}'),
    ("content_block_stop", '{"type": "content_block_stop", "index": 0}'),
    (
        "content_block_start",
        '{"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", '
        '"id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "read_file", "input": {}}}',
    ),
    ("content_block_delta", AM + '1, "delta": {"type": "input_json_delta", "partial_json": ""}}'),
    (
        "content_block_delta",
        AM + '1, "delta": {"type": "input_json_delta", "partial_json": "{\\"path\\": "}}',
    ),
    ("content_block_delta", AM + '1, "delta": {"type": "input_json_delta", "partial_json": "\\"a.py\\"}"}}'),
    ("content_block_stop", '{"type": "content_block_stop", "index": 1}'),
    (
        "message_delta",
        '{"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, '
        '"usage": {"output_tokens": 21}}',
    ),
    ("message_stop", '{"type": "message_stop"}'),
]
# an overloaded upstream mid-stream: Anthropic's `event: error`, then the body ends
LITELLM_MESSAGES_OVERLOADED = [
    *LITELLM_MESSAGES_TOOL_USE[:3],
    ("content_block_delta", AM + '0, "delta": {"type": "text_delta", "text": "class"}}'),
    ("error", '{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'),
]
# a fault, not vLLM's habit: a delta for a block that was never started, the rest in order
VLLM_MESSAGES_OUT_OF_ORDER = [
    VLLM_MESSAGES_THINKING[0],
    ("content_block_delta", VM + '0,"delta":{"type":"text_delta","text":"def"}}'),
    ("content_block_delta", VM + '0,"delta":{"type":"text_delta","text":" f"}}'),
    ("content_block_stop", '{"type":"content_block_stop","index":0}'),
    (
        "message_delta",
        '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":40,"output_tokens":2}}',
    ),
    ("message_stop", '{"type":"message_stop"}'),
]


def chunked(body_pieces: list[str]) -> str:
    out = []
    for piece in body_pieces:
        size = len(piece.encode("utf-8"))
        out.append(f"{size:x}\r\n{piece}\r\n")
    out.append("0\r\n\r\n")
    return "".join(out)


def sse(events: list[str], *, space: bool = True, newline: str = "\n") -> list[str]:
    prefix = "data: " if space else "data:"
    return [(e if e.startswith(":") else prefix + e) + newline + newline for e in events]


def named(events: list[tuple[str, str]]) -> list[str]:
    return [f"event: {name}\ndata: {data}\n\n" for name, data in events]


def write(name: str, head: str, pieces: list[str]) -> None:
    (HERE / f"{name}.http").write_bytes((head + chunked(pieces)).encode("utf-8"))


def main() -> None:
    write("vllm_chat", UVICORN_HEAD, sse(VLLM_CHAT))
    write("vllm_first_token_stop", UVICORN_HEAD, sse(VLLM_FIRST_TOKEN_STOP))
    write("vllm_reasoning", UVICORN_HEAD, sse(VLLM_REASONING))
    write("vllm_error_midstream", UVICORN_HEAD, sse(VLLM_ERROR))
    write("vllm_completions", UVICORN_HEAD, sse(VLLM_COMPLETIONS))
    write("sglang_chat", UVICORN_HEAD, sse(SGLANG_CHAT))
    write("llamacpp_chat", LLAMACPP_HEAD, sse(LLAMACPP_CHAT))
    write("llamacpp_completions_no_usage", LLAMACPP_HEAD, sse(LLAMACPP_COMPLETIONS_NO_USAGE))
    write("llamacpp_infill", LLAMACPP_INFILL_HEAD, sse(LLAMACPP_INFILL))
    # llama.cpp ends a failed stream with `error: {...}` and closes the body without [DONE]
    write(
        "llamacpp_error_midstream",
        LLAMACPP_HEAD,
        [f"{field}: {data}\n\n" for field, data in LLAMACPP_ERROR_EVENTS],
    )
    write("tgi_chat", TGI_HEAD, sse(TGI_CHAT, space=False))
    write("tgi_error_midstream", TGI_HEAD, sse(TGI_ERROR, space=False))
    ollama = sse(OLLAMA_CHAT)
    # Go flushes after each write, but two writes can leave in one chunk
    write("ollama_chat", OLLAMA_HEAD, [ollama[0], ollama[1] + ollama[2], *ollama[3:]])
    write("litellm_tool_calls", LITELLM_HEAD, sse(LITELLM_CHAT))
    write("litellm_error_midstream", LITELLM_HEAD, sse(LITELLM_ERROR))
    # sse-starlette (used by several OpenAI-compatible servers and proxies) ends lines with CRLF
    write("litellm_crlf", LITELLM_HEAD, sse(VLLM_CHAT, newline="\r\n"))
    write("openai_chat", OPENAI_HEAD, sse(OPENAI_CHAT))
    llama = named(LLAMACPP_MESSAGES)
    write("llamacpp_messages", LLAMACPP_HEAD, ["".join(llama[:3]), *llama[3:5], "".join(llama[5:])])
    write("vllm_messages_thinking", UVICORN_HEAD, named(VLLM_MESSAGES_THINKING))
    write("vllm_messages_out_of_order", UVICORN_HEAD, named(VLLM_MESSAGES_OUT_OF_ORDER))
    write("litellm_messages_tool_use", LITELLM_HEAD, named(LITELLM_MESSAGES_TOOL_USE))
    write("litellm_messages_overloaded", LITELLM_HEAD, named(LITELLM_MESSAGES_OVERLOADED))


if __name__ == "__main__":
    main()
