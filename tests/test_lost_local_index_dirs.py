"""Both local key-index directories lost (repair drill, r11).

`store/index` and `store/tiered_index_file` removed: the coverage marks went with them, and
the next open, seeing no recovery path, declared the index whole. Key lookups missed every
tiered-only message for that whole broker run; only the run after indexed them again. Now
an open without marks bounds what the index may miss by its own files, whatever the path.
"""

from __future__ import annotations

import shutil

from test_offset_invariant import FAR_FUTURE_MS, TOPIC, body, config_at, put

from tiered_core import TieredMessageStore


def test_the_first_open_after_losing_both_index_directories_indexes_the_tier_again(tmp_path):
    cfg = config_at(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        put(store, "a", 400)
        store.dispatch(force=True)
        store.delete_expired_local(FAR_FUTURE_MS)  # the early messages are tiered only
        assert store.local.get_min_offset_in_queue(TOPIC, 0) > 5
    for name in ("index", "tiered_index_file"):
        shutil.rmtree(tmp_path / "store" / name)
    with TieredMessageStore.open(cfg) as store:
        assert store.key_repair is not None and store.key_repair.done.is_set()
        hits = store.query_message(TOPIC, "a-0-5").messages
        assert [(m.queue_id, m.body) for m in hits] == [(0, body("a", 0, 5))]


def test_a_read_only_open_says_keys_may_be_missed_only_for_messages_its_local_copy_no_longer_holds(tmp_path):
    """A read-only open cannot index a key-index gap again (upgrade drill U2). Messages the
    local copy still holds are found through its own index: no warning for them. Once local
    retention took them, the lookup says it may have missed them instead of finding nothing."""
    cfg = config_at(tmp_path)
    with TieredMessageStore.open(cfg) as store:
        put(store, "a", 400)
        store.dispatch(force=True)
    shutil.rmtree(tmp_path / "store" / "tiered_index_file")  # the tiered index's local part
    with TieredMessageStore.open(cfg, read_only=True) as store:
        result = store.query_message(TOPIC, "a-0-5")
        assert [m.body for m in result.messages] == [body("a", 0, 5)] and result.error is None
    with TieredMessageStore.open(cfg) as store:  # (indexes the gap again, then retention)
        store.delete_expired_local(FAR_FUTURE_MS)
        assert store.local.get_min_offset_in_queue(TOPIC, 0) > 5
    shutil.rmtree(tmp_path / "store" / "tiered_index_file")
    with TieredMessageStore.open(cfg, read_only=True) as store:
        result = store.query_message(TOPIC, "a-0-5")
        assert result.messages == [] and result.error is not None and result.error.context["key_index_gap"]
    with TieredMessageStore.open(cfg) as store:
        assert [m.body for m in store.query_message(TOPIC, "a-0-5").messages] == [body("a", 0, 5)]
