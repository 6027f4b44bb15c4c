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
import logging
import base64
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tiered_core.cli.shared import (
    DispatchFailed,
    Interrupted,
    MessageNotFound,
    add_json_option,
    error_payload,
    int_arg,
    load_config,
    open_store,
    print_json,
)
from tiered_core.common import INT_MAX, LONG_MAX
from tiered_core.cli.exit_codes import ExitCode
from tiered_core.errors import CorruptData, DriverError, IllegalParam, LocalIOError, StateConflict, TieredStoreError
from tiered_core.local.io_errors import DISK_ERRNOS, local_io_error, with_stored

if TYPE_CHECKING:
    from tiered_core.config import StoreConfig

_queue_id = int_arg(0, "a queue id", INT_MAX)
_offset = int_arg(0, "a queue offset", LONG_MAX)
_count = int_arg(1, "a message count", INT_MAX)

log = logging.getLogger(__name__)


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
    p.add_argument("--body", help="message body (default: read stdin; an empty stdin is refused, "
                                   "--body '' puts an empty message)")
    p.add_argument("--dispatch", action="store_true",
                   help="dispatch to the tiered store before exiting; exit 5 if the dispatch failed")

    g = _store_command(sub, "get", get, "the status and the messages (each with \"body\", its text, and "
                                        "\"body_base64\", its exact bytes)",
                       help="read messages of a queue (from whichever tier holds them)",
                       description="Read messages by queue offset, or by key with --key. "
                                   "Exit 3 when no message is found or the store does not exist; exit 4 "
                                   "when the message at the offset is damaged in the tiered store and no "
                                   "local copy serves it. The text listing shows a body that is not "
                                   "UTF-8 as Python bytes (b'\\xff...'); --json gives every body's exact "
                                   "bytes in body_base64.")
    _queue_arguments(g, "topic to read")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--offset", type=_offset, default=None, help="first queue offset to read (default 0)")
    where.add_argument("--key", help="look up by key instead of offset (all queues of the topic)")
    g.add_argument("--count", type=_count, default=10,
                   help="most messages to return (default 10); fewer may come back: a read from the tiered "
                        "store returns at most 4096 messages (16 MiB); continue from next_begin_offset")

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
    A Ctrl-C after the put returned says so the same way (``stored``, ``put``; exit 130).
    """
    config = load_config(args.config)
    body = _body(args)
    done = _PutDone()
    try:
        return _put(args, config, body, done)
    except KeyboardInterrupt:
        if done.result is None:
            raise  # before the put returned: nothing to tell
        if not args.json and not done.printed:
            _print_put(done.result)
        raise Interrupted(f"interrupted; the message WAS stored ({_where_stored(done.result)}): do not put it "
                          "again", stored=True, put=done.result) from None


@dataclass
class _PutDone:
    """How far a put got: its result once the store returned it, and whether it was printed."""

    result: dict[str, Any] | None = None
    printed: bool = False


def _body(args: argparse.Namespace) -> bytes:
    """The body of ``put``: ``--body``, else stdin, which must not be empty (an empty pipe is
    more likely a mistake than a message; ``--body ''`` puts an empty one)."""
    if args.body is not None:
        return args.body.encode()
    body = sys.stdin.buffer.read()
    if not body:
        raise IllegalParam("the body read from stdin is empty; to put an empty message, pass --body ''",
                           source="stdin")
    return body


def _where_stored(result: dict[str, Any]) -> str:
    return f"{result['topic']}/{result['queue_id']}@{result['queue_offset']}"


def _put(args: argparse.Namespace, config: "StoreConfig", body: bytes, done: _PutDone) -> int:
    """:func:`put` once the body is read; ``done`` records the put's result as soon as it is known."""
    from tiered_core.codec.message import Message

    failure: DispatchFailed | None = None
    dispatch: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    try:
        with open_store(config, create=True) as store:
            from tiered_core.static_topic.guard import refuse_direct_puts
            refuse_direct_puts(store, args.topic)  # a static topic's physical queues take the cluster's puts only
            res = store.put_message(Message(topic=args.topic, body=body, keys=args.key, tags=args.tags),
                                    args.queue)
            if not res.ok:
                kind = IllegalParam if res.status.name == "MESSAGE_ILLEGAL" else StateConflict
                raise kind(f"put to {args.topic}/{args.queue} answered {res.status.name}", topic=args.topic,
                           queue_id=args.queue, status=res.status.name)
            result = done.result = {"status": res.status.name, "topic": args.topic, "queue_id": args.queue,
                                    "queue_offset": res.queue_offset, "commitlog_offset": res.commitlog_offset,
                                    "store_timestamp": res.store_timestamp}
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
            done.printed = True
        raise with_stored(exc, True, _where_stored(result), put=result) from None
    if failure is not None:
        if not args.json:
            _print_put(result)  # the message is stored locally: say so, then fail
            done.printed = True
        raise failure
    if args.json:
        print_json({**result, "dispatch": dispatch})
    else:
        _print_put(result)
        done.printed = True
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
    queues = sorted(set(lagging) | {e.split(":", 1)[0] for e in stats.errors if "/" in e.split(":", 1)[0]})
    why = "; ".join(stats.errors) if stats.errors else "no error was reported"
    if this_tiered:
        # The put's own message is tiered: the command did its job (exit 0; a retry would store
        # it twice). Other queues' failures are said, and the next dispatch retries them.
        if stats.errors or stats.failed_commits:
            log.warning("tiered put: the message is tiered (%s@%d); the dispatch failed for %s (%d failed "
                        "commit(s): %s), which a later dispatch retries", own, queue_offset,
                        ", ".join(q for q in queues if q != own) or "other queues", stats.failed_commits, why)
        return None
    return DispatchFailed(
        f"dispatch to the tiered store failed for {', '.join(queues) or 'no named queue'} "
        f"({stats.failed_commits} failed commit(s), {len(stats.errors)} error(s): {why}); "
        f"the message is stored locally at {own}@{queue_offset} "
        f"({'tiered' if this_tiered else 'not tiered'}) and a later dispatch retries",
        errors=list(stats.errors), queues=queues, failed_commits=stats.failed_commits, stored=True, put=result)


def _row(m) -> dict:
    """A message as ``get --json`` prints it: ``body`` is its text (bytes that are not UTF-8
    replaced by U+FFFD), ``body_base64`` its exact bytes."""
    return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "commitlog_offset": m.commitlog_offset, "store_timestamp": m.store_timestamp,
            "keys": m.keys, "tags": m.tags, "body": m.body.decode("utf-8", "replace"),
            "body_base64": base64.b64encode(m.body).decode("ascii")}


def _shown_body(body: bytes, limit: int = 60) -> str:
    """The body as the text listing shows it: its text's repr when it is UTF-8, else its
    bytes' (``b'\\xff\\xfe'``), so that different bodies never print alike; cut after ``limit``
    characters (bytes) with ``...``."""
    try:
        text: str | bytes = body.decode("utf-8")
    except UnicodeDecodeError:
        text = body
    return f"{text[:limit]!r}{'...' if len(text) > limit else ''}"


def get(args: argparse.Namespace) -> int:
    """``tiered get``: messages by offset or key; :class:`MessageNotFound` when there are none."""
    config = load_config(args.config)
    offset = 0 if args.offset is None else args.offset  # (None: not given, which --key requires)
    unread: TieredStoreError | None = None  # a key lookup that may have missed messages
    with open_store(config, create=False) as store:
        if args.key is not None:
            result = store.query_message(args.topic, args.key, args.count)
            messages = result.messages
            unread = None if result.error is None else _key_unread(args.topic, args.key, result.error)
            status, tier, nxt = "FOUND", None, None  # several queues and tiers: no one answer
            if not messages and unread is not None:
                raise unread
            if not messages:
                hint = ""
                from tiered_core.access.policy import ReadPolicy

                if store.policy is ReadPolicy.FORCE:
                    hint = (" in the tier (storage_level FORCE reads only the tier: messages the local store holds "
                            "but has not dispatched yet are not searched; dispatch them with put --dispatch, or "
                            "look up with another storage_level)")
                heads = _heads_without_messages(store, args.topic)
                if heads:
                    hint += (f"; the tier holds no message at {', '.join(heads)} (their commit-log bytes expired, "
                             "or a commit-log object was lost), so a key of theirs cannot be found")
                raise MessageNotFound(f"no message of topic {args.topic!r} has key {args.key!r}{hint}",
                                      topic=args.topic, key=args.key)
        else:
            res = store.get_message("tiered-cli", args.topic, args.queue, offset, args.count)
            messages, status = res.messages, res.status.name
            tier, nxt = (res.tier.value if res.tier else None), res.next_begin_offset
            if not messages and res.error is not None:
                raise _unserved(args.topic, args.queue, offset, status, res.error)
            if not messages:
                raise _not_found(store, args.topic, args.queue, offset, res)
    if args.json:
        print_json({"status": status, "tier": tier, "next_begin_offset": nxt,
                    "messages": [_row(m) for m in messages],
                    **(error_payload(unread) if unread is not None else {})})
    else:
        print(f"status={status} tier={tier or '-'} next_begin_offset={'-' if nxt is None else nxt}")
        for m in messages:
            print(f"  {m.topic}/{m.queue_id}@{m.queue_offset} ts={m.store_timestamp} keys={','.join(m.keys)} "
                  f"tags={m.tags or ''} body={_shown_body(m.body)}")
    if unread is not None:  # what was found is shown; the exit status says it may not be all
        print(f"tiered get: {unread}", file=sys.stderr)
        return int(ExitCode.BACKEND)
    return 0


def _key_unread(topic: str, key: str, error: TieredStoreError) -> TieredStoreError:
    """The error of a key lookup that could not read a message the tiered key index names
    (the result's ``error``): the lookup may have missed it. A key index that misses keys
    (a read-only open of a restored copy) says so itself."""
    if error.context.get("key_index_gap"):
        return error
    return DriverError(f"the key lookup of {key!r} in topic {topic!r} could not read a tiered message its key index "
                       f"names, so it may have missed it: {error.message}", retryable=True, topic=topic, key=key,
                       cause=str(getattr(error.code, "value", error.code)))


def _heads_without_messages(store: Any, topic: str) -> list[str]:
    """``topic/queue offsets a..b`` for each tiered queue of ``topic`` whose consume queue
    begins before the first message its commit log still holds (expiry, or a lost commit-log
    object: the take-over or rebuild that met it said so); the ones that cannot be read now
    are left out."""
    out = []
    for flat in store.flat_files.files():
        if flat.topic != topic or not flat.initialized:
            continue
        try:
            units_from, first = flat.consume_queue.min_queue_offset, flat.consume_queue_min_offset()
        except TieredStoreError:
            continue
        if first > units_from:
            out.append(f"{topic}/{flat.queue_id} offsets {units_from}..{first - 1}")
    return sorted(out)


def _not_found(store: Any, topic: str, queue_id: int, offset: int, res: Any) -> MessageNotFound:
    """The error of a read by offset that found nothing. Under storage level FORCE, which
    reads only the tier, messages the local store holds but has not dispatched yet are named
    (the local range, and that the offset is among them), not only "no message"."""
    status = res.status.name
    context = dict(topic=topic, queue_id=queue_id, offset=offset, status=status, min_offset=res.min_offset,
                   max_offset=res.max_offset, next_begin_offset=res.next_begin_offset)
    text = (f"no message in {topic}/{queue_id} at offset {offset}: {status} "
            f"(queue offsets {res.min_offset}..{res.max_offset}, next {res.next_begin_offset})")
    pending = _undispatched(store, topic, queue_id, res.max_offset)
    if pending is not None:
        local_min, local_max = pending
        first = max(local_min, res.max_offset)
        where = ("the local store holds it" if local_min <= offset < local_max else
                 f"the local store holds offsets {local_min}..{local_max - 1}")
        tier = f"offsets {res.min_offset}..{res.max_offset - 1}" if res.max_offset > res.min_offset else "no offset"
        text = (f"no message in the tier for {topic}/{queue_id} at offset {offset}: {status} (the tier holds {tier} "
                f"of this queue); {where} ({first}..{local_max - 1} not dispatched to the tier yet), and "
                "storage_level FORCE reads only the tier: dispatch them (put --dispatch) or read with another "
                "storage_level")
        context.update(local_min_offset=local_min, local_max_offset=local_max)
    return MessageNotFound(text, **context)


def _undispatched(store: Any, topic: str, queue_id: int, tier_end: int) -> tuple[int, int] | None:
    """Under storage level FORCE: the local range of a queue whose local messages reach past
    ``tier_end`` (not dispatched yet, so invisible to reads); else None."""
    from tiered_core.access.policy import ReadPolicy

    if store.policy is not ReadPolicy.FORCE:
        return None
    local_min = store.local.get_min_offset_in_queue(topic, queue_id)
    local_max = store.local.get_max_offset_in_queue(topic, queue_id)
    return (local_min, local_max) if local_max > max(local_min, tier_end) else None


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
