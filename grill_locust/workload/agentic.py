"""Agentic coding sessions: a tool-calling loop whose context grows by real tool results.

`Workload.script` gives an `AgenticPlan` for kind `agentic`: the session's system prompt, its task and,
per step, which tool the script calls and how many tokens its results hold, all fixed by (seed, user
key, iteration). An `AgenticSession` plays a plan without I/O: `next_request()` gives the messages of
the next model call (OpenAI chat form), `on_reply(reply)` carries the engine's real reply forward:

- the reply becomes the assistant message, with its text and tool calls; where the model called no
  tool, the step's scripted call is added (a fresh id);
- one `tool` message answers each call's id, with corpus material of the step's drawn size (split
  evenly when the model made several calls): code (read_file), `path:line: text` listings (grep),
  a directory listing (list_dir), an edit confirmation (edit_file), a pytest log with a traceback into
  corpus code (run_tests, bash). The step's tool decides the material, whatever the model named;
- the last step asks for the final answer (final_max_tokens; other steps step_max_tokens);
- with `context_limit_tokens`, when the next request, a request for a summary and final_max_tokens
  of answer would pass it, one summarising request goes first (the context as last sent, and that
  request) and the context restarts from the system prompt and the real summary (then the held-back
  reply and results): no request with its answer passes the limit;
- with `subagents: k`, the reply of one step (drawn) gets k `task` calls; `on_reply` returns k sub-plans,
  played in parallel by the caller, whose final answers answer those calls (`on_subagents_done`).

`system_tokens` is the system message plus the tools' JSON as the body carries it (tools.py), both
counted as text; the chat template's own markup around them is not counted, as for every kind.
Exact on the approximate tokenizer (the simulated engine); against a calibrated backend the system
prompt and read_file results are exact, the other tools' material scaled.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from grill_locust.tokens import count_tokens, fit_tokens, tokenize
from grill_locust.workload.heads import AGENT_SYSTEM_HEAD, READ_FILE_HEAD
from grill_locust.workload.seeding import ShapeKey, seeded_rng
from grill_locust.workload.tools import (
    STEP_TOOLS,
    SUBAGENT_TOOL,
    TOOLS_APPROX_TOKENS,
    tools_text,
)

if TYPE_CHECKING:
    from grill_locust.workload.corpus import SourceFile
    from grill_locust.workload.generators import Workload
    from grill_locust.workload.kinds.agentic import AgenticConversation

SUBAGENT_STEPS = (2, 4)  # a sub-agent's own trajectory: model calls, drawn per sub-agent
_P95_Z = 1.6448536269514722  # the standard normal's 95th percentile
_CHARS_PER_TOKEN = 4.5  # of the material read before it is cut to size (as corpus.py reads code)
# a chat template's markup around one message (role tags, call ids), allowed for when the session
# estimates its next request's size to decide whether to compact
MESSAGE_OVERHEAD_TOKENS = 8

TASK_HEADS = (
    "{id}: bug report: `{name}` in `{module}` fails on empty input since the last release (an exception "
    "instead of an empty result). Find the cause, fix it, and add a test that fails without the fix.",
    "{id}: feature request: `{name}` in `{module}` should accept a timeout in seconds, defaulting to no "
    "limit. Implement it, keep the current behaviour by default, and test both paths.",
    "{id}: the tests around `{name}` in `{module}` are flaky on CI: one run in twenty fails. Find out "
    "why, make them deterministic, and explain the cause in the commit message.",
    "{id}: refactor: `{name}` in `{module}` has grown too long. Split it into smaller functions "
    "without changing its behaviour; the existing tests must keep passing.",
    "{id}: performance: `{name}` in `{module}` is slow on large inputs. Profile it, make it faster, "
    "and show the numbers before and after.",
)
SUBAGENT_TASK_HEADS = (
    "{id}: sub-task: find every caller of `{name}` in `{module}` and report how each one uses its result.",
    "{id}: sub-task: read the tests that cover `{name}` in `{module}` and list the cases they miss.",
    "{id}: sub-task: check whether `{name}` in `{module}` is thread-safe and report the risky lines.",
)
FINAL_REQUEST = (
    "That is enough investigation. Give your final answer now: what was wrong, what you changed, "
    "and how the tests show it."
)
SUMMARY_REQUEST = (
    "Your context is nearly full. Summarise the work so far (the task, what you found, what you "
    "changed, what is left) so that you can go on from the summary alone."
)
COMPACTED_HEAD = "This session goes on from an earlier one whose context was summarised:\n"
NO_REPORT = "(the sub-agent gave no text)"
_TEST_LOG_HEAD = (
    "============================= test session starts ==============================\n"
    "platform linux -- Python 3.11.9, pytest-8.3.3, pluggy-1.5.0\n"
    "rootdir: /repo\ncollected 48 items\n\n"
    "tests/test_{stem}.py ....F.......\n\n"
    "=================================== FAILURES ===================================\n"
    "___________________________ test_{test} ___________________________\n"
)
_TEST_LOG_TAIL = (
    "\nE       AssertionError: assert None == []\n"
    "=========================== short test summary info ============================\n"
    "FAILED tests/test_{stem}.py::test_{test} - AssertionError\n"
    "========================= 1 failed, 47 passed in 2.31s =========================\n"
)
_EDIT_HEAD = "The file {path} has been edited. The result around the change (cat -n):\n"


@dataclass(frozen=True)
class PlannedStep:
    """A step whose reply calls tools: the tool the script calls and its results' size (tokens, in all)."""

    tool: str
    result_tokens: int


@dataclass(frozen=True)
class AgenticPlan:
    """One agentic session fixed by the seed. Material is rendered when a step needs it (`call_and_results`,
    `subagent_plan`), so planning a long session costs little."""

    conversation_id: str
    system: str
    task: str
    steps: int  # model calls, compaction requests aside
    planned: tuple[PlannedStep, ...]  # steps 0 .. steps-2 (the last one answers)
    step_max_tokens: int
    final_max_tokens: int
    context_limit_tokens: int | None
    subagent_step: int | None  # the step whose reply runs the sub-agents
    subagents: int
    shape: ShapeKey  # the steps, tools and sizes: the same developer's on every target
    workload: Workload = field(repr=False, compare=False)

    def count(self, text: str) -> int:
        """Tokens of `text` on the backend (estimated without a call: for the compaction check)."""
        counter = self.workload.token_counter
        return counter.count(text) if counter is not None else count_tokens(text)

    def call_and_results(self, step: int, call_ids: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
        """The step's scripted call (with a fresh id) and the results of `call_ids` (the model's calls,
        or none: then the scripted call's), whose sizes add up to the step's drawn size."""
        planned = self.planned[step]
        rng = self._rng("step", str(step))
        arguments, material = _MATERIAL[planned.tool](self.workload, rng)
        scripted = tool_call(_call_id(self.conversation_id, step, 0), planned.tool, arguments)
        answered = len(call_ids) or 1
        sizes = _split(planned.result_tokens, answered)
        return scripted, [material(self.workload, rng, size) for size in sizes]

    def subagent_calls(self) -> list[dict[str, Any]]:
        """The `task` calls of the sub-agents' step, one per sub-agent."""
        step = self.subagent_step if self.subagent_step is not None else 0
        calls = []
        for index in range(self.subagents):
            plan = self.subagent_plan(index)
            arguments = json.dumps({"description": f"sub-task {index + 1}", "prompt": plan.task})
            calls.append(tool_call(_call_id(self.conversation_id, step, index + 1), SUBAGENT_TOOL, arguments))
        return calls

    def subagent_plan(self, index: int) -> AgenticPlan:
        """Sub-agent `index`: the parent's system prompt, its own task and short trajectory, its own
        conversation id (`<parent id>/sub<index>`)."""
        workload = self.workload
        rng = self._rng("sub", str(index))
        code = workload._pick(rng, 1)
        values = {"id": workload._request_id(rng), "name": code.name, "module": code.module}
        task = rng.choice(SUBAGENT_TASK_HEADS).format(**values)
        shape = ShapeKey(self.shape.seed, f"{self.shape.key}/sub{index}")
        shape_rng = shape.rng()
        steps = shape_rng.randint(*SUBAGENT_STEPS)
        return AgenticPlan(
            conversation_id=f"{self.conversation_id}/sub{index}",
            system=self.system,
            task=task,
            steps=steps,
            planned=_planned_steps(shape_rng, steps, _agentic(workload)),
            step_max_tokens=self.step_max_tokens,
            final_max_tokens=self.final_max_tokens,
            context_limit_tokens=self.context_limit_tokens,
            subagent_step=None,
            subagents=0,
            shape=shape,
            workload=workload,
        )

    def _rng(self, *parts: str) -> random.Random:
        return seeded_rng(self.workload.conversation.seed, self.conversation_id, *parts)


def _agentic(workload: Workload) -> AgenticConversation:
    # the agentic kind builds the workloads it plans for (workload/kinds/agentic.py)
    return cast("AgenticConversation", workload.conversation)


def plan_session(
    workload: Workload, conversation_id: str, rng: random.Random, shape: ShapeKey
) -> AgenticPlan:
    """The plan of one session (the `agentic` kind's script builder): its text from `rng`, its steps,
    tools and result sizes from `shape`."""
    conversation = _agentic(workload)
    shape_rng = shape.rng()
    low, high = conversation.steps or (1, 1)
    steps = shape_rng.randint(low, high)
    system_tokens = (conversation.system_tokens or 1) - tools_tokens(workload)
    code = workload._pick(rng, system_tokens)
    values = {"id": workload._request_id(rng), "module": code.module}
    system = workload._render(AGENT_SYSTEM_HEAD, values, code, system_tokens, "\n```\n")
    task_code = workload._pick(rng, 1, same_module_as=code)
    task_values = {"id": workload._request_id(rng), "name": task_code.name, "module": task_code.module}
    task = rng.choice(TASK_HEADS).format(**task_values)
    subagent_step = shape_rng.randrange(steps - 1) if conversation.subagents and steps >= 2 else None
    return AgenticPlan(
        conversation_id=conversation_id,
        system=system,
        task=task,
        steps=steps,
        planned=_planned_steps(shape_rng, steps, conversation),
        step_max_tokens=conversation.step_max_tokens or 1,
        final_max_tokens=conversation.final_max_tokens or 1,
        context_limit_tokens=conversation.context_limit_tokens,
        subagent_step=subagent_step,
        subagents=conversation.subagents or 0,
        shape=shape,
        workload=workload,
    )


def _planned_steps(
    rng: random.Random, steps: int, conversation: AgenticConversation
) -> tuple[PlannedStep, ...]:
    sizes = conversation.tool_result_tokens
    median, p95 = (sizes.median, sizes.p95) if sizes is not None else (1, 1)
    sigma = math.log(p95 / median) / _P95_Z
    return tuple(
        PlannedStep(rng.choice(STEP_TOOLS), max(1, round(median * math.exp(sigma * rng.gauss()))))
        for _ in range(steps - 1)
    )


# ---- the session ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentRequest:
    """One model call: `turn` is its index in the session (the record's turn)."""

    turn: int
    messages: list[dict[str, Any]]
    max_tokens: int
    compaction: bool = False


@dataclass(frozen=True)
class AgentReply:
    """What the session needs of the engine's reply: its text, its tool calls (objects with `id`, `name`,
    `arguments`, as `client.ToolCall`), and the usage counts where the engine sent them."""

    text: str
    tool_calls: Sequence[Any] = ()
    prompt_tokens: int | None = None


class AgenticSession:
    """Plays one `AgenticPlan`: `next_request()`, then `on_reply()` with the engine's reply, until
    `next_request()` gives None; `final_answer` is then the last reply's text."""

    def __init__(self, plan: AgenticPlan) -> None:
        self.plan = plan
        self.system_message = {"role": "system", "content": plan.system}
        self.context: list[dict[str, Any]] = [self.system_message, {"role": "user", "content": plan.task}]
        self.step = 0  # the plan step the next request serves
        self.turn = 0  # model calls made
        self.final_answer: str | None = None
        self.compactions = 0
        self._sent: AgentRequest | None = None
        self._added: list[dict[str, Any]] = []  # the last reply and its results, not yet in the context
        self._held: list[dict[str, Any]] = []  # the same, held while a summary is asked for
        self._compact = False
        self._waiting_subagents: list[dict[str, Any]] = []
        self._last_prompt_tokens: int | None = None

    @property
    def conversation_id(self) -> str:
        return self.plan.conversation_id

    @property
    def done(self) -> bool:
        return self.final_answer is not None

    def next_request(self) -> AgentRequest | None:
        if self.done:
            return None
        if self._waiting_subagents:
            raise RuntimeError("the sub-agents' answers come first (on_subagents_done)")
        plan = self.plan
        if self._compact:
            assert self._sent is not None
            messages = [*self._sent.messages, {"role": "user", "content": SUMMARY_REQUEST}]
            request = AgentRequest(self.turn, messages, plan.final_max_tokens, compaction=True)
        else:
            last = self.step == plan.steps - 1
            max_tokens = plan.final_max_tokens if last else plan.step_max_tokens
            request = AgentRequest(self.turn, list(self.context), max_tokens)
        self._sent = request
        return request

    def on_reply(self, reply: AgentReply) -> list[AgenticPlan]:
        """Carry the reply of the last request forward. Returns the plans of the sub-agents to run
        before the next request (their final answers go to `on_subagents_done`), usually none."""
        sent = self._sent
        assert sent is not None, "a reply before any request"
        self.turn += 1
        plan = self.plan
        if sent.compaction:
            summary = {"role": "user", "content": COMPACTED_HEAD + reply.text}
            self.context = [self.system_message, summary, *self._held]
            self._held, self._compact = [], False
            self.compactions += 1
            self._last_prompt_tokens = None  # the context is new: counted, not taken from usage
            return []
        self._last_prompt_tokens = reply.prompt_tokens
        if self.step == plan.steps - 1:
            self.final_answer = reply.text
            return []
        # a call cut short by max_tokens has arguments that are no JSON object: an agent cannot run it,
        # and engines refuse it when it is sent back (llama-server: HTTP 500), so it is not carried
        model_calls = [
            tool_call(call.id, call.name, call.arguments)
            for call in reply.tool_calls
            if _json_object(call.arguments)
        ]
        subagents = plan.subagent_step == self.step
        calls = model_calls
        results: list[str] = []
        if model_calls or not subagents:  # the sub-agents' step adds their calls rather than its own
            scripted, results = plan.call_and_results(self.step, [call["id"] for call in model_calls])
            calls = model_calls or [scripted]
        task_calls = plan.subagent_calls() if subagents else []
        assistant = {"role": "assistant", "content": reply.text or None, "tool_calls": calls + task_calls}
        self._added = [assistant]
        self._added += [tool_result(call["id"], text) for call, text in zip(calls, results, strict=False)]
        if subagents:
            self._waiting_subagents = task_calls
            return [plan.subagent_plan(index) for index in range(plan.subagents)]
        self._advance()
        return []

    def on_subagents_done(self, answers: Sequence[str]) -> None:
        """The sub-agents' final answers, in the order of the plans `on_reply` gave."""
        calls, self._waiting_subagents = self._waiting_subagents, []
        self._added += [
            tool_result(call["id"], answer or NO_REPORT) for call, answer in zip(calls, answers, strict=True)
        ]
        self._advance()

    def _advance(self) -> None:
        self.step += 1
        plan = self.plan
        added, self._added = self._added, []
        if self.step == plan.steps - 1:
            added.append({"role": "user", "content": FINAL_REQUEST})
        limit = plan.context_limit_tokens
        if limit is not None:
            assert self._sent is not None
            before = self._last_prompt_tokens
            if before is None:
                before = sum(self._message_tokens(message) for message in self._sent.messages)
            next_prompt = before + sum(self._message_tokens(message) for message in added)
            # compact now if a summary asked after the next request could not fit any more
            summary_request = self._message_tokens({"role": "user", "content": SUMMARY_REQUEST})
            if next_prompt + summary_request + plan.final_max_tokens > limit:
                self._compact, self._held = True, added
                return
        self.context += added

    def _message_tokens(self, message: dict[str, Any]) -> int:
        count = self.plan.count
        tokens = MESSAGE_OVERHEAD_TOKENS + count(message.get("content") or "")
        for call in message.get("tool_calls") or ():
            tokens += count(call["function"]["name"]) + count(call["function"]["arguments"])
        if message["role"] == "system":
            tokens += tools_tokens(self.plan.workload)
        return tokens


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """An assistant message's tool call, in OpenAI's form."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _call_id(conversation_id: str, step: int, index: int) -> str:
    """A call id that is fresh in its session and the same in every process."""
    digest = hashlib.blake2b(f"{conversation_id}|{step}|{index}".encode(), digest_size=9).hexdigest()
    return f"call_{digest}"


def _split(total: int, parts: int) -> list[int]:
    """`total` tokens in `parts` near-equal sizes of at least 1 (adding up to `total` when it can)."""
    share, extra = divmod(total, parts)
    return [max(1, share + (1 if index < extra else 0)) for index in range(parts)]


# ---- the material of each tool: (its scripted arguments, a renderer of a result of n tokens) -------

Material = Callable[["Workload", random.Random, int], str]


def _path(module: str) -> str:
    return module.replace(".", "/") + ".py"


def _read_file(workload: Workload, rng: random.Random) -> tuple[str, Material]:
    code = workload._pick(rng, 1)  # where the model reads; each result picks code of its size

    def render(workload: Workload, rng: random.Random, n_tokens: int) -> str:
        found = workload._pick(rng, n_tokens)
        values = {"module": found.module, "name": found.name}
        return workload._render(READ_FILE_HEAD, values, found, n_tokens, "")

    return json.dumps({"path": _path(code.module)}), render


def _listing(
    workload: Workload, rng: random.Random, n_tokens: int, line: Callable[[SourceFile, int, str], str | None]
) -> list[str]:
    """Tokens of lines made by `line(file, line_number, text)` over corpus files from a random
    definition on (then further files), at least `n_tokens` of them."""
    corpus = workload.corpus
    file = corpus.random_file(rng)
    start = rng.choice(file.definitions).offset
    want_chars = int(max(n_tokens, 16) * _CHARS_PER_TOKEN) + 200
    parts: list[str] = []
    length = 0
    tokens: list[str] = []
    while True:
        first_line = file.text.count("\n", 0, start) + 1
        for number, text in enumerate(file.text[start:].splitlines(), first_line):
            made = line(file, number, text)
            if made is None:
                continue
            parts.append(made)
            length += len(made)
            if length >= want_chars:
                break
        if length >= want_chars:
            tokens = tokenize("".join(parts))
            if len(tokens) >= n_tokens:
                return tokens
            want_chars += int((n_tokens - len(tokens)) * _CHARS_PER_TOKEN) + 200
        file, start = corpus.random_file(rng), 0


def _grep(workload: Workload, rng: random.Random) -> tuple[str, Material]:
    code = workload._pick(rng, 1)
    pattern = code.name.rsplit(".", 1)[-1]

    def render(workload: Workload, rng: random.Random, n_tokens: int) -> str:
        def line(file: SourceFile, number: int, text: str) -> str | None:
            return f"{_path(file.module)}:{number}: {text.strip()}\n" if text.strip() else None

        return _sized(workload, "", _listing(workload, rng, n_tokens, line), "", n_tokens)

    return json.dumps({"pattern": pattern, "path": code.module.split(".")[0]}), render


def _list_dir(workload: Workload, rng: random.Random) -> tuple[str, Material]:
    code = workload._pick(rng, 1)

    def render(workload: Workload, rng: random.Random, n_tokens: int) -> str:
        corpus = workload.corpus
        start = rng.randrange(len(corpus))
        lines: list[str] = []
        length = 0
        index = start
        while length < n_tokens * _CHARS_PER_TOKEN + 200:  # wraps round a small corpus
            source = corpus.file(index % len(corpus))
            kind = "-rw-r--r--"
            lines.append(f"{kind} {len(source.text.encode()):>8} {_path(source.module)}\n")
            length += len(lines[-1])
            index += 1
        return _sized(workload, f"total {len(lines)}\n", tokenize("".join(lines)), "", n_tokens)

    return json.dumps({"path": code.module.split(".")[0]}), render


def _edit_file(workload: Workload, rng: random.Random) -> tuple[str, Material]:
    code = workload._pick(rng, 1)
    name = code.name.rsplit(".", 1)[-1]
    arguments = {
        "path": _path(code.module),
        "old_text": f"def {name}(",
        "new_text": f"def {name}(  # checked: empty input returns early\n",
    }

    def render(workload: Workload, rng: random.Random, n_tokens: int) -> str:
        def line(file: SourceFile, number: int, text: str) -> str:
            return f"{number:>6}\t{text}\n"

        head = _EDIT_HEAD.format(path=arguments["path"])
        return _sized(workload, head, _listing(workload, rng, n_tokens, line), "", n_tokens)

    return json.dumps(arguments), render


def _test_log(command: str) -> Callable[[Workload, random.Random], tuple[str, Material]]:
    def tool(workload: Workload, rng: random.Random) -> tuple[str, Material]:
        code = workload._pick(rng, 1)
        stem = code.module.rsplit(".", 1)[-1]
        test = code.name.rsplit(".", 1)[-1].strip("_").lower() or "main"
        if command == "bash":
            arguments = {"command": f"python -m pytest -x -q tests/test_{stem}.py"}
        else:
            arguments = {"path": f"tests/test_{stem}.py", "keyword": test}

        def render(workload: Workload, rng: random.Random, n_tokens: int) -> str:
            def line(file: SourceFile, number: int, text: str) -> str | None:
                if not text.strip():
                    return None
                if text.lstrip().startswith(("def ", "class ")):  # a new frame of the traceback
                    return (
                        f"\n{_path(file.module)}:{number}: in {text.split('(')[0].split()[-1]}\n    {text}\n"
                    )
                return f"    {text}\n"

            head = _TEST_LOG_HEAD.format(stem=stem, test=test)
            tail = _TEST_LOG_TAIL.format(stem=stem, test=test)
            return _sized(workload, head, _listing(workload, rng, n_tokens, line), tail, n_tokens)

        return json.dumps(arguments), render

    return tool


def _sized(workload: Workload, head: str, body: list[str], tail: str, n_tokens: int) -> str:
    """head + body + tail cut to `n_tokens` (exact on the approximate tokenizer, scaled on a backend's)."""
    return fit_tokens(head, body, tail, workload._size(n_tokens))


_MATERIAL: dict[str, Callable[[Workload, random.Random], tuple[str, Material]]] = {
    "read_file": _read_file,
    "grep": _grep,
    "list_dir": _list_dir,
    "edit_file": _edit_file,
    "run_tests": _test_log("run_tests"),
    "bash": _test_log("bash"),
}
assert set(_MATERIAL) == set(STEP_TOOLS), "every tool a step calls has its material"


# ---- the plan's expected size (grill validate) ---------------------------------------------------


def expected_requests_per_session(conversation: AgenticConversation) -> float:
    """Model calls one session makes on average: the mean of `steps`, plus the sub-agents' steps, plus
    compactions estimated from mean sizes (a reply taken at step_max_tokens, the task at ~60 tokens)."""
    low, high = conversation.steps or (1, 1)
    mean_steps = (low + high) / 2
    requests = mean_steps
    if conversation.subagents and high >= 2:
        share_with_room = 1.0 if low >= 2 else (high - 1) / (high - low + 1)
        requests += share_with_room * conversation.subagents * sum(SUBAGENT_STEPS) / 2
    limit = conversation.context_limit_tokens
    sizes = conversation.tool_result_tokens
    if limit is not None and sizes is not None:
        sigma = math.log(sizes.p95 / sizes.median) / _P95_Z
        growth = sizes.median * math.exp(sigma * sigma / 2) + (conversation.step_max_tokens or 1)
        final = conversation.final_max_tokens or 1
        system = (conversation.system_tokens or 1) + 60
        first_s = (limit - final - system) / growth  # steps before the first summary
        period_s = max(1.0, (limit - 2 * final - system) / growth)  # then the summary fills the context too
        if mean_steps - 1 >= first_s:
            requests += 1 + math.floor((mean_steps - 1 - first_s) / period_s)
    return requests


def tools_tokens(workload: Workload) -> int:
    """The tools' JSON in the backend's tokens: measured where the backend was calibrated, else scaled."""
    text = tools_text()
    measured = workload.measured
    if measured is not None and text in measured.span_tokens:
        return measured.span(text)
    counter = workload.token_counter
    return counter.count(text) if counter is not None else TOOLS_APPROX_TOKENS


__all__ = [
    "AgentReply",
    "AgentRequest",
    "AgenticPlan",
    "AgenticSession",
    "TOOLS_APPROX_TOKENS",
    "expected_requests_per_session",
    "plan_session",
    "tool_call",
    "tool_result",
    "tools_text",
]
