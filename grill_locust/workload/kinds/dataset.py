"""The `dataset` kind: recorded prompts or conversations replayed from a file, rows drawn by the seed or
in order (reading and checking the file: workload/dataset.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grill_locust.workload.dataset import dataset_format, load_dataset
from grill_locust.workload.kinds._kind import ChatKind

if TYPE_CHECKING:
    from grill_locust.config import Conversation
    from grill_locust.workload.generators import ConversationScript, Workload
    from grill_locust.workload.seeding import ShapeKey


@dataclass(frozen=True)
class Dataset(ChatKind):
    """A row's recorded messages sent as they are; a ShareGPT row sends each of its user turns."""

    def check(self, conversation: Conversation) -> dict[str, object]:
        if not conversation.path:
            raise ValueError("path: kind 'dataset' needs the file to replay (JSONL or ShareGPT JSON)")
        return {"format": dataset_format(conversation.path, conversation.format)}

    def check_file(self, conversation: Conversation) -> None:
        load_dataset(conversation.path or "", conversation.format)

    def requests_per_iteration(self, conversation: Conversation) -> float:
        return load_dataset(conversation.path or "", conversation.format).mean_user_turns

    def prepare(self, workload: Workload) -> None:
        workload.dataset_rows()  # a large file takes seconds to parse: not under load

    def build_script(
        self,
        workload: Workload,
        conversation_id: str,
        user_key: str,
        iteration: int,
        rng: random.Random,
        shape: ShapeKey,
    ) -> ConversationScript:
        return workload.dataset_script(conversation_id, rng)


# its path, its format (from the extension when not given), rows drawn by the seed or in order, a
# max_tokens for rows without their own
DATASET = Dataset(
    "dataset",
    {"path": None, "format": None, "sample": "seed", "max_tokens": None},
    replays_file=True,
)
