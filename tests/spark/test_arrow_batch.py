"""``properties_columns`` (Arrow kernels) against ``parse_properties`` (the codec's parser) on
any properties text: empty names or values, a ``\\x01`` inside a value, repeated names, empty
pairs, no properties at all. No Spark session needed: pyarrow only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")

from tiered_core.codec.message import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, parse_properties  # noqa: E402
from tiered_core.spark.source.arrow_rows import properties_columns  # noqa: E402
from tiered_core.spark.source.schema import arrow_schema  # noqa: E402

NAMES = st.sampled_from(["a", "b", "TAGS", "KEYS", "UNIQ_KEY", "", "名"])
VALUES = st.sampled_from(["", "1", "x\x01y", "k1 k2", " lead", "値 🙂", "tag"])
PAIR = st.one_of(st.tuples(NAMES, VALUES).map(lambda p: f"{p[0]}\x01{p[1]}"), st.sampled_from(["", "noseparator"]))
TEXT = st.lists(PAIR, max_size=6).map(lambda pairs: "".join(p + "\x02" for p in pairs))


def expected(text: str):
    props = parse_properties(text)
    keys = [k for k in props.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k]
    return list(props.items()), keys, props.get(PROPERTY_TAGS)


def check(texts: list[str]) -> None:
    properties, keys, tags = properties_columns(texts, arrow_schema())
    got = list(zip(properties.to_pylist(), keys.to_pylist(), tags.to_pylist()))
    assert got == [expected(t) for t in texts]


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=8))
def test_properties_columns_equal_parse_properties(texts):
    check(texts)


def test_properties_columns_usual_and_edge_texts():
    usual = [f"a\x011\x02KEYS\x01k{i} k{i + 1}\x02TAGS\x01t{i % 3}\x02" for i in range(50)]
    check(usual)  # every pair whole: the split path
    check(usual + [""])  # a message without properties
    check(usual + ["a\x01\x02\x01b\x02"])  # an empty value, an empty name: skipped
    check(usual + ["a\x011\x02a\x012\x02"])  # a repeated name: first place, last value
    check(["x\x01a\x01b\x02"])  # the value is everything after the first \x01


def _batch_of_every_layout():
    """A validated batch of messages of every header layout (IPv4 / IPv6 hosts, V1 / V2 magic),
    an empty body, no properties, multi-byte text."""
    from tiered_core.codec.message import Message, MessageVersion, encode_message
    from tiered_core.flat.batch_check import check_batch

    messages = [
        Message(topic="orders", body=b"plain", keys=["k1", "k2"], tags="TagA", properties={"a": "1", "b": "two"}),
        Message(topic="orders", body=b""),
        Message(topic="orders", body="héllo ✓".encode(), keys=["ключ"], tags="标签", properties={"名": "値"}),
        Message(topic="orders", body=bytes(range(256)), keys="spaced keys", born_host=("::1", 9)),
        Message(topic="orders", body=b"v6 store", born_host=("::3", 11)),
    ]
    buf, units = bytearray(), []
    for i, msg in enumerate(messages):
        store_host = {"store_host": ("::2", 10)} if i >= 4 else {}
        raw = encode_message(msg, queue_id=3, queue_offset=10 + i, store_timestamp=1_700_000_000_000 + i,
                             physical_offset=5000 + len(buf), version=MessageVersion.V2 if i % 2 else MessageVersion.V1,
                             **store_host)
        units.append((5000 + len(buf), len(raw), 0))
        buf += raw
    batch = check_batch(units, bytes(buf), 5000, topic="orders", queue_id=3, queue_offset=10)
    assert batch.error is None and len(batch) == len(messages)
    return batch


def test_the_one_builder_pure_is_the_oracle_of_every_read():
    """One builder for every reader: the pure build equals an independent row-by-row reference,
    the chosen build (compiled when built) equals the pure one, and fetched messages (the static
    readers' input) build the same rows from their bytes, with their own queue and offsets."""
    from spark_helpers import messages_to_batch

    from tiered_core.codec.message import decode_message
    from tiered_core.spark.source.arrow_rows import batch_to_arrow, messages_to_arrow

    schema = arrow_schema()
    batch = _batch_of_every_layout()
    pure = batch_to_arrow(batch, schema, use_compiled=False)
    assert pure.equals(messages_to_batch(batch.messages(), schema))
    assert batch_to_arrow(batch, schema).equals(pure)
    fetched = list(batch.messages())
    assert messages_to_arrow(fetched, schema).equals(pure)
    assert messages_to_arrow(fetched, schema, use_compiled=False).equals(pure)
    decoded = [decode_message(bytes(batch.data), off - batch.base) for off, _size, _tags in batch.units]
    assert messages_to_arrow(decoded, schema).equals(pure)  # objects without their bytes: encoded again
    for i, m in enumerate(fetched):  # a static topic's reader: logic queue and offsets
        m.queue_id, m.queue_offset = 7, 100 + i
    logic = messages_to_arrow(fetched, schema)
    assert logic.column("queue_id").to_pylist() == [7] * len(fetched)
    assert logic.column("queue_offset").to_pylist() == list(range(100, 100 + len(fetched)))
    assert logic.drop_columns(["queue_id", "queue_offset"]).equals(pure.drop_columns(["queue_id", "queue_offset"]))
    assert messages_to_arrow([], schema).num_rows == 0 and batch_to_arrow(batch, schema, start=9).num_rows == 0
