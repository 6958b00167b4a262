"""The tools an agentic session offers the model, in OpenAI's function schema, sent with every request.

They are the tools coding agents give their models (Claude Code, OpenHands, Codex CLI): read, search,
list, edit, test, run a command, hand a task to a sub-agent. The session answers each call with
material from the code corpus (workload/agentic.py), whatever the model asked for.
"""

from __future__ import annotations

import json
from typing import Any

from grill_locust.tokens import count_tokens


def _function(
    name: str, description: str, properties: dict[str, object], required: list[str]
) -> dict[str, object]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def _text(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


TOOLS: list[dict[str, Any]] = [
    _function(
        "read_file",
        "Read a file of the repository. Returns its lines, from start_line to end_line when given.",
        {
            "path": _text("Path of the file, relative to the repository root."),
            "start_line": {"type": "integer", "description": "First line to read (1-based)."},
            "end_line": {"type": "integer", "description": "Last line to read (inclusive)."},
        },
        ["path"],
    ),
    _function(
        "grep",
        "Search the repository for a regular expression. Returns matching lines as path:line: text.",
        {
            "pattern": _text("Regular expression to search for."),
            "path": _text("Folder or file to search in (default: the repository root)."),
        },
        ["pattern"],
    ),
    _function(
        "list_dir",
        "List the files and folders of a directory, with their sizes in bytes.",
        {"path": _text("Folder to list, relative to the repository root.")},
        ["path"],
    ),
    _function(
        "edit_file",
        "Replace one exact occurrence of old_text by new_text in a file.",
        {
            "path": _text("Path of the file to edit."),
            "old_text": _text("The exact text to replace; it must occur once in the file."),
            "new_text": _text("The text to put in its place."),
        },
        ["path", "old_text", "new_text"],
    ),
    _function(
        "run_tests",
        "Run the test suite (pytest), or the tests of one path or keyword. Returns pytest's output.",
        {
            "path": _text("Test file or folder to run (default: all tests)."),
            "keyword": _text("Only run tests whose names match this pytest -k expression."),
        },
        [],
    ),
    _function(
        "bash",
        "Run a shell command in the repository and return its output (stdout and stderr).",
        {"command": _text("The command line to run.")},
        ["command"],
    ),
    _function(
        "task",
        "Hand a self-contained task to a sub-agent with the same tools; returns its final report.",
        {
            "description": _text("A short title of the task (3-5 words)."),
            "prompt": _text("The task in full: what to find out or change, and what to report."),
        },
        ["description", "prompt"],
    ),
]
TOOL_NAMES: tuple[str, ...] = tuple(tool["function"]["name"] for tool in TOOLS)
SUBAGENT_TOOL = "task"
# the tools a step's scripted call uses (the sub-agent tool is called only where the script runs sub-agents)
STEP_TOOLS: tuple[str, ...] = tuple(name for name in TOOL_NAMES if name != SUBAGENT_TOOL)


def tools_text() -> str:
    """The tools as the request body carries them (compact JSON): what `system_tokens` counts for them."""
    return json.dumps(TOOLS, separators=(",", ":"), ensure_ascii=False)


TOOLS_APPROX_TOKENS = count_tokens(tools_text())
# the smallest system_tokens that holds the tools, the instruction and a few lines of code
MIN_SYSTEM_TOKENS = TOOLS_APPROX_TOKENS + 200
