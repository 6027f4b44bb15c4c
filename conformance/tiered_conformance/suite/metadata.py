"""The metadata store contract as a test mixin: :class:`MetadataStoreConformance`.

Fixture contract for a class that runs it:

``store_class``
    The :class:`~tiered_core.spi.metadata.TieredMetadataStore` subclass under test.
    Default: looked up in the plugin registry by the class attribute ``store_name`` (a
    registered name, an alias or ``module:Class``), else by ``--tiered-metadata-store``.
``store_options``
    Keyword options every open passes (default none).
``path``
    Where a test's store lives: a fresh directory per test, the class's
    ``default_filename`` in it.

Every test opens its own store (``self.open(path)``), and checks durability by closing
and opening it again (``self.reopen(store)``), once from a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from typing import Any, ClassVar, Iterator

import pytest

from tiered_core.common import NO_TIMESTAMP, FileSegmentType, SegmentStatus, now_ms
from tiered_core.errors import IllegalParam, InvalidOption, MetadataError
from tiered_conformance.suite.base import run_threads
from tiered_core.spi.metadata import FileSegmentMetadata, QueueMetadata, TieredMetadataStore, TopicMetadata
from tiered_conformance.areas import METADATA_STORE
from tiered_conformance.plugin import NO_METADATA_STORE_MESSAGE, suite_settings

CL, CQ, IDX = FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE, FileSegmentType.INDEX


def segment(path: str, base: int, type: int = CL, **fields) -> FileSegmentMetadata:
    return FileSegmentMetadata(path=path, type=type, base_offset=base, **fields)


def snapshot(store: TieredMetadataStore) -> tuple:
    return (store.max_topic_id, list(store.iterate_topics()), list(store.iterate_queues()),
            list(store.iterate_file_segments()))


class MetadataStoreConformance:
    """The whole metadata store contract (``TieredMetadataStore``'s docstring), for a
    store's author to subclass under a ``Test*`` name::

        class TestMyStore(MetadataStoreConformance):
            store_name = "mystore"          # or my_pkg.store:MyStore

    or, with no test file at all,
    ``pytest --pyargs tiered_conformance --tiered-metadata-store mystore``.
    Override the ``store_class``/``store_options`` fixtures for a store that is not
    registered or needs options.
    """

    #: Which part of the suite this is (see ``tiered_conformance.areas``).
    tiered_area: ClassVar[str] = METADATA_STORE
    #: The store under test: registered name, alias or ``module:Class``; None: the
    #: ``--tiered-metadata-store`` of the run.
    store_name: ClassVar[str | None] = None

    @pytest.fixture
    def store_class(self, request: pytest.FixtureRequest) -> type[TieredMetadataStore]:
        name = self.store_name or suite_settings(request.config).metadata_store_name
        if not name:
            pytest.fail(NO_METADATA_STORE_MESSAGE, pytrace=False)
        from tiered_core.plugins import get_registry

        return get_registry().metadata_store_class(name)

    @pytest.fixture
    def store_options(self) -> dict[str, Any]:
        return {}

    @pytest.fixture(autouse=True)
    def _tiered_metadata_opener(self, store_class: type[TieredMetadataStore], store_options: dict[str, Any]) -> None:
        self._store_class = store_class
        self._store_options = dict(store_options)

    @pytest.fixture
    def path(self, tmp_path, store_class: type[TieredMetadataStore]) -> str:
        filename = store_class.default_filename or f"tieredStoreMetadata.{store_class.name or 'store'}"
        return str(tmp_path / "config" / filename)

    @pytest.fixture
    def store(self, path: str) -> Iterator[TieredMetadataStore]:
        s = self.open(path)
        yield s
        s.close()

    def open(self, path: str, **options: Any) -> TieredMetadataStore:
        """A store of the class under test at ``path`` (the run's options, plus ``options``)."""
        return self._store_class(path, **self._store_options, **options)

    def reopen(self, store: TieredMetadataStore) -> TieredMetadataStore:
        store.close()
        return self.open(store.path)

    # -- topics ---------------------------------------------------------------------

    def test_topic_ids_start_at_zero_and_add_returns_the_existing_entry(self, store):
        assert store.max_topic_id == -1
        a = store.add_topic("TopicA", 72)
        b = store.add_topic("TopicB")
        assert (a.topic_id, a.status, a.reserve_time) == (0, 0, 72)
        assert (b.topic_id, b.reserve_time) == (1, -1)
        again = store.add_topic("TopicA", 5)
        assert again == a
        assert store.get_topic("TopicA") == a
        assert store.get_topic("missing") is None
        assert store.max_topic_id == 1

    def test_update_topic_persists_fields_and_refreshes_the_timestamp(self, store):
        m = store.add_topic("T")
        before = now_ms()
        m.status, m.reserve_time, m.update_timestamp = 3, 48, 0
        stored = store.update_topic(m)
        assert stored.update_timestamp >= before
        store = self.reopen(store)
        got = store.get_topic("T")
        assert (got.status, got.reserve_time, got.topic_id) == (3, 48, m.topic_id)
        assert got.update_timestamp == stored.update_timestamp
        store.close()

    def test_update_topic_without_touch_keeps_the_timestamp_and_raises_the_sequence(self, store):
        store.update_topic(TopicMetadata(41, "Imported", 10, 0, 1234), touch=False)
        assert store.get_topic("Imported") == TopicMetadata(41, "Imported", 10, 0, 1234)
        assert store.max_topic_id == 41
        assert store.add_topic("Next").topic_id == 42

    def test_topic_id_owned_by_another_topic_is_refused(self, store):
        a = store.add_topic("A")
        store.add_topic("B")
        with pytest.raises(MetadataError) as err:
            store.update_topic(TopicMetadata(a.topic_id, "B"))
        assert err.value.topic == "B" and err.value.topic_id == a.topic_id
        assert "'A'" in str(err.value)
        assert store.get_topic("B").topic_id == 1

    def test_deleted_topic_ids_are_not_handed_out_again(self, store):
        store.add_topic("A")
        store.add_topic("B")
        assert store.delete_topic("B") is True
        assert store.delete_topic("B") is False
        store = self.reopen(store)
        assert store.add_topic("C").topic_id == 2
        store.close()

    def test_iterate_topics_is_ordered_and_allows_deleting_inside_the_loop(self, store):
        names = ["t10", "t2", "a", "Z", "t1"]
        for name in names:
            store.add_topic(name)
        seen = []
        for m in store.iterate_topics():
            seen.append(m.topic)
            store.delete_topic(m.topic)
        assert seen == sorted(names)
        assert list(store.iterate_topics()) == []

    def test_set_max_topic_id(self, store):
        store.add_topic("A")
        store.set_max_topic_id(9)
        assert store.max_topic_id == 9
        assert store.add_topic("B").topic_id == 10
        with pytest.raises(IllegalParam):
            store.set_max_topic_id(5)
        assert store.max_topic_id == 10

    # -- queues ---------------------------------------------------------------------

    def test_queue_add_update_iterate_delete(self, store):
        q = store.add_queue("T", 10, -1, broker_name="broker-a")
        assert (q.min_offset, q.max_offset, q.broker_name) == (-1, -1, "broker-a")
        store.add_queue("T", 2, 100)
        assert store.add_queue("T", 2, 555).min_offset == 100  # existing entry returned unchanged
        q.min_offset, q.max_offset, q.update_timestamp = 4, 9, 0
        before = now_ms()
        assert store.update_queue(q).update_timestamp >= before
        got = store.get_queue("T", 10)
        assert (got.min_offset, got.max_offset, got.broker_name) == (4, 9, "broker-a")
        assert [m.queue_id for m in store.iterate_queues("T")] == [2, 10]
        assert store.delete_queue("T", 10) is True
        assert store.delete_queue("T", 10) is False
        assert store.get_queue("T", 10) is None
        assert store.get_queue("unknown-topic", 0) is None
        assert list(store.iterate_queues("unknown-topic")) == []

    def test_iterate_all_queues_includes_topics_without_a_topic_entry(self, store):
        store.add_topic("B")
        store.add_queue("B", 1, 0)
        store.add_queue("A", 3, 0)  # no topic entry for A
        store.add_queue("A", 0, 0)
        assert [(m.topic, m.queue_id) for m in store.iterate_queues()] == [("A", 0), ("A", 3), ("B", 1)]

    def test_update_queue_is_an_upsert_and_touch_false_keeps_the_timestamp(self, store):
        m = QueueMetadata("T", 7, 11, 22, 1234, "b")
        assert store.update_queue(m, touch=False) == m
        assert store.get_queue("T", 7) == m

    # -- file segments --------------------------------------------------------------

    def test_segment_defaults_and_sealing(self, store):
        stored = store.update_file_segment(segment("b/t/0", 0, size=10, create_timestamp=now_ms()))
        assert stored.status == SegmentStatus.NEW and stored.seal_timestamp == 0
        assert stored.begin_timestamp == stored.end_timestamp == NO_TIMESTAMP
        store.update_file_segment(segment("b/t/0", 100, CQ))
        got = store.get_file_segment(CL, "b/t/0", 0)
        assert got == stored
        got.mark_sealed()
        store.update_file_segment(got)
        store = self.reopen(store)
        sealed = store.get_file_segment(CL, "b/t/0", 0)
        assert sealed.status == SegmentStatus.SEALED and sealed.seal_timestamp != 0
        assert store.get_file_segment(CQ, "b/t/0", 100).status == SegmentStatus.NEW
        assert store.get_file_segment(CQ, "b/t/0", 0) is None
        assert store.get_file_segment(IDX, "b/t/0", 0) is None
        store.close()

    def test_a_segment_checksum_is_kept_or_not_known_never_another(self, store):
        """``checksum``/``checksum_size`` are optional: a store keeps the pair as given, or
        answers ``checksum=None`` ("not known"); any other value would make verify call a
        whole object damaged."""
        store.update_file_segment(segment("b/t/0", 0, size=10, checksum=0xFFFFFFFF, checksum_size=10))
        store.update_file_segment(segment("b/t/0", 10, size=5))
        store = self.reopen(store)
        kept = store.get_file_segment(CL, "b/t/0", 0)
        assert kept.checksum is None or (kept.checksum, kept.checksum_size) == (0xFFFFFFFF, 10)
        assert store.get_file_segment(CL, "b/t/0", 10).checksum is None
        assert [m.checksum for m in store.iterate_file_segments(CL, "b/t/0")] == [kept.checksum, None]
        store.close()

    def test_segments_iterate_by_type_and_path_in_numeric_base_order(self, store):
        bases = [100, 9, 10, 0, 1 << 40]
        for base in bases:
            store.update_file_segment(segment("q/1", base, CL))
            store.update_file_segment(segment("q/1", base, CQ))
            store.update_file_segment(segment("q/0", base, CL))
        store.update_file_segment(segment("rmq_sys_INDEX/0", 5, IDX))
        assert [m.base_offset for m in store.iterate_file_segments(CL, "q/1")] == sorted(bases)
        assert [(m.path, m.base_offset) for m in store.iterate_file_segments(CL)] == (
            [("q/0", b) for b in sorted(bases)] + [("q/1", b) for b in sorted(bases)])
        assert [(m.type, m.base_offset) for m in store.iterate_file_segments(path="q/1")] == (
            [(CL, b) for b in sorted(bases)] + [(CQ, b) for b in sorted(bases)])
        everything = list(store.iterate_file_segments())
        assert len(everything) == 3 * len(bases) + 1
        assert [m.key for m in everything] == sorted(m.key for m in everything)
        assert [m.type for m in store.iterate_file_segments(IDX)] == [IDX]
        assert list(store.iterate_file_segments(CQ, "q/0")) == []

    def test_delete_by_path_and_by_offset(self, store):
        for base in range(0, 1000, 100):
            store.update_file_segment(segment("a", base, CL))
            store.update_file_segment(segment("b", base, CL))
            store.update_file_segment(segment("a", base, CQ))
        assert store.delete_file_segment(CL, "a") == 10
        assert list(store.iterate_file_segments(CL, "a")) == []
        assert len(list(store.iterate_file_segments(CQ, "a"))) == 10  # other type untouched
        for base in range(0, 500, 100):
            assert store.delete_file_segment(CL, "b", base) == 1
        assert store.delete_file_segment(CL, "b", 0) == 0
        assert store.delete_file_segment(CL, "nothing-here") == 0
        assert [m.base_offset for m in store.iterate_file_segments(CL, "b")] == list(range(500, 1000, 100))

    def test_iteration_pages_through_many_segments_while_deleting(self, store):
        count = 2500  # more than one page of the SQLite store
        with store.transaction():
            for i in range(count):
                store.update_file_segment(segment(f"p{i % 7}", i, CQ, size=i))
        seen = []
        with store.transaction():  # one commit: the JSON store rewrites its whole file per commit
            for m in store.iterate_file_segments(CQ):
                seen.append(m.key)
                store.delete_file_segment(m.type, m.path, m.base_offset)
        assert len(seen) == len(set(seen)) == count
        assert seen == sorted(seen)
        assert list(store.iterate_file_segments()) == []

    def test_large_and_negative_values_round_trip(self, store):
        m = segment("x", (1 << 62), CL, size=(1 << 40), create_timestamp=-5, seal_timestamp=NO_TIMESTAMP)
        store.update_file_segment(m)
        store.update_queue(QueueMetadata("T", 0, -1, NO_TIMESTAMP, 0))
        store = self.reopen(store)
        assert store.get_file_segment(CL, "x", 1 << 62) == m
        assert store.get_queue("T", 0).max_offset == NO_TIMESTAMP
        store.close()

    def test_unicode_and_separator_characters_in_names(self, store):
        path = 'broker-a\\topic-tiered\\0/{0:"x"},1:'
        store.update_file_segment(segment(path, 3, CL, size=1))
        store.add_topic("主题-1")
        store.add_queue("主题-1", 0, 5)
        store = self.reopen(store)
        assert store.get_file_segment(CL, path, 3).size == 1
        assert store.get_topic("主题-1").topic_id == 0
        assert store.get_queue("主题-1", 0).min_offset == 5
        store.close()

    # -- entities are copies ----------------------------------------------------------

    def test_returned_entities_are_copies(self, store):
        m = store.update_file_segment(segment("c", 0, size=1))
        m.size = 99
        got = store.get_file_segment(CL, "c", 0)
        assert got.size == 1
        got.size = 77
        next(store.iterate_file_segments()).size = 55
        assert store.get_file_segment(CL, "c", 0).size == 1
        t = store.add_topic("T")
        t.status = 9
        assert store.get_topic("T").status == 0

    # -- store properties -------------------------------------------------------------

    def test_store_properties_set_get_iterate_delete_and_reopen(self, store):
        assert store.get_property("a") is None
        assert list(store.iterate_properties()) == []
        store.set_property("sink/b", '{"committed": 3}')
        store.set_property("sink/a", "x\ny \u00e9")
        store.set_property("other", "1")
        store.set_property("other", "2")
        assert store.get_property("other") == "2"
        assert list(store.iterate_properties("sink/")) == [("sink/a", "x\ny \u00e9"), ("sink/b", '{"committed": 3}')]
        store.set_property("other", None)
        store.set_property("absent", None)  # removing what is not there is fine
        store = self.reopen(store)
        assert list(store.iterate_properties()) == [("sink/a", "x\ny \u00e9"), ("sink/b", '{"committed": 3}')]
        assert store.get_property("other") is None
        store.close()

    @pytest.mark.parametrize("key, value", [("", "v"), (None, "v"), (3, "v"), ("k", 3), ("k", b"v")])
    def test_bad_store_properties_raise_illegal_param(self, store, key, value):
        with pytest.raises(IllegalParam):
            store.set_property(key, value)
        assert list(store.iterate_properties()) == []

    def test_store_properties_follow_the_transaction(self, store):
        store.set_property("ledger", "1")
        with pytest.raises(RuntimeError, match="boom"):
            with store.transaction():
                store.set_property("ledger", "2")
                store.update_file_segment(segment("p", 0))
                raise RuntimeError("boom")
        assert store.get_property("ledger") == "1"
        with store.transaction():
            store.set_property("ledger", "3")
            store.update_file_segment(segment("p", 0))
        store = self.reopen(store)
        assert store.get_property("ledger") == "3"
        assert store.get_file_segment(CL, "p", 0) is not None
        store.close()

    # -- transactions -----------------------------------------------------------------

    def test_transaction_commits_all_updates_together_durably(self, store):
        with store.transaction() as tx:
            assert tx is store
            tx.add_topic("T")
            tx.add_queue("T", 0, 0)
            for base in range(0, 50, 10):
                tx.update_file_segment(segment("t/0", base))
        store = self.reopen(store)
        assert store.get_topic("T").topic_id == 0
        assert store.get_queue("T", 0) is not None
        assert len(list(store.iterate_file_segments(CL, "t/0"))) == 5
        store.close()

    def test_transaction_that_raises_applies_nothing(self, store):
        store.update_file_segment(segment("keep", 0, size=1))
        with pytest.raises(RuntimeError, match="boom"):
            with store.transaction():
                store.add_topic("T")
                store.update_file_segment(segment("keep", 0, size=2))
                store.update_file_segment(segment("new", 0))
                store.delete_file_segment(CL, "keep", 0)
                raise RuntimeError("boom")
        assert store.get_topic("T") is None
        assert store.max_topic_id == -1
        assert store.get_file_segment(CL, "keep", 0).size == 1
        assert store.get_file_segment(CL, "new", 0) is None
        store = self.reopen(store)
        assert [m.path for m in store.iterate_file_segments()] == ["keep"]
        assert store.add_topic("U").topic_id == 0
        store.close()

    def test_nested_transaction_failure_undoes_only_the_inner_block(self, store):
        with store.transaction():
            store.update_file_segment(segment("outer", 0))
            with pytest.raises(ValueError):
                with store.transaction():
                    store.update_file_segment(segment("inner", 0))
                    store.add_queue("T", 1)
                    raise ValueError("inner fails")
            store.update_file_segment(segment("outer", 1))
        store = self.reopen(store)
        assert [(m.path, m.base_offset) for m in store.iterate_file_segments()] == [("outer", 0), ("outer", 1)]
        assert store.get_queue("T", 1) is None
        store.close()

    def test_other_threads_wait_for_a_transaction_and_then_see_all_of_it(self, store):
        inside, results = threading.Event(), []
        release = threading.Event()

        def reader():
            inside.wait()
            results.append(len(list(store.iterate_file_segments())))

        t = threading.Thread(target=reader)
        t.start()
        with store.transaction():
            for base in range(5):
                store.update_file_segment(segment("tx", base))
            inside.set()
            release.wait(0.2)  # give the reader a chance to run into the transaction
            for base in range(5, 10):
                store.update_file_segment(segment("tx", base))
        t.join()
        assert results == [10]

    # -- durability and concurrency -----------------------------------------------------

    def test_reopen_reads_back_everything(self, store):
        store.add_topic("T", 24)
        store.add_queue("T", 0, 2, broker_name="b")
        store.add_queue("T", 1, 4)
        store.add_queue("T", 2, 8)
        store.update_file_segment(segment("T/0", 100, CL, size=3, begin_timestamp=1, end_timestamp=2))
        store.update_file_segment(segment("T/0", 200, CQ, size=20))
        before = snapshot(store)
        store = self.reopen(store)
        assert snapshot(store) == before
        assert [q.min_offset for q in store.iterate_queues("T")] == [2, 4, 8]
        store.close()

    def test_an_update_is_durable_when_the_call_returns(self, path):
        # The child exits without close() or flush(): what returned must be on disk.
        cls = self._store_class
        code = textwrap.dedent(f"""
            import importlib, os
            from tiered_core.spi.metadata import FileSegmentMetadata
            cls = importlib.import_module({cls.__module__!r})
            for attr in {cls.__qualname__!r}.split("."):
                cls = getattr(cls, attr)
            s = cls({path!r}, **{self._store_options!r})
            s.add_topic("T")
            s.add_queue("T", 3, 30)
            s.update_file_segment(FileSegmentMetadata("T/3", 0, 30, size=123))
            with s.transaction():
                s.update_file_segment(FileSegmentMetadata("T/3", 1, 30, size=20))
            os._exit(0)
        """)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)
        store = self.open(path)
        try:
            assert store.get_topic("T").topic_id == 0
            assert store.get_queue("T", 3).min_offset == 30
            assert store.get_file_segment(CL, "T/3", 30).size == 123
            assert store.get_file_segment(CQ, "T/3", 30).size == 20
        finally:
            store.close()

    def test_threads_updating_different_segments(self, store):
        threads, per_thread, errors = 8, 20, []

        def work(n: int) -> None:
            try:
                for i in range(per_thread):
                    store.update_file_segment(segment(f"thread{n}", i % 5, CL, size=i))
                    if i % 10 == 0:
                        with store.transaction():
                            store.update_file_segment(segment(f"thread{n}", 100 + i, CQ, size=i))
                            store.update_file_segment(segment(f"thread{n}", 100 + i, CL, size=i))
                store.add_topic(f"topic{n}")
            except Exception as exc:  # reported below
                errors.append(exc)

        run_threads(work, threads)
        assert errors == []
        store = self.reopen(store)
        for n in range(threads):
            last = {i % 5: i for i in range(per_thread)}
            assert {m.base_offset: m.size for m in store.iterate_file_segments(CL, f"thread{n}")
                    if m.base_offset < 100} == last
            assert len(list(store.iterate_file_segments(CQ, f"thread{n}"))) == per_thread // 10
        assert sorted(m.topic_id for m in store.iterate_topics()) == list(range(threads))
        store.close()

    # -- errors -----------------------------------------------------------------------

    @pytest.mark.parametrize("args, named", [
        (("commitlog", "p", 0), "type"),
        ((7, "p", 0), "type"),
        ((True, "p", 0), "type"),
        (("p", 0, 0), "type"),  # path and type swapped
        ((0, "", 0), "path"),
        ((0, "p", -1), "base_offset"),
    ])
    def test_bad_segment_keys_raise_illegal_param_naming_them(self, store, args, named):
        with pytest.raises(IllegalParam) as err:
            store.get_file_segment(*args)
        assert named in err.value.context

    def test_bad_entities_are_refused_and_nothing_is_stored(self, store):
        with pytest.raises(IllegalParam) as err:
            store.update_file_segment(segment("p", 0, status=7))
        assert err.value.status == 7
        with pytest.raises(IllegalParam):
            store.update_file_segment(segment("p", 0, size=-1))
        with pytest.raises(IllegalParam):
            store.update_file_segment(segment("p", 0, size="12"))
        with pytest.raises(IllegalParam) as err:
            store.add_topic("")
        assert err.value.topic == ""
        with pytest.raises(IllegalParam):
            store.add_queue("T", -1)
        with pytest.raises(IllegalParam):
            store.update_topic(TopicMetadata(-3, "T"))
        with pytest.raises(IllegalParam):
            store.update_queue(TopicMetadata(0, "T"))
        assert snapshot(store) == (-1, [], [], [])

    def test_unknown_options_raise_invalid_option_naming_them(self, path):
        with pytest.raises(InvalidOption) as err:
            self.open(path, bogus=1, other="x")
        assert err.value.options == ["bogus", "other"]
        assert "'bogus'" in str(err.value) and "'other'" in str(err.value)
        assert not os.path.exists(path)

    def test_closed_store_raises_metadata_error(self, store):
        store.close()
        store.close()  # idempotent
        assert store.closed
        for call in (lambda: store.get_topic("T"), lambda: store.add_topic("T"),
                     lambda: list(store.iterate_file_segments()), lambda: store.flush()):
            with pytest.raises(MetadataError) as err:
                call()
            assert err.value.path == store.path

    def test_destroy_removes_everything(self, store, path):
        store.add_topic("T")
        store.update_file_segment(segment("p", 0))
        store.flush()
        store.destroy()
        assert store.closed
        assert os.listdir(os.path.dirname(path)) == []
        fresh = self.open(path)
        assert snapshot(fresh) == (-1, [], [], [])
        fresh.close()
