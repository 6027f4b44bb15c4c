"""``tiered demo``: the main job, end to end, on the configured backend.

1. put messages (4 topics x 4 queues, keys and tags) into the local store;
2. dispatch them to the tiered store;
3. let local retention delete the local copy;
4. reopen the store reading from the tiered store only, read every message back and
   verify it byte for byte;
5. run key and time lookups;
6. on the embedded default, a static topic over three brokers (:mod:`tiered_core.cli.demo_static`);
then print a summary. Without ``--config`` it runs on the embedded default: POSIX
driver and SQLite metadata under ``./demo-data``, and writes the config it used to
``./demo-data/tiered.toml``. A rerun recreates ``./demo-data``, but only when the store
in it holds nothing but what the demo put there (:data:`DEMO_RECORD`, beside the output
marker, records the demo's topics and per-queue message counts): a store an operator put
other topics or more messages into through that config is refused, nothing deleted.

The three rates it prints are defined as in ``bench/store.py``: *put* is
``put_message`` with the background local reput, ending when the reput has consumed
everything (``put_reput_msgs_per_s``; messages are built outside the timed part);
*dispatch* is the forced copy to the tier with the key index, after reput and flush
(``dispatch_msgs_per_s``; the index upload is reported on its own); *read* is
``get_message(..., 32)`` calls on a store reopened with storage level FORCE and an empty
read-ahead cache (``cold_read_api_msgs_per_s``; verifying the bytes is not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time

from tiered_core.access.results import GetMessageStatus, StoreTier
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli.shared import (
    CheckFailed,
    DispatchFailed,
    add_json_option,
    check_store_path,
    int_arg,
    load_config,
    open_store,
    print_json,
    store_exists,
)
from tiered_core.cli.progress import Progress
from tiered_core.codec.message import Message
from tiered_core.config import StoreConfig
from tiered_core.errors import IllegalParam, InvalidPath, TieredStoreError
from tiered_core.common import BoundaryType
from tiered_core.ops.output_paths import create_output_dir, remove_output_dir


#: Messages built per chunk before their puts are timed (bounds the memory they take).
PUT_CHUNK = 4096

#: What the demo put into ./demo-data (topics and per-queue message counts), beside the
#: output marker: a rerun deletes the directory only when its store holds no more than that.
DEMO_RECORD = ".tiered-demo.json"

#: The demo's own topics (what a directory of an older demo, without the record, may hold).
DEMO_TOPIC = re.compile(r"demo-\d+")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``demo``."""
    p = sub.add_parser("demo", help="put, tier, expire locally, read back and verify messages",
                       description="The main job end to end: put, dispatch, local retention, read back "
                                   "from the tiered store only, verify, key and time lookups. "
                                   "Exit 1 when the verification fails.")
    p.add_argument("--config", metavar="FILE",
                   help="store config (.toml or broker.conf) of an empty store; default: ./demo-data on posix")
    p.add_argument("--force", action="store_true",
                   help="with --config: add the demo topics to a store that already holds messages (the "
                        "demo topics themselves must be empty); without it such a store is refused")
    p.add_argument("--messages", type=int_arg(1, "a number of messages"), default=200_000, metavar="N",
                   help="messages to put (default 200000)")
    p.add_argument("--size", type=int_arg(1, "a body size in bytes"), default=1024,
                   help="body bytes per message (default 1024)")
    p.add_argument("--topics", type=int_arg(1, "a number of topics"), default=4, metavar="N",
                   help="topics to spread them over (default 4)")
    p.add_argument("--queues", type=int_arg(1, "a number of queues"), default=4, metavar="N",
                   help="queues per topic (default 4)")
    p.add_argument("--lookups", type=int_arg(0, "a number of lookups"), default=200, metavar="N",
                   help="key and time lookups to run (default 200)")
    p.add_argument("--static-messages", type=int_arg(0, "a number of messages"), default=4000, metavar="N",
                   help="messages for the static-topic step on the embedded default (default 4000; 0 skips it)")
    add_json_option(p, "the summary")
    p.set_defaults(func=run)


def default_config(root: str) -> StoreConfig:
    return StoreConfig(
        store_path=root,
        driver="posix",
        driver_options={"root": os.path.join(root, "tiered")},
        metadata="sqlite",
        local_commit_log_file_size=32 << 20,  # several local files, so retention can delete them
        local_retention_hours=0,  # the demo expires the local copy at once
        commit_log_max_size=64 << 20,  # several tiered segments per queue
        read_ahead_cache_bytes=128 << 20,
    )


def body_of(topic: str, queue_id: int, seq: int, size: int) -> bytes:
    stamp = f"{topic}/{queue_id}/{seq}|".encode()
    return (stamp * (size // len(stamp) + 1))[:size]


def run(args: argparse.Namespace) -> int:
    """``tiered demo``: the main job end to end; raises a typed error on any failure."""
    if args.static_messages < 0:
        raise IllegalParam(f"--static-messages must be >= 0, got {args.static_messages}", option="--static-messages",
                           value=args.static_messages)
    for name in ("messages", "size", "topics", "queues"):
        if getattr(args, name) <= 0:
            raise IllegalParam(f"--{name} must be > 0, got {getattr(args, name)}", option=f"--{name}",
                               value=getattr(args, name))
    if args.force and not args.config:
        raise IllegalParam("--force needs --config (the embedded default store is recreated anyway)",
                           option="--force")
    topics = [f"demo-{t}" for t in range(args.topics)]
    if args.config:
        config = load_config(args.config)
        config_path = args.config
        check_store_path(config)
        if store_exists(config):
            refuse_a_used_store(config, topics, force=args.force)
    else:
        root = os.path.abspath("demo-data")
        check_store_path(default_config(root))  # e.g. a read-only working directory: name it
        # Recreated on every run, but only a directory an earlier demo made (its output marker)
        # whose store holds nothing but what that demo put.
        if os.path.lexists(root):
            refuse_operator_data(root)
            remove_output_dir(root, option="./demo-data")
        create_output_dir(root, "tiered demo", option="./demo-data")
        # Recorded before the first put: a demo that stops half way leaves fewer messages.
        write_demo_record(root, planned_counts(topics, args.queues, args.messages))
        # Local files small enough that retention has several to delete, whatever the volume.
        local_file = max(1 << 20, min(32 << 20, args.messages * (args.size + 200) // 6))
        config = default_config(root).replace(local_commit_log_file_size=local_file)
        config_path = os.path.join(root, "tiered.toml")
        with open(config_path, "w") as fh:
            fh.write(config.to_toml())
    queues = [(t, q) for t in topics for q in range(args.queues)]
    rows: list[tuple[str, str]] = []
    total_bytes = 0

    # 1. put
    store = open_store(config, create=True)
    counts = {key: 0 for key in queues}
    # Rates as bench/store.py defines them: messages are built outside the timed part (in
    # chunks, to bound memory), and "put" ends when the local reput has consumed every
    # message (bench: put_reput_msgs_per_s).
    put_s = 0.0
    with Progress("put", args.messages) as bar:
        for first in range(0, args.messages, PUT_CHUNK):
            chunk = []
            for seq in range(first, min(first + PUT_CHUNK, args.messages)):
                topic, qid = queues[seq % len(queues)]
                n = counts[(topic, qid)]
                counts[(topic, qid)] = n + 1
                chunk.append((Message(topic=topic, body=body_of(topic, qid, n, args.size),
                                      keys=[f"{topic}-{qid}-{n}"], tags=f"tag{n % 8}"), qid, n))
                total_bytes += args.size
            t0 = time.perf_counter()
            for msg, qid, n in chunk:
                res = store.put_message(msg, qid)
                if res.queue_offset != n:
                    store.close()
                    raise IllegalParam(f"{msg.topic}/{qid} of store_path {config.store_path!r} already holds "
                                       "messages; the demo needs an empty store", path=config.store_path,
                                       topic=msg.topic, queue_id=qid)
            put_s += time.perf_counter() - t0
            bar.update(len(chunk))
        t0 = time.perf_counter()
        store.local.reput()  # what the background reput has not done yet
        put_s += time.perf_counter() - t0
    mib = total_bytes / (1 << 20)
    put_rate = args.messages / max(put_s, 1e-9)
    rows.append(("put + local reput", f"{args.messages:,} msgs, {mib:,.1f} MiB, {put_s:.1f} s, "
                                      f"{put_rate:,.0f} msg/s"))

    # 2. dispatch (bench: dispatch_msgs_per_s -- the copy with the key index, after reput
    # and flush; the index upload is timed on its own)
    store.local.flush()
    dispatched = 0
    dispatch_s = 0.0
    with Progress("dispatch", args.messages) as bar:
        for topic, qid in queues:
            t0 = time.perf_counter()
            stats = store.dispatcher.dispatch_queue(topic, qid, force=True)
            dispatch_s += time.perf_counter() - t0
            if stats.errors or stats.failed_commits:
                store.close()
                raise DispatchFailed(f"dispatch of {topic}/{qid} failed ({stats.failed_commits} failed "
                                     f"commit(s)): {'; '.join(stats.errors) or 'no error was reported'}",
                                     errors=list(stats.errors), queues=[f"{topic}/{qid}"],
                                     failed_commits=stats.failed_commits)
            dispatched += stats.messages
            bar.update(stats.messages)
    t0 = time.perf_counter()
    store.index.compact_and_upload()
    upload_s = time.perf_counter() - t0
    dispatch_rate = dispatched / max(dispatch_s, 1e-9)
    rows.append(("dispatch to tiered", f"{dispatched:,} msgs, {dispatch_s:.1f} s, {dispatch_rate:,.0f} msg/s, "
                                       f"{mib / max(dispatch_s, 1e-9):,.1f} MiB/s (index upload {upload_s:.1f} s)"))

    # 3. local retention
    local_before = sum(store.local.get_max_offset_in_queue(t, q) - store.local.get_min_offset_in_queue(t, q)
                       for t, q in queues)
    deleted_files = store.delete_expired_local()
    local_after = sum(store.local.get_max_offset_in_queue(t, q) - store.local.get_min_offset_in_queue(t, q)
                      for t, q in queues)
    rows.append(("local retention", f"{deleted_files} commit-log files deleted; local copy "
                                    f"{local_before:,} -> {local_after:,} msgs"))
    store.close()

    # 4. reopen reading from the tiered store only; verify everything
    store = TieredMessageStore.open(config.replace(storage_level="FORCE"))
    read_s = 0.0  # get_message calls only (bench: cold_read_api_msgs_per_s); verifying is not timed
    verified = wrong = 0
    problems: list[str] = []  # the first few messages that did not verify, and why
    tiers: dict[StoreTier | None, int] = {}
    samples: list[tuple[str, int, int, int]] = []
    rng = random.Random(7)
    with Progress("verify", args.messages) as bar:
        for topic, qid in queues:
            offset = 0
            while offset < counts[(topic, qid)]:
                t0 = time.perf_counter()
                got = store.get_message("demo", topic, qid, offset, 32)
                read_s += time.perf_counter() - t0
                if got.status is not GetMessageStatus.FOUND:
                    print(f"tiered demo: {topic}/{qid}@{offset}: {got.status.name}", file=sys.stderr)
                    problems.append(f"{topic}/{qid}@{offset}: {got.status.name} (the {counts[(topic, qid)] - offset} "
                                    f"message(s) from there on were not read)")
                    wrong += counts[(topic, qid)] - offset
                    break
                for m in got.messages:
                    ok = (m.queue_offset == offset and m.body == body_of(topic, qid, offset, args.size)
                          and m.keys == [f"{topic}-{qid}-{offset}"] and m.tags == f"tag{offset % 8}")
                    verified += ok
                    wrong += not ok
                    if not ok and len(problems) < 5:
                        problems.append(f"{topic}/{qid}@{offset}: read back {m.topic}/{m.queue_id}@{m.queue_offset} "
                                        "with other bytes, keys or tags than were put")
                    tiers[got.tier] = tiers.get(got.tier, 0) + 1
                    if rng.random() < args.lookups / args.messages:
                        samples.append((topic, qid, offset, m.store_timestamp))
                    offset += 1
                bar.update(len(got.messages))
    stats = store.cache.stats
    read_rate = sum(tiers.values()) / max(read_s, 1e-9)
    rows.append(("read back (get_message x32)", f"{sum(tiers.values()):,} msgs, {read_s:.1f} s, "
                                                 f"{read_rate:,.0f} msg/s"))
    rows.append(("verify", f"{verified:,} verified, {wrong} wrong"))
    rows.append(("served by tier", ", ".join(f"{(t.value if t else '?')}: {n:,}" for t, n in tiers.items())))
    rows.append(("read-ahead cache", f"hit rate {stats.hit_rate:.1%} ({stats.hits:,} hits, "
                                     f"{stats.misses:,} misses)"))

    # 5. key and time lookups
    t0 = time.perf_counter()
    key_ok = time_ok = 0
    lookup_problems: list[str] = []
    for topic, qid, offset, ts in samples:
        key = f"{topic}-{qid}-{offset}"
        found = store.query_message(topic, key, 4).messages
        hit = len(found) == 1 and found[0].queue_offset == offset and found[0].queue_id == qid
        key_ok += hit
        if not hit and len(lookup_problems) < 3:
            lookup_problems.append(f"key {key!r} found {[(m.queue_id, m.queue_offset) for m in found]}, "
                                   f"expected [({qid}, {offset})]")
        at = store.get_offset_in_queue_by_time(topic, qid, ts, BoundaryType.LOWER)
        first = store.get_message("demo", topic, qid, at, 1).messages
        before = store.get_message("demo", topic, qid, at - 1, 1).messages if at > 0 else []
        right = (at <= offset and bool(first) and first[0].store_timestamp >= ts
                 and (not before or before[0].store_timestamp < ts))
        time_ok += right
        if not right and len(lookup_problems) < 6:
            lookup_problems.append(f"time {ts} of {topic}/{qid}@{offset} gave offset {at}")
    lookup_s = time.perf_counter() - t0
    rows.append(("key lookups", f"{key_ok}/{len(samples)} found exactly"))
    rows.append(("time lookups", f"{time_ok}/{len(samples)} correct ({lookup_s:.1f} s for both kinds)"))
    store.close()

    # 6. a static topic over three brokers (embedded default only: it needs its own cluster)
    static = None
    if not args.config and args.static_messages > 0:
        from tiered_core.cli.demo_static import TOPIC, run_static_demo

        static = run_static_demo(os.path.join(config.store_path, "cluster"), args.static_messages)
        rows.append(("static topic", f"{TOPIC}: {static.verified:,}/{static.put:,} read back in order over "
                                     f"{static.generations} generations, leaders now {', '.join(sorted(set(static.leaders)))}, "
                                     f"the first broker's store deleted"))
        rows.append(("  inspect it", f"tiered static-topic status --cluster {os.path.relpath(static.cluster_file)} "
                                     f"--topic {TOPIC} --json"))

    reasons = failure_reasons(config, args.messages, verified, wrong, problems, deleted_files, len(samples), key_ok,
                              time_ok, lookup_problems, static)
    success = not reasons
    rows.append(("result", "OK: every message verified from the tiered store after the local copy was deleted"
                 if success else "FAILED"))
    summary = {"driver": config.driver, "metadata": config.metadata, "config": config_path,
               "messages": args.messages, "verified": verified, "wrong": wrong,
               "local_files_deleted": deleted_files, "key_lookups": len(samples), "key_lookups_ok": key_ok,
               "time_lookups_ok": time_ok,
               "rates_msgs_per_s": {"put": round(put_rate), "dispatch": round(dispatch_rate), "read": round(read_rate)},
               "static_topic": None if static is None else {
                   "cluster": static.cluster_file, "put": static.put, "verified": static.verified,
                   "wrong": static.wrong, "generations": static.generations},
               "rows": dict(rows), "result": "OK" if success else "FAILED", "reasons": reasons}
    if args.json and success:
        print_json(summary)
    elif not args.json:
        print(f"\ntiered demo: {config.driver} driver, {config.metadata} metadata, config {config_path}")
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            print(f"  {key:<{width}}  {value}")
        for reason in reasons:
            print(f"  FAILED: {reason}")
    if not success:
        raise CheckFailed(f"verification failed: {'; '.join(reasons)}", summary=summary, reasons=reasons)
    return 0


def planned_counts(topics: list[str], queues: int, messages: int) -> dict[str, list[int]]:
    """Messages the demo puts into each queue of each topic (round robin over the queues)."""
    slots = len(topics) * queues
    return {topic: [messages // slots + (t * queues + q < messages % slots) for q in range(queues)]
            for t, topic in enumerate(topics)}


def write_demo_record(root: str, counts: dict[str, list[int]]) -> None:
    """Write :data:`DEMO_RECORD` into ``root`` (atomically, fsynced)."""
    path = os.path.join(root, DEMO_RECORD)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"created_by": "tiered demo", "messages": counts}, fh, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_demo_record(root: str) -> dict[str, list[int]] | None:
    """The per-queue counts :data:`DEMO_RECORD` holds; None when there is none (an older
    demo). Raises ValueError or OSError when it cannot be read."""
    path = os.path.join(root, DEMO_RECORD)
    if not os.path.lexists(path):
        return None
    with open(path) as fh:
        counts = json.load(fh)["messages"]
    if not isinstance(counts, dict) or not all(
            isinstance(v, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in v)
            for v in counts.values()):
        raise ValueError(f"{DEMO_RECORD} has no per-queue message counts")
    return counts


def refuse_operator_data(root: str) -> None:
    """Refuse (:class:`InvalidPath`, nothing deleted) to recreate ``root`` (./demo-data) when
    the store in it holds what the demo did not put: a topic the demo's record does not
    name, or more messages in a queue than it recorded (without a record, from an older
    demo: a topic other than ``demo-N``), or when that cannot be checked. The store is
    opened read-only with the config the demo wrote there (the one operators use)."""
    shown = "./demo-data"
    config_file = os.path.join(root, "tiered.toml")
    foreign = _foreign_tier(root)
    if foreign is not None:
        raise InvalidPath(f"{shown}: refusing to delete {root!r}: it holds the tier of a store the demo did not make "
                          f"({foreign!r}). Move that tier out (and point its store's driver root at "
                          "the new place), or run the demo on another store with --config (nothing was deleted)",
                          path=root, option=shown, tier=foreign)
    try:
        counts = read_demo_record(root)
        config = StoreConfig.load(config_file) if os.path.isfile(config_file) else default_config(root)
        if os.path.realpath(config.store_path) != os.path.realpath(root):  # a directory moved here
            config = default_config(root)
        if not store_exists(config):
            return
        with open_store(config, create=False) as store:
            held = {(r.topic, r.queue_id): max(r.local_max, r.tiered_commit) for r in store.stat(check_damage=False)}
    except (TieredStoreError, OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidPath(f"{shown}: refusing to delete {root!r}: cannot check that its store holds only what an "
                          f"earlier demo put there ({type(exc).__name__}: {exc}). Move it away (or delete it "
                          "yourself if it is disposable), or run the demo on another store with --config",
                          path=root, option=shown) from None
    if counts is None:
        extra = {key: n for key, n in held.items() if n > 0 and not DEMO_TOPIC.fullmatch(key[0])}
    else:
        extra = {key: n for key, n in held.items()
                 if n > (counts[key[0]][key[1]] if key[0] in counts and 0 <= key[1] < len(counts[key[0]]) else 0)}
    if extra:
        listed = sorted(extra.items())
        what = ", ".join(f"{t}/{q}: {n:,} message(s)" for (t, q), n in listed[:5]) + (" ..." if len(listed) > 5 else "")
        recorded = "beyond what the demo recorded putting" if counts is not None else "topics other than the demo-N ones"
        raise InvalidPath(f"{shown}: refusing to delete {root!r}: its store holds messages the demo did not put "
                          f"({recorded}; {len(listed)} queue(s): {what}), e.g. put through {config_file!r}. Move "
                          "the directory away to keep them, or run the demo on another store with --config "
                          "(nothing was deleted)", path=root, option=shown,
                          queues=[f"{t}/{q}" for t, q in sorted(extra)])


def _foreign_tier(root: str) -> str | None:
    """Where below ``root`` a tier lies that the demo did not make -- a broker prefix whose
    newest owner record names a store_path outside ``root``, or that has no owner record
    (whose it is cannot be told) -- or None."""
    from tiered_core.codec.naming import is_cluster_dir
    from tiered_core.flat.ownership import OWNER_DIR

    inside = os.path.realpath(root) + os.sep
    for directory, subdirs, _files in os.walk(root):
        for cluster in [d for d in subdirs if is_cluster_dir(d)]:
            subdirs.remove(cluster)  # (its segments are not walked)
            for broker in sorted(os.listdir(os.path.join(directory, cluster))):
                owners = os.path.join(directory, cluster, broker, OWNER_DIR)
                try:
                    records = sorted(n for n in os.listdir(owners) if n.isdigit())
                    with open(os.path.join(owners, records[-1]), encoding="utf-8") as fh:
                        store_path = str(json.load(fh).get("store_path", ""))
                except (IndexError, OSError, ValueError, AttributeError):
                    return os.path.join(directory, cluster, broker)  # no readable record: not the demo's
                if not (os.path.realpath(store_path) + os.sep).startswith(inside):
                    return owners
    return None


def refuse_a_used_store(config: StoreConfig, topics: list[str], *, force: bool) -> None:
    """Refuse (:class:`IllegalParam`, nothing written) a store that holds messages, unless
    ``force``; even then the demo's own ``topics`` must be empty (it verifies from offset 0).
    The store is looked at read-only."""
    with open_store(config, create=False) as store:
        held = [r for r in store.stat() if max(r.local_max, r.tiered_commit) > 0]
    used = [f"{r.topic}/{r.queue_id}" for r in held if r.topic in topics]
    if used:
        raise IllegalParam(f"{', '.join(used)} of store_path {config.store_path!r} already hold messages; "
                           "the demo needs its topics empty (nothing was written)", path=config.store_path,
                           queues=used)
    if held and not force:
        shown = ", ".join(f"{r.topic}/{r.queue_id}" for r in held[:5]) + (" ..." if len(held) > 5 else "")
        raise IllegalParam(f"store_path {config.store_path!r} already holds messages ({len(held)} queue(s): "
                           f"{shown}); the demo writes {len(topics)} topic(s) of its own and expires local "
                           "files: use an empty store, or --force to add them to this one (nothing was written)",
                           path=config.store_path, queues=[f"{r.topic}/{r.queue_id}" for r in held], option="--force")


def failure_reasons(config: StoreConfig, messages: int, verified: int, wrong: int, problems: list[str],
                    deleted_files: int, samples: int, key_ok: int, time_ok: int, lookup_problems: list[str],
                    static) -> list[str]:
    """Why the demo's verification failed, one sentence per failed check (empty: it passed)."""
    reasons = []
    if verified != messages or wrong:
        reasons.append(f"{messages - verified:,} of {messages:,} message(s) did not read back as put from the "
                       f"tiered store ({'; '.join(problems[:5]) or 'no detail'})")
    if deleted_files == 0:
        where = f" (config {config.source!r})" if config.source else ""
        reasons.append(f"local retention deleted no commit-log file, so nothing was read from the tier alone: "
                       f"local_retention_hours = {config.local_retention_hours}{where} keeps younger files, and "
                       f"a file is deleted only once it is full (local_commit_log_file_size = "
                       f"{config.local_commit_log_file_size:,} bytes) and tiered; the demo needs "
                       "local_retention_hours = 0 and enough --messages to fill a file")
    if key_ok != samples or time_ok != samples:
        reasons.append(f"key lookups {key_ok}/{samples} and time lookups {time_ok}/{samples} correct "
                       f"({'; '.join(lookup_problems) or 'no detail'})")
    if static is not None and not static.ok:
        reasons.append(f"static topic: {static.verified:,} of {static.put:,} read back in order, {static.wrong} wrong, "
                       f"{static.generations} generation(s) (at least 2 expected)")
    return reasons
