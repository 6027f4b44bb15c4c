"""The JSON store against RocketMQ's ``tieredStoreMetadata.json`` (fastjson, bare integer keys)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tiered_core.errors import MetadataError
from tiered_core.metadata import JsonMetadataStore
from tiered_core.metadata import json_store as json_store_module
from tiered_core.metadata.convert import copy_metadata, same_contents
from tiered_core.metadata.json_store import SEGMENT_TABLES, parse_json
from tiered_core.common import FileSegmentType
from tiered_core.spi.metadata import FileSegmentMetadata, QueueMetadata, TopicMetadata

SEED = Path(__file__).parent / "data" / "tieredStoreMetadata.json"
CL, CQ = FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE


def independent_parse(text: str) -> dict:
    """A second reading of the seed that shares no code with the store: quote ``{N:`` keys."""
    return json.loads(re.sub(r"\{(\d+):", r'{"\1":', text))


@pytest.fixture
def seed_copy(tmp_path) -> str:
    target = tmp_path / "config" / "tieredStoreMetadata.json"
    target.parent.mkdir()
    shutil.copyfile(SEED, target)
    return str(target)


def test_the_seed_has_bare_integer_keys_and_is_not_standard_json():
    text = SEED.read_text()
    assert re.search(r"\{\d+:\{", text)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_the_seed_example_loads_unchanged(seed_copy):
    before = Path(seed_copy).read_bytes()
    doc = independent_parse(before.decode())
    store = JsonMetadataStore(seed_copy)
    try:
        topics = list(store.iterate_topics())
        assert topics == [
            TopicMetadata(raw["topicId"], raw["topic"], raw["reserveTime"], raw["status"], raw["updateTimestamp"])
            for raw in doc["topicMetadataTable"].values()
        ]
        assert store.max_topic_id == doc["topicSerialNumber"]
        queues = list(store.iterate_queues())
        assert queues == [
            QueueMetadata(raw["queue"]["topic"], raw["queue"]["queueId"], raw["minOffset"], raw["maxOffset"],
                          raw["updateTimestamp"], raw["queue"]["brokerName"])
            for by_id in doc["queueMetadataTable"].values() for raw in by_id.values()
        ]
        expected_segments = [
            FileSegmentMetadata(raw["path"], raw["type"], raw["baseOffset"], raw["size"], raw["status"],
                                raw["createTimestamp"], raw["beginTimestamp"], raw["endTimestamp"],
                                raw["sealTimestamp"])
            for table in SEGMENT_TABLES.values() for by_base in doc[table].values() for raw in by_base.values()
        ]
        assert list(store.iterate_file_segments()) == expected_segments
        assert len(expected_segments) == 2
        # A few facts of the example read directly, as RocketMQ wrote them.
        seg = store.get_file_segment(CL, "broker-a\\topic-tiered\\0", 0)
        assert seg.size == 557667000 and seg.status == 0 and seg.seal_timestamp == 0
        assert store.get_queue("topic-tiered", 0).broker_name == "broker-a"
        assert store.get_topic("topic-tiered").topic_id == 2
    finally:
        store.close()
    assert Path(seed_copy).read_bytes() == before  # loading never rewrites the file


def test_writing_then_loading_gives_equal_entities(seed_copy, tmp_path):
    seed = JsonMetadataStore(seed_copy)
    out_path = str(tmp_path / "out" / "tieredStoreMetadata.json")
    out = JsonMetadataStore(out_path)
    copy_metadata(seed, out)
    out.close()
    text = Path(out_path).read_text()
    doc = json.loads(text)  # standard JSON: no tolerance needed
    assert re.search(r"\{\s*\d+\s*:", text) is None  # every integer key is quoted
    reloaded = JsonMetadataStore(out_path)
    assert same_contents(seed, reloaded) is None
    # Same wrapper keys and per-entity field names (in fastjson's alphabetical order) as the seed.
    seed_doc = independent_parse(SEED.read_text())
    assert list(doc) == list(seed_doc)

    def field_orders(d: dict) -> list[list[str]]:
        seg = [list(raw) for t in SEGMENT_TABLES.values() for by in d[t].values() for raw in by.values()]
        queue = [list(raw) + list(raw["queue"]) for by in d["queueMetadataTable"].values() for raw in by.values()]
        topic = [list(raw) for raw in d["topicMetadataTable"].values()]
        return seg + queue + topic

    assert field_orders(doc) == field_orders(seed_doc)
    # A change persisted by the store loads back equal too.
    m = reloaded.get_file_segment(CQ, "broker-a\\topic-tiered\\0", 0)
    m.size += 20
    reloaded.update_file_segment(m.mark_sealed())
    reloaded.add_queue("topic-tiered", 1, 7, broker_name="broker-a")
    expected = (list(reloaded.iterate_topics()), list(reloaded.iterate_queues()),
                list(reloaded.iterate_file_segments()))
    reloaded.close()
    again = JsonMetadataStore(out_path)
    assert (list(again.iterate_topics()), list(again.iterate_queues()),
            list(again.iterate_file_segments())) == expected
    seed.close()


def test_bare_keys_inside_strings_are_left_alone():
    text = '{1:{"path":"a{2:b,3:c","n":{4:5}}, 6 : "x,7:y"}'
    assert parse_json(text, "inline.json") == {"1": {"path": "a{2:b,3:c", "n": {"4": 5}}, "6": "x,7:y"}


def _error_position(path: str) -> MetadataError:
    with pytest.raises(MetadataError) as err:
        JsonMetadataStore(path)
    return err.value


@pytest.mark.parametrize("garbage_after_bare_keys", [True, False])
def test_bad_json_names_the_file_and_the_position_in_it(tmp_path, garbage_after_bare_keys):
    text = SEED.read_text()
    anchor = '"topicSerialNumber":2' if garbage_after_bare_keys else '"commitLogFileSegmentTable":{'
    assert anchor in text
    broken = text.replace(anchor, anchor + " ]oops", 1)
    path = tmp_path / "tieredStoreMetadata.json"
    path.write_text(broken)
    err = _error_position(str(path))
    where = broken.index("]oops")
    assert err.path == str(path)
    assert err.position == where
    assert err.line == broken.count("\n", 0, where) + 1
    assert err.column == where - broken.rfind("\n", 0, where)
    assert str(path) in str(err) and f"line {err.line} column {err.column}" in str(err)


@pytest.mark.parametrize("mutate, location", [
    (lambda d: d["commitLogFileSegmentTable"]["b\\t\\0"]["0"].__setitem__("size", "big"),
     "commitLogFileSegmentTable['b\\\\t\\\\0'][0].size"),
    (lambda d: d["commitLogFileSegmentTable"]["b\\t\\0"]["0"].__setitem__("baseOffset", 5),
     "commitLogFileSegmentTable['b\\\\t\\\\0'][0]"),
    (lambda d: d["queueMetadataTable"]["t"].__setitem__("x", {}), "queueMetadataTable['t'][x]"),
    (lambda d: d["topicMetadataTable"]["t"].pop("topicId"), "topicMetadataTable['t'].topicId"),
    (lambda d: d.__setitem__("topicMetadataTable", []), "topicMetadataTable"),
    (lambda d: d["commitLogFileSegmentTable"]["b\\t\\0"]["0"].__setitem__("status", 9),
     "commitLogFileSegmentTable['b\\\\t\\\\0'][0]"),
])
def test_entries_of_the_wrong_shape_name_their_location(tmp_path, mutate, location):
    doc = {
        "commitLogFileSegmentTable": {"b\\t\\0": {"0": {"baseOffset": 0, "path": "b\\t\\0", "size": 1, "type": 0}}},
        "queueMetadataTable": {"t": {"0": {"minOffset": 0, "maxOffset": 0,
                                           "queue": {"brokerName": "b", "queueId": 0, "topic": "t"}}}},
        "topicMetadataTable": {"t": {"topic": "t", "topicId": 0}},
        "topicSerialNumber": 0,
    }
    good = tmp_path / "good.json"
    good.write_text(json.dumps(doc))
    JsonMetadataStore(str(good)).close()  # the unmutated document is fine
    mutate(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    err = _error_position(str(bad))
    assert err.path == str(bad)
    assert err.location == location
    assert location in str(err)


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "m.json"
    path.write_bytes(b'{"topicMetadataTable":{"\xff":{}}}')
    err = _error_position(str(path))
    assert err.path == str(path) and err.position == path.read_bytes().index(b"\xff")


def test_the_backup_is_read_when_the_file_is_missing_or_empty(seed_copy):
    os.rename(seed_copy, seed_copy + ".bak")
    with JsonMetadataStore(seed_copy) as store:
        assert store.get_topic("topic-tiered").topic_id == 2
    Path(seed_copy).write_bytes(b"")
    with JsonMetadataStore(seed_copy) as store:
        assert store.get_topic("topic-tiered").topic_id == 2
        store.add_topic("another")  # written to the file itself, not the backup
    with JsonMetadataStore(seed_copy) as store:
        assert store.get_topic("another").topic_id == 3


def test_a_corrupt_file_is_not_silently_replaced_by_the_backup(seed_copy):
    shutil.copyfile(seed_copy, seed_copy + ".bak")
    Path(seed_copy).write_text('{"topicMetadataTable": {')
    err = _error_position(seed_copy)
    assert ".bak" in str(err) and err.path == seed_copy


def test_a_transaction_reaches_the_file_only_at_its_end(seed_copy):
    store = JsonMetadataStore(seed_copy)
    before = Path(seed_copy).read_bytes()
    with store.transaction():
        for base in range(3):
            store.update_file_segment(FileSegmentMetadata("x", CL, base))
        assert Path(seed_copy).read_bytes() == before
    assert len(json.loads(Path(seed_copy).read_text())["commitLogFileSegmentTable"]["x"]) == 3
    store.close()


def test_a_failed_write_keeps_the_old_file_and_rolls_back_memory(seed_copy, monkeypatch):
    store = JsonMetadataStore(seed_copy)
    before = Path(seed_copy).read_bytes()

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(json_store_module.os, "replace", failing_replace)
    with pytest.raises(MetadataError) as err:
        store.update_file_segment(FileSegmentMetadata("new", CL, 0))
    assert err.value.path == seed_copy and "No space left" in str(err.value)
    assert store.get_file_segment(CL, "new", 0) is None
    assert Path(seed_copy).read_bytes() == before
    assert not os.path.exists(seed_copy + ".tmp")
    monkeypatch.undo()
    store.update_file_segment(FileSegmentMetadata("new", CL, 1))
    store.close()
    with JsonMetadataStore(seed_copy) as again:
        assert [m.base_offset for m in again.iterate_file_segments(CL, "new")] == [1]


def test_compact_output_option(tmp_path):
    path = str(tmp_path / "m.json")
    with JsonMetadataStore(path, pretty="false") as store:
        store.add_topic("T")
    text = Path(path).read_text()
    assert text.count("\n") == 1 and "\t" not in text
    with JsonMetadataStore(path) as store:
        assert store.get_topic("T").topic_id == 0


def test_pretty_output_is_exactly_what_the_generic_json_encoder_writes(seed_copy):
    with JsonMetadataStore(seed_copy) as store:
        store.update_file_segment(FileSegmentMetadata('odd "path"\\\u4e2d\n', CQ, 7, size=1))
        store.add_queue("topic-tiered", 9, 3, broker_name='b"\t')
        store.update_file_segment(FileSegmentMetadata("empty-index", 2, 0))
        text = store.encode()
        assert text == json.dumps(store.document(), indent="\t", separators=(",", ":"), ensure_ascii=False) + "\n"
        assert json.loads(text) == store.document()


def test_incremental_rendering_always_matches_the_full_document(tmp_path, monkeypatch):
    """The store re-renders only changed groups on persist; after any mix of updates,
    deletes, rolled-back transactions and failed writes the file must still be exactly the store."""
    import random

    real_replace = os.replace

    def failing_replace(src, dst):
        raise OSError(5, "injected I/O error")

    rng = random.Random(7)
    path = str(tmp_path / "m.json")
    store = JsonMetadataStore(path, fsync=False)

    def check() -> None:
        expected = json.dumps(store.document(), indent="\t", separators=(",", ":"), ensure_ascii=False) + "\n"
        assert Path(path).read_text() == expected
        assert store.encode() == expected

    for step in range(300):
        op = rng.random()
        p, base, t = f"p{rng.randrange(6)}", rng.randrange(5) * 10, rng.randrange(3)
        if op < 0.4:
            store.update_file_segment(FileSegmentMetadata(p, t, base, size=step))
        elif op < 0.5:
            store.delete_file_segment(t, p, base if rng.random() < 0.7 else None)
        elif op < 0.6:
            store.update_queue(QueueMetadata(f"t{rng.randrange(3)}", rng.randrange(4), step, step))
        elif op < 0.65:
            store.delete_queue(f"t{rng.randrange(3)}", rng.randrange(4))
        elif op < 0.7:
            monkeypatch.setattr(json_store_module.os, "replace", failing_replace)
            with pytest.raises(MetadataError):
                store.update_file_segment(FileSegmentMetadata(p, t, base, size=step + 2000))
            monkeypatch.setattr(json_store_module.os, "replace", real_replace)
        elif op < 0.8:
            with pytest.raises(KeyError):
                with store.transaction():
                    store.update_file_segment(FileSegmentMetadata(p, t, base, size=step + 1000))
                    store.update_queue(QueueMetadata("t0", 0, -step, 0))
                    raise KeyError("roll back")
        else:
            with store.transaction():
                for _ in range(3):
                    store.update_file_segment(FileSegmentMetadata(f"p{rng.randrange(6)}", t, base, size=step))
                store.add_topic(f"topic{rng.randrange(5)}")
        if Path(path).exists():
            check()
    store.close()
    with JsonMetadataStore(path) as again:
        assert again.document() == json.loads(Path(path).read_text())
