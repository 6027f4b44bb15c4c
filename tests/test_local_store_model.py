"""LocalMessageStore against a model: random puts, reputs, flushes, clean reopens and
crashes (a copy of the directory taken while the store is open, its last message torn)."""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tiered_conformance.drills import copy_sparse
from tiered_core.codec import Message
from tiered_core.local import LocalMessageStore, LocalStoreConfig

CONFIG = LocalStoreConfig(
    commit_log_file_size=16 * 1024,
    consume_queue_units_per_file=8,
    index_hash_slots=8,
    index_max_items=16,
    background_services=False,
)
TOPICS = ("orders", "refunds")


class LocalStoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="local-model-")
        self.generation = 0
        self.store = LocalMessageStore(self._dir(), CONFIG)
        # every message in commit-log order: (topic, queue, queue offset, key, body, commit-log offset, size)
        self.log: list[tuple[str, int, int, str, bytes, int, int]] = []
        self.visible = 0  # messages the last reput (or open) dispatched
        self.cl_min = 0  # commit-log bytes below were deleted by retention

    def _dir(self) -> str:
        return os.path.join(self.tmp, f"g{self.generation}")

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(topic=st.sampled_from(TOPICS), queue=st.integers(0, 2), size=st.integers(0, 6000),
          key=st.sampled_from(["a", "b", "Aa", "BB", "c"]))
    def put(self, topic: str, queue: int, size: int, key: str) -> None:
        n = len(self.log)
        body = (f"{n}.".encode() * (size // 2 + 1))[:size]
        expected = sum(1 for m in self.log if m[0] == topic and m[1] == queue)
        r = self.store.put_message(topic, queue, Message(topic=topic, body=body, keys=[key, f"id{n}"]))
        assert r.queue_offset == expected
        size = len(self.store.get_message_bytes(r.commitlog_offset))
        self.log.append((topic, queue, r.queue_offset, key, body, r.commitlog_offset, size))

    @rule()
    def reput(self) -> None:
        assert self.store.reput() == len(self.log) - self.visible
        self.visible = len(self.log)

    @rule()
    def flush(self) -> None:
        assert self.store.flush() == self.store.get_commit_log_max_offset()

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = LocalMessageStore(self._dir(), CONFIG)
        self.visible = len(self.log)

    @precondition(lambda self: self.log)
    @rule(keep=st.integers(0, 10_000), flush_first=st.booleans())
    def retention(self, keep: int, flush_first: bool) -> None:
        """Delete every expired file that holds nothing at or after ``keep_from``."""
        if flush_first:
            self.store.flush()
        keep_from = self.log[keep % len(self.log)][5]
        bound = min(keep_from, self.store.reput_offset, self.store.flushed_offset)
        files = self.store.commit_log.files()
        size = CONFIG.commit_log_file_size
        old_min = self.store.get_commit_log_min_offset()
        expected_min = max(old_min, min(files[-1].start, bound - bound % size))
        deleted = self.store.delete_expired(10**15, keep_from=keep_from)
        assert self.store.get_commit_log_min_offset() == expected_min
        assert deleted == (expected_min - old_min) // size
        self.cl_min = expected_min

    @precondition(lambda self: self.log)
    @rule(cut=st.integers(0, 10_000))
    def crash_with_torn_tail(self, cut: int) -> None:
        """The directory as a killed process leaves it, the last message partly written."""
        old = self._dir()
        self.generation += 1
        shutil.copytree(old, self._dir(), copy_function=copy_sparse)
        self.store.close()
        last = self.log[-1]
        cl_dir = os.path.join(self._dir(), "commitlog")
        name = sorted(os.listdir(cl_dir))[-1]
        path = os.path.join(cl_dir, name)
        start = int(name)
        msg_start = last[5] - start
        assert 0 <= msg_start < os.path.getsize(path)
        if cut % 3:  # tear it in two of three crashes (cutting the rest of its file)
            with open(path, "r+b") as f:
                f.truncate(msg_start + cut % last[6])
            self.log.pop()
        self.store = LocalMessageStore(self._dir(), CONFIG)
        self.visible = len(self.log)

    @invariant()
    def queues_match_the_model(self) -> None:
        shown = self.log[: self.visible]
        queues = sorted({(m[0], m[1]) for m in shown})
        assert [q for q in self.store.list_queues() if self.store.get_max_offset_in_queue(*q)] == queues
        for topic, queue in queues:
            everything = [m for m in shown if m[0] == topic and m[1] == queue]
            want = [m for m in everything if m[5] >= self.cl_min]
            assert self.store.get_max_offset_in_queue(topic, queue) == len(everything)
            lo = want[0][2] if want else len(everything)
            assert self.store.get_min_offset_in_queue(topic, queue) == lo
            got = self.store.get_messages(topic, queue, lo, max_count=len(want) + 1)
            assert [(g.queue_offset, g.keys, g.body) for g in got] == \
                [(m[2], [m[3], f"id{self.log.index(m)}"], m[4]) for m in want]

    @invariant()
    def keys_are_found(self) -> None:
        shown = [m for m in self.log[: self.visible] if m[5] >= self.cl_min]
        for topic in TOPICS:
            for key in ("Aa", "BB"):
                want = [(m[1], m[2]) for m in reversed(shown) if m[0] == topic and m[3] == key]
                got = self.store.query_message(topic, key, max_count=1000)
                assert [(g.queue_id, g.queue_offset) for g in got] == want


LocalStoreModel.TestCase.settings = settings(
    max_examples=12, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_local_store_model = LocalStoreModel.TestCase
