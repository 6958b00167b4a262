"""The load shape Locust asks for a user count every second: the campaign answers it."""

from __future__ import annotations

from locust import LoadTestShape, User

from grill_locust.run.openloop import OpenLoopUser
from grill_locust.run.state import run_state
from grill_locust.run.user import CampaignUser


class CampaignShape(LoadTestShape):
    """Targets x tiers x iterations, with pauses: the shape asks the campaign (master or local runner).
    A tier of users runs CampaignUsers; an open-loop tier one OpenLoopUser per worker."""

    # Locust must not warn about -u/-r/-t itself: we print our own one-line warning when a scenario drives.
    use_common_options = True

    def tick(self) -> tuple[int, float, list[type[User]]] | None:
        campaign = run_state(self.runner.environment).campaign if self.runner else None
        step = campaign.tick() if campaign is not None else None
        if campaign is None or step is None:
            return None
        current = campaign.current
        open_loop = current is not None and current.tier.open_loop
        return (*step, [OpenLoopUser if open_loop else CampaignUser])
