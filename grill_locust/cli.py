"""`grill`: the command line. Each subcommand lives beside what it drives; this module only routes."""

from __future__ import annotations

import argparse
import importlib
import sys

from grill_locust.errors import GrillError

# name -> (module with `configure_parser(parser)` and `run(args) -> int`, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("grill_locust.run.estimate", "check a scenario file and print an estimate of the campaign"),
    "ping": ("grill_locust.ping", "check each backend of a scenario and print its capabilities"),
    "sim": ("grill_locust.sim.cli", "run the simulated OpenAI-compatible engine"),
    "report": ("grill_locust.report.cli", "turn a run's results into tables, figures and report.html"),
    "compare": ("grill_locust.report.cli", "compare several runs in one report"),
    "gpu-exporter": ("grill_locust.telemetry.cli", "serve NVML GPU metrics for Prometheus / InfluxDB"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grill", description="grill-locust: load tests for LLM engines")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(module_name)
        module.configure_parser(sub, name)
        sub.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    return _run(build_parser().parse_args(argv))


def main_for(name: str, argv: list[str] | None = None) -> int:
    """One subcommand on its own (`python -m grill_locust.sim`): imports only that subcommand's module,
    so the simulated engine and the GPU exporter start without the rest of the package's dependencies."""
    module_name, help_text = SUBCOMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"grill {name}", description=help_text)
    module.configure_parser(parser, name)
    args = parser.parse_args(argv)
    args.command, args._module = name, module
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args._module.run(args) or 0)
    except GrillError as error:
        print(f"grill {args.command}: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
