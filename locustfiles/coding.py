"""grill-locust's entry point: `locust -f locustfiles/coding.py [--scenario FILE]`.

With a scenario (default scenarios/demo.yaml when neither --scenario nor --host is given) the campaign's
load shape drives CampaignUser through targets x tiers (OpenLoopUser through open-loop rate tiers). With --host and a user class, the plain users
(MultiTurnUser, SharedPrefixUser, ShortBaselineUser, UniquePromptsUser) run as any Locust user does.
"""

import locust  # noqa: F401  (gevent's monkey patching happens here, before any network library)

import grill_locust.run.listeners  # noqa: F401  (registers the options and the event listeners)
from grill_locust.run.openloop import OpenLoopUser  # noqa: F401
from grill_locust.run.shape import CampaignShape  # noqa: F401
from grill_locust.run.user import (  # noqa: F401
    CampaignUser,
    MultiTurnUser,
    SharedPrefixUser,
    ShortBaselineUser,
    UniquePromptsUser,
)
