"""The text around a message's code: the questions developers ask and the heads that open each kind
of message, with `{id}`, `{name}` and `{module}` to fill. The generators fill them (generators.py);
calibration measures them once per backend, filled with `HEAD_REFERENCE` (calibrate.py)."""

from __future__ import annotations

# Questions developers ask a coding assistant about a piece of code; `{name}` is a definition in it.
# The name always follows a word and precedes a space-led word, where tokenizers do not merge across.
QUESTIONS = (
    "Explain what `{name}` does and suggest a refactor.",
    "Is there a bug in `{name}` at all? Walk me through an edge case that could break it.",
    "Write pytest unit tests for `{name}` that cover the error paths.",
    "Add type hints and a docstring to `{name}` without changing its behaviour.",
    "How would you make `{name}` faster? Show the changed code.",
    "Rewrite `{name}` so a new team member can read it, keeping its behaviour.",
    "What does `{name}` do with empty or unexpected input? Point to the lines.",
    "Review `{name}` as if it were a pull request: what would you ask the author to change?",
    "Port `{name}` to idiomatic Python 3.11, using match statements or dataclasses where they help.",
    "Which callers would break if the signature of `{name}` changed? Suggest a safe migration.",
    "Is `{name}` thread-safe? If not, what would you change?",
    "Summarise the responsibilities of `{name}` in three bullet points, then list its side effects.",
)
FOLLOW_UPS = (
    "Thanks. Now look at `{name}` below: how does it relate to the code above?",
    "Good. Apply the same review to `{name}` as shown below:",
    "Next, look at `{name}` below. Could it share a helper with what we just discussed?",
    "One more: does `{name}` below handle errors the same way? Suggest a consistent approach.",
    "And `{name}` now: what tests are missing for it?",
)
CODE_OPEN = "\n```python\n"
SYSTEM_HEAD = (
    "{id}: you are a senior Python engineer pairing with a developer on the module `{module}` in this "
    "session. Answer precisely, quote the lines you change, keep replies short.\n"
    "The developer has this file open:\n```python\n"
)
PREFIX_HEAD = (
    "You are the coding assistant of a team that maintains a Python code base. The team's reference "
    "sources follow, starting with the module `{module}` and going on with others. Answer questions "
    "about them precisely and cite function names.\n```python\n"
)
# a session's first message starts with its own id: with a shared system prompt, users part there
FIRST_TURN_HEADS = tuple("{id}: " + question + "\nThe part I mean:" + CODE_OPEN for question in QUESTIONS)
FOLLOW_UP_HEADS = tuple(follow_up + CODE_OPEN for follow_up in FOLLOW_UPS)
QUESTION_HEADS = tuple("{id}: " + question + CODE_OPEN for question in QUESTIONS)
UNIQUE_HEADS = tuple(
    "{id}: code review of the module `{module}` please.\n" + question + CODE_OPEN for question in QUESTIONS
)
# agentic sessions (workload/agentic.py): the agent's instruction and the code it read, a file read back
AGENT_SYSTEM_HEAD = (
    "{id}: you are a coding agent working in a Python repository, starting with the module `{module}` "
    "today. Use the tools to read, search, edit and test the code; make small changes, run the tests after "
    "each one, and end with a short report of what you changed and why.\n"
    "The repository's conventions, as this excerpt shows them:\n```python\n"
)
READ_FILE_HEAD = "Contents of `{module}` from the definition of `{name}` on:\n"
# a message too small for its question still opens with its id (measured mode; see generators.py)
ID_HEAD = "{id}:" + CODE_OPEN
# the values heads are measured with (calibrate.py); a message's count corrects for its own values
HEAD_REFERENCE = {"id": "QQQQQQQQ", "name": "main", "module": "json"}


def measured_heads() -> list[str]:
    """Every message head, filled with the reference values, as calibration measures them, and the
    agent's tool definitions as requests carry them."""
    from grill_locust.workload.tools import tools_text

    heads = (
        SYSTEM_HEAD,
        PREFIX_HEAD,
        ID_HEAD,
        AGENT_SYSTEM_HEAD,
        READ_FILE_HEAD,
        *FIRST_TURN_HEADS,
        *FOLLOW_UP_HEADS,
        *QUESTION_HEADS,
        *UNIQUE_HEADS,
    )
    return [head.format(**HEAD_REFERENCE) for head in heads] + [tools_text()]
