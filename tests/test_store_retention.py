"""Local retention never deletes a message that is not tiered yet, and what it deletes
stays readable from the tiered store."""

from __future__ import annotations

from store_workload import (
    Workload,
    assert_exactly_once,
    assert_message_matches,
    read_queue,
    small_config,
    tiered_commit,
)
from tiered_core.access.results import StoreTier
from tiered_core.access.tiered_store import TieredMessageStore

FAR_FUTURE_MS = 1 << 50


def test_retention_keeps_every_untiered_message(tmp_path):
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tiered")},
                          local_commit_log_file_size=64 << 10)
    workload = Workload(topics=("orders",), queues=2)
    tiered_q, lagging_q = workload.queue_keys
    with TieredMessageStore.open(config) as store:
        workload.put(store, 1500)
        store.dispatch(force=True)
        first_phase = {k: len(v) for k, v in workload.sent.items()}
        workload.put(store, 1500)
        store.local.reput()
        store.local.flush()
        store.dispatcher.dispatch_queue(*tiered_q, force=True)
        assert tiered_commit(store, *tiered_q) == len(workload.sent[tiered_q])
        assert tiered_commit(store, *lagging_q) == first_phase[lagging_q]

        assert store.delete_expired_local(FAR_FUTURE_MS) > 0  # the first phase's files go
        # ... but not one message of the lagging queue that only the local store has
        assert 0 < store.local.get_min_offset_in_queue(*lagging_q) <= tiered_commit(store, *lagging_q)
        # a second pass changes nothing while the queue lags
        before = store.local.get_min_offset_in_queue(*lagging_q)
        store.delete_expired_local(FAR_FUTURE_MS)
        assert store.local.get_min_offset_in_queue(*lagging_q) == before

        # everything is readable: below the local copy from the tiered store, the rest locally
        def tier_of(topic, qid, offset):
            return StoreTier.TIERED if offset < store.local.get_min_offset_in_queue(topic, qid) else StoreTier.LOCAL

        lagging_sent = workload.sent.pop(lagging_q)  # not fully tiered: checked by reads alone
        assert_exactly_once(store, workload, tier=tier_of)
        workload.sent[lagging_q] = lagging_sent
        got = read_queue(store, *lagging_q, len(lagging_sent))
        assert len(got) == len(lagging_sent)
        for offset, ((m, start, tier), sent) in enumerate(zip(got, lagging_sent)):
            assert_message_matches(m, *lagging_q, offset, sent)
            assert tier is tier_of(*lagging_q, start)
        store.dispatch(force=True)
        assert store.delete_expired_local(FAR_FUTURE_MS) > 0
    with TieredMessageStore.open(config.replace(storage_level="FORCE")) as store:
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)


def test_a_failed_delete_of_an_expired_file_loses_nothing(tmp_path, monkeypatch):
    """A load drill: local retention met an unwritable commit-log directory once. The files
    whose delete failed stayed on disk, off the list; later runs deleted the files after
    them, and the next open saw a gap and dropped the NEWEST file: acknowledged messages
    that were not tiered yet were lost and their offsets handed out again. Now a failed
    delete is retried at the next run, and an open never drops the newest files."""
    import errno
    import os

    import tiered_core.local.mapped_file as mapped_file
    from tiered_core import Message

    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tiered")}, local_commit_log_file_size=4096,
                          group_commit_count=16)
    sent = {}

    def put(store, n, tag):
        for i in range(n):
            body = f"{tag}-{i}-".encode() + b"z" * 300
            sent[store.put_message(Message(topic="t", body=body), 0).queue_offset] = body

    real_unlink = os.unlink

    def refused(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    with TieredMessageStore.open(config) as store:
        put(store, 40, "a")
        store.local.reput()
        store.dispatch(force=True)
        commitlog = os.path.join(config.store_path, "commitlog")
        before = sorted(os.listdir(commitlog))
        monkeypatch.setattr(mapped_file.os, "unlink", refused)
        assert store.delete_expired_local(FAR_FUTURE_MS) > 0
        assert sorted(os.listdir(commitlog)) == before  # nothing could be deleted
        monkeypatch.setattr(mapped_file.os, "unlink", real_unlink)
        put(store, 40, "b")
        store.local.reput()
        store.dispatch(force=True)
        store.delete_expired_local(FAR_FUTURE_MS)
        assert not set(before[:-1]) & set(os.listdir(commitlog))  # the failed deletes were retried
        put(store, 5, "c")  # acknowledged, not tiered
    with TieredMessageStore.open(config) as store:
        for offset, body in sorted(sent.items()):
            got = store.get_message("g", "t", 0, offset, 1)
            assert got.found and got.messages[0].body == body, (offset, got.status)
        assert store.put_message(Message(topic="t", body=b"new"), 0).queue_offset == len(sent)


def test_an_open_keeps_the_newest_files_after_a_gap(tmp_path):
    """A head file whose delete failed (left before a gap) is not loaded and stays on disk;
    the files after the gap, the newest, are the log (they were dropped instead)."""
    import os

    from tiered_core.local.mapped_file import MappedFileQueue

    queue = MappedFileQueue(str(tmp_path / "log"), 64)
    for i in range(4):
        queue.create_file(i * 64).append(bytes([i]) * 64)
    queue.close()
    names = sorted(os.listdir(tmp_path / "log"))
    assert len(names) == 4
    os.unlink(tmp_path / "log" / names[1])  # the gap
    reopened = MappedFileQueue(str(tmp_path / "log"), 64)
    assert [os.path.basename(f.path) for f in reopened.files] == names[2:]
    assert os.path.exists(tmp_path / "log" / names[0])  # kept: nothing deleted at open
    reopened.close()
