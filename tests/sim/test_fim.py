"""FIM requests against the simulated engine's llamacpp flavor through the real client: each transport
streams an ok record whose prompt tokens are exactly what /tokenize counts (every FIM token one), a
repeated file prefix is served from the cache, /infill keeps llama-server's share of a batch for the
prefix, and a model without FIM tokens answers /infill with llama-server's HTTP 501 and message."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grill_locust.client import EngineClient, fim_request
from grill_locust.client.backend_http import tokenize
from grill_locust.config import Backend, Model
from grill_locust.fim_templates import FIM_TEMPLATES
from grill_locust.record import Measurement, measure
from grill_locust.scenario import validate_conversation
from grill_locust.sim import SimProcess

MODEL = "grill-sim"
BATCH_TOKENS = 512  # the profile's n_batch, small so that a prefix of a few hundred tokens is cut
PREFIX = "import os\n\n\ndef read_config(path):\n    with open(path) as handle:\n        return "
SUFFIX = "\n\n\ndef main():\n    print(read_config(os.environ['CONFIG']))\n"
EXTRA = [("settings.py", "DEFAULTS = {'debug': False, 'workers': 4}\n")]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    args = ["--max-num-batched-tokens", str(BATCH_TOKENS)]
    with SimProcess.start(profile="llamacpp", served_model_name=MODEL, extra_args=args) as process:
        yield process.url


def backend(url: str) -> Backend:
    return Backend(name="llama", engine="llamacpp", url=url)


def send(url: str, prefix: str, suffix: str, **fim: str) -> Measurement:
    conversation = validate_conversation({"name": "c", "kind": "short-baseline", **fim})
    model = Model(name=MODEL, max_tokens=4, ignore_eos=True)
    path, body = fim_request(backend(url), model, conversation, prefix, suffix, EXTRA)
    return measure(EngineClient(backend(url)).stream(path, body).raw)


def counted(url: str, text: str) -> int:
    """Tokens of `text` as the server's /tokenize counts them."""
    count = tokenize(f"{url}/tokenize", "llamacpp", text).count
    assert count is not None
    return count


@pytest.mark.parametrize("family", sorted(FIM_TEMPLATES))
def test_template_streams_with_the_prompt_counted_as_tokenize_does(url: str, family: str) -> None:
    m = send(url, PREFIX, SUFFIX, fim="template", fim_template=family)
    assert (m.status, m.output_tokens, m.finish_reason) == ("ok", 4, "length")
    rendered = FIM_TEMPLATES[family].render(PREFIX, SUFFIX)
    assert m.prompt_tokens == counted(url, rendered)


def test_suffix_streams_as_the_simulated_models_own_template_where_the_engine_serves_it(url: str) -> None:
    # llama-server takes OpenAI's `suffix` and leaves it out of the prompt (the real one does the same)
    ignored = send(url, PREFIX, SUFFIX, fim="suffix")
    assert (ignored.status, ignored.output_tokens) == ("ok", 4)
    assert ignored.prompt_tokens == counted(url, PREFIX)
    with SimProcess.start(profile="vllm", served_model_name=MODEL) as vllm:
        m = send(vllm.url, PREFIX, SUFFIX, fim="suffix")
    assert (m.status, m.output_tokens) == ("ok", 4)
    assert m.prompt_tokens == counted(url, PREFIX) + counted(url, SUFFIX) + 3


def infill_tokens(url: str, prefix: str, suffix: str) -> int:
    """llama-server's /infill prompt: repository token and name, each extra file (separator, name,
    text), the completed file's separator and name, then prefix and suffix among the 3 FIM tokens."""
    extra = sum(1 + counted(url, name + "\n") + counted(url, text) for name, text in EXTRA)
    header = 1 + counted(url, "myproject\n") + extra + 1 + counted(url, "filename\n")
    return header + 1 + counted(url, prefix) + 1 + counted(url, suffix) + 1


def test_infill_streams_llamacpps_chunks_with_the_extra_files_in_the_prompt(url: str) -> None:
    m = send(url, PREFIX, SUFFIX, fim="infill")
    assert (m.status, m.output_tokens, m.finish_reason, m.tokens_source) == ("ok", 4, "length", "usage")
    assert m.ttft_s is not None and m.e2e_s is not None and m.ttft_s < m.e2e_s
    assert m.prompt_tokens == infill_tokens(url, PREFIX, SUFFIX)


def test_infill_reuses_the_cached_file_prefix_when_the_suffix_changes(url: str) -> None:
    prefix = PREFIX * 6
    send(url, prefix, SUFFIX, fim="infill")
    m = send(url, prefix, "# edited\n" + SUFFIX, fim="infill")
    assert m.status == "ok"
    unchanged = infill_tokens(url, prefix, "") - 1  # the other files, the prefix and the suffix token
    assert m.cached_tokens == unchanged


def test_infill_keeps_the_last_three_quarters_of_a_batch_of_the_prefix(url: str) -> None:
    long_prefix = PREFIX * 40
    assert counted(url, long_prefix) > 3 * BATCH_TOKENS // 4
    m = send(url, long_prefix, SUFFIX, fim="infill")
    assert m.status == "ok"
    assert m.prompt_tokens == infill_tokens(url, "", SUFFIX) + 3 * BATCH_TOKENS // 4


def test_a_model_without_fim_tokens_answers_infill_with_501_and_its_message() -> None:
    with SimProcess.start(profile="llamacpp", extra_args=["--fim-tokens=false"]) as sim:
        m = send(sim.url, PREFIX, SUFFIX, fim="infill")
    assert (m.status, m.http_status) == ("http_501", 501)
    assert "Infill is not supported by this model: prefix token is missing." in (m.error or "")
    assert m.output_tokens == 0
