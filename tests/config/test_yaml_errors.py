"""A YAML syntax error is reported where the broken construct opened, and named in plain words."""

from __future__ import annotations

from pathlib import Path

import pytest

from grill_locust.config import ConfigError
from grill_locust.scenario import load_scenario

CASES = [
    pytest.param(
        'name: demo\ndescription: x\nmodels: []\nbackend:  "vllm\ntargets: []\n',
        "4:11",
        "unclosed double quote opened at line 4, column 11",
        id="double-quote",
    ),
    pytest.param(
        "name: demo\ndescription: 'it is\nmodels: []\n",
        "2:14",
        "unclosed single quote opened at line 2, column 14",
        id="single-quote",
    ),
    pytest.param(
        "backends:\n  - name: vllm\nmodels: [ {name: m}\ntargets:\n  - conversation: short-baseline\n",
        "3:9",
        "unclosed flow sequence '[' opened at line 3, column 9 (at line 4, column 1: expected ',' or ']', "
        "found a value)",
        id="flow-sequence",
    ),
    pytest.param(
        "backends: [\n", "1:11", "unclosed flow sequence '[' opened at line 1, column 11", id="bracket-at-end"
    ),
    pytest.param(
        "models:\n  - {name: m, max_tokens: 3\ntargets: []\n",
        "2:5",
        "unclosed flow mapping '{' opened at line 2, column 5 (at line 3, column 8: expected ',' or '}', found ':')",
        id="flow-mapping",
    ),
    pytest.param(
        "backends:\n  - name: vllm\n    url: http://h:1\n   engine: vllm\n",
        "4:4",
        "bad indentation: a key at line 4, column 4 lines up with nothing above it "
        "(the block it belongs to starts at line 2, column 3)",
        id="bad-indentation",
    ),
    pytest.param(
        "load:\n  iterations: 2\n    pause_s: 1\n",
        "3:12",
        "bad indentation or an unquoted ': ' at line 3, column 12",
        id="deeper-key",
    ),
    pytest.param(
        "backends:\n\t- name: vllm\n",
        "2:1",
        "a tab at line 2, column 1: indent with spaces",
        id="tab",
    ),
]


@pytest.mark.parametrize(("text", "place", "message"), CASES)
def test_a_syntax_error_names_the_construct_where_it_opened(
    text: str, place: str, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_scenario(path)
    assert str(caught.value).startswith(f"{path}:{place}: YAML syntax error: {message}")
    assert "\n" not in str(caught.value)
