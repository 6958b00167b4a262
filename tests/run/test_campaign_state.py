"""The campaign's state table: the moves a campaign makes, and a move outside the table raising."""

from __future__ import annotations

import pytest

from grill_locust.run.campaign_state import (
    DONE,
    DRAINING,
    HOLDING,
    PAUSING,
    RUNNING,
    SETTLING,
    TRANSITIONS,
    CampaignState,
    CampaignStateMachine,
    IllegalTransition,
)


def test_a_ladder_with_an_outage_walks_running_holding_pausing_then_drains_to_done() -> None:
    walk = CampaignStateMachine()
    for state, until in ((RUNNING, None), (HOLDING, 10.0), (PAUSING, 10.0), (RUNNING, None)):
        walk.move(state, until)
    walk.move(DRAINING, until=20.0)
    assert walk.waiting(19.0) and not walk.waiting(20.0)
    walk.move(DONE)
    assert walk.state is DONE


@pytest.mark.parametrize(
    ("start", "to"),
    [(PAUSING, SETTLING), (PAUSING, HOLDING), (DRAINING, RUNNING), (DONE, PAUSING), (RUNNING, RUNNING)],
)
def test_a_move_outside_the_table_raises(start: CampaignState, to: CampaignState) -> None:
    walk = CampaignStateMachine(state=start)
    with pytest.raises(IllegalTransition, match=f"from {start.value} to {to.value}"):
        walk.move(to)
    assert walk.state is start


def test_every_state_but_done_leads_to_done() -> None:
    reached = {DONE}
    while True:
        more = {state for state, moves in TRANSITIONS.items() if moves & reached} - reached
        if not more:
            break
        reached |= more
    assert reached == set(CampaignState)
