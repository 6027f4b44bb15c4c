"""``tiered put``, ``tiered get``, ``tiered stat``: operator commands on a store.

``put`` creates the store when it does not exist; ``get`` and ``stat`` only read, and a
store that does not exist is :class:`~tiered_core.cli.shared.StoreNotFound` (exit 3)
rather than a new empty store. ``put --dispatch`` fails (exit 5, the queues and errors on
stderr) when the dispatch left the message untiered. ``get`` exits 3 when it finds no
message, and 4 (``CorruptData``) when the message at the offset is damaged in the tier and
no local copy serves it: the read answered OFFSET_FOUND_NULL and its ``error`` (the
fetcher's record of what failed) is a CorruptData. ``stat`` names damaged tiered segments.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tiered_core.cli.shared import (
    DispatchFailed,
    MessageNotFound,
    add_json_option,
    int_arg,
    load_config,
    open_store,
    print_json,
)
from tiered_core.common import INT_MAX, LONG_MAX
from tiered_core.errors import CorruptData, IllegalParam, LocalIOError, StateConflict, TieredStoreError
from tiered_core.local.io_errors import DISK_ERRNOS, local_io_error, with_stored

_queue_id = int_arg(0, "a queue id", INT_MAX)
_offset = int_arg(0, "a queue offset", LONG_MAX)
_count = int_arg(1, "a message count", INT_MAX)


def _store_command(sub: argparse._SubParsersAction, name: str, func, json_what: str, *,
                   help: str, description: str) -> argparse.ArgumentParser:
    """A subcommand on one store: its ``--config``, ``--json`` and handler."""
    p = sub.add_parser(name, help=help, description=description)
    p.add_argument("--config", required=True, metavar="FILE",
                   help="the store's config file (tiered.toml or broker.conf)")
    add_json_option(p, json_what)
    p.set_defaults(func=func)
    return p


def _queue_arguments(p: argparse.ArgumentParser, topic_help: str) -> None:
    p.add_argument("--topic", required=True, help=topic_help)
    p.add_argument("--queue", type=_queue_id, default=0, metavar="ID", help="queue id (default 0)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``put``, ``get`` and ``stat``."""
    p = _store_command(sub, "put", put, "the put result (and the dispatch round's stats)",
                       help="put one message (body from --body or stdin); creates the store if needed",
                       description="Put one message into the local store; with --dispatch also copy it to "
                                   "the tiered store and fail unless that succeeded.")
    _queue_arguments(p, "topic of the message")
    p.add_argument("--key", action="append", default=[], help="index key (repeatable)")
    p.add_argument("--tags", help="message tags")
    p.add_argument("--body", help="message body (default: read stdin)")
    p.add_argument("--dispatch", action="store_true",
                   help="dispatch to the tiered store before exiting; exit 5 if the dispatch failed")

    g = _store_command(sub, "get", get, "the status and the messages",
                       help="read messages of a queue (from whichever tier holds them)",
                       description="Read messages by queue offset, or by key with --key. "
                                   "Exit 3 when no message is found or the store does not exist; exit 4 "
                                   "when the message at the offset is damaged in the tiered store and no "
                                   "local copy serves it.")
    _queue_arguments(g, "topic to read")
    g.add_argument("--offset", type=_offset, default=0, help="first queue offset to read (default 0)")
    g.add_argument("--count", type=_count, default=10, help="most messages to return (default 10)")
    g.add_argument("--key", help="look up by key instead of offset (all queues of the topic)")

    _store_command(sub, "stat", stat, "a list of per-queue objects (with their damaged segments)",
                   help="per-queue offsets in each tier, and damaged tiered segments",
                   description="Per-queue offsets in the local and the tiered store, and every tiered "
                               "segment that is missing or shorter than the metadata records (which "
                               "queue, which segment, what is wrong; a damaged segment costs only its "
                               "own range). Exit 3 when the store does not exist.")


def put(args: argparse.Namespace) -> int:
    """``tiered put``: put one message; with ``--dispatch`` tier it or fail.

    A local disk failure is a :class:`~tiered_core.errors.LocalIOError` (exit 5) saying whether
    the message was stored: not when the store could not open or the commit-log append failed;
    stored (with its offsets, under ``put``) when it came after the append (consume queue, key
    index, flush, dispatch, close), so a retry would store it twice.
    """
    from tiered_core.codec.message import Message

    config = load_config(args.config)
    body = args.body.encode() if args.body is not None else sys.stdin.buffer.read()
    failure: DispatchFailed | None = None
    dispatch: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    try:
        with open_store(config, create=True) as store:
            from tiered_core.static_topic.guard import refuse_direct_puts
            refuse_direct_puts(store, args.topic)  # a static topic's physical queues take the cluster's puts only
            res = store.put_message(Message(topic=args.topic, body=body, keys=args.key, tags=args.tags),
                                    args.queue)
            result = {"status": res.status.name, "topic": args.topic, "queue_id": args.queue,
                      "queue_offset": res.queue_offset, "commitlog_offset": res.commitlog_offset,
                      "store_timestamp": res.store_timestamp}
            if not res.ok:
                result = None
                kind = IllegalParam if res.status.name == "MESSAGE_ILLEGAL" else StateConflict
                raise kind(f"put to {args.topic}/{args.queue} answered {res.status.name}", topic=args.topic,
                           queue_id=args.queue, status=res.status.name)
            if args.dispatch:
                stats = store.dispatch(force=True)
                dispatch = {"messages": stats.messages, "bytes": stats.bytes, "groups": stats.groups,
                            "queues": stats.queues, "failed_commits": stats.failed_commits,
                            "errors": list(stats.errors)}
                failure = _dispatch_failure(store, stats, args.topic, args.queue, res.queue_offset, result)
    except (LocalIOError, OSError) as exc:
        if not isinstance(exc, LocalIOError):
            if exc.errno not in DISK_ERRNOS:
                raise
            exc = local_io_error("accessing", exc.filename, exc)  # (one that escaped untyped)
        if result is None:
            raise with_stored(exc, False) from None
        if not args.json:
            _print_put(result)  # the message is stored: say where, then fail
        raise with_stored(exc, True, f"{args.topic}/{args.queue}@{result['queue_offset']}", put=result) from None
    if failure is not None:
        if not args.json:
            _print_put(result)  # the message is stored locally: say so, then fail
        raise failure
    if args.json:
        print_json({**result, "dispatch": dispatch})
    else:
        _print_put(result)
    return 0


def _print_put(result: dict[str, Any]) -> None:
    print(f"{result['status']} topic={result['topic']} queue={result['queue_id']} "
          f"queue_offset={result['queue_offset']} commitlog_offset={result['commitlog_offset']}")


def _dispatch_failure(store, stats, topic: str, queue_id: int, queue_offset: int,
                      result: dict[str, Any]) -> DispatchFailed | None:
    """A :class:`DispatchFailed` when the round reported errors or failed commits, or left
    the message just put untiered; None when the dispatch did its job."""
    # From what the store knows in memory only: after a failed dispatch the backend may not
    # answer, and a read of each queue's first tiered message (stat, is_tiered) would wait
    # out every request's timeout and retries before the operator hears the message is stored.
    lagging = []
    for t, q in sorted(store.local.list_queues()):
        flat = store.flat_files.get(t, q)
        committed = flat.consume_queue_commit_offset() if flat is not None and flat.initialized else -1
        if committed < store.local.get_max_offset_in_queue(t, q):
            lagging.append(f"{t}/{q}")
    own = f"{topic}/{queue_id}"
    flat = store.flat_files.get(topic, queue_id)
    this_tiered = flat is not None and flat.initialized and queue_offset < flat.consume_queue_commit_offset()
    if not this_tiered and own not in lagging:
        lagging.append(own)
    if not stats.errors and not stats.failed_commits and this_tiered:
        return None
    queues = sorted(set(lagging) | {e.split(":", 1)[0] for e in stats.errors if "/" in e.split(":", 1)[0]})
    why = "; ".join(stats.errors) if stats.errors else "no error was reported"
    return DispatchFailed(
        f"dispatch to the tiered store failed for {', '.join(queues) or 'no named queue'} "
        f"({stats.failed_commits} failed commit(s), {len(stats.errors)} error(s): {why}); "
        f"the message is stored locally at {own}@{queue_offset} "
        f"({'tiered' if this_tiered else 'not tiered'}) and a later dispatch retries",
        errors=list(stats.errors), queues=queues, failed_commits=stats.failed_commits, stored=True, put=result)


def _row(m) -> dict:
    return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "commitlog_offset": m.commitlog_offset, "store_timestamp": m.store_timestamp,
            "keys": m.keys, "tags": m.tags, "body": m.body.decode("utf-8", "replace")}


def get(args: argparse.Namespace) -> int:
    """``tiered get``: messages by offset or key; :class:`MessageNotFound` when there are none."""
    config = load_config(args.config)
    with open_store(config, create=False) as store:
        if args.key is not None:
            messages = store.query_message(args.topic, args.key, args.count).messages
            status, tier, nxt = "FOUND", None, None  # several queues and tiers: no one answer
            if not messages:
                raise MessageNotFound(f"no message of topic {args.topic!r} has key {args.key!r}",
                                      topic=args.topic, key=args.key)
        else:
            res = store.get_message("tiered-cli", args.topic, args.queue, args.offset, args.count)
            messages, status = res.messages, res.status.name
            tier, nxt = (res.tier.value if res.tier else None), res.next_begin_offset
            if not messages and res.error is not None:
                raise _unserved(args.topic, args.queue, args.offset, status, res.error)
            if not messages:
                raise MessageNotFound(
                    f"no message in {args.topic}/{args.queue} at offset {args.offset}: {status} "
                    f"(queue offsets {res.min_offset}..{res.max_offset}, next {res.next_begin_offset})",
                    topic=args.topic, queue_id=args.queue, offset=args.offset, status=status,
                    min_offset=res.min_offset, max_offset=res.max_offset,
                    next_begin_offset=res.next_begin_offset)
    if args.json:
        print_json({"status": status, "tier": tier, "next_begin_offset": nxt,
                    "messages": [_row(m) for m in messages]})
        return 0
    print(f"status={status} tier={tier or '-'} next_begin_offset={'-' if nxt is None else nxt}")
    for m in messages:
        body = m.body[:60].decode("utf-8", "replace")
        print(f"  {m.topic}/{m.queue_id}@{m.queue_offset} ts={m.store_timestamp} keys={','.join(m.keys)} "
              f"tags={m.tags or ''} body={body!r}{'...' if len(m.body) > 60 else ''}")
    return 0


def _unserved(topic: str, queue_id: int, offset: int, status: str, error: TieredStoreError) -> TieredStoreError:
    """The error of a read that answered ``status`` (OFFSET_FOUND_NULL) because the tiered
    read failed with ``error`` (the result's record of it): a CorruptData (exit 4) naming the
    queue, the offset and what failed when the message is damaged in the tier; the read's
    own typed error otherwise."""
    if not isinstance(error, CorruptData):
        return error
    # The error's own offset is where in the stored file it failed (a commit-log offset, or
    # one of the damaged segment's file): keep it under its own name.
    where = f"{str(error.context.get('file_type', 'commitlog')).lower()}_offset"
    context = {(where if k == "offset" else k): v for k, v in error.context.items()}
    context.update(topic=topic, queue_id=queue_id, offset=offset, status=status)
    reason = error.context.get("reason", "corrupt")
    return CorruptData(
        f"the message at {topic}/{queue_id} offset {offset} is damaged in the tiered store ({reason}) and no "
        f"local copy serves it: {error.message}", **context)


def stat(args: argparse.Namespace) -> int:
    """``tiered stat``: one row per queue with its offsets in each tier."""
    config = load_config(args.config)
    with open_store(config, create=False) as store:
        rows = store.stat()
    if args.json:
        print_json([{**r.__dict__, "damage": [d.as_dict() for d in r.damage]} for r in rows])
        return 0
    head = ("topic", "queue", "local min", "local max", "tiered min", "tiered commit", "segments", "damaged")
    table = [head] + [(r.topic, str(r.queue_id), str(r.local_min), str(r.local_max), str(r.tiered_min),
                       str(r.tiered_commit), str(r.tiered_segments),
                       "all" if r.unrecoverable else str(len(r.damage))) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    damaged = [(r, d) for r in rows for d in r.damage]
    if damaged:
        print(f"\n{len(damaged)} damaged tiered segment(s); reads of every other segment are unaffected:")
        for r, d in damaged:
            print(f"  {r.topic}/{r.queue_id}: {d.describe()}")
    broken = [r for r in rows if r.unrecoverable]
    if broken:
        print(f"\n{len(broken)} queue(s) whose tiered files could not be recovered (their tiered data is not "
              "served and puts to them are refused; the other queues work):")
        for r in broken:
            print(f"  {r.topic}/{r.queue_id}: {r.unrecoverable}")
    return 0
