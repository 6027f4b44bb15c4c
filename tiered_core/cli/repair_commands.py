"""``tiered repair --config FILE [--apply] [--json]``: mend what ``tiered verify`` finds, where
it is provably safe.

Without --apply (the default) it is a dry run: it runs verify (--deep unless --shallow) and
prints the plan -- what it would do about each finding, and what it cannot mend with the
manual step -- and changes nothing anywhere. With --apply it takes the store lock and
claims the tier prefix (so it refuses while the store is open elsewhere, or while another
store owns the prefix), decides every step again against the live state and does only what
still holds: segments that continue their file and read back are adopted into the
metadata, bytes past a committed end that read back are adopted, seals and segment times
made to agree, an unreadable key-index file quarantined and its keys indexed again, the
owner record written. Nothing is ever deleted outright: an object that must leave the
prefix (an orphan, a bad tail's object before it is cut back) is copied into
``{prefix}.quarantine/{repair id}/``, the copy read back and compared, and recorded in that
directory's manifest.json before the original goes.

``--list-quarantine`` prints what the quarantine holds. ``--purge-quarantine --older-than
7d`` (s, m, h or d) is the only way out of it: it deletes the copies a manifest lists whose
move is older than that, under the store lock and the prefix claim.

exit status: 0 nothing is left that repair cannot mend (dry run: every finding has an
action or needs none; --apply: every action was done); 1 something is left that needs a
manual step (each is printed with it), or an action failed; as every command: 2 bad input
(a bad --older-than), 3 no such store, 5 backend or store state (the store is open
elsewhere, another store owns the prefix).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Any

from tiered_core.cli.progress import Progress
from tiered_core.cli.shared import (
    StoreNotFound, add_json_option, load_config, print_json, print_section, store_exists, topics_arg,
)
from tiered_core.errors import IllegalParam

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+)([smhd])")


def duration(text: str) -> float:
    """Seconds of a duration such as ``7d``, ``12h``, ``30m``, ``45s`` (the argparse type of
    ``--older-than``; a bad one is a usage error naming the option)."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"must be a duration: a whole number and a unit s, m, h or d "
                                         f"(e.g. 7d, 12h), got {text!r}")
    return float(int(match.group(1)) * _UNITS[match.group(2)])


duration.__name__ = "a duration"


def register(sub: argparse._SubParsersAction) -> None:
    doc = __doc__ or ""
    p = sub.add_parser("repair", help="mend what `tiered verify` finds where it is safe (a dry run unless --apply)",
                       description=doc.split("\n\n", 1)[1].rsplit("\n\nexit status:", 1)[0],
                       epilog="exit status:" + doc.rsplit("exit status:", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, metavar="FILE", help="tiered.toml or broker.conf of the store")
    p.add_argument("--apply", action="store_true",
                   help="do it (under the store lock and the prefix claim); without it nothing is changed")
    p.add_argument("--shallow", action="store_true",
                   help="plan from a shallow verify (no message read: misses corrupt messages, segment "
                        "times and wrong key-index entries)")
    p.add_argument("--topics", nargs="+", metavar="T", help="verify only these topics' queues (as `tiered verify`)")
    p.add_argument("--list-quarantine", action="store_true", help="print what the quarantine holds and exit")
    p.add_argument("--purge-quarantine", action="store_true",
                   help="delete quarantined copies older than --older-than (the only way out of the quarantine)")
    p.add_argument("--older-than", type=duration, metavar="AGE",
                   help="with --purge-quarantine: how old a move must be, e.g. 7d, 12h, 30m, 45s")
    add_json_option(p, "the plan, or what --apply did, or the quarantine")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``tiered repair``: plan, apply, list or purge (module doc)."""
    if args.older_than is not None and not args.purge_quarantine:
        raise IllegalParam("--older-than goes with --purge-quarantine", option="--older-than")
    if args.purge_quarantine and args.older_than is None:
        raise IllegalParam("--purge-quarantine needs --older-than AGE (e.g. 7d): how old a quarantined copy must "
                           "be to be deleted", option="--older-than")
    if sum((args.purge_quarantine, args.list_quarantine, args.apply)) > 1:
        raise IllegalParam("give one of --apply, --list-quarantine, --purge-quarantine", option="--apply")
    config = load_config(args.config)
    if not store_exists(config):
        from tiered_core.cli.verify_commands import lost_disk_hint

        raise StoreNotFound(config, hint=lost_disk_hint(config))
    if args.list_quarantine:
        return _list(config, args)
    if args.purge_quarantine:
        return _purge(config, args)
    if args.apply:
        return _apply(config, args)
    from tiered_core.ops.repair import plan_repair

    plan = plan_repair(config, deep=not args.shallow, topics=topics_arg(args.topics), progress=Progress)
    if args.json:
        print_json(plan.as_dict())
    else:
        print_plan(plan)
    return plan.exit_code


def _apply(config: Any, args: argparse.Namespace) -> int:
    from tiered_core.access.writer_session import WriterSession
    from tiered_core.ops.repair import apply, plan_repair

    from tiered_core.local.local_store import acquire_store_lock, release_store_lock

    # Refuse a store open elsewhere before the (long) verify; the session below is the guard.
    os.makedirs(config.store_path, exist_ok=True)
    release_store_lock(acquire_store_lock(config.store_path))
    # The plan comes first (read-only) so that it shows what the session's claim mends
    # (a missing owner record); every step is decided again under the lock.
    plan = plan_repair(config, deep=not args.shallow, topics=topics_arg(args.topics), progress=Progress)
    with WriterSession(config, writer="tiered repair") as session:  # refused: open elsewhere, owned by another
        result = apply(plan, session, progress=Progress)
    if args.json:
        print_json(result.as_dict())
        return result.exit_code
    out = sys.stdout
    print(f"repair {result.repair_id} of {plan.report.prefix} (owner epoch {result.owner_epoch}):", file=out)
    for entry in result.finished:
        print(f"  finished an earlier run's move: {entry.original} {entry.then} (copy at {entry.copy})", file=out)
    for entry, why, _failed in result.unfinished:
        print(f"  left an earlier run's move unfinished: {entry.original} ({entry.then}; copy at {entry.copy}): "
              f"{why}", file=out)
    sections = [("DONE", [s for s in plan.steps if s.done is not None], lambda s: s.done),
                ("LEFT AS IT IS (no longer needed)",
                 [s for s in plan.steps if s.skipped is not None and s.manual is None], lambda s: s.skipped),
                ("NOT DONE (manual step)",
                 [s for s in plan.steps if s.skipped is not None and s.manual is not None], lambda s: s.manual),
                ("FAILED", [s for s in plan.steps if s.error is not None], lambda s: s.error),
                ("MENDED BY THE STEPS ABOVE", result.mended, lambda s: s.done),
                ("CANNOT MEND (manual step)", plan.manual, lambda s: s.manual)]
    for title, steps, what in sections:
        _section(out, title, steps, what)
    if result.keys_indexed:
        print(f"keys of {result.keys_indexed:,} message(s) indexed again", file=out)
    moved = len(result.moved)
    print(f"quarantine: {result.quarantine_dir} ({moved} object(s) moved)" if moved else
          "quarantine: nothing moved", file=out)
    print("run `tiered verify --config FILE --deep` to confirm", file=out)
    return result.exit_code


def _section(out: Any, title: str, steps: list, what: Any) -> None:
    print_section(out, title, [(f"{s.finding.kind.value}: {s.finding.subject}", [what(s)]) for s in steps])


def print_plan(plan: Any, stream: Any = None) -> None:
    """The human form of a :class:`~tiered_core.ops.repair.RepairPlan`."""
    out = stream or sys.stdout
    print(f"repair plan for {plan.report.prefix} ({'deep' if plan.report.deep else 'shallow'} verify: "
          f"{len(plan.report.findings)} finding(s))", file=out)
    print_section(out, "WOULD DO", [(f"{s.finding.kind.value}: {s.finding.subject}",
                                     [f"found: {s.finding.detail}", f"would: {s.detail}"]) for s in plan.steps])
    print_section(out, "CANNOT MEND", [(f"{s.finding.severity.value} {s.finding.kind.value}: {s.finding.subject}",
                                        [f"found: {s.finding.detail}", f"manual step: {s.manual}"])
                                       for s in plan.manual])
    print_section(out, "NOTHING TO DO", [(f"{s.finding.kind.value}: {s.finding.subject}: {s.detail}", [])
                                         for s in plan.nothing])
    print_section(out, "EARLIER RUNS' UNFINISHED MOVES", [
        (f"{e.original} ({e.then}; copy at {e.copy})",
         ["would: finish it first" if why is None else f"would leave it: {why}"]) for e, why in plan.pending])
    held = sum(len(r.entries) for r in plan.quarantine)
    if plan.quarantine:
        print(f"quarantine: {len(plan.quarantine)} repair run(s), {held} object(s) held "
              "(`tiered repair --list-quarantine`)", file=out)
    verdict = ("nothing is left that repair cannot mend" if not plan.manual
               else f"{len(plan.manual)} finding(s) need a manual step")
    print(f"dry run: nothing was changed; {len(plan.steps)} action(s) planned "
          f"({'run with --apply to do them' if plan.steps else 'none'}); {verdict}", file=out)


def _list(config: Any, args: argparse.Namespace) -> int:
    from tiered_core.flat.ownership import ReadOnlyDriver, tier_prefix
    from tiered_core.ops.quarantine import list_quarantine

    with ReadOnlyDriver(config.open_driver(), "listing the quarantine only reads") as driver:
        runs = list_quarantine(driver, tier_prefix(config.cluster, config.broker))
    if args.json:
        print_json({"runs": [r.as_dict() for r in runs]})
        return 0
    if not runs:
        print("the quarantine is empty")
    for run_ in runs:
        print(f"{run_.repair_id} ({run_.manifest})")
        for e in run_.entries:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e.at_ms / 1000))
            print(f"  {e.state:<7} {e.original} ({e.size} bytes, {e.kind}, {when} UTC): {e.then}")
        for path, size in run_.unlisted:
            print(f"  (no manifest line) {path} ({size} bytes)")
    return 0


def _purge(config: Any, args: argparse.Namespace) -> int:
    from tiered_core.access.writer_session import WriterSession
    from tiered_core.flat.ownership import PrefixOwnership, load_store_id, tier_prefix
    from tiered_core.ops.quarantine import purge

    with WriterSession(config, writer="tiered repair --purge-quarantine") as session:
        ownership = PrefixOwnership(session.driver, config.cluster, config.broker, load_store_id(config.store_path),
                                    config.store_path)
        ownership.claim()  # the session's claim: finds this store's record
        report = purge(ownership.guard(session.driver), tier_prefix(config.cluster, config.broker),
                       args.older_than)
    if args.json:
        print_json(report.as_dict())
        return 0
    for e in report.purged:
        print(f"purged {e.copy} ({e.size} bytes, moved by repair {e.repair_id})")
    for path in report.manifests:
        print(f"removed manifest {path}")
    for path, why in report.kept:
        print(f"kept {path}: {why}")
    n = len(report.purged)
    print(f"{n} cop{'y' if n == 1 else 'ies'} ({report.bytes:,} bytes) purged; {len(report.kept)} kept")
    return 0
