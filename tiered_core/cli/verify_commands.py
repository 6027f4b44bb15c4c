"""``tiered verify --config FILE [--deep] [--checksums] [--topics T ...] [--json]``: is the store whole?

Walks the store end to end and reports what is wrong with it, read-only: it takes no store
lock, claims nothing and writes nothing anywhere, so it is safe beside a running store.
It checks the owner of the tier prefix, the metadata against one listing of the backend
(objects no metadata lists and whose they look like, listed objects that are missing or
shorter than committed, bytes past the committed end, sealed flags), every queue (segments
that join, every consume-queue unit inside the commit log; with --deep every message
through the read checks and the segments' times against their messages), with --checksums
every commit-log and consume-queue object against the CRC-32 of the bytes the store wrote to
it, the key index (every uploaded file readable; with --deep every entry pointing at a
message with its key) and the local store (what waits to be tiered, what local retention
holds back).

Each finding names its kind, severity, the object or queue, the offsets and the fix;
`tiered repair --config FILE` mends the ones marked mendable.

exit status: 0 clean (no finding, or informational ones only); 1 findings (a warning or an
error); 4 corrupt data (acknowledged bytes are gone or fail the read checks); bad input
(no such config, no such store) as every command: 2 bad input, 3 not found, 5 backend.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tiered_core.cli.progress import Progress
from tiered_core.cli.shared import (
    StoreNotFound, add_json_option, load_config, print_json, print_section, store_exists, topics_arg,
)
from tiered_core.ops.findings import Severity, VerifyReport
from tiered_core.ops.verify import offsets_text


def register(sub: argparse._SubParsersAction) -> None:
    doc = __doc__ or ""
    p = sub.add_parser("verify", help="check that a store is whole: ownership, listing, queues, key index (read-only)",
                       description=doc.split("\n\n", 1)[1].rsplit("\n\nexit status:", 1)[0],
                       epilog="exit status:" + doc.rsplit("exit status:", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, metavar="FILE", help="tiered.toml or broker.conf of the store")
    p.add_argument("--deep", action="store_true",
                   help="also read every message through the read checks, compare the segments' times with "
                        "their messages and check every key-index entry (reads the whole tier)")
    p.add_argument("--checksums", action="store_true",
                   help="also hash every commit-log and consume-queue object and compare it with the checksum "
                        "recorded as the store wrote it: finds an object put in another's place (a restore from "
                        "the wrong copy) whose messages pass every read check (reads the whole tier once more)")
    p.add_argument("--topics", nargs="+", metavar="T",
                   help="check only these topics' queues, key-index entries and local queues (names separated "
                        "by spaces or commas; the ownership and the listing are always checked whole)")
    add_json_option(p, "the report: {\"summary\": {...}, \"findings\": [...]}")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``tiered verify``: run :func:`~tiered_core.ops.verify.verify_store` and print the report."""
    from tiered_core.ops.verify import verify_store

    config = load_config(args.config)
    topics = topics_arg(args.topics)
    if not store_exists(config):
        raise StoreNotFound(config, hint=lost_disk_hint(config))
    report = verify_store(config, deep=args.deep, checksums=args.checksums, topics=topics, progress=Progress)
    if args.json:
        print_json(report.as_dict())
    else:
        print_report(report)
    return report.exit_code


def lost_disk_hint(config: Any) -> str | None:
    """When ``store_path`` holds neither a local store nor metadata but the tier prefix
    holds a store's owner record (a lost disk; the tier root may live in ``store_path``):
    `tiered takeover --create` recovers it (`tiered metadata rebuild` refuses a prefix whose
    owner record names a store id the directory no longer holds). None otherwise."""
    from tiered_core.access.opening import prefix_owner
    from tiered_core.errors import TieredStoreError
    from tiered_core.flat.ownership import tier_prefix

    try:
        owner = prefix_owner(config)
    except (TieredStoreError, OSError):
        return None  # the default hint stands
    if owner is None:
        return None
    return (f"its tier prefix {tier_prefix(config.cluster, config.broker)!r} holds the data of {owner.describe()}: "
            "if this machine lost its disk, or this is a failover to a new store_path, stop the old store and run "
            f"`tiered takeover --config {config.source or 'FILE'} --create` (it rebuilds the metadata from the tier "
            "and continues every queue after it)")


def print_report(report: VerifyReport, stream: Any = None) -> None:
    """The human form of ``report``: findings by severity (worst first), each with its
    subject, what is wrong and the fix; then a summary line."""
    out = stream or sys.stdout
    for severity in sorted(Severity, key=lambda s: -s.rank):
        found = [f for f in report.findings if f.severity is severity]
        print_section(out, severity.value.upper(), [
            (f"{f.kind.value}: {f.subject}{'' if f.queue_offsets is None else f' [{offsets_text(f.queue_offsets)}]'}",
             [f.detail, f"fix: {f.fix}{'' if not f.mendable else ' (tiered repair mends it)'}"]) for f in found])
        if found:
            print(file=out)
    s = report.summary()
    counts = ", ".join(f"{n} {sev}" for sev, n in s["by_severity"].items() if n) or "no findings"
    verdict = {0: "clean", 1: "findings", 4: "CORRUPT DATA"}[report.exit_code]
    walk = ("deep" if report.deep else "shallow") + (", checksums" if report.checksums else "")
    print(f"{verdict}: {report.prefix} ({walk}): {counts}; "
          f"{s['objects_listed']:,} objects listed, {s['queues_checked']:,} queues, {s['segments_checked']:,} "
          f"segments, {s['messages_read']:,} messages and {s['bytes_read']:,} bytes read, "
          f"{s['index_files_checked']:,} key-index files ({s['index_entries_checked']:,} entries) in "
          f"{s['elapsed_s']:.1f} s", file=out)
    if report.checksums:
        unknown = s["objects_without_checksum"]
        print(f"checksums: {s['objects_hashed']:,} segment(s) hashed"
              + (f"; {unknown:,} segment(s) not hashed: no checksum was recorded for them (written before this "
                 "version kept checksums, or recorded by a metadata rebuild or a take-over); `tiered metadata "
                 "checksum --apply` records theirs once verify --deep finds the store whole" if unknown else ""),
              file=out)
