"""What a conversation of every kind holds (`ConversationBase`: its name, kind, seed, SLO and FIM
transport). Each kind's model, in the kind's module, adds its sizes with their defaults and checks; the
scenario file's `Conversation` is the union of those models (grill_locust/scenario/)."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, get_args

from pydantic import BaseModel, Field, field_validator, model_validator

from grill_locust.config import ConversationSlo, Count, FimTransport, Frozen, Model, check_fim_family
from grill_locust.workload.kinds._registry import WORKLOAD_KINDS, size_fields

if TYPE_CHECKING:
    from grill_locust.workload.kinds._kind import SizeDefault, WorkloadKind

# the sizes a model sets too, each with the model's field: a conversation's written value wins, then the
# model's written one, then the kind's default (ConversationBase.settled)
MODEL_SETTINGS: dict[str, str] = {
    "max_tokens": "max_tokens",
    "step_max_tokens": "max_tokens",
    "final_max_tokens": "max_tokens",
    "ignore_eos": "ignore_eos",
}


class ConversationBase(Frozen):
    """What one simulated user sends in one iteration: a workload kind and its sizes (tokens). These keys
    every kind has; each kind's own follow, under its name."""

    name: str = Field(min_length=1)
    """The conversation's name, as targets and mixes refer to it (a built-in one's name implies its kind)."""
    kind: str
    """The workload kind, one of those below (workload/kinds/); `turns` imply `fixed`, a built-in
    conversation's name its own kind."""
    description: str = ""
    """Free text, for the reader of the scenario."""
    seed: Count = 0
    """What draws the conversation's text and shapes (from its name when not given)."""
    salt: bool = True
    """fixed: a line of its own first in each iteration, so none shares a cached prefix by accident."""
    slo: ConversationSlo | None = None
    """This conversation's own service level, over the scenario's `slo` (its bounds win)."""
    fim: FimTransport | None = None
    """How FIM requests go: over the model's tokens (template), `suffix`, or /infill."""
    fim_template: str | None = None
    """The model's FIM family, when its name does not tell it."""

    @field_validator("fim_template")
    @classmethod
    def _known_fim_family(cls, value: str | None) -> str | None:
        return check_fim_family(value)

    @model_validator(mode="before")
    @classmethod
    def _own_keys_and_seed(cls, data: Any) -> Any:
        """A size left empty takes its kind's default; another kind's size, or a key no kind has, is
        refused naming the keys this kind uses; the seed comes from the name when not given."""
        if not isinstance(data, dict) or cls is ConversationBase:
            return data
        own, kind = cls.model_fields, kind_name(cls)
        others = set(size_fields()) - set(own)
        checked = {}
        for key, value in data.items():
            if key in own:
                if value is not None or key in ConversationBase.model_fields:
                    checked[key] = value
            elif key in others:
                if value not in (None, []):  # an empty one is as good as not written
                    owners = [other for other in WORKLOAD_KINDS.values() if key in other.sizes]
                    if all(owner.scripted_turns for owner in owners):  # llm-grill's turns
                        raise ValueError(f"{key}: only for kind {owners[0].name!r}, not {kind!r}")
                    used = ", ".join(kind_sizes(cls)) or "none"
                    raise ValueError(f"{key}: not used by kind {kind!r} (it uses: {used})")
            else:
                raise ValueError(f"{key}: unknown key (known: {', '.join(sorted(own))})")
        if checked.get("seed") is None:
            checked["seed"] = zlib.crc32(str(checked.get("name")).encode("utf-8"))
        return checked

    @property
    def workload_kind(self) -> WorkloadKind:
        return WORKLOAD_KINDS[self.kind]

    @property
    def requests_per_iteration(self) -> float:
        """Requests one iteration (one whole conversation) sends; for an agentic session, the expected
        number (workload/agentic.py says how it is estimated)."""
        return self.workload_kind.requests_per_iteration(self)

    def settled(self, model: Model) -> ConversationBase:
        """This conversation as `model` drives it: each setting both give (MODEL_SETTINGS) is the
        conversation's where it wrote it, else the model's where the model wrote it, else the kind's
        default. Settling again changes nothing (the values settled count as written)."""
        update = {
            key: getattr(model, model_key)
            for key, model_key in MODEL_SETTINGS.items()
            if key in type(self).model_fields
            and key not in self.model_fields_set
            and model_key in model.model_fields_set
        }
        return self.model_copy(update=update) if update else self

    def sending(self, model: Model) -> Model:
        """`model`'s sampling settings as this (settled) conversation's requests send them: its
        max_tokens and ignore_eos where its kind has them (an agent's steps set theirs per request)."""
        return model.with_settings(
            max_tokens=getattr(self, "max_tokens", None),
            ignore_eos=getattr(self, "ignore_eos", None),
        )


def kind_name(model: type[ConversationBase]) -> str:
    """The kind a model is of: the literal of its `kind` field."""
    literal = get_args(model.model_fields["kind"].annotation)
    return str(literal[0]) if literal else model.__name__


@functools.cache
def kind_sizes(model: type[ConversationBase]) -> Mapping[str, SizeDefault]:
    """A kind's own fields (those beyond `ConversationBase`'s) and their defaults (None: none)."""
    sizes: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if name in ConversationBase.model_fields:
            continue
        default = None if field.is_required() else field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            default = default.model_dump()
        sizes[name] = default
    return sizes
