"""The committed Grafana boards read through grafana-foundation-sdk's models of Grafana's dashboard schema.

grafana/build_dashboards.py builds the boards with the SDK; the few keys its models have no room for are
named here, so a key the schema does not know (a typo, a field of another Grafana version) fails.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

DASHBOARD_DIR = Path(__file__).resolve().parents[2] / "grafana" / "dashboards"
BOARDS = sorted(path.name for path in DASHBOARD_DIR.glob("*.json"))

# Keys the SDK's models (Grafana 11.4) do not hold. An InfluxDB annotation's query and columns: the
# schema's annotation target is the built-in Grafana one. The XY chart's `mapping`: the schema still
# describes the panel's older options (`seriesMapping`, `dims`).
OUTSIDE_THE_MODELS = {
    ".annotations.list[*].query",
    ".annotations.list[*].textColumn",
    ".annotations.list[*].tagsColumn",
    ".annotations.list[*].titleColumn",
    ".annotations.list[*].target.refId",
    ".annotations.list[*].target.query",
    ".annotations.list[*].target.rawQuery",
    ".annotations.list[*].target.resultFormat",
    ".panels[*].options.mapping",
}


def lost_keys(written: object, read_back: object, path: str = "") -> set[str]:
    """Paths (list indices as [*]) whose value in `written` is missing or different in `read_back`;
    keys only `read_back` has (the SDK's defaults) are not losses."""
    if isinstance(written, dict) and isinstance(read_back, dict):
        return {
            lost
            for key, value in written.items()
            for lost in (
                lost_keys(value, read_back[key], f"{path}.{key}") if key in read_back else {f"{path}.{key}"}
            )
        }
    if isinstance(written, list) and isinstance(read_back, list) and len(written) == len(read_back):
        return {
            lost for a, b in zip(written, read_back, strict=True) for lost in lost_keys(a, b, f"{path}[*]")
        }
    return set() if written == read_back and type(written) is type(read_back) else {path}


@pytest.fixture(scope="module", autouse=True)
def panel_models() -> None:
    register_default_plugins()  # so panels' options and field configs are read by their panel's model


def test_the_boards_are_there() -> None:
    assert BOARDS == ["engine-comparison.json", "gpus-engines.json", "live-run.json"]


@pytest.mark.parametrize("name", BOARDS)
def test_every_key_of_a_board_is_in_grafana_s_schema_but_the_named_few(name: str) -> None:
    written = json.loads((DASHBOARD_DIR / name).read_text())
    read_back = json.loads(json.dumps(Dashboard.from_json(written), cls=JSONEncoder))
    assert lost_keys(written, read_back) <= OUTSIDE_THE_MODELS


def test_a_key_outside_the_schema_is_caught() -> None:
    written = json.loads((DASHBOARD_DIR / "live-run.json").read_text())
    written["panels"][0]["gridpos"] = written["panels"][0]["gridPos"]  # a typo of gridPos
    written["templating"]["list"][0]["definiton"] = "SHOW TAG VALUES"
    read_back = json.loads(json.dumps(Dashboard.from_json(written), cls=JSONEncoder))
    lost = {re.sub(r"\[\*\]", "", key) for key in lost_keys(written, read_back) - OUTSIDE_THE_MODELS}
    assert lost == {".panels.gridpos", ".templating.list.definiton"}
