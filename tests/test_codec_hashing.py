"""Java String.hashCode and the RocketMQ hashes built on it.

The expected values below were measured, not derived: a throw-away Java 17 program
(javac H.java && java H) printed ``s.hashCode()`` and ``Math.abs(s.hashCode())`` for
each string; they are hard-coded here so the tests need no JVM.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered_core.codec import (
    build_index_key,
    encode_cq_unit,
    decode_cq_unit,
    index_key_hash,
    java_string_hash,
    tags_hash_code,
)

# (string, Java hashCode) as printed by the JVM.
JAVA_HASHES = [
    ("", 0),
    ("hello", 99162322),
    ("TopicTest#MessageKey", 638347386),
    ("TagA", 2598919),
    ("a", 97),
    ("\u03a9", 937),
    ("\u65e5\u672c\u8a9e", 25921943),
    ("\U0001F600", 1772899),  # one code point, two UTF-16 units \uD83D\uDE00
    ("tag\U0001F600x", -826375781),
    ("polygenelubricants", -2147483648),
    ("TopicTest#DV[XZAX", -2147483648),
    ("\ud800", 55296),  # a lone surrogate is one code unit
    ("z" * 1000, 1978296576),
    ("orders#o-1", 772470709),
    ("caf\u00e9#\u00fcber", 1451160373),
]


@pytest.mark.parametrize("text,expected", JAVA_HASHES)
def test_java_string_hash_matches_the_jvm(text, expected):
    assert java_string_hash(text) == expected


def test_digest_vector_for_index_keys():
    assert build_index_key("TopicTest", "MessageKey") == "TopicTest#MessageKey"
    assert index_key_hash("TopicTest", "MessageKey") == 638347386


# (topic, key, Java hashCode of topic#key, Java Math.abs of it), measured on the JVM.
JAVA_INDEX_HASHES = [
    ("orders", "order-0-xyz", -1697257825, 1697257825),
    ("orders", "order-1-xyz", -1696334304, 1696334304),
    ("orders", "\u00fc\U0001F600", 774377665, 774377665),
    ("caf\u00e9", "\u00fcber", 1451160373, 1451160373),
    ("orders", "o-1", 772470709, 772470709),
]


@pytest.mark.parametrize("topic,key,java_hash,java_abs", JAVA_INDEX_HASHES)
def test_index_hash_is_abs_of_hashcode(topic, key, java_hash, java_abs):
    assert java_string_hash(build_index_key(topic, key)) == java_hash
    assert index_key_hash(topic, key) == java_abs


def test_index_hash_of_int_min_value_is_zero_not_negative():
    # Java's Math.abs(Integer.MIN_VALUE) is still negative (a negative slot); we map it to 0.
    assert java_string_hash("TopicTest#DV[XZAX") == -(2**31)
    assert index_key_hash("TopicTest", "DV[XZAX") == 0


@given(st.text(max_size=40), st.text(max_size=40))
def test_index_hash_is_never_negative(topic, key):
    assert 0 <= index_key_hash(topic, key) <= 2**31 - 1


def test_tags_hash_code():
    assert tags_hash_code(None) == 0
    assert tags_hash_code("") == 0
    assert tags_hash_code("TagA") == 2598919
    assert tags_hash_code("tag\U0001F600x") == -826375781


def test_negative_tags_code_is_sign_extended_in_the_unit():
    code = tags_hash_code("tag\U0001F600x")
    unit = encode_cq_unit(0, 1, code)
    assert unit[12:] == (code & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")
    assert unit[12:16] == b"\xff\xff\xff\xff"
    assert decode_cq_unit(unit).tags_code == -826375781


@given(st.text(max_size=50))
def test_hash_is_a_signed_32_bit_int(text):
    h = java_string_hash(text)
    assert -(2**31) <= h < 2**31
    # the recurrence h(s + c) = 31*h(s) + c (mod 2^32) over UTF-16 units
    if text:
        units = text.encode("utf-16-be", "surrogatepass")
        last = int.from_bytes(units[-2:], "big")
        prefix = units[:-2].decode("utf-16-be", "surrogatepass")
        assert (31 * java_string_hash(prefix) + last - h) % 2**32 == 0
