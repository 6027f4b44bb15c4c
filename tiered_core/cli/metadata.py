"""``tiered metadata ACTION``: work on a metadata store.

- ``convert --from PATH --to PATH [--from-format NAME] [--to-format NAME] [--force]``:
  copy a store into a new one (JSON <-> SQLite, formats from the file extensions).
- ``rebuild --config FILE``: reconstruct lost metadata from ``driver.list()``. Not
  wired yet: write :func:`rebuild` and add ``"rebuild"`` to :data:`ACTIONS`
  with a ``_register_rebuild`` that adds its parser.

Each action is a ``_register_<name>(actions)`` function adding its sub-parser and
setting ``func`` to a callable ``(args) -> exit code``.
"""

from __future__ import annotations

import argparse
from typing import Callable

from tiered_core.metadata.convert import FORMAT_BY_EXTENSION, convert

#: Actions in the order ``tiered metadata --help`` lists them.
ACTIONS: list[str] = ["convert"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("metadata", help="convert or rebuild a metadata store",
                                   description="Work on a tiered-store metadata store.")
    actions = parser.add_subparsers(dest="metadata_action", metavar="ACTION")
    for name in ACTIONS:
        _REGISTER[name](actions)

    def usage(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=usage)


def _register_convert(actions: argparse._SubParsersAction) -> None:
    known = ", ".join(f"{ext} = {name}" for ext, name in FORMAT_BY_EXTENSION.items())
    p = actions.add_parser(
        "convert", help="copy a metadata store into a new one (JSON <-> SQLite)",
        description="Copy every topic, queue and file segment of one metadata store into a new "
                    f"store. Formats come from the file extensions ({known}) unless given. "
                    "The copy is verified before it is moved into place; the source is only read.")
    p.add_argument("--from", dest="source", required=True, metavar="PATH", help="the store to read")
    p.add_argument("--to", dest="target", required=True, metavar="PATH", help="the store to create")
    p.add_argument("--from-format", dest="source_format", metavar="NAME",
                   help="store name of the source (json, sqlite, or a plugin's)")
    p.add_argument("--to-format", dest="target_format", metavar="NAME", help="store name of the target")
    p.add_argument("--force", action="store_true", help="replace an existing target")
    p.set_defaults(func=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    stats = convert(args.source, args.target, source_format=args.source_format,
                    target_format=args.target_format, force=args.force)
    print(f"converted {stats.topics} topic(s), {stats.queues} queue(s), {stats.segments} file segment(s) "
          f"from {args.source!r} to {args.target!r} (max topic id {stats.max_topic_id})")
    return 0


def rebuild(args: argparse.Namespace) -> int:
    """``tiered metadata rebuild --config FILE``: rebuild metadata from the driver's listing.

    Hook for the lead (issue 4 item 4); not registered in :data:`ACTIONS` until written.
    """
    raise NotImplementedError("tiered metadata rebuild is not implemented yet")


_REGISTER: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "convert": _register_convert,
}
