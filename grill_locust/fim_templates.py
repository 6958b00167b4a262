"""Fill-in-the-middle prompts: each code model family's FIM tokens, in one table, and how a model's
name tells its family.

A `template` FIM request sends the text `FimTemplate.render(prefix, suffix)` to `/v1/completions`;
the engine's tokenizer turns the family's token strings into its special tokens. The simulated engine
reads the same table to count every family's FIM tokens as one token each (`FIM_TOKEN_PATTERN`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from grill_locust.engines import ENGINES, engine_facts

# how a FIM request reaches the engine: the family's tokens in a completions prompt, OpenAI's
# `suffix` field on /v1/completions, or llama.cpp's /infill
FIM_TRANSPORTS: tuple[str, ...] = ("template", "suffix", "infill")


@dataclass(frozen=True)
class FimTemplate:
    """One family's FIM prompt: `layout` places the prefix and suffix among the family's `tokens`;
    `model_names` matches the (lower-cased) model names of the family."""

    family: str
    layout: str  # with "{prefix}" and "{suffix}"
    tokens: tuple[str, ...]
    model_names: re.Pattern[str]

    def render(self, prefix: str, suffix: str) -> str:
        """The prompt for a cursor between `prefix` and `suffix` (their text is never read as layout)."""
        parts = {"prefix": prefix, "suffix": suffix}
        return _PLACEHOLDER.sub(lambda match: parts[match.group(1)], self.layout)


_PLACEHOLDER = re.compile(r"\{(prefix|suffix)\}")

FIM_TEMPLATES: dict[str, FimTemplate] = {
    template.family: template
    for template in (
        # Qwen2.5-Coder and Qwen3-Coder share these tokens (CodeGemma's have the same spelling)
        FimTemplate(
            "qwen-coder",
            "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>",
            ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
            re.compile(r"qwen.*coder|codegemma"),
        ),
        FimTemplate(
            "starcoder",
            "<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>",
            ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
            re.compile(r"starcoder"),
        ),
        # fullwidth vertical lines (U+FF5C) and the lower one-eighth block (U+2581), as in its tokenizer
        FimTemplate(
            "deepseek-coder",
            "<\uff5cfim\u2581begin\uff5c>{prefix}<\uff5cfim\u2581hole\uff5c>{suffix}<\uff5cfim\u2581end\uff5c>",
            ("<\uff5cfim\u2581begin\uff5c>", "<\uff5cfim\u2581hole\uff5c>", "<\uff5cfim\u2581end\uff5c>"),
            re.compile(r"deepseek.*coder"),
        ),
        # its SentencePiece tokens carry a word boundary: `▁<SUF>`, `▁<MID>`, and the text after
        # `<PRE>` starts a word; as text, the spaces around the prefix
        FimTemplate(
            "codellama",
            "<PRE> {prefix} <SUF>{suffix} <MID>",
            ("<PRE>", "<SUF>", "<MID>"),
            re.compile(r"code-?llama"),
        ),
        # suffix first, then the prefix, which the model continues (no middle token); the space
        # stands for the word boundary SentencePiece puts before the prefix
        FimTemplate(
            "codestral",
            "[SUFFIX]{suffix}[PREFIX] {prefix}",
            ("[SUFFIX]", "[PREFIX]"),
            re.compile(r"codestral"),
        ),
    )
}
FIM_FAMILIES: tuple[str, ...] = tuple(FIM_TEMPLATES)

# the repository-level tokens of Qwen2.5-Coder, which llama.cpp's /infill puts before other files
REPO_NAME_TOKEN = "<|repo_name|>"
FILE_SEPARATOR_TOKEN = "<|file_sep|>"

# every family's FIM tokens (longest first, so that no token matches inside a longer one)
FIM_TOKENS: tuple[str, ...] = tuple(
    sorted(
        {token for template in FIM_TEMPLATES.values() for token in template.tokens}
        | {REPO_NAME_TOKEN, FILE_SEPARATOR_TOKEN},
        key=lambda token: (-len(token), token),
    )
)
FIM_TOKEN_PATTERN = re.compile("|".join(re.escape(token) for token in FIM_TOKENS))


def guess_family(model_name: str) -> str | None:
    """The FIM family of a model named `model_name` (e.g. "Qwen/Qwen2.5-Coder-7B" -> "qwen-coder"),
    or None when no family's names match."""
    lowered = model_name.lower()
    for template in FIM_TEMPLATES.values():
        if template.model_names.search(lowered):
            return template.family
    return None


@dataclass(frozen=True)
class FimChoice:
    """How one target sends its FIM requests: the transport, and the family's template for `template`."""

    transport: str
    template: FimTemplate | None


class FimChoiceError(ValueError):
    """A target's FIM keys that cannot work: `owner` ("conversation" or "model") wrote `key` wrong."""

    def __init__(self, owner: str, key: str, message: str) -> None:
        super().__init__(message)
        self.owner = owner
        self.key = key


def choose_fim(engine: str, model: Any, conversation: object) -> FimChoice:
    """The transport and template of a FIM request: the conversation's `fim` and `fim_template` win
    over the model's; the family is the one named, else the one the model's name tells. Without a
    `fim`, a model whose family is known gets `template` (every OpenAI-compatible engine takes a
    completions prompt), any other `suffix` (OpenAI's field, which needs no family: vLLM refuses it
    with HTTP 400, llama-server and the simulated engine take it). `model` may be a served name."""
    model_name = model if isinstance(model, str) else model.name
    transport, owner = _first("fim", conversation, model)
    family, _ = _first("fim_template", conversation, model)
    if family is None:
        family = guess_family(model_name)
    if transport is None:
        transport = "template" if family is not None else "suffix"
    if transport == "template" and family is None:
        families = ", ".join(FIM_FAMILIES)
        raise FimChoiceError(
            owner,
            "fim_template",
            f"fim: template needs the model's FIM tokens, and model {model_name!r} is of no family "
            f"known by its name: give fim_template (one of {families})",
        )
    if transport == "infill" and "infill" not in engine_facts(engine).apis:
        serving = ", ".join(sorted(name for name, facts in ENGINES.items() if "infill" in facts.apis))
        raise FimChoiceError(
            owner,
            "fim",
            f"fim: infill is llama.cpp's /infill, which engine {engine!r} does not serve (engines that "
            f"do: {serving}): use fim: template or suffix",
        )
    return FimChoice(transport, FIM_TEMPLATES[family] if transport == "template" and family else None)


def _first(key: str, conversation: object, model: object) -> tuple[str | None, str]:
    """The conversation's value of `key`, else the model's, and which of them gave it."""
    value = getattr(conversation, key, None)
    if value is not None:
        return value, "conversation"
    return getattr(model, key, None), "model"
