"""Java ``String.hashCode`` and the two RocketMQ hashes built on it.

``String.hashCode`` is ``s[0]*31^(n-1) + ... + s[n-1]`` over the string's UTF-16 code
units with 32-bit signed overflow, so a character outside the BMP counts as its two
surrogates, and a lone surrogate (legal in Java strings and Python ``str``) as itself.
"""

from __future__ import annotations

import functools
import operator
import struct

INT_MIN_VALUE = -(1 << 31)


@functools.lru_cache(maxsize=256)
def _powers(n: int) -> tuple[int, ...]:
    """``31**(n-1-i) mod 2**32`` for i in 0..n-1: the weight of code unit i in a hash of n units."""
    out = [1] * n
    for i in range(n - 2, -1, -1):
        out[i] = (out[i + 1] * 31) & 0xFFFFFFFF
    return tuple(out)


_mul = operator.mul


def _units(s: str) -> "bytes | tuple[int, ...]":
    """The UTF-16 code units of ``s`` (its bytes when ASCII)."""
    if s.isascii():
        return s.encode("ascii")
    data = s.encode("utf-16-be", "surrogatepass")
    return struct.unpack(f">{len(data) // 2}H", data)


def _unsigned_hash(units: "bytes | tuple[int, ...]") -> int:
    # sum(units[i] * 31**(n-1-i)) mod 2**32, the products summed in C (no per-unit bytecode)
    return sum(map(_mul, units, _powers(len(units)))) & 0xFFFFFFFF


def java_string_hash(s: str) -> int:
    """Java's ``s.hashCode()``: a signed 32-bit int."""
    h = _unsigned_hash(_units(s))
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=1024)
def _index_prefix_hash(topic: str) -> int:
    """The unsigned hash of ``topic + "#"``: every key of the topic continues from it."""
    return _unsigned_hash(_units(build_index_key(topic, "")))


@functools.lru_cache(maxsize=4096)
def tags_hash_code(tags: str | None) -> int:
    """The consume-queue ``tagsCode`` of a tags string (RocketMQ ``tagsString2tagsCode``):
    0 for no or empty tags, else the signed ``hashCode`` (sign-extended to the 8-byte
    field by the unit encoder)."""
    if not tags:
        return 0
    return java_string_hash(tags)


def build_index_key(topic: str, key: str) -> str:
    """The string an index entry hashes: ``topic + "#" + key``."""
    return f"{topic}#{key}"


def index_key_hash(topic: str, key: str) -> int:
    """Index hash of a message key: ``abs(hashCode(topic#key))``, always in 0..2^31-1.

    Java's ``Math.abs(Integer.MIN_VALUE)`` stays negative, which the tiered index once
    used as-is (a negative hash, a negative slot). Here that one value maps to 0, which
    is what RocketMQ's local ``IndexFile`` does and what the later tiered fix
    (``& 0x7FFFFFFF``) yields, so every other key hashes exactly as in RocketMQ.
    """
    units = _units(key)
    # hashCode(a + b) = hashCode(a) * 31**len(b) + hashCode(b), modulo 2**32
    h = (_index_prefix_hash(topic) * pow(31, len(units), 1 << 32) + _unsigned_hash(units)) & 0xFFFFFFFF
    if h & 0x80000000:
        h -= 1 << 32
    return 0 if h == INT_MIN_VALUE else abs(h)


__all__ = [
    "INT_MIN_VALUE",
    "java_string_hash",
    "tags_hash_code",
    "build_index_key",
    "index_key_hash",
]
