"""Child process of tests/test_local_io.py: fill a store's disk, then check what survived.

Usage: ``python full_disk_child.py fill CONFIG REPORT SHAPE`` puts messages into the store of
CONFIG until the local disk fails, and writes REPORT (JSON): the queue offsets that were
acknowledged, and the failure (where it came, its errno, path and ``stored`` answer). SHAPE
``bodies``: 6 KB bodies without keys (the commit log fills the disk); ``keys``: small
bodies with 64 keys each (the key index's slot pages fill it). ``python full_disk_child.py
check CONFIG REPORT SHAPE`` reopens the store (after the test freed space) and prints, as JSON
on stdout, the acknowledged messages that do not read back or whose keys are not found, the
queue's max offset and the offset a new put gets. ``python full_disk_child.py lookup CONFIG
REPORT keys`` puts 20 keyed messages, fills the disk with another file, then looks up 200 keys
no message has (their slot-table pages were never written: holes of the sparse index file)
and writes REPORT: how many lookups answered, and the keys of the first message still found.
Anything but a LocalIOError stops it with exit 3.
"""

from __future__ import annotations

import json
import sys

from tiered_core import Message, StoreConfig, TieredMessageStore
from tiered_core.errors import LocalIOError

TOPIC = "full"
#: shape -> (body bytes, keys per message)
SHAPES = {"bodies": (6000, 0), "keys": (16, 64)}


def body_of(i: int, shape: str) -> bytes:
    return ((b"msg-%d;" % i) * SHAPES[shape][0])[:SHAPES[shape][0]]


def keys_of(i: int, shape: str) -> list[str]:
    return [f"key-{i}-{k}" for k in range(SHAPES[shape][1])]


def failure(exc: LocalIOError, where: str, i: int) -> dict:
    return {"where": where, "i": i, "stored": exc.context.get("stored"), "errno": exc.context.get("errno"),
            "path": exc.context.get("path"), "message": exc.message}


def fill(config: StoreConfig, shape: str) -> dict:
    acked: list[int] = []
    failed = None
    store = TieredMessageStore.open(config)
    i = 0
    try:
        while i < 100_000:
            try:
                r = store.put_message(Message(topic=TOPIC, body=body_of(i, shape), keys=keys_of(i, shape)), 0)
            except LocalIOError as exc:
                failed = failure(exc, "put", i)
                break
            acked.append(r.queue_offset)
            i += 1
            try:
                store.local.reput()  # (the background reput may have got there first)
            except LocalIOError as exc:
                failed = failure(exc, "reput", i - 1)
                break
    finally:
        closed = None
        try:
            store.close()
        except LocalIOError as exc:
            closed = failure(exc, "close", i)
    return {"acked": acked, "failed": failed, "close": closed}


def check(config: StoreConfig, report: dict, shape: str) -> dict:
    acked = report["acked"]
    with TieredMessageStore.open(config) as store:
        bad = []
        for i, offset in enumerate(acked):
            got = store.get_message("g", TOPIC, 0, offset, 1)
            if not got.messages or got.messages[0].body != body_of(i, shape):
                bad.append(offset)
        unkeyed = [i for i in range(len(acked)) if keys_of(i, shape)
                   and len(store.query_message(TOPIC, keys_of(i, shape)[-1], 4).messages) != 1]
        max_offset = store.get_max_offset_in_queue(TOPIC, 0)
        nxt = store.put_message(Message(topic=TOPIC, body=b"after", keys=["after"]), 0).queue_offset
        store.dispatch(force=True)
    return {"bad": bad, "unkeyed": unkeyed, "max_offset": max_offset, "next_offset": nxt}


def lookup(config: StoreConfig, filler: str) -> dict:
    store = TieredMessageStore.open(config)
    try:
        for i in range(20):
            store.put_message(Message(topic=TOPIC, body=body_of(i, "keys"), keys=[f"key-{i}"]), 0)
        store.local.reput()
        try:
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\0" * 65536)
        except OSError:
            pass  # the disk is full
        answered = sum(1 for i in range(200) if store.query_message(TOPIC, f"other-{i}").messages == [])
        return {"answered": answered, "found": [m.keys for m in store.query_message(TOPIC, "key-3").messages]}
    finally:
        try:
            store.close()
        except LocalIOError:
            pass  # its checkpoint cannot be written on the full disk: the next open recovers


def main(action: str, config_path: str, report_path: str, shape: str) -> int:
    config = StoreConfig.load(config_path)
    if action == "lookup":
        import os

        with open(report_path, "w", encoding="utf-8") as f:
            json.dump(lookup(config, os.path.join(os.path.dirname(config.store_path), "filler")), f)
        return 0
    if action == "fill":
        with open(report_path, "w", encoding="utf-8") as f:
            json.dump(fill(config, shape), f)
        return 0
    with open(report_path, encoding="utf-8") as f:
        report = json.load(f)
    print(json.dumps(check(config, report, shape)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(*sys.argv[1:5]))
    except Exception as exc:  # noqa: BLE001 - the parent reads why
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(3)
