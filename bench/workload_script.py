"""CPU per `Workload.script` (one conversation's prompts) for the four coding workloads, long and short.

Every request a user sends starts with a script, in the user's greenlet: its cost is CPU per request and,
for long prompts, a stall of the worker's event loop. Prompts are sized on the approximate tokenizer
(as against `grill sim`), so the figures include sizing to the exact token count.

    python bench/workload_script.py [--scripts 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

from grill_locust.scenario import validate_conversation
from grill_locust.workload import build_workload

CASES = [
    {"name": "short", "kind": "short-baseline", "prompt_tokens": 100},
    {"name": "unique", "kind": "unique-prompts", "prompt_tokens": 4000},
    {"name": "session", "kind": "multi-turn", "system_tokens": 2000, "user_turns": 3, "turn_tokens": 500},
    {"name": "prefix", "kind": "shared-prefix", "prefix_tokens": 4000, "question_tokens": 100},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scripts", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"CPU per script, best of {args.repeats} x {args.scripts} scripts (distinct users and iterations)")
    for fields in CASES:
        workload = build_workload(validate_conversation(fields))
        workload.script("warm-up", 0)  # shared parts (a shared prefix) are built once, on first use
        best = float("inf")
        for repeat in range(args.repeats):
            start = time.process_time()
            for index in range(args.scripts):
                workload.script(f"user{repeat}-{index}", index)
            best = min(best, (time.process_time() - start) / args.scripts)
        sizes = ", ".join(
            f"{key} {value}" for key, value in fields.items() if key.endswith(("tokens", "turns"))
        )
        print(f"  {fields['kind']:<15} ({sizes}): {best * 1e6:8.0f} µs")


if __name__ == "__main__":
    main()
