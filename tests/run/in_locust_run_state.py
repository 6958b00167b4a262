"""The run's state lives in one declared object per environment; the campaign fans its events out to
every sink in its list."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from locust.argument_parser import get_parser
from locust.env import Environment
from locust.event import Events

import grill_locust.run.listeners  # noqa: F401  (registers the options and listeners, as the locustfile does)
from grill_locust.run.campaign import Campaign
from grill_locust.run.shape import CampaignShape
from grill_locust.run.state import run_state
from grill_locust.run.user import CampaignUser
from grill_locust.samples import KIND_ENGINE, empty_sample
from grill_locust.scenario import parse_scenario
from grill_locust.sinks import PhaseEvent
from grill_locust.sinks.results import ResultsWriter
from tests.influx.influx_dataset import make_record

UNREACHABLE_URL = "http://127.0.0.1:9"  # nothing is sent in these tests


def scenario_data(tiers: list[int]) -> dict[str, Any]:
    return {
        "name": "state",
        "backends": [{"name": "b", "url": UNREACHABLE_URL, "engine": "vllm"}],
        "models": [{"name": "m"}],
        "targets": [{"backend": "b", "model": "m", "conversation": "short-baseline"}],
        "load": {"tiers": tiers, "iterations": 1, "pause_s": 0},
    }


def test_init_keeps_its_state_in_run_state_and_adds_nothing_to_locusts_environment(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(scenario_data([1])))
    options = get_parser().parse_args(
        ["--scenario", str(scenario), "--results-dir", str(tmp_path / "r"), "--telemetry-interval", "0"]
    )
    from locust import events

    environment = Environment(
        user_classes=[CampaignUser], shape_class=CampaignShape(), events=events, parsed_options=options
    )
    before = set(vars(environment))
    runner = environment.create_local_runner()
    events.init.fire(environment=environment, runner=runner, web_ui=None)
    state = run_state(environment)
    assert state is run_state(environment)
    assert state.campaign is not None and state.worker is not None
    assert state.worker.scenario is state.campaign.scenario and state.worker.run_id == state.campaign.run_id
    assert set(vars(environment)) == before
    state.campaign.close()


class RecordingSink:
    """A third sink: one class with the protocol's methods is all a new destination needs."""

    live: ClassVar[bool] = True

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.tier_rows: list[dict[str, Any]] = []

    def write_records(self, records: list[dict[str, Any]]) -> None:
        self.events.append(("records", len(records)))

    def write_phase(self, event: PhaseEvent, phase: dict[str, Any]) -> None:
        self.events.append(("phase", event, phase["tier_users"], phase["complete"]))

    def write_tier(self, row: dict[str, Any]) -> None:
        self.events.append(("tier", row["tier_users"], row["requests"]))
        self.tier_rows.append(row)

    def write_telemetry(self, samples: list[dict[str, Any]]) -> None:
        self.events.append(("telemetry", len(samples)))

    def close(self) -> None:
        self.events.append(("close",))


def a_record(campaign: Campaign, record_id: str) -> dict[str, Any]:
    assert campaign.current is not None
    phase = campaign.current.phase
    return make_record(
        record_id=record_id,
        run_id=campaign.run_id,
        target=phase.target,
        tier_index=phase.tier_index,
        tier_users=phase.tier_users,
        session=phase.session,
        e2e_s=0.5,
    )


def test_the_campaign_sends_phases_tiers_and_telemetry_to_every_sink_and_records_to_the_folder(
    tmp_path: Path,
) -> None:
    environment = Environment(user_classes=[], events=Events())
    environment.create_local_runner()
    scenario = parse_scenario(scenario_data([2]), source="test")
    results = ResultsWriter(tmp_path / "run", {"run_id": "run-1"}, scenario.redacted())
    sink = RecordingSink()
    campaign = Campaign(environment, scenario, results, "run-1", sinks=[sink])
    assert campaign.tick() is not None  # the tier starts
    phase_key = campaign.phases[0].key
    records = [a_record(campaign, "r1"), a_record(campaign, "r2")]
    campaign.on_records("w", [*records, records[0]], {phase_key: 2})  # r1 resent: counted once
    campaign.on_telemetry([empty_sample(KIND_ENGINE, 1_700_000_001.0, "b", "b", "127.0.0.1")])
    campaign.tick()  # its iterations are done: the tier ends
    assert campaign.current is None
    campaign.close()
    assert sink.events == [
        ("phase", "start", 2, False),
        ("telemetry", 1),
        ("phase", "end", 2, True),
        ("tier", 2, 2),
        ("close",),
    ]  # no records: the worker's own sinks took them from its users
    assert results.record_count == 2
    assert [p["complete"] for p in results.phases] == [True]
    assert (tmp_path / "run" / "records.parquet").exists() and (
        tmp_path / "run" / "telemetry.parquet"
    ).exists()


def test_the_live_tier_row_judges_requests_by_the_scenario_s_slo(tmp_path: Path) -> None:
    environment = Environment(user_classes=[], events=Events())
    environment.create_local_runner()
    scenario = parse_scenario({**scenario_data([2]), "slo": {"ttft_s": 0.5}}, source="test")
    results = ResultsWriter(tmp_path / "run", {"run_id": "run-1"}, scenario.redacted())
    sink = RecordingSink()
    campaign = Campaign(environment, scenario, results, "run-1", sinks=[sink])
    campaign.tick()
    records = [{**a_record(campaign, f"r{n}"), "ttft_s": ttft_s} for n, ttft_s in enumerate((0.2, 0.4, 0.9))]
    campaign.on_records("w", records, {campaign.phases[0].key: 2})
    campaign.tick()
    campaign.close()
    assert [row["slo_attainment"] for row in sink.tier_rows] == [pytest.approx(2 / 3)]


def test_abandoned_requests_are_no_errors_and_make_no_outage(tmp_path: Path) -> None:
    environment = Environment(user_classes=[], events=Events())
    environment.create_local_runner()
    scenario = parse_scenario(scenario_data([1]), source="test")
    results = ResultsWriter(tmp_path / "run", {"run_id": "run-1"}, scenario.redacted())
    campaign = Campaign(environment, scenario, results, "run-1", sinks=[])
    assert campaign.tick() is not None
    progress = campaign.current
    assert progress is not None
    statuses = ["abandoned"] * 6 + ["ok"] * 3 + ["http_500"]
    records = [{**a_record(campaign, f"r{i}"), "status": status} for i, status in enumerate(statuses)]
    campaign.on_records("w", records, {progress.phase.key: 1})
    assert (progress.errors, progress.abandoned) == (1, 6)
    assert progress.outage == ""  # 1 failed of the 4 not abandoned: no outage (7 of 10 were it counted them)
    campaign.tick()
    campaign.close()
    assert [p["complete"] for p in results.phases] == [True]
