"""A store written by the bulk paths (the flat API the jobs use, `tiered spark import`) and then
opened as a store continues every queue after what they wrote (issue 18): a put never reuses
an offset they filled, and every offset they filled reads back its own message."""

from __future__ import annotations

from sample_store import SampleSpec, sample_message, write_sample
from spark_helpers import write_config

from tiered_core import Message, TieredMessageStore
from tiered_core.access.results import GetMessageStatus
from tiered_core.config import StoreConfig
from tiered_core.spark.jobs import export, import_parquet

SPEC = SampleSpec(topics=("orders",), queues=2, messages=120, body_size=48)


def check_continues(config_path: str) -> None:
    config = StoreConfig.load(config_path)
    with TieredMessageStore.open(config) as store:
        for qid in range(SPEC.queues):
            r = store.put_message(Message(topic="orders", body=b"new"), qid)
            assert r.queue_offset == SPEC.messages, "a put reused an offset the bulk path filled"
        store.dispatch(force=True)
        for qid in range(SPEC.queues):
            seen = {}
            off = 0
            while off <= SPEC.messages:
                res = store.get_message("g", "orders", qid, off, 32)
                assert res.status is GetMessageStatus.FOUND, (qid, off, res.status)
                seen.update((m.queue_offset, m.body) for m in res.messages)
                off = res.next_begin_offset
            for i in range(SPEC.messages):
                assert seen[i] == sample_message("orders", qid, i, SPEC).body
            assert seen[SPEC.messages] == b"new"


def test_store_written_through_the_flat_api_continues(tmp_path):
    path = write_config(tmp_path / "w.toml", tmp_path / "w", cl_max=8 << 10, cq_max=1000)
    write_sample(StoreConfig.load(path), SPEC)
    check_continues(path)


def test_imported_store_continues(spark, tmp_path):
    source = write_config(tmp_path / "s.toml", tmp_path / "s", cl_max=8 << 10, cq_max=1000)
    write_sample(StoreConfig.load(source), SPEC)
    exported = export(spark, source, tmp_path / "parquet")
    target = write_config(tmp_path / "t.toml", tmp_path / "t", cl_max=8 << 10, cq_max=1000)
    assert import_parquet(spark, target, exported.path).appended == SPEC.messages * SPEC.queues
    check_continues(target)
