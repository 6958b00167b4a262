"""The conversations users send: one generator per workload kind, sized in tokens, seeded.

`build_workload(conversation, model)` returns a `Workload`; `workload.script(user_key, iteration)` gives
the messages of one whole conversation (a `ConversationScript`). The same (seed, user_key, iteration)
gives the same script in every process, so master and workers agree without sending prompts around.

Every sized message is a head (a question, a request id, names between backticks) and code from the
standard library that starts at a definition. Sizing has two modes:
- exact on the approximate tokenizer (`tokens.py`, which the simulated engine also uses), or scaled
  by a backend's tokens per approximate token when its `/tokenize` gives counts only;
- measured (a `TokenCounter` whose `measured` corpus holds the backend's own token pieces): the head
  is a template measured once with reference values, the values' own spans are measured too, and the
  code is cut after exactly the tokens left (see calibrate.py). Heads keep every variable part between
  a word end and a space-led word, or at a line start, where tokenizers do not merge across.

Request ids open the messages meant to be distinct; each carries at least ID_ENTROPY_BITS, so no two
ids of any run (seeded by run session, phase, attempt, worker and user) meet in practice. Exact mode:
words of eight capital letters, one approximate token each. Measured mode: words the backend keeps as
one token each wherever an id puts them (`MeasuredCorpus.id_words`), so the id is token-exact too.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from grill_locust.client.payloads import completion_prompt
from grill_locust.tokens import fit_tokens
from grill_locust.workload.calibrate import MeasuredCorpus, TokenCounter, name_span
from grill_locust.workload.corpus import Corpus, Excerpt, stdlib_corpus
from grill_locust.workload.dataset import DatasetRow, load_dataset
from grill_locust.workload.heads import (
    FIRST_TURN_HEADS,
    FOLLOW_UP_HEADS,
    HEAD_REFERENCE,
    ID_HEAD,
    PREFIX_HEAD,
    QUESTION_HEADS,
    SYSTEM_HEAD,
    UNIQUE_HEADS,
)
from grill_locust.workload.seeding import ShapeKey, seeded_rng
from grill_locust.workload.trace import BLOCK_TOKENS, TraceRow, block_count, conversation_trace

if TYPE_CHECKING:
    from grill_locust.config import Model
    from grill_locust.workload.agentic import AgenticPlan
    from grill_locust.workload.autocomplete import AutocompletePlan
    from grill_locust.workload.kinds import ConversationBase
    from grill_locust.workload.kinds.dataset import DatasetConversation
    from grill_locust.workload.kinds.study import (
        FixedConversation,
        MultiTurnConversation,
        SharedPrefixConversation,
        ShortBaselineConversation,
        UniquePromptsConversation,
    )

log = logging.getLogger(__name__)

UNIQUE_ID_LETTERS = 8  # the approximate tokenizer keeps up to 8 letters in one token
ID_ENTROPY_BITS = 64  # 10^5 prompts of 64-bit ids collide with a chance of 3 in 10^10
_CODE_END = "\n```"  # closes the code in the approximate modes (measured mode ends on the exact token)
_SYSTEM_CODE_END = "\n```\n"


@dataclass(frozen=True)
class ConversationScript:
    """Everything one iteration of one user sends: an optional system message, recorded messages sent
    before the first user turn as they are (a dataset row's earlier turns), and the user turns.

    The user sends the turns one by one, appending each real reply as an assistant message."""

    conversation_id: str
    system: str | None
    user_turns: list[str] = field(default_factory=list)
    # every request's max_tokens where the script sets it (a trace row's output length, a dataset
    # row's own), else the model's
    max_tokens: int | None = None
    history: list[dict[str, str]] = field(default_factory=list)
    trace_line: int | None = None  # the trace or dataset row replayed (0-based), for the records

    def messages(self, turn: int, replies: Sequence[str]) -> list[dict[str, str]]:
        """Chat messages for request `turn` (0-based), with the real `replies` to earlier turns."""
        if len(replies) < turn:
            raise ValueError(f"turn {turn} needs {turn} earlier replies, got {len(replies)}")
        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages += self.history
        for index in range(turn):
            messages.append({"role": "user", "content": self.user_turns[index]})
            messages.append({"role": "assistant", "content": replies[index]})
        messages.append({"role": "user", "content": self.user_turns[turn]})
        return messages

    def prompt(self, turn: int, replies: Sequence[str]) -> str:
        """The same conversation as one plain-text prompt, for the completions API."""
        return completion_prompt(self.messages(turn, replies))


@dataclass(frozen=True)
class _Code:
    """Where a message's code starts: a definition (its name and module) in the corpus or the
    measured stream. `place` is an `Excerpt` (approximate modes) or a definition index (measured)."""

    name: str
    module: str
    place: Excerpt | int


class Workload:
    """Builds the scripts of one conversation (kind, sizes, seed) for any user and iteration."""

    def __init__(
        self,
        conversation: ConversationBase,
        model: Model | None = None,
        token_counter: TokenCounter | None = None,
        corpus: Corpus | None = None,
    ) -> None:
        self.conversation = conversation
        self.model = model
        self.token_counter = token_counter
        self.measured: MeasuredCorpus | None = token_counter.measured if token_counter else None
        self._id_words = id_words_needed(len(self.measured.id_words)) if self.measured else 0
        self.corpus = corpus or stdlib_corpus()
        self._shared: dict[str, Any] = {}  # parts every script shares, built on first use

    @property
    def requests_per_iteration(self) -> float:
        return self.conversation.requests_per_iteration

    def script(
        self, user_key: str, iteration: int, developer: int | None = None
    ) -> ConversationScript | AgenticPlan | AutocompletePlan:
        """The conversation `user_key` sends in `iteration`. Its text is its own (no two users, phases
        or runs share it; a dataset's rows excepted, recorded text sent as it is); what shapes its load
        — an agent session's steps, tools and result sizes — is
        drawn per `developer` and iteration, so every target (engine) of a run gets the same shapes."""
        conversation = self.conversation
        conversation_id = f"{conversation.name}:{user_key}:{iteration}"
        rng = seeded_rng(conversation.seed, conversation.name, user_key, str(iteration))
        shape_key = f"developer {developer}" if developer is not None else user_key
        shape = ShapeKey(conversation.seed, f"{conversation.name}|{shape_key}|{iteration}")
        return conversation.workload_kind.build_script(self, conversation_id, user_key, iteration, rng, shape)

    # ---- the chat scripts of the kinds (grill_locust/workload/kinds/) ------------------------------

    def multi_turn_script(self, conversation_id: str, rng: random.Random) -> ConversationScript:
        conversation = cast("MultiTurnConversation", self.conversation)
        system_tokens = conversation.system_tokens or 1
        turn_tokens = conversation.turn_tokens or 1
        if conversation.shared_system:
            system, code = self._shared_system()
        else:
            system, code = self._system_prompt(rng, system_tokens, turn_tokens)
        turns = []
        for turn in range(conversation.user_turns or 1):
            if turn == 0:
                head = rng.choice(FIRST_TURN_HEADS)
                values = {"id": self._request_id(rng), "name": code.name}
                turns.append(self._render(head, values, code, turn_tokens, _CODE_END))
                continue
            # follow-ups stay in the module under discussion, as a developer's session does
            follow_up = self._pick(rng, turn_tokens, same_module_as=code)
            head = rng.choice(FOLLOW_UP_HEADS)
            turns.append(self._render(head, {"name": follow_up.name}, follow_up, turn_tokens, _CODE_END))
        return ConversationScript(conversation_id, system, turns)

    def shared_prefix_script(self, conversation_id: str, rng: random.Random) -> ConversationScript:
        question = self._question(rng, cast("SharedPrefixConversation", self.conversation).question_tokens)
        return ConversationScript(conversation_id, self._shared_prefix(), [question])

    def short_baseline_script(self, conversation_id: str, rng: random.Random) -> ConversationScript:
        return ConversationScript(
            conversation_id,
            None,
            [self._question(rng, cast("ShortBaselineConversation", self.conversation).prompt_tokens)],
        )

    def unique_prompt_script(self, conversation_id: str, rng: random.Random) -> ConversationScript:
        return ConversationScript(conversation_id, None, [self._unique_prompt(rng)])

    def _system_prompt(self, rng: random.Random, system_tokens: int, turn_tokens: int) -> tuple[str, _Code]:
        code = self._pick(rng, max(system_tokens, turn_tokens))  # the first turn asks about it too
        values = {"id": self._request_id(rng), "module": code.module}
        return self._render(SYSTEM_HEAD, values, code, system_tokens, _SYSTEM_CODE_END), code

    def _shared_system(self) -> tuple[str, _Code]:
        if "system" not in self._shared:
            conversation = cast("MultiTurnConversation", self.conversation)
            rng = seeded_rng(conversation.seed, conversation.name, "shared-system")
            self._shared["system"] = self._system_prompt(
                rng, conversation.system_tokens or 1, conversation.turn_tokens or 1
            )
        shared: tuple[str, _Code] = self._shared["system"]
        return shared

    def _shared_prefix(self) -> str:
        if "prefix" not in self._shared:
            rng = seeded_rng(self.conversation.seed, self.conversation.name, "prefix")
            size = cast("SharedPrefixConversation", self.conversation).prefix_tokens
            code = self._pick(rng, size)
            self._shared["prefix"] = self._render(PREFIX_HEAD, {"module": code.module}, code, size, "\n```\n")
        prefix: str = self._shared["prefix"]
        return prefix

    def _question(self, rng: random.Random, size: int) -> str:
        request_id = self._request_id(rng)  # first: no two requests share even their first token
        code = self._pick(rng, size)
        head = rng.choice(QUESTION_HEADS)
        return self._render(head, {"id": request_id, "name": code.name}, code, size, _CODE_END)

    def _unique_prompt(self, rng: random.Random) -> str:
        size = cast("UniquePromptsConversation", self.conversation).prompt_tokens
        request_id = self._request_id(rng)
        code = self._pick(rng, size)
        head = rng.choice(UNIQUE_HEADS)
        values = {"id": request_id, "module": code.module, "name": code.name}
        return self._render(head, values, code, size, _CODE_END)

    def fixed_script(self, conversation_id: str, rng: random.Random) -> ConversationScript:
        turns = cast("FixedConversation", self.conversation).turns
        system_parts = [turn.content for turn in turns if turn.role == "system"]
        user_turns = [turn.content for turn in turns if turn.role == "user"]
        system = "\n\n".join(system_parts) if system_parts else None
        if self.conversation.salt:
            # a per-conversation line first, so users (and iterations) never share cached prefixes by accident
            salt_line = f"[session {unique_id(rng)}]\n"
            if system is not None:
                system = salt_line + system
            else:
                user_turns[0] = salt_line + user_turns[0]
        return ConversationScript(conversation_id, system, user_turns)

    def dataset_script(self, conversation_id: str, rng: random.Random) -> ConversationScript:
        """A recorded row as it is: drawn by the seed per user and iteration, or the next in file order
        (one counter per process, target and conversation, wrapping around). Nothing is made unique: a row sent
        twice may be served from the engine's prefix cache, as it would be in production."""
        conversation = cast("DatasetConversation", self.conversation)
        rows = self.dataset_rows()
        if conversation.sample == "order":
            row = rows[next(self._shared["next_row"]) % len(rows)]
        else:
            row = rows[rng.randrange(len(rows))]
        return ConversationScript(
            conversation_id,
            row.system,
            list(row.user_turns),
            max_tokens=row.max_tokens or conversation.max_tokens,
            history=list(row.history),
            trace_line=row.line,
        )

    def dataset_rows(self) -> tuple[DatasetRow, ...]:
        if "dataset rows" not in self._shared:
            conversation = cast("DatasetConversation", self.conversation)
            assert conversation.path is not None  # a dataset conversation has one (its model checks)
            self._shared["dataset rows"] = load_dataset(conversation.path, conversation.format)
            self._shared["next_row"] = itertools.count()
        rows: tuple[DatasetRow, ...] = self._shared["dataset rows"].rows
        return rows

    def trace_script(self, conversation_id: str, replay_key: str, iteration: int) -> ConversationScript:
        """Row `iteration` of the trace: its prompt of `input_tokens`, its output length asked for."""
        row = conversation_trace(self.conversation)[iteration]
        return ConversationScript(
            conversation_id,
            None,
            [self._trace_prompt(replay_key, row)],
            max_tokens=max(1, row.output_tokens),  # an engine takes no max_tokens of 0
            trace_line=row.line,
        )

    def _trace_prompt(self, replay_key: str, row: TraceRow) -> str:
        """BLOCK_TOKENS-token blocks, the last one cut: block k is the block of the row's k-th hash id
        (the same text wherever that id appears in the replay), or one of the row's own where the trace
        gives no id for it. The engine's template adds its own tokens to the turn (calibrate.py measures
        them): the prompt is that much shorter, so the engine counts the row's input length."""
        overhead = self.token_counter.turn_overhead_tokens if self.token_counter else 0
        input_tokens = max(1, row.input_tokens - overhead)  # an engine takes no empty prompt
        hash_ids = row.hash_ids or ()
        blocks = []
        for block in range(block_count(input_tokens)):
            size = min(BLOCK_TOKENS, input_tokens - block * BLOCK_TOKENS)
            key = f"hash {hash_ids[block]}" if block < len(hash_ids) else f"row {row.line} block {block}"
            blocks.append(self._trace_block(replay_key, key, size))
        return "".join(blocks)

    def _trace_block(self, replay_key: str, key: str, n_tokens: int) -> str:
        """A block's text, a function of the replay and the block's key only: its own id first (blocks
        part from their first token), then code picked for a whole block, so a cut block is a prefix of
        the whole one. It ends with a newline, which keeps the next block's id from merging with its last
        token (measured mode counts it as one token: a tokenizer that joins it to a newline before it
        makes the block one token short)."""
        rng = seeded_rng(self.conversation.seed, self.conversation.name, "trace block", replay_key, key)
        values = {"id": self._request_id(rng)}
        code = self._pick(rng, BLOCK_TOKENS)
        if isinstance(code.place, Excerpt) or n_tokens == 1:
            return self._render(ID_HEAD, values, code, n_tokens, "\n")
        return self._render(ID_HEAD, values, code, n_tokens - 1, "") + "\n"

    # ---- code, ids and sizing ----------------------------------------------------------------

    def _fits_measured(self, n_tokens: int) -> bool:
        if self.measured is None:
            return False
        if self.measured.definitions_fitting(n_tokens) > 0:
            return True
        if self._shared.setdefault("warned", False):
            return False
        self._shared["warned"] = True
        log.warning(
            "workload %s: %d tokens exceed the measured corpus; such messages are sized approximately",
            self.conversation.name,
            n_tokens,
        )
        return False

    def _request_id(self, rng: random.Random) -> str:
        if self.measured is not None:
            words = self.measured.id_words
            return " ".join(words[index] for index in _digits(rng, len(words), self._id_words))
        return unique_id(rng)

    def _pick(self, rng: random.Random, n_tokens: int, same_module_as: _Code | None = None) -> _Code:
        """Code from a random definition onwards, with at least `n_tokens` after it."""
        measured = self.measured
        if measured is not None and self._fits_measured(n_tokens):
            fitting = measured.definitions_fitting(n_tokens)
            index = rng.randrange(fitting)
            if same_module_as is not None and isinstance(same_module_as.place, int):
                file = measured.files[measured.definitions[same_module_as.place].file_index]
                same = [member for member in file.definitions if member < fitting]
                if same:
                    index = rng.choice(same)
            definition = measured.definitions[index]
            return _Code(definition.name, definition.module, index)
        source = (
            same_module_as.place.source
            if same_module_as and isinstance(same_module_as.place, Excerpt)
            else None
        )
        excerpt = self.corpus.excerpt(rng, self._size(n_tokens), file=source)
        return _Code(excerpt.definition.name, excerpt.module, excerpt)

    def _render(self, head: str, values: dict[str, str], code: _Code, n_tokens: int, tail: str) -> str:
        """`head` with `values`, then code: `n_tokens` in all on the backend (or the approximation)."""
        if isinstance(code.place, Excerpt):  # picked with at least the approximate size
            return fit_tokens(head.format(**values), code.place.tokens, tail, self._size(n_tokens))
        assert self.measured is not None  # a definition index comes from the measured corpus
        return _measured_message(self.measured, head, values, code.place, n_tokens)

    def _size(self, tokens: int | None) -> int:
        """The approximate-tokenizer target for `tokens` of the backend's tokenizer."""
        asked = tokens or 1
        return asked if self.token_counter is None else self.token_counter.approx_tokens(asked)


def _measured_message(
    measured: MeasuredCorpus, head: str, values: dict[str, str], definition: int, n_tokens: int
) -> str:
    """Head plus code with exactly `n_tokens` by the backend's measured pieces."""
    head_tokens = _measured_head_tokens(measured, head, values)
    if head_tokens >= n_tokens and "id" in values:  # too small for the question: still distinct by its id
        head, values = ID_HEAD, {"id": values["id"]}
        head_tokens = _measured_head_tokens(measured, head, values)
    start = measured.definitions[definition].token_index
    body_tokens = n_tokens - head_tokens
    if body_tokens <= 0:  # a target smaller than the head: code alone
        return measured.code(start, n_tokens)
    return head.format(**values) + measured.code(start, body_tokens)


def _measured_head_tokens(measured: MeasuredCorpus, head: str, values: dict[str, str]) -> int:
    """Tokens of `head` filled with `values`: its measured count with the reference values, corrected
    by each value's own count against its reference's."""
    head_tokens = measured.span(head.format(**HEAD_REFERENCE))
    for key, value in values.items():
        if key == "id":
            head_tokens += measured.id_tokens(value) - measured.span(HEAD_REFERENCE["id"])
        else:
            head_tokens += measured.span(name_span(value)) - measured.span(name_span(HEAD_REFERENCE[key]))
    return head_tokens


def build_workload(
    conversation: ConversationBase, model: Model | None = None, token_counter: TokenCounter | None = None
) -> Workload:
    # read the whole corpus now, not file by file under load (and not as slow memory growth in a soak)
    stdlib_corpus().preload()
    workload = Workload(conversation, model, token_counter)
    conversation.workload_kind.prepare(workload)
    return workload


def id_words_needed(pool_words: int) -> int:
    """How many words drawn from a pool of `pool_words` make an id of at least ID_ENTROPY_BITS."""
    return math.ceil(ID_ENTROPY_BITS / math.log2(pool_words))


def unique_id(rng: random.Random) -> str:
    """Words of eight capital letters, one token each for the approximate tokenizer, and a first
    token that alone tells two ids apart (37.6 bits)."""
    letters = string.ascii_uppercase
    words = id_words_needed(len(letters) ** UNIQUE_ID_LETTERS)
    text = "".join(letters[index] for index in _digits(rng, len(letters), words * UNIQUE_ID_LETTERS))
    return " ".join(
        text[start : start + UNIQUE_ID_LETTERS] for start in range(0, len(text), UNIQUE_ID_LETTERS)
    )


def _digits(rng: random.Random, base: int, count: int) -> list[int]:
    """`count` independent uniform draws below `base`, from one draw (a third of the time of one each)."""
    number = rng.randrange(base**count)
    digits = []
    for _ in range(count):
        number, digit = divmod(number, base)
        digits.append(digit)
    return digits
