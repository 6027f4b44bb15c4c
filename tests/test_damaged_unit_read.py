"""A read through a damaged tiered consume-queue unit (repair drill, r4).

A flipped byte made a unit read as commit-log offset -72057594037868166: the read asked the
commit log for that offset and answered ILLEGAL_OFFSET (exit 3), blaming the reader's
offset. A unit no store writes is damaged data: CORRUPT_DATA (exit 4), naming the queue
offset."""

from __future__ import annotations

import os
from pathlib import Path

from tiered_core import Message, StoreConfig, TieredMessageStore
from tiered_core.errors import CorruptData


def test_a_damaged_unit_is_corrupt_data(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "s"}"\ngroup_commit_interval_ms = 0\n'
                    f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    config = StoreConfig.load(str(conf), environ={})
    with TieredMessageStore.open(config) as store:
        for i in range(10):
            store.put_message(Message(topic="t", body=b"m%d" % i), 0)
        assert store.dispatch(force=True).errors == []
    (cq,) = Path(tmp_path / "tier").rglob("CONSUME_QUEUE/*")
    data = bytearray(cq.read_bytes())
    data[5 * 20] ^= 0xFF  # the top byte of unit 5's commit-log offset: negative
    os.chmod(cq, 0o644)
    cq.write_bytes(bytes(data))
    with TieredMessageStore.open(config, read_only=True) as store:
        flat = store.flat_files.get("t", 0)
        assert len(flat.read_batch(0, 5, 1 << 20)) == 5
        batch = flat.read_batch(5, 5, 1 << 20)
        assert len(batch) == 0 and isinstance(batch.error, CorruptData)
        assert batch.error.context["queue_offset"] == 5 and batch.error.context["reason"] == "bad_unit"
