"""Scenario files: every section of the native schema, llm-grill compatibility, ${ENV}, secrets."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from pydantic import SecretStr

from grill_locust.config import DEFAULT_TIERS, ConfigError, expand_env_string
from grill_locust.errors import GrillError
from grill_locust.scenario import Scenario, iter_secrets, load_scenario, parse_scenario, parse_tiers
from grill_locust.workload.kinds import BUILTIN_CONVERSATION_KINDS

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"

FULL_NATIVE = """
name: full
description: every key of the native schema
backends:
  - name: vllm
    engine: vllm
    url: http://127.0.0.1:8000/
    api_key: sk-native-secret
    api: completions
    timeouts: {connect_s: 2, first_token_s: 30, total_s: 60}
    metrics_url: http://127.0.0.1:9400/metrics
    gpu_exporters: [http://10.0.0.5:9835/metrics]
    extra_body: {chat_template_kwargs: {enable_thinking: false}}
    headers: {X-Team: infra}
    retries: 2
  - name: sim
    engine: sim
    profile: llamacpp
    sim_args: {max_num_seqs: 4}
models:
  - name: devstral
    max_tokens: 128
    min_tokens: 16
    temperature: 0.2
    top_p: 0.9
    top_k: 20
    ignore_eos: true
conversations:
  - name: chat
    kind: multi-turn
    description: a shorter session
    system_tokens: 300
    user_turns: 3
    turn_tokens: 40
    shared_system: true
    seed: 7
  - name: docs
    kind: shared-prefix
    prefix_tokens: 1000
    question_tokens: 30
  - name: tiny
    kind: short-baseline
    prompt_tokens: 10
  - name: big
    kind: unique-prompts
    prompt_tokens: 500
  - name: scripted
    kind: fixed
    salt: false
    turns:
      - {role: user, content: hello}
targets:
  - {name: first, backend: vllm, model: devstral, conversation: chat}
  - {backend: sim, model: devstral, conversation: docs}
load:
  tiers: [2, 4]
  iterations: 3
  pause_s: 0.5
  think_time_s: 0
  spawn_rate: 10
  tier_timeout_s: 120
slo: {ttft_p50_s: 1.5, e2e_p50_s: 8, success_rate: 0.95}
sinks:
  influx: {url: "http://127.0.0.1:8086", org: grill, bucket: runs, token: influx-secret-token}
"""

MINIMAL = """
backends: [{name: vllm, engine: vllm, url: "http://127.0.0.1:8000"}]
models: [{name: m}]
targets: [{conversation: short-baseline}]
"""


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_every_native_section_is_read(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, FULL_NATIVE, "full.yaml"))
    assert scenario.name == "full" and scenario.description.startswith("every key")
    vllm, sim = scenario.backends
    assert vllm.url == "http://127.0.0.1:8000"  # trailing slash dropped
    assert vllm.api == "completions" and vllm.retries == 2
    assert (vllm.timeouts.connect_s, vllm.timeouts.first_token_s, vllm.timeouts.total_s) == (2, 30, 60)
    assert vllm.metrics_url == "http://127.0.0.1:9400/metrics"  # given
    assert vllm.tokenize_url == "http://127.0.0.1:8000/tokenize"  # default
    assert vllm.gpu_exporters == ["http://10.0.0.5:9835/metrics"]
    assert vllm.extra_body == {"chat_template_kwargs": {"enable_thinking": False}}
    assert vllm.headers == {"X-Team": "infra"}
    assert isinstance(vllm.api_key, SecretStr) and vllm.api_key.get_secret_value() == "sk-native-secret"
    assert sim.profile == "llamacpp" and sim.sim_args == {"max_num_seqs": 4} and sim.managed
    model = scenario.models[0]
    assert (model.max_tokens, model.min_tokens, model.temperature, model.top_p, model.top_k) == (
        128,
        16,
        0.2,
        0.9,
        20,
    )
    assert model.ignore_eos
    by_name = {conversation.name: conversation for conversation in scenario.conversations}
    chat = by_name["chat"]
    assert (chat.system_tokens, chat.user_turns, chat.turn_tokens, chat.shared_system, chat.seed) == (
        300,
        3,
        40,
        True,
        7,
    )
    assert (by_name["docs"].prefix_tokens, by_name["docs"].question_tokens) == (1000, 30)
    assert by_name["tiny"].prompt_tokens == 10 and by_name["big"].prompt_tokens == 500
    assert by_name["scripted"].kind == "fixed" and not by_name["scripted"].salt
    first, second = scenario.targets
    assert first.name == "first" and first.backend is vllm and first.conversation is chat
    assert second.name == "sim/devstral/docs"
    load = scenario.load
    assert (load.tiers, load.iterations, load.pause_s, load.think_time_s) == ([2, 4], 3, 0.5, 0)
    assert (load.spawn_rate, load.tier_timeout_s) == (10, 120)
    assert (scenario.slo.ttft_p50_s, scenario.slo.e2e_p50_s, scenario.slo.success_rate) == (1.5, 8, 0.95)
    influx = scenario.sinks.influx
    assert influx is not None and influx.bucket == "runs" and influx.org == "grill"
    assert influx.token is not None and influx.token.get_secret_value() == "influx-secret-token"


def test_defaults_of_a_minimal_file(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, MINIMAL, "minimal.yaml"))
    assert scenario.name == "minimal"  # from the file name
    assert scenario.load.tiers == list(DEFAULT_TIERS)
    assert (scenario.load.iterations, scenario.load.pause_s, scenario.load.think_time_s) == (5, 30.0, 0.5)
    assert scenario.load.spawn_rate is None and scenario.load.tier_timeout_s == 1800
    assert (scenario.slo.ttft_p50_s, scenario.slo.e2e_p50_s, scenario.slo.success_rate) == (2.0, 10.0, 0.99)
    assert scenario.sinks.influx is None
    backend = scenario.backends[0]
    assert (backend.timeouts.connect_s, backend.timeouts.first_token_s, backend.timeouts.total_s) == (
        10,
        300,
        600,
    )
    assert backend.api == "chat" and backend.retries == 0 and backend.api_key is None
    assert backend.metrics_url == "http://127.0.0.1:8000/metrics"
    model = scenario.models[0]
    assert (model.max_tokens, model.temperature, model.ignore_eos) == (256, 0.0, False)
    # the only backend and model are implied; the target name says all three
    assert scenario.targets[0].name == "vllm/m/short-baseline"


def test_builtin_conversations_need_no_declaration(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, MINIMAL))
    by_name = {conversation.name: conversation for conversation in scenario.conversations}
    assert set(BUILTIN_CONVERSATION_KINDS) <= set(by_name)
    multi = by_name["multi-turn-session"]
    assert (multi.kind, multi.system_tokens, multi.user_turns, multi.turn_tokens, multi.shared_system) == (
        "multi-turn",
        1500,
        4,
        150,
        False,
    )
    assert (by_name["shared-prefix"].prefix_tokens, by_name["shared-prefix"].question_tokens) == (4000, 100)
    assert by_name["short-baseline"].prompt_tokens == 50
    assert by_name["unique-prompts"].prompt_tokens == 3000
    assert multi.requests_per_iteration == 4 and by_name["unique-prompts"].requests_per_iteration == 1


def test_a_declared_conversation_replaces_the_builtin_of_that_name(tmp_path: Path) -> None:
    text = MINIMAL + "conversations: [{name: shared-prefix, prefix_tokens: 800}]\n"
    scenario = load_scenario(write(tmp_path, text))
    shared = [c for c in scenario.conversations if c.name == "shared-prefix"]
    assert len(shared) == 1 and shared[0].kind == "shared-prefix" and shared[0].prefix_tokens == 800
    assert shared[0].question_tokens == 100  # the kind's default for what was not given


def test_llm_grill_example_parses_unchanged() -> None:
    scenario = load_scenario(SCENARIOS / "llm-grill-example.yaml")
    vllm, llamacpp = scenario.backends
    assert (vllm.name, vllm.engine, vllm.url) == (
        "vllm-local",
        "vllm",
        "http://localhost:8000",
    )  # /v1 dropped
    assert vllm.timeouts.total_s == 300 and vllm.api_key is None  # ${VLLM_API_KEY:-} unset: no key
    assert (llamacpp.engine, llamacpp.timeouts.total_s) == ("llamacpp", 600)  # type: llama.cpp
    assert scenario.models[0].top_k == 40 and scenario.models[0].max_tokens == 512
    review = next(c for c in scenario.conversations if c.name == "code-review")
    assert review.kind == "fixed" and review.salt is True
    assert [turn.role for turn in review.turns] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert review.requests_per_iteration == 3
    assert [target.backend.name for target in scenario.targets] == ["vllm-local", "llamacpp-local"]
    load = scenario.load
    assert load.tiers == [1, 5, 10, 20] and load.iterations == 3
    assert load.spawn_rate == pytest.approx(2.0)  # 20 users over ramp_up_seconds: 10
    assert (load.think_time_s, load.pause_s) == (1.0, 15)


@pytest.mark.parametrize(
    ("load_yaml", "tiers"),
    [
        ("{concurrent_users: 8}", [8]),
        ("{concurrent_users: 200, ramp_levels: 4}", [50, 100, 150, 200]),
        ("{concurrent_users: 10, ramp_levels: 3}", [4, 7, 10]),
        ("{concurrent_users: [1, 3]}", [1, 3]),
        ("{ramp_levels: [2, 6], concurrent_users: 6}", [2, 6]),
    ],
)
def test_llm_grill_load_becomes_tiers(tmp_path: Path, load_yaml: str, tiers: list[int]) -> None:
    scenario = load_scenario(write(tmp_path, MINIMAL + f"load: {load_yaml}\n"))
    assert scenario.load.tiers == tiers


@pytest.mark.parametrize(
    ("load_yaml", "expected"),
    [
        ("{ramp_levels: [1, 0]}", "load.ramp_levels[1]: expected a positive number of users, got 0"),
        ("{concurrent_users: 0}", "load.concurrent_users: expected a positive number of users, got 0"),
        (
            "{concurrent_users: [2, -1]}",
            "load.concurrent_users[1]: expected a positive number of users, got -1",
        ),
        ("{ramp_levels: [1, x]}", "load.ramp_levels[1]: expected a whole number, got 'x'"),
    ],
)
def test_llm_grill_load_errors_name_the_key_in_the_file(
    tmp_path: Path, load_yaml: str, expected: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_scenario(write(tmp_path, MINIMAL + f"load: {load_yaml}\n"))


def test_llm_grill_server_keys_backend_and_type_are_synonyms(tmp_path: Path) -> None:
    text = """
    servers:
      - {name: a, url: "http://127.0.0.1:1/v1", backend: SGLang}
      - {name: b, url: "http://127.0.0.1:2", type: llama-cpp}
      - {name: c, url: "http://127.0.0.1:3", engine: openai-compatible}
    models: [{name: m}]
    targets:
      - {server: a, conversation: short-baseline}
      - {backend: b, conversation: short-baseline}
      - {server: c, conversation: short-baseline}
    """
    scenario = load_scenario(write(tmp_path, text))
    assert [b.engine for b in scenario.backends] == ["sglang", "llamacpp", "openai"]
    assert scenario.backends[2].metrics_url is None and scenario.backends[2].tokenize_url is None


def test_an_llm_grill_file_gets_llm_grills_defaults_where_it_is_silent(tmp_path: Path) -> None:
    # llm-grill's own minimal file: no type (openai), no max_tokens (512), no load (1 user, 1 iteration,
    # no think time), its SSH GPU monitoring and run_id (not ours: accepted, left aside), top_p 0
    text = """
    name: m
    run_id: abc123
    backends:
      - {name: s, url: "http://127.0.0.1:8000", gpu_monitoring: true, ssh_host: gpu1, ssh_user: ubuntu}
    models: [{name: m, top_p: 0.0}]
    conversations:
      - name: c
        turns: [{role: user, content: hi}]
    targets: [{backend: s, model: m, conversation: c}]
    """
    scenario = load_scenario(write(tmp_path, text))
    (backend,) = scenario.backends
    assert (backend.engine, backend.gpu_exporters) == ("openai", [])
    assert (scenario.models[0].max_tokens, scenario.models[0].top_p) == (512, 0.0)
    load = scenario.load
    assert (load.tiers, load.iterations, load.think_time_s) == ([1], 1, 0.0)
    ramp = load_scenario(write(tmp_path, text + "load: {ramp_levels: [1, 4], concurrent_users: 4}\n")).load
    assert (ramp.tiers, ramp.iterations, ramp.think_time_s, ramp.pause_s) == ([1, 4], 1, 0.0, 10.0)


def test_a_native_file_keeps_the_native_defaults_and_needs_its_engine(tmp_path: Path) -> None:
    native = load_scenario(write(tmp_path, MINIMAL)).load
    assert (native.iterations, native.think_time_s, native.pause_s) == (5, 0.5, 30.0)
    text = """
    backends: [{name: s, url: "http://127.0.0.1:8000"}]
    models: [{name: m}]
    targets: [{backend: s, model: m, conversation: short-baseline}]
    """
    with pytest.raises(ConfigError, match=r"backends\[0\]\.engine: required"):
        load_scenario(write(tmp_path, text))


def test_credentials_in_a_url_are_refused_without_being_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRILL_T_GW", "https://bob:hunter2secret@gw.example:4000/v1")
    text = """
    backends: [{name: s, engine: litellm, url: "${GRILL_T_GW}"}]
    models: [{name: m}]
    targets: [{backend: s, model: m, conversation: short-baseline}]
    """
    with pytest.raises(ConfigError) as error:
        load_scenario(write(tmp_path, text))
    assert "backends[0].url" in str(error.value) and "***@gw.example" in str(error.value)
    assert "hunter2secret" not in str(error.value) and "bob" not in str(error.value)


def test_env_expansion_in_any_string(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRILL_T_URL", "http://10.1.2.3:8000")
    monkeypatch.setenv("GRILL_T_MODEL", "devstral")
    monkeypatch.setenv("GRILL_T_ITER", "2")
    monkeypatch.setenv("GRILL_T_EMPTY", "")
    monkeypatch.delenv("GRILL_T_UNSET", raising=False)
    text = """
    name: ${GRILL_T_UNSET:-fallback-name}
    description: "costs $${PRICE} per ${GRILL_T_EMPTY-never}token"
    backends: [{name: vllm, engine: vllm, url: "${GRILL_T_URL}", headers: {X-Model: "${GRILL_T_MODEL}"}}]
    models: [{name: "${GRILL_T_MODEL}"}]
    targets: [{model: "${GRILL_T_MODEL}", conversation: "${GRILL_T_CONV:-unique-prompts}"}]
    load: {iterations: "${GRILL_T_ITER}", tiers: ["${GRILL_T_ITER}", 4]}
    """
    scenario = load_scenario(write(tmp_path, text))
    assert scenario.name == "fallback-name"
    assert scenario.description == "costs ${PRICE} per token"  # $${ is a literal; ${X-d} keeps an empty X
    assert scenario.backends[0].url == "http://10.1.2.3:8000"
    assert scenario.backends[0].headers == {"X-Model": "devstral"}
    assert scenario.targets[0].model.name == "devstral"
    assert scenario.targets[0].conversation.name == "unique-prompts"
    assert scenario.load.iterations == 2 and scenario.load.tiers == [2, 4]


def test_expand_env_string_rules() -> None:
    env = {"SET": "x", "EMPTY": ""}
    assert expand_env_string("a${SET}b", env) == "axb"
    assert expand_env_string("${EMPTY:-d}|${EMPTY-d}|${NOPE-d}|${NOPE:-}", env) == "d||d|"
    assert expand_env_string("$$plain $HOME", env) == "$$plain $HOME"  # only ${...} is special
    with pytest.raises(KeyError):
        expand_env_string("${NOPE}", env)
    with pytest.raises(ValueError):
        expand_env_string("${1BAD}", env)


def test_unset_variable_names_the_yaml_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRILL_T_UNSET", raising=False)
    text = MINIMAL.replace(
        'url: "http://127.0.0.1:8000"', 'url: "http://127.0.0.1:8000", headers: {A: "${GRILL_T_UNSET}"}'
    )
    with pytest.raises(ConfigError) as caught:
        load_scenario(write(tmp_path, text, "env.yaml"))
    message = str(caught.value)
    assert message.startswith(
        f"{tmp_path / 'env.yaml'}: backends[0].headers.A: environment variable GRILL_T_UNSET"
    )
    assert "\n" not in message


def test_secrets_are_redacted_everywhere(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, FULL_NATIVE))
    secrets = sorted(iter_secrets(scenario))
    assert secrets == ["influx-secret-token", "sk-native-secret"]
    redacted = scenario.redacted()
    assert redacted["backends"][0]["api_key"] == "***"
    assert redacted["targets"][0]["backend"]["api_key"] == "***"
    assert redacted["sinks"]["influx"]["token"] == "***"
    for text in (
        str(redacted),
        repr(scenario),
        str(scenario),
        scenario.model_dump_json(),
        str(scenario.to_wire()),
    ):
        for secret in secrets:
            assert secret not in text


SECRETS_BY_REFERENCE = """
backends:
  - name: a
    engine: vllm
    url: http://127.0.0.1:8000
    api_key: ${GRILL_T_KEY_A}
    headers: {Authorization: "Bearer ${GRILL_T_KEY_A}", X-Team: infra}
    extra_body: {nested: {secret_token: "${GRILL_T_BODY:-}"}}
  - {name: b, engine: vllm, url: "http://127.0.0.1:8001", api_key: "${GRILL_T_KEY_B}"}
models: [{name: m}]
targets: [{backend: a, model: m, conversation: short-baseline}, {backend: b, model: m, conversation: short-baseline}]
sinks: {influx: {url: "http://127.0.0.1:8086", bucket: grill, token: "${GRILL_T_TOKEN}"}}
"""
SECRET_ENV = {"GRILL_T_KEY_A": "sk-a-1f3e", "GRILL_T_KEY_B": "sk-b-77c0", "GRILL_T_TOKEN": "tok-9d2a"}


def test_secrets_travel_as_their_references_and_each_worker_expands_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GRILL_T_BODY", raising=False)
    scenario = load_scenario(write(tmp_path, SECRETS_BY_REFERENCE))
    wire = scenario.to_wire()
    assert all(value not in str(wire) for value in SECRET_ENV.values())
    assert wire["backends"][0]["headers"] == {"Authorization": None, "X-Team": "infra"}
    assert {tuple(r["path"]): r["text"] for r in wire["secret_references"]} == {
        ("backends", 0, "api_key"): "${GRILL_T_KEY_A}",
        ("backends", 0, "headers", "Authorization"): "Bearer ${GRILL_T_KEY_A}",
        ("backends", 0, "extra_body", "nested", "secret_token"): "${GRILL_T_BODY:-}",
        ("backends", 1, "api_key"): "${GRILL_T_KEY_B}",
        ("sinks", "influx", "token"): "${GRILL_T_TOKEN}",
    }
    assert Scenario.from_wire(wire) == scenario  # a worker with the master's environment
    worker_env = {**SECRET_ENV, "GRILL_T_KEY_B": "sk-b-workers-own", "GRILL_T_BODY": "body-own"}
    on_worker = Scenario.from_wire(wire, worker_env)
    b = on_worker.targets[1].backend
    assert b.api_key is not None and b.api_key.get_secret_value() == "sk-b-workers-own"
    assert on_worker.targets[0].backend.headers["Authorization"] == "Bearer sk-a-1f3e"
    assert on_worker.backends[0].extra_body == {"nested": {"secret_token": "body-own"}}


def test_a_worker_without_a_secrets_variable_refuses_naming_it(tmp_path: Path) -> None:
    env = {"GRILL_T_KEY_A": "sk-a-1f3e", "GRILL_T_KEY_B": "sk-b-77c0", "GRILL_T_TOKEN": "tok-9d2a"}
    path = write(tmp_path, SECRETS_BY_REFERENCE, "refs.yaml")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        wire = load_scenario(path).to_wire()
    lacking = {name: value for name, value in env.items() if name != "GRILL_T_KEY_B"}
    with pytest.raises(ConfigError) as caught:
        Scenario.from_wire(wire, lacking)
    assert str(caught.value) == (
        f"{path}: backends[1].api_key: environment variable GRILL_T_KEY_B is not set on this worker "
        "(workers take the scenario's secrets from their own environment: set GRILL_T_KEY_B there)"
    )


def test_a_literal_secret_never_travels_and_a_worker_refuses_it(tmp_path: Path) -> None:
    path = write(tmp_path, FULL_NATIVE, "literal.yaml")
    scenario = load_scenario(path)
    literal = [(r.path, r.line) for r in scenario.literal_secrets()]
    assert literal == [(("backends", 0, "api_key"), 8), (("sinks", "influx", "token"), 64)]
    wire = scenario.to_wire()
    assert "sk-native-secret" not in str(wire) and "influx-secret-token" not in str(wire)
    with pytest.raises(
        ConfigError, match=r"literal.yaml: backends\[0\]\.api_key: a secret written literally"
    ):
        Scenario.from_wire(wire, {})


def test_llm_grill_api_key_none_is_no_secret_and_servers_keep_their_name(tmp_path: Path) -> None:
    text = """
    servers:
      - {name: a, type: vllm, url: "http://127.0.0.1:8000", api_key: none}
      - {name: b, type: vllm, url: "http://127.0.0.1:8001", api_key: sk-llm-grill-literal}
    models: [{name: m}]
    conversations: [{name: c, turns: [{role: user, content: hi}]}]
    targets: [{server: a, model: m, conversation: c}, {server: b, model: m, conversation: c}]
    """
    scenario = load_scenario(write(tmp_path, text, "grill.yaml"))
    assert [r.path for r in scenario.literal_secrets()] == [("servers", 1, "api_key")]
    with pytest.raises(ConfigError, match=r"grill.yaml: servers\[1\]\.api_key: a secret written literally"):
        Scenario.from_wire(scenario.to_wire(), {})


def test_an_empty_api_key_sends_none(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        'url: "http://127.0.0.1:8000"', 'url: "http://127.0.0.1:8000", api_key: "${NO_SUCH_KEY_X:-}"'
    )
    assert load_scenario(write(tmp_path, text)).backends[0].api_key is None


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp", "ollama", "litellm", "sim"])
def test_api_messages_is_accepted_where_the_engine_serves_it(tmp_path: Path, engine: str) -> None:
    text = MINIMAL.replace("engine: vllm", f"engine: {engine}, api: messages")
    assert load_scenario(write(tmp_path, text)).backends[0].api == "messages"


@pytest.mark.parametrize("engine", ["tgi", "openai"])
def test_an_api_the_engine_does_not_serve_is_refused_naming_the_key(tmp_path: Path, engine: str) -> None:
    text = MINIMAL.replace("engine: vllm", f"engine: {engine}, api: messages")
    with pytest.raises(
        ConfigError, match=rf"backends\[0\]\.api: engine '{engine}' does not serve the messages API"
    ):
        load_scenario(write(tmp_path, text))


def test_overrides_replace_the_load_and_are_validated(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, MINIMAL))
    changed = scenario.with_overrides(tiers=[1, 4], iterations=1, pause_s=0.2, think_time_s=0)
    assert (changed.load.tiers, changed.load.iterations, changed.load.pause_s, changed.load.think_time_s) == (
        [1, 4],
        1,
        0.2,
        0,
    )
    assert scenario.load.tiers == list(DEFAULT_TIERS)  # the original is unchanged (frozen)
    assert scenario.with_overrides().load == scenario.load
    with pytest.raises(ConfigError, match="iterations: expected a value >= 1"):
        scenario.with_overrides(iterations=0)


def test_managed_sim_gets_endpoints_once_it_has_a_url(tmp_path: Path) -> None:
    text = """
    backends: [{name: sim, engine: sim}]
    models: [{name: grill-sim}]
    targets: [{conversation: short-baseline}]
    """
    backend = load_scenario(write(tmp_path, text)).backends[0]
    assert backend.managed and backend.profile == "vllm" and backend.tokenize_url is None
    started = backend.with_url("http://127.0.0.1:40123")
    assert not started.managed
    assert started.tokenize_url == "http://127.0.0.1:40123/tokenize"
    assert started.metrics_url == "http://127.0.0.1:40123/metrics"
    moved = started.with_url("http://127.0.0.1:40124")
    assert moved.metrics_url == "http://127.0.0.1:40124/metrics"


def test_yaml_errors_and_paths_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_scenario(write(tmp_path, "backends: [\n", "bad.yaml"))
    assert str(caught.value).startswith(f"{tmp_path / 'bad.yaml'}:1:11: YAML syntax error")
    with pytest.raises(ConfigError, match="no such file"):
        load_scenario(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"^inline: targets\[0\]\.conversation: required"):
        parse_scenario(
            {
                "backends": [{"name": "a", "engine": "vllm", "url": "http://h:1"}],
                "models": [{"name": "m"}],
                "targets": [{}],
            },
            "inline",
        )


def test_shipped_scenarios_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("VLLM_URL", "VLLM_API_KEY", "MODEL", "LLAMACPP_MODEL", "SGLANG_URL", "LLAMACPP_URL"):
        monkeypatch.delenv(variable, raising=False)
    coding = load_scenario(SCENARIOS / "coding.yaml")
    assert {t.backend.name for t in coding.targets} == {"vllm", "vllm-no-prefix-cache", "sglang", "llamacpp"}
    assert {t.conversation.name for t in coding.targets} == set(BUILTIN_CONVERSATION_KINDS)
    assert len(coding.targets) == 16 and coding.load.tiers == list(DEFAULT_TIERS)
    demo = load_scenario(SCENARIOS / "demo.yaml")
    assert all(b.engine == "sim" and b.managed for b in demo.backends)
    assert {b.profile for b in demo.backends} == {"vllm", "llamacpp"}
    assert demo.load.tiers == [1, 4, 8] and demo.load.iterations == 1


def test_parse_tiers() -> None:
    assert parse_tiers("1, 5,10") == [1, 5, 10]
    for bad in ("", "1,x", "0", "-3"):
        with pytest.raises(GrillError, match="--tiers: expected comma-separated"):
            parse_tiers(bad)
    for bad, item in (("1,,2", 2), ("1,5,", 3), (",1", 1)):
        with pytest.raises(GrillError) as caught:
            parse_tiers(bad)
        assert str(caught.value) == (
            f"--tiers: item {item} of {bad!r} is empty "
            "(expected comma-separated positive numbers of users like 1,5,10)"
        )


def test_started_engines_get_their_urls_everywhere(tmp_path: Path) -> None:
    scenario = load_scenario(SCENARIOS / "demo.yaml")
    started = scenario.with_backend_urls({"sim-vllm": "http://127.0.0.1:41001"})
    assert started.backends[0].url == "http://127.0.0.1:41001" and started.backends[1].managed
    assert started.targets[0].backend == started.backends[0]
    assert started.targets[0].backend.tokenize_url == "http://127.0.0.1:41001/tokenize"
    assert started.targets[1].backend.managed
    assert Scenario.from_wire(started.to_wire()) == started
    with pytest.raises(ConfigError, match="no backend named nope"):
        scenario.with_backend_urls({"nope": "http://127.0.0.1:1"})


def test_an_unknown_key_or_kind_lists_what_is_known(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_scenario(write(tmp_path, MINIMAL + "load: {tires: [1]}\n"))
    message = str(caught.value)
    assert (
        "load.tires: unknown key (known: arrival, burstiness, concurrent_users, duration_s, engine_wait_s, "
        "iterations, max_in_flight, pause_s, ramp_levels," in message
    )
    with pytest.raises(ConfigError) as caught:
        load_scenario(write(tmp_path, MINIMAL + "conversations: [{name: c, kind: agentic-loop}]\n"))
    assert str(caught.value).endswith(
        "conversations[0].kind: expected 'multi-turn', 'shared-prefix', 'short-baseline', "
        "'unique-prompts', 'fixed', 'agentic', 'autocomplete', 'dataset' or 'trace', got 'agentic-loop' (line 5)"
    )
