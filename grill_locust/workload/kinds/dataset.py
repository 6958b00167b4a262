"""The `dataset` kind: recorded prompts or conversations replayed from a file, rows drawn by the seed or
in order (reading and checking the file: workload/dataset.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from grill_locust.config import MAX_TOKENS_PER_MESSAGE, Count
from grill_locust.workload.dataset import dataset_format, load_dataset
from grill_locust.workload.kinds._conversation import ConversationBase
from grill_locust.workload.kinds._kind import ChatKind

if TYPE_CHECKING:
    from grill_locust.workload.generators import ConversationScript, Workload
    from grill_locust.workload.seeding import ShapeKey


class DatasetConversation(ConversationBase):
    """A `dataset` conversation's keys: recorded prompts or conversations replayed from a file."""

    kind: Literal["dataset"]
    """A row's recorded messages sent as they are; a ShareGPT row sends each of its user turns."""
    # a relative path is from the scenario file's folder (scenario/_load.py), or from the current
    # folder for data without a file
    path: str | None = Field(default=None, min_length=1)
    """The file replayed (JSONL or ShareGPT JSON); relative to the scenario file's folder."""
    format: str | None = None
    """jsonl or sharegpt (from the extension when not given)."""
    sample: Literal["seed", "order"] = "seed"
    """Rows drawn by the seed, or in file order."""
    max_tokens: Count | None = Field(default=None, ge=1, le=MAX_TOKENS_PER_MESSAGE)
    """max_tokens of the rows without their own, over the model's."""

    @model_validator(mode="after")
    def _file_and_format(self) -> DatasetConversation:
        if not self.path:
            raise ValueError("path: kind 'dataset' needs the file to replay (JSONL or ShareGPT JSON)")
        object.__setattr__(self, "format", dataset_format(self.path, self.format))
        return self


@dataclass(frozen=True)
class Dataset(ChatKind):
    """A row's recorded messages sent as they are; a ShareGPT row sends each of its user turns."""

    def check_file(self, conversation: ConversationBase) -> None:
        assert isinstance(conversation, DatasetConversation)
        load_dataset(conversation.path or "", conversation.format)

    def requests_per_iteration(self, conversation: ConversationBase) -> float:
        assert isinstance(conversation, DatasetConversation)
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


DATASET = Dataset(DatasetConversation, replays_file=True)
