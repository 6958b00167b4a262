"""Where a campaign stands between Locust's ticks: one state of an enum, its moves in one table.

Everything the shape's answer depends on, beside the tier running, is here: which state the campaign
is in and until when it holds there (h11's rule: the state machine lives in one place).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class CampaignState(enum.Enum):
    PAUSING = "pausing"  # between tiers: the next starts once the pause is over and the last one's users gone
    RUNNING = "running"  # a tier runs (Campaign.current)
    SETTLING = (
        "settling"  # a search's probe ended: its users' last records are on their way, then it is judged
    )
    HOLDING = "holding for the engine"  # after an outage: 0 users, probing the backend until it answers
    DRAINING = "draining"  # no tier left: the workers' users stop and their last records arrive
    DONE = "done"  # the shape walked every tier: Locust stops the test


PAUSING, RUNNING, SETTLING, HOLDING, DRAINING, DONE = CampaignState

# The moves a campaign makes; any other is a bug (IllegalTransition).
TRANSITIONS: dict[CampaignState, frozenset[CampaignState]] = {
    PAUSING: frozenset({RUNNING, DRAINING}),
    RUNNING: frozenset({PAUSING, SETTLING, HOLDING, DRAINING}),
    SETTLING: frozenset({PAUSING, HOLDING, DRAINING}),  # holding: the probe measured an outage
    HOLDING: frozenset({PAUSING, DRAINING, DONE}),
    DRAINING: frozenset({DONE}),
    DONE: frozenset(),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass
class CampaignStateMachine:
    """The campaign's state and its deadline (monotonic): the pause's end while pausing or holding, the
    end of the wait for the workers' users while draining, then `records_until` for their last records;
    `after_tier`: a tier ran, so the next waits for its users to be gone."""

    state: CampaignState = PAUSING
    until: float | None = None
    records_until: float | None = None
    after_tier: bool = False

    def move(self, to: CampaignState, until: float | None = None) -> None:
        if to not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"a campaign cannot go from {self.state.value} to {to.value}")
        self.state = to
        self.until = until

    def waiting(self, now: float) -> bool:
        """Whether the state's deadline is still ahead."""
        return self.until is not None and now < self.until
