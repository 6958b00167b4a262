"""The web UI's 'Campaign' tab: target, tier, iterations done / to do, errors, a mix's personas apart,
for every tier."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grill_locust.run.state import run_state

if TYPE_CHECKING:
    from collections import Counter

    from locust.env import Environment

    from grill_locust.run.campaign import Campaign
    from grill_locust.scenario import Target

CAMPAIGN_TAB_KEY = "grill-campaign"


def extend_web_ui(environment: Environment, on_start: Callable[[Environment], None]) -> None:
    """Add the tab; its rows ride on Locust's own /stats/requests answers (extended_stats). `on_start`
    runs before Locust handles the Start button (POST /swarm)."""
    from flask import Response, request

    web_ui = environment.web_ui
    assert web_ui is not None and web_ui.app is not None
    web_ui.template_args["extendedTabs"] = [{"title": "Campaign", "key": CAMPAIGN_TAB_KEY}]
    web_ui.template_args["extendedTables"] = [
        {
            "key": CAMPAIGN_TAB_KEY,
            "structure": [
                {"key": "tier", "title": "Tier"},
                {"key": "target", "title": "Target"},
                {"key": "users", "title": "Users"},
                {"key": "iterations", "title": "Iterations done / to do"},
                {"key": "requests", "title": "Requests"},
                {"key": "errors", "title": "Errors"},
                {"key": "personas", "title": "Personas (developers, requests, errors)"},
                {"key": "state", "title": "State"},
            ],
        }
    ]

    def start_pressed() -> None:
        on_start(environment)

    @web_ui.app.before_request
    def before_start() -> Any:
        if request.endpoint == "locust.swarm" and request.method == "POST":  # under --web-base-path too
            return web_ui.auth_required_if_enabled(start_pressed)()  # None: on to Locust's handler
        return None

    @web_ui.app.after_request
    def add_campaign_stats(response: Response) -> Response:
        if request.path != "/stats/requests" or not response.is_json:
            return response
        campaign = run_state(environment).campaign
        payload = response.get_json()
        rows = campaign_rows(campaign) if campaign is not None else []
        payload["extended_stats"] = [{"key": CAMPAIGN_TAB_KEY, "data": rows}]
        response.set_data(json.dumps(payload))
        return response


def personas_cell(
    target: Target,
    tier_users: int,
    records_by_conversation: Counter[str],
    errors_by_conversation: Counter[str],
) -> str:
    """A mix's personas apart: `chat: 2 dev, 8 req, 0 err; ...` ("" for a target of one conversation)."""
    if not target.mix:
        return ""
    return "; ".join(
        f"{name}: {count} dev, {records_by_conversation[name]} req, {errors_by_conversation[name]} err"
        for name, count in target.persona_counts(tier_users).items()
    )


def campaign_rows(campaign: Campaign) -> list[dict[str, Any]]:
    rows = []
    for progress in campaign.tiers():
        phase = progress.phase
        state = (
            "running"
            if progress is campaign.current
            else ("done" if progress.complete else "incomplete")
            if progress.ended_wall
            else "waiting"
        )
        rows.append(
            {
                "tier": campaign.plan.label(phase),
                "target": phase.target,
                "users": phase.tier_users,
                "iterations": f"{progress.iterations_done}/{phase.iterations_target}",
                "requests": progress.records,
                "errors": progress.errors,
                "personas": personas_cell(
                    campaign.targets[phase.target],
                    phase.tier_users,
                    progress.records_by_conversation,
                    progress.errors_by_conversation,
                ),
                "state": state,
            }
        )
    return rows
