"""The ``tiered`` command.

Each subcommand lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func`` (returning the
exit code). Add a module name to ``COMMANDS`` to add a subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tiered_core.errors import TieredStoreError

#: Subcommand modules, in the order ``tiered --help`` lists them.
COMMANDS = [
    "drivers",
    "conformance",
    "demo",
    "ops",
    "metadata",
    "takeover",
    "spark",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tiered", description="tiered-store: tiered message storage")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"tiered_core.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"tiered_core.cli.{name}":
                continue  # not written yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except TieredStoreError as exc:
        print(f"tiered {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
