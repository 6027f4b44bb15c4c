"""Every tiered read validates every field it can check (issue 9, scenario 3).

A flipped byte in a tiered COMMIT_LOG segment must never come back as a valid message of
the queue asked for: the body CRC does not cover the header, so topic, queue id, queue
offset, physical offset, size and tags code are checked against the request and the
consume-queue unit (:mod:`tiered_core.codec.checks`), and with ``append_prop_crc`` +
``verify_prop_crc`` RocketMQ's whole-message CRC property covers the rest.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from tiered_core import Message
from tiered_core.access.store import TieredMessageStore
from tiered_core.config import StoreConfig
from tiered_core.local import store as local_store_module

# -- golden bytes: tiered segments are unchanged when append_prop_crc is off ---------------

#: sha256 over (relative path, bytes) of every tiered COMMIT_LOG and CONSUME_QUEUE segment that
#: golden_segments() writes. Recorded ONCE on main at 7c14a2b (before the validation work) with
#:   .venv/bin/python -c "import tests.test_store_validation as t, tempfile, pathlib; \
#:       print(t.golden_digest(pathlib.Path(tempfile.mkdtemp())))"
#: (run from the repository root). A change of the tiered bytes for the same input makes
#: this test fail: with append_prop_crc off the format must stay byte-identical.
GOLDEN_SHA256 = "99e9068c6e47a0648b3f1c40dc54088708d906754281539b47c71441c52a137a"

GOLDEN_T0 = 1_700_000_000_000


def golden_messages() -> list[tuple[Message, int]]:
    """A fixed set of messages (keys, tags, properties, UNIQ_KEY, an IPv6 born host, a
    127-character topic, an empty body) and their queue ids."""
    out: list[tuple[Message, int]] = []
    for i in range(60):
        props = {"UNIQ_KEY": f"{i:032X}"} if i % 3 == 0 else {}
        if i % 7 == 0:
            props["custom"] = f"value-{i}"
        out.append((Message(topic="golden", body=f"body-{i}-".encode() * (i % 5 + 1),
                            keys=[f"k{i}", f"o-{i // 2}"] if i % 2 == 0 else [],
                            tags=("paid" if i % 4 == 0 else "new") if i % 3 else None,
                            properties=props, born_timestamp=GOLDEN_T0 - 1000 + i,
                            born_host=("::1", 4000 + i) if i % 11 == 0 else ("10.0.0.7", 4000 + i)),
                    i % 2))
    out.append((Message(topic="golden", body=b"", born_timestamp=GOLDEN_T0), 0))
    out.append((Message(topic="golden-" + "g" * 120, body=b"long topic", keys=["lt"],
                        born_timestamp=GOLDEN_T0), 0))
    return out


def golden_digest(tmp_path, monkeypatch=None, **changes) -> str:
    """Put golden_messages() with a fixed clock, dispatch, and hash the tiered segments."""
    # A constant clock: background threads (flush, index) read it too, so a ticking one
    # would make store timestamps depend on thread timing.
    clock = lambda: GOLDEN_T0  # noqa: E731
    if monkeypatch is not None:
        monkeypatch.setattr(local_store_module, "_now_ms", clock)
    else:  # recording from the command line
        local_store_module._now_ms = clock
    config = StoreConfig(store_path=str(tmp_path / "store"), driver="posix",
                         driver_options={"root": str(tmp_path / "tiered"), "fsync": False},
                         commit_log_max_size=4096, consume_queue_max_size=400, **changes)
    with TieredMessageStore.open(config) as store:
        for msg, qid in golden_messages():
            store.put_message(msg, qid)
        store.dispatch(force=True)
    root = tmp_path / "tiered"
    digest = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file()
                   and ("/COMMIT_LOG/" in p.as_posix() or "/CONSUME_QUEUE/" in p.as_posix()))
    assert len(files) > 4, files  # several segments, so rolled segments are covered too
    for p in files:
        rel = p.relative_to(root).as_posix().encode()
        data = p.read_bytes()
        digest.update(len(rel).to_bytes(4, "big") + rel + len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def test_tiered_bytes_are_unchanged_without_the_property_crc(tmp_path, monkeypatch):
    assert golden_digest(tmp_path, monkeypatch) == GOLDEN_SHA256
