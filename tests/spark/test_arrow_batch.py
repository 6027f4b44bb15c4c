"""``properties_columns`` (Arrow kernels) against ``parse_properties`` (the codec's parser) on
any properties text: empty names or values, a ``\\x01`` inside a value, repeated names, empty
pairs, no properties at all. No Spark session needed: pyarrow only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")

from tiered_core.codec.message import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, parse_properties  # noqa: E402
from tiered_core.spark.arrow_batch import properties_columns  # noqa: E402
from tiered_core.spark.schema import arrow_schema  # noqa: E402

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
