"""The registry of workload kinds (name -> kind): below every kind's module, so that a conversation's
model can ask for its kind, and the other kinds' fields, without importing the kinds themselves."""

from __future__ import annotations

from typing import TYPE_CHECKING, get_args

if TYPE_CHECKING:
    from grill_locust.workload.kinds._kind import WorkloadKind

# name -> kind, in the order errors list them
WORKLOAD_KINDS: dict[str, WorkloadKind] = {}
# built-in conversation name -> its kind's name
BUILTIN_CONVERSATION_KINDS: dict[str, str] = {}


def register(kind: WorkloadKind) -> WorkloadKind:
    """Add a kind; a name taken, or a model whose `kind` literal is not the kind's name, is refused."""
    if kind.name in WORKLOAD_KINDS:
        raise ValueError(f"workload kind {kind.name!r} is already registered")
    literal = get_args(kind.conversation_model.model_fields["kind"].annotation)
    if literal != (kind.name,):
        model = kind.conversation_model.__name__
        raise ValueError(f"workload kind {kind.name!r}: {model}.kind must be Literal[{kind.name!r}]")
    WORKLOAD_KINDS[kind.name] = kind
    if kind.builtin is not None:
        BUILTIN_CONVERSATION_KINDS[kind.builtin] = kind.name
    return kind


def unregister(name: str) -> None:
    """Remove a kind added by `register` (a test's, once it has run)."""
    kind = WORKLOAD_KINDS.pop(name)
    if kind.builtin is not None:
        BUILTIN_CONVERSATION_KINDS.pop(kind.builtin, None)


def kind_named(name: str) -> WorkloadKind:
    return WORKLOAD_KINDS[name]


def kind_names() -> tuple[str, ...]:
    return tuple(WORKLOAD_KINDS)


def names_where(has: str) -> list[str]:
    """The names of the kinds whose attribute `has` (a flag of WorkloadKind) is true: for records,
    which carry their kind's name."""
    return [kind.name for kind in WORKLOAD_KINDS.values() if getattr(kind, has)]


def size_fields() -> tuple[str, ...]:
    """Every size field of any kind, in the registry's order."""
    return tuple(dict.fromkeys(field for kind in WORKLOAD_KINDS.values() for field in kind.sizes))
