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


def test_a_job_never_appends_over_messages_the_target_has_not_tiered(spark, tmp_path):
    """An operator drill: ``tiered spark import`` (and migrate, and the mirror sink) into a
    store holding acknowledged messages not yet tiered appended the job's messages at their
    offsets, and the store's next open continued after the tier: the local messages were
    lost and their offsets named other messages. Now the job is refused, naming the queue and
    the offsets, before anything is written; once the store dispatched them it runs."""
    import pytest

    from snapshots import changes, snapshot
    from tiered_core.errors import StateConflict
    from tiered_core.spark.jobs import migrate

    source = write_config(tmp_path / "s.toml", tmp_path / "s", cl_max=8 << 10, cq_max=1000)
    write_sample(StoreConfig.load(source), SPEC)
    exported = export(spark, source, tmp_path / "parquet")
    target = write_config(tmp_path / "t.toml", tmp_path / "t", cl_max=8 << 10, cq_max=1000)
    other_tier = write_config(tmp_path / "m.toml", tmp_path / "m", cl_max=8 << 10, cq_max=1000)
    for path in (target, other_tier):
        with TieredMessageStore.open(StoreConfig.load(path)) as store:
            assert [store.put_message(Message(topic="orders", body=f"local-{i}".encode()), 0).queue_offset
                    for i in range(3)] == [0, 1, 2]
    before = snapshot(tmp_path / "t", tmp_path / "m")
    with pytest.raises(StateConflict, match=r"orders/0 offsets 0-2") as info:
        import_parquet(spark, target, exported.path)
    assert "has not tiered yet" in str(info.value) and "Nothing was written" in str(info.value)
    with pytest.raises(StateConflict, match=r"orders/0 offsets 0-2"):
        migrate(spark, source, other_tier)
    assert changes(before, snapshot(tmp_path / "t", tmp_path / "m")) == {}
    with TieredMessageStore.open(StoreConfig.load(target)) as store:
        store.dispatch(force=True)
        assert [m.body for m in store.get_message("g", "orders", 0, 0, 3).messages] == [b"local-0", b"local-1",
                                                                                       b"local-2"]
    # Dispatched, they are the target's tiered history: the input's rows there differ, and the
    # import is refused for that (test_an_import_of_another_stores_history_is_refused_not_skipped).
    with pytest.raises(StateConflict, match="another message at queue offset 0"):
        import_parquet(spark, target, exported.path)
    with TieredMessageStore.open(StoreConfig.load(target)) as store:
        assert [m.body for m in store.get_message("g", "orders", 0, 0, 3).messages] == [b"local-0", b"local-1",
                                                                                       b"local-2"]


def test_an_import_of_another_stores_history_is_refused_not_skipped(spark, tmp_path):
    """An operator drill: importing store A's export into store C, whose tier holds C's own
    messages at the same offsets, reported them "already stored, skipped": A's messages there
    were dropped without a word. The skipped rows are now compared with what is stored (the
    first and last of each run): another body is refused, naming the queue and offset; the
    same export imported again still skips."""
    import pytest

    from tiered_core.errors import StateConflict

    source = write_config(tmp_path / "s.toml", tmp_path / "s", cl_max=8 << 10, cq_max=1000)
    write_sample(StoreConfig.load(source), SPEC)
    exported = export(spark, source, tmp_path / "parquet")
    other = write_config(tmp_path / "c.toml", tmp_path / "c", cl_max=8 << 10, cq_max=1000)
    with TieredMessageStore.open(StoreConfig.load(other)) as store:
        for i in range(5):
            store.put_message(Message(topic="orders", body=f"c-{i}".encode()), 0)
        store.dispatch(force=True)
    with pytest.raises(StateConflict, match="orders/0: the store already holds another message at queue offset 0"):
        import_parquet(spark, other, exported.path)
    with TieredMessageStore.open(StoreConfig.load(other)) as store:  # refused before anything was written
        assert [m.body for m in store.get_message("g", "orders", 0, 0, 5).messages] == [
            f"c-{i}".encode() for i in range(5)]
    target = write_config(tmp_path / "t.toml", tmp_path / "t", cl_max=8 << 10, cq_max=1000)
    assert import_parquet(spark, target, exported.path).appended == SPEC.messages * SPEC.queues
    again = import_parquet(spark, target, exported.path)
    assert (again.appended, again.skipped) == (0, SPEC.messages * SPEC.queues)


def test_another_stores_history_with_the_same_bodies_is_refused_by_its_store_times(spark, tmp_path):
    """Two stores' histories may share bodies (heartbeats, retried payloads). The import's
    check compared bodies only, so store C holding A's bodies at the same offsets, put at
    other times, took A's export as "already stored" and dropped A's messages there. The
    store time is compared too; the same export imported again still skips every row."""
    import pytest

    from tiered_core.errors import StateConflict

    source = write_config(tmp_path / "s.toml", tmp_path / "s", cl_max=8 << 10, cq_max=1000)
    write_sample(StoreConfig.load(source), SPEC)
    exported = export(spark, source, tmp_path / "parquet")
    other = write_config(tmp_path / "c.toml", tmp_path / "c", cl_max=8 << 10, cq_max=1000)
    with TieredMessageStore.open(StoreConfig.load(other)) as store:
        for i in range(5):
            store.put_message(Message(topic="orders", body=sample_message("orders", 0, i, SPEC).body), 0)
        store.dispatch(force=True)
    with pytest.raises(StateConflict, match="orders/0: the store already holds another message at queue offset 0 "
                                            r"\(its store time differs"):
        import_parquet(spark, other, exported.path)
    target = write_config(tmp_path / "t.toml", tmp_path / "t", cl_max=8 << 10, cq_max=1000)
    assert import_parquet(spark, target, exported.path).appended == SPEC.messages * SPEC.queues
    again = import_parquet(spark, target, exported.path)
    assert (again.appended, again.skipped) == (0, SPEC.messages * SPEC.queues)
