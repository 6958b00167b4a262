"""FIM prompts and request bodies: each family's tokens exactly, the family told by the model's name,
which transport a target gets, and the body each transport sends (client/payloads.py `fim_request`)."""

from __future__ import annotations

import pytest

from grill_locust.client import COMPLETIONS_PATH, INFILL_PATH, fim_request
from grill_locust.config import Backend, Model
from grill_locust.fim_templates import (
    FIM_TEMPLATES,
    FIM_TOKENS,
    FimChoiceError,
    choose_fim,
    guess_family,
)
from grill_locust.scenario import Conversation, validate_conversation
from grill_locust.sim.text import prompt_tokens
from grill_locust.tokens import tokenize

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\nprint(add(1, 2))\n"

RENDERED = {
    "qwen-coder": f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>",
    "starcoder": f"<fim_prefix>{PREFIX}<fim_suffix>{SUFFIX}<fim_middle>",
    "deepseek-coder": f"<\uff5cfim\u2581begin\uff5c>{PREFIX}<\uff5cfim\u2581hole\uff5c>{SUFFIX}<\uff5cfim\u2581end\uff5c>",
    "codellama": f"<PRE> {PREFIX} <SUF>{SUFFIX} <MID>",
    "codestral": f"[SUFFIX]{SUFFIX}[PREFIX] {PREFIX}",
}


def test_every_family_has_its_rendering_pinned() -> None:
    assert sorted(RENDERED) == sorted(FIM_TEMPLATES)


@pytest.mark.parametrize("family", sorted(RENDERED))
def test_each_template_renders_exactly_the_familys_tokens(family: str) -> None:
    assert FIM_TEMPLATES[family].render(PREFIX, SUFFIX) == RENDERED[family]


def test_deepseek_tokens_use_fullwidth_bars_and_the_block_character() -> None:
    begin = FIM_TEMPLATES["deepseek-coder"].tokens[0]
    assert [hex(ord(c)) for c in begin if ord(c) > 127] == ["0xff5c", "0x2581", "0xff5c"]


def test_text_that_looks_like_a_placeholder_is_sent_as_written() -> None:
    rendered = FIM_TEMPLATES["qwen-coder"].render("x = '{suffix}'", "y = '{prefix}'")
    assert rendered == "<|fim_prefix|>x = '{suffix}'<|fim_suffix|>y = '{prefix}'<|fim_middle|>"


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("Qwen/Qwen2.5-Coder-7B", "qwen-coder"),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen-coder"),
        ("bigcode/starcoder2-15b", "starcoder"),
        ("deepseek-ai/deepseek-coder-6.7b-base", "deepseek-coder"),
        ("deepseek-ai/DeepSeek-Coder-V2-Lite-Base", "deepseek-coder"),
        ("codellama/CodeLlama-13b-hf", "codellama"),
        ("mistralai/Codestral-22B-v0.1", "codestral"),
        ("Qwen/Qwen2.5-7B-Instruct", None),
        ("gemma3-270m", None),
    ],
)
def test_family_is_told_by_the_model_name(name: str, family: str | None) -> None:
    assert guess_family(name) == family


def conversation(**keys: object) -> Conversation:
    return validate_conversation({"name": "c", "kind": "short-baseline", **keys})


def test_default_transport_is_the_template_when_the_family_is_known_else_suffix() -> None:
    known = choose_fim("vllm", Model(name="Qwen/Qwen2.5-Coder-7B"), conversation())
    assert (known.transport, known.template) == ("template", FIM_TEMPLATES["qwen-coder"])
    assert choose_fim("vllm", Model(name="my-model"), conversation()).transport == "suffix"


def test_the_conversations_keys_win_over_the_models() -> None:
    model = Model(name="my-model", fim="suffix", fim_template="starcoder")
    choice = choose_fim("llamacpp", model, conversation(fim="template", fim_template="codellama"))
    assert (choice.transport, choice.template) == ("template", FIM_TEMPLATES["codellama"])
    assert choose_fim("llamacpp", model, conversation(fim="infill")).transport == "infill"
    assert choose_fim("llamacpp", model, conversation()).transport == "suffix"


def test_template_without_a_family_and_infill_without_the_route_are_refused() -> None:
    with pytest.raises(FimChoiceError, match="give fim_template") as unknown:
        choose_fim("vllm", Model(name="my-model"), conversation(fim="template"))
    assert (unknown.value.owner, unknown.value.key) == ("conversation", "fim_template")
    with pytest.raises(FimChoiceError, match="does not serve") as no_infill:
        choose_fim("vllm", Model(name="Qwen/Qwen2.5-Coder-7B", fim="infill"), conversation())
    assert (no_infill.value.owner, no_infill.value.key) == ("model", "fim")


LLAMA = Backend(
    name="llama", engine="llamacpp", url="http://127.0.0.1:8080", extra_body={"cache_prompt": True}
)
CODER = Model(name="Qwen/Qwen2.5-Coder-7B", max_tokens=256, ignore_eos=True)


def test_template_body_is_a_streaming_completion_of_the_rendered_prompt() -> None:
    path, body = fim_request(LLAMA, CODER, conversation(), PREFIX, SUFFIX)
    assert path == COMPLETIONS_PATH
    assert body["prompt"] == RENDERED["qwen-coder"] and "suffix" not in body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["max_tokens"], body["ignore_eos"], body["cache_prompt"]) == (256, True, True)


def test_suffix_body_sends_the_prefix_as_prompt_and_openais_suffix_field() -> None:
    path, body = fim_request(LLAMA, CODER, conversation(fim="suffix"), PREFIX, SUFFIX)
    assert path == COMPLETIONS_PATH
    assert (body["prompt"], body["suffix"]) == (PREFIX, SUFFIX)


def test_infill_body_has_llamacpps_fields_and_the_other_files() -> None:
    files = [("util/strings.py", "def strip(s):\n    return s.strip()\n")]
    path, body = fim_request(LLAMA, CODER, conversation(fim="infill"), PREFIX, SUFFIX, files)
    assert path == INFILL_PATH
    assert (body["input_prefix"], body["input_suffix"], body["prompt"]) == (PREFIX, SUFFIX, "")
    assert body["input_extra"] == [{"filename": "util/strings.py", "text": files[0][1]}]
    assert body["n_predict"] == 256 and "max_tokens" not in body
    assert body["stream"] is True and "stream_options" not in body  # its own stream has no usage
    assert body["cache_prompt"] is True


def test_the_conversations_max_tokens_replaces_the_models() -> None:
    short = type("Autocomplete", (), {"max_tokens": 48, "fim": None, "fim_template": None})()
    _, body = fim_request(LLAMA, CODER, short, PREFIX, SUFFIX)
    assert body["max_tokens"] == 48


def test_the_simulator_counts_each_fim_token_as_one() -> None:
    for family, template in FIM_TEMPLATES.items():
        tokens = prompt_tokens(template.render(PREFIX, SUFFIX))
        for token in template.tokens:
            assert tokens.count(token) == 1, family
    assert set(FIM_TOKENS) >= {token for t in FIM_TEMPLATES.values() for token in t.tokens}
    text = RENDERED["qwen-coder"]
    assert len(prompt_tokens(text)) == len(tokenize(PREFIX)) + len(tokenize(SUFFIX)) + 3
