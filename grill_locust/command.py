"""How one `grill` subcommand runs. A subcommand module holds `COMMANDS` (each name it serves, with its
one-line help), `configure_parser(parser, name)` and `run(args) -> int`; a user's error (`GrillError`)
ends it with one line and its exit status. Below every package, so a subcommand also runs alone
(`python -m grill_locust.sim`) without importing the rest of grill's commands."""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from grill_locust.errors import GrillError


def add_subcommand(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str, module: ModuleType
) -> None:
    help_text = module.COMMANDS[name]
    parser = subparsers.add_parser(name, help=help_text, description=help_text)
    module.configure_parser(parser, name)
    parser.set_defaults(_module=module)


def run_alone(module: ModuleType, name: str, argv: list[str] | None = None) -> int:
    """One subcommand on its own, as `grill <name>` runs it."""
    help_text = module.COMMANDS[name]
    parser = argparse.ArgumentParser(prog=f"grill {name}", description=help_text)
    module.configure_parser(parser, name)
    args = parser.parse_args(argv)
    args.command, args._module = name, module
    return run_parsed(args)


def run_parsed(args: argparse.Namespace) -> int:
    try:
        return int(args._module.run(args) or 0)
    except GrillError as error:
        print(f"grill {args.command}: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130
