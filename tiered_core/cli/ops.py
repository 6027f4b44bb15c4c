"""``tiered put``, ``tiered get``, ``tiered stat``: operator commands on a store."""

from __future__ import annotations

import argparse
import json
import sys

from tiered_core.config import StoreConfig


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("put", help="put one message (body from --body or stdin)")
    p.add_argument("--config", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--queue", type=int, default=0)
    p.add_argument("--key", action="append", default=[], help="index key (repeatable)")
    p.add_argument("--tags")
    p.add_argument("--body", help="message body (default: read stdin)")
    p.add_argument("--dispatch", action="store_true", help="dispatch to the tiered store before exiting")
    p.set_defaults(func=put)

    g = sub.add_parser("get", help="read messages of a queue (from whichever tier holds them)")
    g.add_argument("--config", required=True)
    g.add_argument("--topic", required=True)
    g.add_argument("--queue", type=int, default=0)
    g.add_argument("--offset", type=int, default=0)
    g.add_argument("--count", type=int, default=10)
    g.add_argument("--key", help="look up by key instead of offset")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=get)

    s = sub.add_parser("stat", help="per-queue offsets in each tier")
    s.add_argument("--config", required=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=stat)


def _open(path: str):
    from tiered_core.access.store import TieredMessageStore

    return TieredMessageStore.open(StoreConfig.load(path))


def put(args: argparse.Namespace) -> int:
    from tiered_core.codec.message import Message

    body = args.body.encode() if args.body is not None else sys.stdin.buffer.read()
    with _open(args.config) as store:
        res = store.put_message(Message(topic=args.topic, body=body, keys=args.key, tags=args.tags), args.queue)
        if args.dispatch:
            store.dispatch(force=True)
    print(f"{res.status.name} topic={args.topic} queue={args.queue} queue_offset={res.queue_offset} "
          f"commitlog_offset={res.commitlog_offset}")
    return 0


def _row(m) -> dict:
    return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "commitlog_offset": m.commitlog_offset, "store_timestamp": m.store_timestamp,
            "keys": m.keys, "tags": m.tags, "body": m.body.decode("utf-8", "replace")}


def get(args: argparse.Namespace) -> int:
    with _open(args.config) as store:
        if args.key:
            messages, status, tier, nxt = store.query_message(args.topic, args.key, args.count).messages, "FOUND", "-", "-"
        else:
            res = store.get_message("tiered-cli", args.topic, args.queue, args.offset, args.count)
            messages, status = res.messages, res.status.name
            tier, nxt = (res.tier.value if res.tier else "-"), res.next_begin_offset
    if args.json:
        print(json.dumps({"status": status, "tier": tier, "next_begin_offset": nxt,
                          "messages": [_row(m) for m in messages]}, indent=2))
        return 0
    print(f"status={status} tier={tier} next_begin_offset={nxt}")
    for m in messages:
        body = m.body[:60].decode("utf-8", "replace")
        print(f"  {m.topic}/{m.queue_id}@{m.queue_offset} ts={m.store_timestamp} keys={','.join(m.keys)} "
              f"tags={m.tags or ''} body={body!r}{'...' if len(m.body) > 60 else ''}")
    return 0 if messages or status != "FOUND" else 1


def stat(args: argparse.Namespace) -> int:
    with _open(args.config) as store:
        rows = store.stat()
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], indent=2))
        return 0
    head = ("topic", "queue", "local min", "local max", "tiered min", "tiered commit", "segments")
    table = [head] + [(r.topic, str(r.queue_id), str(r.local_min), str(r.local_max), str(r.tiered_min),
                       str(r.tiered_commit), str(r.tiered_segments)) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    return 0
