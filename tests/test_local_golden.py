"""Local store bytes for a fixed workload: commit log, consume queues, index files and the
checkpoint's offsets, hashed. The expected digest was computed with main at 585da1c (before
the batch put/reput path), so the batch path writes exactly the bytes the per-message path
wrote: prop CRC on and off, IPv6 hosts, big and empty bodies, V1 topics of 127 bytes,
commit-log, consume-queue and index files rolling, reputs at random points, restarts.
"""

from __future__ import annotations

import hashlib
import json
import os
import random

from tiered_core.codec.message import Message
from tiered_core.local.local_store import LocalMessageStore, LocalStoreConfig

EXPECTED = "69c1612e00569fe85e78b7df064208cb981e01724fcae702e61bfdd869b20faa"


def _run(root: str, prop_crc: bool) -> None:
    t = [1_700_000_000_000]

    def clock() -> int:
        t[0] += 7
        return t[0]

    cfg = LocalStoreConfig(commit_log_file_size=64 * 1024, consume_queue_units_per_file=50,
                           index_hash_slots=101, index_max_items=300, background_services=False,
                           append_prop_crc=prop_crc)
    rnd = random.Random(7)
    seq = 0
    for _phase in range(3):
        with LocalMessageStore(root, cfg, clock=clock) as s:
            for _ in range(700):
                seq += 1
                topic = rnd.choice(["orders", "pay", "t" * 127, "x-y_z"])
                q = rnd.randrange(5)
                keys = [f"k{rnd.randrange(50)}" for _ in range(rnd.randrange(3))]
                props = {}
                if rnd.random() < 0.5:
                    props["UNIQ_KEY"] = f"U{seq}"
                if rnd.random() < 0.2:
                    props["a"] = "é" * rnd.randrange(1, 4)
                if rnd.random() < 0.05:
                    props["KEYS"] = "pk1 pk2"
                if rnd.random() < 0.05:
                    props["TAGS"] = "ptag"
                tags = rnd.choice([None, "", "tagA", "tagB", "ü"])
                host = rnd.choice([("127.0.0.1", 1), ("::1", 9), ("10.1.2.3", 65535)])
                body = rnd.randbytes(rnd.choice([0, 10, 500, 3000, 20000]))
                m = Message(topic=topic, body=body, keys=keys, tags=tags, properties=props,
                            born_timestamp=1_600_000_000_000 + seq, born_host=host,
                            flag=rnd.randrange(3), sys_flag=rnd.choice([0, 0, 4, 8]),
                            reconsume_times=rnd.randrange(2))
                s.put_message(topic, q, m)
                if rnd.random() < 0.02:
                    s.reput()
                if rnd.random() < 0.005:
                    s.flush()


def _digest(root: str) -> dict[str, str]:
    out = {}
    for d, _, files in os.walk(root):
        for f in sorted(files):
            p = os.path.join(d, f)
            if f == "lock":
                continue
            with open(p, "rb") as fh:
                data = fh.read()
            if f == "checkpoint.json":
                j = json.loads(data)
                j.pop("written_at", None)
                j.pop("index_newest", None)  # (a file name, added after the digest was computed)
                j.pop("queues", None)  # (the queue list, added after it too)
                data = json.dumps(j, sort_keys=True).encode()
            out[os.path.relpath(p, root)] = hashlib.sha256(data).hexdigest()
    return out


def test_local_store_bytes_are_those_of_the_per_message_path(tmp_path):
    res = {}
    for crc in (False, True):
        root = str(tmp_path / f"crc-{crc}")
        _run(root, crc)
        res[str(crc)] = _digest(root)
    assert sum(len(v) for v in res.values()) == 499
    assert hashlib.sha256(json.dumps(res, sort_keys=True).encode()).hexdigest() == EXPECTED
