"""`grill`: the command line. Each subcommand lives beside what it drives; this module only routes."""

from __future__ import annotations

import argparse
import importlib
import sys

from grill_locust.command import add_subcommand, run_parsed

# name -> the module with its `COMMANDS` help, `configure_parser(parser, name)` and `run(args) -> int`
SUBCOMMANDS: dict[str, str] = {
    "validate": "grill_locust.run.estimate",
    "ping": "grill_locust.ping",
    "sim": "grill_locust.sim.cli",
    "report": "grill_locust.report.cli",
    "compare": "grill_locust.report.cli",
    "gpu-exporter": "grill_locust.telemetry.cli",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grill", description="grill-locust: load tests for LLM engines")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name, module_name in SUBCOMMANDS.items():
        add_subcommand(subparsers, name, importlib.import_module(module_name))
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_parsed(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
