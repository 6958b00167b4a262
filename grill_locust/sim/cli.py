"""`grill sim`: run the simulated OpenAI-compatible engine (also `python -m grill_locust.sim`)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys

from grill_locust.errors import GrillError
from grill_locust.sim.faults import FAULT_KINDS, KNOWN_KINDS, FaultSettings, parse_kinds
from grill_locust.sim.llamacpp import LlamaCppServer
from grill_locust.sim.params import PROFILES, EngineParams, resolve_params
from grill_locust.sim.server import SPIN_WINDOW_S, SimServer

READY_LINE = "grill sim: listening on http://{host}:{port}"

_PARAM_HELP = {
    "max_num_seqs": "running requests at most (llama.cpp profile: slots)",
    "max_num_batched_tokens": "tokens per step: prefill chunks plus one per decoding request",
    "max_model_len": "longest prompt + output accepted (400 beyond)",
    "block_size": "KV block size in tokens (1: token-granular reuse, as SGLang's radix cache)",
    "kv_blocks": "KV cache capacity in blocks",
    "prefix_caching": "reuse cached prompt prefixes: on or off",
    "cache_kind": "'blocks' (paged, vLLM/SGLang) or 'slots' (llama.cpp)",
    "step_a_ms": "step time: fixed part, ms (a in a + b*decode_batch + c*prefill_tokens + d*kv_tokens)",
    "step_b_ms": "step time per decoding request, ms (b)",
    "step_c_ms": "step time per prefill token, ms (c)",
    "step_d_ms": "step time per token held in KV by running requests, ms (d)",
    "reasoning_tokens": "stream the first R output tokens as reasoning_content",
    "natural_output_tokens": "mean answer length when the answer stops by itself (no ignore_eos)",
    "metrics_flavor": "vllm, sglang (vLLM's answers, SGLang's /metrics names too) or llamacpp (llama-server's answers and names)",
}


# each subcommand this module serves, with its one-line help (grill_locust/command.py)
COMMANDS = {"sim": "run the simulated OpenAI-compatible engine"}


def configure_parser(parser: argparse.ArgumentParser, name: str = "sim") -> None:
    parser.add_argument(
        "--profile", default="vllm", choices=sorted(PROFILES), help="engine shape to simulate"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--served-model-name", default="grill-sim", help="the model name listed and accepted")
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"answer 401 on /v1/* without 'Authorization: Bearer KEY' (default: ${API_KEY_ENV}, "
        "which keeps the key out of the process list)",
    )
    parser.add_argument(
        "--truth-log", default=None, help="write one JSON line of ground truth per request here"
    )
    parser.add_argument(
        "--config", default=None, help="YAML mapping of engine parameters that override the profile"
    )
    group = parser.add_argument_group("engine parameters (override the profile and --config)")
    for field in dataclasses.fields(EngineParams):
        flag = "--" + field.name.replace("_", "-")
        group.add_argument(
            flag, dest=f"param_{field.name}", default=None, help=_PARAM_HELP.get(field.name, "")
        )
    faults = parser.add_argument_group("faults")
    faults.add_argument(
        "--fault-rate", type=float, default=0.0, help="share of requests that get a fault (0..1)"
    )
    faults.add_argument(
        "--fault-kinds", default=",".join(FAULT_KINDS), help=f"comma list from: {', '.join(KNOWN_KINDS)}"
    )
    faults.add_argument("--fault-seed", type=int, default=0, help="seed of the fault draws")
    faults.add_argument(
        "--fault-trickle-ms", type=float, default=500.0, help="gap between tokens of a trickled stream"
    )
    parser.add_argument(
        "--spin-ms",
        type=float,
        default=SPIN_WINDOW_S * 1000.0,
        help="busy-wait this last part of each step for sub-millisecond step timing (0: never spin)",
    )


def param_overrides(args: argparse.Namespace) -> dict[str, object]:
    return {
        field.name: getattr(args, f"param_{field.name}")
        for field in dataclasses.fields(EngineParams)
        if getattr(args, f"param_{field.name}", None) is not None
    }


API_KEY_ENV = "GRILL_SIM_API_KEY"


def run(args: argparse.Namespace) -> int:
    params = resolve_params(args.profile, args.config, param_overrides(args))
    if not 0 <= args.port <= 65535:
        raise GrillError(f"--port: expected 0..65535 (0 picks a free port), got {args.port}")
    if not 0.0 <= args.fault_rate <= 1.0:
        raise GrillError("--fault-rate: expected a share between 0 and 1")
    faults = FaultSettings(
        rate=args.fault_rate,
        kinds=parse_kinds(args.fault_kinds),
        seed=args.fault_seed,
        trickle_gap_ms=args.fault_trickle_ms,
    )
    try:
        if args.truth_log:
            open(args.truth_log, "a").close()
    except OSError as error:
        raise GrillError(f"--truth-log: cannot write {args.truth_log}: {error.strerror}") from None

    async def main() -> None:
        server_class = LlamaCppServer if params.metrics_flavor == "llamacpp" else SimServer
        server = server_class(
            params,
            served_model_name=args.served_model_name,
            api_key=args.api_key,
            faults=faults,
            truth_log=args.truth_log,
            spin_window_s=max(0.0, args.spin_ms / 1000.0),
            profile=args.profile,
        )

        def ready(port: int) -> None:
            print(READY_LINE.format(host=args.host, port=port), flush=True)

        try:
            await server.serve(args.host, args.port, ready)
        except OSError as error:
            raise GrillError(f"--port: cannot listen on {args.host}:{args.port}: {error.strerror}") from None

    asyncio.run(main())
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m grill_locust.sim.cli`: the same as `grill sim`."""
    from grill_locust.command import run_alone

    return run_alone(sys.modules[__name__], "sim", argv)
