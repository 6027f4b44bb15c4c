"""The compiled core (tiered_core._speedups) against its oracles, the pure-Python codec.

Random valid input must give equal results; random corruptions (bit flips, truncations,
units that point elsewhere, wrong expectations) must give the same exception -- type,
code, message and context -- or the same ``UnitCheck`` (positions of the good units and
the first bad unit's error). Skipped, saying why, when the extension is not built; but
under ``CI`` on a machine with a C compiler a missing extension fails.
"""

from __future__ import annotations

import bisect
import os
import shlex
import shutil
import subprocess
import zlib

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tiered_core.codec import _impl
from tiered_core.codec.checks import PropCrcPolicy, UnitCheck
from tiered_core.codec.consume_queue import ConsumeQueueUnit
from tiered_core.codec.hashing import tags_hash_code
from tiered_core.codec.checks import scan_flags
from tiered_core.codec.dispatch_batch import GroupBuild
from tiered_core.codec.message import _EXT_FIELDS, MAGIC_V1, MAGIC_V2, Message, MessageExt, MessageVersion

pure = _impl.pure
compiled = _impl.load_compiled()


def _compiler_present() -> bool:
    """A C compiler that runs (``CC=false`` simulates a machine without one)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return False
    try:
        return subprocess.run([*shlex.split(cc), "--version"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, ValueError, subprocess.SubprocessError):
        return False


_NOT_BUILT = ("the compiled core (tiered_core._speedups._core) is not built: no C compiler or "
              "Cython at install time (`make setup` builds it); the pure-Python path is in use")
_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")

# Not built: skip, saying why -- unless this is CI with a working C compiler, where every test
# then fails saying the extension is missing.
_MUST_HAVE_CORE = compiled is None and _CI and _compiler_present()
pytestmark = pytest.mark.skipif(compiled is None and not _MUST_HAVE_CORE, reason=_NOT_BUILT)

SETTINGS = settings(max_examples=int(os.environ.get("TIERED_SPEEDUPS_EXAMPLES", "120")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_compiled_core_is_built():
    """Under CI with a working compiler the extension must be there (make builds it)."""
    if compiled is None:
        pytest.fail(f"CI with a C compiler, but {_NOT_BUILT}")


# -- comparing outcomes ----------------------------------------------------------------------


def _norm_exc(exc: BaseException | None):
    if exc is None:
        return None
    return (type(exc), str(exc), getattr(exc, "context", None))


def _field(obj, name):
    try:
        return ("ok", getattr(obj, name))
    except Exception as exc:  # a lazy field of bad bytes
        return ("raise", _norm_exc(exc))


def _norm(value):
    if type(value) is bytearray:  # (equal to bytes of the same content: compare the type too)
        return ("bytearray", bytes(value))
    if isinstance(value, UnitCheck):
        return ("UnitCheck", list(value.positions), _norm_exc(value.error))
    if isinstance(value, GroupBuild):
        return ("GroupBuild", value.count, type(value.data), bytes(value.data), type(value.units),
                bytes(value.units), value.timestamps, value.keys, _norm_exc(value.error))
    if isinstance(value, MessageExt):
        return ("MessageExt", type(value), tuple(_field(value, name) for name in (*_EXT_FIELDS, "uniq_key", "msg_id")))
    return value


def outcome(fn, *args, **kw):
    try:
        return ("ok", _norm(fn(*args, **kw)))
    except Exception as exc:  # noqa: BLE001 - the point is to compare whatever is raised
        return ("raise", _norm_exc(exc))


_STATS: dict | None = {} if os.environ.get("TIERED_SPEEDUPS_STATS") else None


@pytest.fixture(scope="module", autouse=True)
def _print_stats():
    yield
    if _STATS is not None:
        for key in sorted(_STATS, key=str):
            print(key, _STATS[key])


class Fresh:
    """An argument made anew for each implementation (an iterator is consumed by the first)."""

    def __init__(self, make):
        self.make = make


def _fresh(args, kw):
    return ([a.make() if isinstance(a, Fresh) else a for a in args],
            {k: v.make() if isinstance(v, Fresh) else v for k, v in kw.items()})


def same(name: str, *args, **kw):
    """Both implementations of kernel ``name`` on the same input: equal outcomes."""
    if compiled is None:
        pytest.fail(f"CI with a C compiler, but {_NOT_BUILT}")
    a, k = _fresh(args, kw)
    expected = outcome(getattr(pure, name), *a, **k)
    a, k = _fresh(args, kw)
    actual = outcome(getattr(compiled, name), *a, **k)
    if _STATS is not None:
        if expected[0] == "raise":
            key = (name, "raise", expected[1][2].get("reason") if expected[1][2] else expected[1][0].__name__)
        elif isinstance(expected[1], tuple) and expected[1][0] == "UnitCheck" and expected[1][2]:
            key = (name, "error", expected[1][2][2]["reason"])
        else:
            key = (name, "ok")
        _STATS[key] = _STATS.get(key, 0) + 1
    assert actual == expected, f"{name}: compiled {actual!r} != pure {expected!r}"
    return expected


# -- strategies ------------------------------------------------------------------------------

words = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=8)
uwords = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Cc")), min_size=1, max_size=6)
hosts = st.sampled_from([("127.0.0.1", 0), ("10.1.2.3", 10911), ("::1", 8080), ("fe80::1:2", 65535)])
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)


@st.composite
def messages(draw, topic=None):
    return Message(
        topic=topic or draw(st.one_of(words, uwords)),
        body=draw(st.binary(max_size=300)),
        keys=draw(st.lists(st.one_of(words, uwords), max_size=3)),
        tags=draw(st.none() | words | uwords),
        properties=draw(st.dictionaries(st.one_of(words, uwords), st.one_of(words, uwords), max_size=3)),
        flag=draw(int32),
        born_timestamp=draw(st.integers(0, 1 << 45)),
        born_host=draw(hosts),
        sys_flag=draw(st.sampled_from([0, 1, 2, 4, 0x30, 0x100])),
        reconsume_times=draw(st.integers(0, 20)),
        prepared_transaction_offset=draw(st.integers(0, 1 << 40)),
    )


@st.composite
def batches(draw):
    """Back-to-back messages of one queue, their units, and where the buffer starts."""
    topic = draw(st.one_of(words, uwords, st.just("SCHEDULE_TOPIC_XXXX")))
    queue_id = draw(st.integers(0, 16))
    q0 = draw(st.integers(0, 1 << 40))
    base = draw(st.integers(0, 1 << 40))
    prop_crc = draw(st.booleans())
    n = draw(st.integers(1, 6))
    buf = bytearray()
    units = []
    for i in range(n):
        msg = draw(messages(topic=topic))
        raw = pure.encode_message(msg, queue_id=queue_id, queue_offset=q0 + i,
                                  store_timestamp=draw(st.integers(0, 1 << 45)),
                                  physical_offset=base + len(buf), store_host=draw(hosts),
                                  version=draw(st.sampled_from([None, 1, 2])), prop_crc=prop_crc)
        tags_code = tags_hash_code(msg.tags) if draw(st.booleans()) else 0
        units.append(ConsumeQueueUnit(base + len(buf), len(raw), tags_code))
        buf += raw
    return topic, queue_id, q0, base, units, bytes(buf)


@st.composite
def corrupted(draw, data: bytes) -> bytes:
    kind = draw(st.sampled_from(["flip", "flip", "flip", "truncate", "byte", "none"]))
    if kind == "none" or not data:
        return data
    out = bytearray(data)
    if kind == "flip":
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(out) - 1))
            out[i] ^= 1 << draw(st.integers(0, 7))
    elif kind == "byte":
        i = draw(st.integers(0, len(out) - 1))
        out[i] = draw(st.integers(0, 255))
    else:
        out = out[:draw(st.integers(0, len(out) - 1))]
    return bytes(out)


@st.composite
def bent_units(draw, units):
    """The units, maybe one pointing at other bytes or with another size/tags code."""
    units = list(units)
    if draw(st.booleans()):
        i = draw(st.integers(0, len(units) - 1))
        off, size, tags = units[i]
        what = draw(st.sampled_from(["offset", "size", "tags", "huge"]))
        if what == "offset":
            off += draw(st.integers(-40, 40))
        elif what == "size":
            size += draw(st.integers(-40, 40))
        elif what == "tags":
            tags = draw(st.one_of(int32, int64))
        else:
            off = draw(st.sampled_from([-1, 1 << 63, -(1 << 70)]))
        units[i] = ConsumeQueueUnit(off, size, tags)
    return units


policies = st.sampled_from(list(PropCrcPolicy) + ["ignore", "require"])


# -- split + validate ------------------------------------------------------------------------


@SETTINGS
@given(batches())
def test_check_units_valid_batches_agree(batch):
    topic, queue_id, q0, base, units, buf = batch
    for prop_crc in PropCrcPolicy:
        result = same("check_units", units, buf, base, topic=topic, queue_id=queue_id, queue_offset=q0,
                      prop_crc=prop_crc)
        if prop_crc is not PropCrcPolicy.REQUIRE:
            assert result[1][2] is None and len(result[1][1]) == len(units)


@SETTINGS
@given(st.data(), batches())
def test_check_units_corruptions_agree(data, batch):
    topic, queue_id, q0, base, units, buf = batch
    buf = data.draw(corrupted(buf))
    units = data.draw(bent_units(units))
    kw = dict(topic=data.draw(st.sampled_from([topic, topic + "x", "SCHEDULE_TOPIC_XXXX"])),
              queue_id=data.draw(st.sampled_from([queue_id, queue_id + 1, 1 << 40])),
              queue_offset=data.draw(st.sampled_from([q0, q0 + 1, None, -1])),
              verify_crc=data.draw(st.booleans()), prop_crc=data.draw(policies),
              check_tags=data.draw(st.booleans()))
    buf_offset = data.draw(st.sampled_from([base, None, base - 1]))
    view = data.draw(st.sampled_from([bytes, bytearray, memoryview]))(buf)
    same("check_units", units, view, buf_offset, **kw)
    same("check_units", Fresh(lambda: iter(units)), view, buf_offset, **kw)


def _three_messages(prop_crc: bool):
    buf = bytearray()
    units = []
    for i, (msg, host) in enumerate([
        (Message("TopicA", b"body-0", keys=["k0", "k1"], tags="tagA", properties={"UNIQ_KEY": "u0"}),
         ("127.0.0.1", 1)),
        (Message("TopicA", b"\xff" * 40, tags="t\u00e9", properties={"p\u00e9": "v"}, born_host=("::1", 2)),
         ("fe80::1", 3)),
        (Message("TopicA", b"", tags=None), ("10.0.0.1", 4)),
    ]):
        raw = pure.encode_message(msg, queue_id=5, queue_offset=100 + i, store_timestamp=7 + i,
                                  physical_offset=1000 + len(buf), store_host=host, prop_crc=prop_crc)
        units.append(ConsumeQueueUnit(1000 + len(buf), len(raw), tags_hash_code(msg.tags)))
        buf += raw
    return units, bytes(buf)


@pytest.mark.parametrize("prop_crc", [False, True])
def test_every_single_bit_flip_agrees(prop_crc):
    """Each byte of three messages, flipped: every check's failure path, same first bad unit."""
    units, buf = _three_messages(prop_crc)
    reasons = set()
    for i in range(len(buf)):
        for bit in (0, 7):
            bad = bytearray(buf)
            bad[i] ^= 1 << bit
            for policy in (PropCrcPolicy.IGNORE, PropCrcPolicy.IF_PRESENT, PropCrcPolicy.REQUIRE):
                got = same("check_units", units, bad, 1000, topic="TopicA", queue_id=5, queue_offset=100,
                           prop_crc=policy)
                if got[1][2]:
                    reasons.add(got[1][2][2]["reason"])
            for unit in units:
                same("decode_message", bad, unit.commitlog_offset - 1000, base_offset=1000)
                same("validate_message", bad, unit.commitlog_offset - 1000, base_offset=1000)
    expected = {"bad_magic", "blank", "size_mismatch", "length_mismatch", "crc_mismatch", "bad_encoding",
                "topic_mismatch", "queue_id_mismatch", "queue_offset_mismatch", "physical_offset_mismatch",
                "tags_mismatch"}
    expected |= {"prop_crc_mismatch"} if prop_crc else {"prop_crc_missing"}
    assert expected - reasons <= {"blank"}, expected - reasons
    for cut in range(len(buf) + 1):  # every truncation
        same("check_units", units, buf[:cut], 1000, topic="TopicA", queue_id=5, queue_offset=100)


def test_check_units_odd_arguments_agree():
    raw = pure.encode_message(Message("T", b"x"), queue_id=0, queue_offset=0, store_timestamp=1)
    unit = ConsumeQueueUnit(0, len(raw), 0)
    for topic in ("T", b"T", None):
        same("check_units", [unit], raw, topic=topic, queue_id=0, queue_offset=0)
    same("check_units", [], raw, topic="T", queue_id=0, queue_offset=0, prop_crc="nonsense")
    same("check_units", [unit], raw, topic="T", queue_id=0, queue_offset=0, prop_crc="nonsense")
    same("check_units", [(0, len(raw))], raw, topic="T", queue_id=0, queue_offset=0)
    same("check_units", [unit], "not a buffer", topic="T", queue_id=0, queue_offset=0)
    same("check_units", [unit], memoryview(raw[:len(raw) // 4 * 4]).cast("I"), topic="T", queue_id=0,
         queue_offset=0)
    same("check_units", [unit], raw, topic="T", queue_id=0.0, queue_offset=0.0)


# -- decode, validate, peek --------------------------------------------------------------------


@SETTINGS
@given(st.data(), batches())
def test_decode_and_validate_agree_on_every_message_and_corruption(data, batch):
    _topic, _queue_id, _q0, base, units, buf = batch
    buf = data.draw(corrupted(buf))
    verify = data.draw(st.booleans())
    for unit in units:
        pos = unit.commitlog_offset - base
        for name in ("decode_message", "validate_message"):
            same(name, buf, pos, verify_crc=verify, base_offset=base)
        for name in ("peek_total_size", "peek_magic", "peek_queue_id", "peek_queue_offset",
                     "peek_physical_offset", "peek_sys_flag", "peek_born_timestamp",
                     "peek_store_timestamp"):
            same(name, buf, pos)
    same("decode_message", memoryview(buf), data.draw(st.integers(-2, len(buf) + 2)))
    same("decode_message", bytearray(buf), data.draw(st.sampled_from([0, True, 1.0, None])))


@SETTINGS
@given(st.binary(max_size=120), st.integers(-2, 130))
def test_peeks_on_random_bytes_agree(raw, offset):
    head = bytearray(raw)
    if len(head) >= 8 and offset % 2 == 0:  # often a real magic, so the field reads happen
        head[4:8] = (MAGIC_V1 if offset % 4 else MAGIC_V2).to_bytes(4, "big")
    for name in ("peek_total_size", "peek_magic", "peek_queue_id", "peek_queue_offset",
                 "peek_physical_offset", "peek_sys_flag", "peek_born_timestamp", "peek_store_timestamp",
                 "decode_message", "validate_message"):
        same(name, bytes(head), 0)
        same(name, bytes(head), offset)


# -- encode ----------------------------------------------------------------------------------


bad_strings = st.sampled_from(["", "a b", "x\x01y", "x\x02", "\ud800", 7, None])


@SETTINGS
@given(st.data(), messages())
def test_encode_message_agrees(data, msg):
    if data.draw(st.booleans()):  # sometimes something the encoder must refuse
        field = data.draw(st.sampled_from(["keys", "tags", "properties", "topic", "flag", "body", "host"]))
        bad = data.draw(bad_strings)
        if field == "keys":
            msg.keys = data.draw(st.sampled_from([[bad], "a  b c", ("k",), {"k"}]))
        elif field == "tags":
            msg.tags = bad
        elif field == "properties":
            msg.properties = {"n": bad} if data.draw(st.booleans()) else {bad: "v"}
        elif field == "topic":
            msg.topic = data.draw(st.sampled_from([bad, "t" * 128, "t" * 40000]))
        elif field == "flag":
            msg.flag = data.draw(st.sampled_from([1 << 31, -(1 << 31) - 1, 1.5, True]))
        elif field == "body":
            msg.body = data.draw(st.sampled_from([bytearray(b"ab"), memoryview(b"cd"), "str", None]))
        else:
            msg.born_host = data.draw(st.sampled_from([("nohost", 1), ("1.2.3.4", 70000), ["1.2.3.4", 1], 5]))
    kw = dict(queue_id=data.draw(st.one_of(int32, st.sampled_from([1 << 31, True]))),
              queue_offset=data.draw(st.one_of(int64, st.just(1 << 63))),
              store_timestamp=data.draw(st.integers(0, 1 << 45)),
              physical_offset=data.draw(st.integers(0, 1 << 50)),
              store_host=data.draw(hosts),
              sys_flag=data.draw(st.sampled_from([None, 0, 0x30, 1 << 31, True])),
              version=data.draw(st.sampled_from([None, 1, 2, MessageVersion.V2, 3, True])),
              prop_crc=data.draw(st.booleans()))
    same("encode_message", msg, **kw)
    same("encode_message_buffer", msg, **kw)


def test_encode_message_buffer_defaults_agree():
    """The put path's encoder: a new bytearray each call, the bytes of encode_message."""
    msg = Message("T", b"body", keys=["k"], tags="t", properties={"a": "b"})
    for prop_crc in (False, True):
        kw = dict(queue_id=3, queue_offset=9, store_timestamp=11, prop_crc=prop_crc)
        got = same("encode_message_buffer", msg, **kw)
        assert got == ("ok", ("bytearray", pure.encode_message(msg, **kw)))
        first = compiled.encode_message_buffer(msg, **kw)
        assert compiled.encode_message_buffer(msg, **kw) is not first


# -- consume-queue units, index items, crc -------------------------------------------------------


wide = st.one_of(int64, st.integers(-(1 << 70), 1 << 70), st.sampled_from([True, 0, 1.0, None]))


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 1 << 62), st.integers(1, (1 << 31) - 1), int64), max_size=8),
       st.tuples(wide, wide, wide))
def test_cq_units_agree(units, odd):
    for unit in units + [odd]:
        same("encode_cq_unit", *unit)
    same("encode_cq_units", units)
    same("encode_cq_units", [ConsumeQueueUnit(*u) for u in units])
    same("encode_cq_units", Fresh(lambda: iter(units + [odd])))
    same("encode_cq_units", units + [(1, 2)])
    raw = pure.encode_cq_units(units)
    same("decode_cq_units", raw)
    same("decode_cq_units", bytearray(raw), base_offset=40)
    same("decode_cq_units", memoryview(raw))
    same("decode_cq_units", raw + b"\x00", base_offset=7)
    if raw:
        same("decode_cq_units", memoryview(raw).cast("I"))


@SETTINGS
@given(st.lists(st.one_of(int32, wide), min_size=7, max_size=7), st.booleans())
def test_pack_item_agrees(fields, with_link):
    same("pack_item", *(fields if with_link else fields[:6]))


@SETTINGS
@given(st.binary(max_size=600), st.one_of(st.integers(-700, 700), st.just(1 << 70)),
       st.none() | st.integers(-700, 700) | st.just(-(1 << 70)))
def test_java_crc32_agrees(raw, start, end):
    same("java_crc32", raw)
    same("java_crc32", raw, start, end)
    same("java_crc32", memoryview(raw), start)
    same("java_crc32", bytearray(raw), 0, end)


def test_java_crc32_odd_buffers_agree():
    same("java_crc32", "text")
    same("java_crc32", memoryview(b"abcdefgh").cast("I"), 1)
    same("java_crc32", memoryview(b"abcdefgh")[::2])
    same("java_crc32", b"abc", 1.0)


def _crc_kernel():
    from tiered_core._speedups import _core

    return _core


@pytest.mark.parametrize("clmul", [True, False], ids=["clmul", "zlib"])
def test_crc_kernel_equals_zlib_at_every_length_and_alignment(clmul):
    """The core's CRC-32 (the carry-less-multiplication fold where the CPU has it, zlib's code
    for the tail and elsewhere) is zlib.crc32 bit for bit: every length up to 700 bytes (the
    fold starts at 64, steps by 16 and 64), 16 alignments, several starting values."""
    core = _crc_kernel()
    if clmul:  # on a CPU with the instructions, the carry-less path is the one under test
        flags = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []
        if "pclmulqdq" in flags and "sse4_1" in flags:
            assert core.crc32_uses_clmul()
        elif not core.crc32_uses_clmul():
            pytest.skip("this CPU has no PCLMULQDQ/SSE4.1: the carry-less path cannot run here")
    raw = bytes(range(256)) * 3 + os.urandom(800)
    for start in range(16):
        for n in range(701):
            data = raw[start:start + n]
            for init in (0, 0xFFFFFFFF, 0x12345678):
                assert core.zlib_crc32(data, init, clmul) == zlib.crc32(data, init), (clmul, start, n, init)


@SETTINGS
@given(st.binary(max_size=5000), st.integers(0, 0xFFFFFFFF))
def test_crc_kernel_equals_zlib_on_random_input(raw, init):
    core = _crc_kernel()
    assert core.zlib_crc32(raw, init) == zlib.crc32(raw, init)
    assert core.zlib_crc32(memoryview(raw)[1:], init) == zlib.crc32(raw[1:], init)


def test_crc_kernel_on_long_buffers():
    core = _crc_kernel()
    big = os.urandom(3 << 20) + b"\x00" * 4099
    assert core.zlib_crc32(big) == zlib.crc32(big)
    assert core.zlib_crc32(big, 0, False) == zlib.crc32(big)


# -- the batch kernels: scan_units, build_group, lazy_message_ext -----------------------------


def _scan_args(units, buf, base, topic, queue_id, queue_offset, verify_crc=True,
               prop_crc=PropCrcPolicy.IGNORE, check_tags=True):
    flags = scan_flags(topic, queue_offset is not None, verify_crc, prop_crc, check_tags)
    return ([tuple(u) for u in units], buf, base, topic.encode("utf-8", "surrogatepass"), queue_id,
            -1 if queue_offset is None else queue_offset, flags)


def _group_args(units, base, tiered):
    return (list(u[0] - base for u in units), [u[0] for u in units], [u[1] for u in units],
            [u[2] for u in units], tiered)


@SETTINGS
@given(batches())
def test_scan_units_valid_batches_agree(batch):
    topic, queue_id, q0, base, units, buf = batch
    for prop_crc in PropCrcPolicy:
        result = same("scan_units", *_scan_args(units, buf, base, topic, queue_id, q0, prop_crc=prop_crc))
        if prop_crc is not PropCrcPolicy.REQUIRE:
            assert result[1] == (len(units), None, "")


@SETTINGS
@given(st.data(), batches())
def test_scan_units_corruptions_agree(data, batch):
    topic, queue_id, q0, base, units, buf = batch
    buf = data.draw(corrupted(buf))
    units = data.draw(bent_units(units))
    asked = data.draw(st.sampled_from([topic, topic + "x", "SCHEDULE_TOPIC_XXXX"]))
    args = _scan_args(units, data.draw(st.sampled_from([bytes, bytearray, memoryview]))(buf),
                      data.draw(st.sampled_from([base, base - 1, base + 1])), asked,
                      data.draw(st.sampled_from([queue_id, queue_id + 1, 1 << 40])),
                      data.draw(st.sampled_from([q0, q0 + 1, None])), verify_crc=data.draw(st.booleans()),
                      prop_crc=data.draw(policies), check_tags=data.draw(st.booleans()))
    same("scan_units", *args)
    same("scan_units", Fresh(lambda: iter(args[0])), *args[1:])


def test_scan_units_odd_arguments_agree():
    raw = pure.encode_message(Message("T", b"x"), queue_id=0, queue_offset=0, store_timestamp=1)
    unit = (0, len(raw), 0)
    same("scan_units", [unit], raw, 0, b"T", 0, 0, 7)
    same("scan_units", [], raw, 0, b"T", 0, 0, 7)
    same("scan_units", [unit], raw, 0, "T", 0, 0, 7)
    same("scan_units", [unit, (0, len(raw))], raw, 0, b"T", 0, 0, 7)
    same("scan_units", [unit, (len(raw), 1 << 70, 0)], raw, 0, b"T", 0, 0, 7)
    same("scan_units", [unit], "not a buffer", 0, b"T", 0, 0, 7)
    same("scan_units", [unit], memoryview(raw[:len(raw) // 4 * 4]).cast("I"), 0, b"T", 0, 0, 7)
    same("scan_units", [unit], raw, 0.0, b"T", 0, 0, 7)
    same("scan_units", [unit], raw, 0, b"T", 0, 1 << 64, 7)
    same("scan_units", [unit], raw, 0, b"T", 1 << 40, 0, 7)
    same("scan_units", [unit], raw, 0, b"T", 0, 0, 1 << 40)


def _cq_bytes(units) -> bytes | None:
    """``units`` as consume-queue bytes; None when one does not fit a unit's fields."""
    try:
        return b"".join(int(u[0]).to_bytes(8, "big", signed=True) + int(u[1]).to_bytes(4, "big", signed=True)
                        + int(u[2]).to_bytes(8, "big", signed=True) for u in units)
    except (OverflowError, IndexError, TypeError):
        return None


@SETTINGS
@given(st.data(), batches())
def test_scan_cq_units_agrees(data, batch):
    """The scan from consume-queue bytes: the same outcome on both paths, and the same as
    scan_units of the decoded units."""
    topic, queue_id, q0, base, units, buf = batch
    if data.draw(st.booleans()):
        buf = data.draw(corrupted(buf))
        units = data.draw(bent_units(units))
    cq = _cq_bytes(units)
    assume(cq is not None)
    args = _scan_args(units, buf, base, topic, queue_id, data.draw(st.sampled_from([q0, q0 + 1, None])),
                      prop_crc=data.draw(policies))
    got = same("scan_cq_units", cq + bytes(data.draw(st.integers(0, 19))), *args[1:])
    assert got == same("scan_units", [tuple(u) for u in units], *args[1:])


def test_scan_cq_units_odd_arguments_agree():
    raw = pure.encode_message(Message("T", b"x"), queue_id=0, queue_offset=0, store_timestamp=1)
    cq = _cq_bytes([(0, len(raw), 0)])
    for args in [(cq, raw, 0, b"T", 0, 0, 7), (b"", raw, 0, b"T", 0, 0, 7), (cq[:19], raw, 0, b"T", 0, 0, 7),
                 (bytearray(cq), raw, 0, b"T", 0, 0, 7), (cq, raw, 0, "T", 0, 0, 7),
                 (cq, "not a buffer", 0, b"T", 0, 0, 7), (cq, raw, 0.0, b"T", 0, 0, 7),
                 (cq, raw, 0, b"T", 0, 1 << 64, 7), (cq, raw, 0, b"T", 0, 0, 1 << 40)]:
        same("scan_cq_units", *args)


@SETTINGS
@given(st.data(), st.lists(st.tuples(st.integers(0, 1 << 40), st.integers(1, 5000)), min_size=1, max_size=12))
def test_cq_runs_agree(data, units):
    """How units split into commit-log reads: both paths agree, and each run is what
    SegmentReader.batches's unit-by-unit loop would take."""
    off = units[0][0]
    healthy = data.draw(st.booleans())
    if healthy:
        spans = []
        for _o, size in units:
            spans.append((off, size, 0))
            off += size + data.draw(st.integers(0, 3))
    else:
        spans = [(o, s, 0) for o, s in units]
    cq = _cq_bytes(spans)
    lo = spans[0][0]
    bases = sorted(set(data.draw(st.lists(st.integers(lo - 100, lo + 40000), min_size=1, max_size=4))))
    max_bytes = data.draw(st.integers(1, 20000))
    got = same("cq_runs", cq, bases, max_bytes)
    same("cq_runs", cq, tuple(bases), max_bytes)
    if got[1] is None:
        return
    assert [r[0] for r in got[1]] == [0] + [r[1] for r in got[1][:-1]] and got[1][-1][1] == len(spans)
    for i, j, first, end in got[1]:
        k = bisect.bisect_right(bases, first)
        limit = min(first + max_bytes, bases[k]) if k < len(bases) else first + max_bytes
        assert first == spans[i][0] and end == spans[j - 1][0] + spans[j - 1][1]
        assert j == i + 1 or end <= limit
        assert j == len(spans) or spans[j][0] + spans[j][1] > limit


def test_cq_runs_odd_arguments_agree():
    cq = _cq_bytes([(100, 10, 0), (110, 10, 0)])
    for args in [(cq, [0], 100), (cq, [], 100), (cq, [200], 100), (cq, [0], 0), (cq, [0], 1.5),
                 (cq, [0.5], 100), (b"", [0], 100), (bytearray(cq), [0], 100), (cq, None, 100),
                 (_cq_bytes([(0x7FFFFFFFFFFFFFF0, 10, 0)]), [0], 100)]:
        same("cq_runs", *args)


def _big_batch(n=90, body=1000, prop_crc=False):
    buf = bytearray()
    units = []
    for i in range(n):
        msg = Message("Big", bytes([i % 251]) * body, keys=[f"k{i}"], tags="t\u00e9" if i % 7 == 0 else "tg",
                      properties={"UNIQ_KEY": f"U{i}", "p\u00e9" if i % 5 == 0 else "p": "v"})
        raw = pure.encode_message(msg, queue_id=1, queue_offset=10 + i, store_timestamp=99 + i,
                                  physical_offset=500 + len(buf), prop_crc=prop_crc)
        units.append(ConsumeQueueUnit(500 + len(buf), len(raw), tags_hash_code(msg.tags)))
        buf += raw
    return units, bytes(buf)


@pytest.mark.parametrize("prop_crc", [False, True])
def test_scan_units_long_batches_agree(prop_crc):
    """Batches long enough to be checked with the GIL released, one byte bad at a time."""
    units, buf = _big_batch(prop_crc=prop_crc)
    policy = PropCrcPolicy.IF_PRESENT if prop_crc else PropCrcPolicy.IGNORE
    assert same("scan_units", *_scan_args(units, buf, 500, "Big", 1, 10, prop_crc=policy))[1][1] is None
    for i in range(7, len(buf), len(buf) // 97):
        bad = bytearray(buf)
        bad[i] ^= 0x10
        args = _scan_args(units, bytes(bad), 500, "Big", 1, 10, prop_crc=policy)
        assert same("scan_units", *args) == same("scan_cq_units", _cq_bytes(units), *args[1:])


@SETTINGS
@given(st.data(), batches())
def test_build_group_agrees(data, batch):
    _topic, _queue_id, _q0, base, units, buf = batch
    tiered = data.draw(st.integers(0, 1 << 50))
    want_keys = data.draw(st.booleans())
    same("build_group", buf, *_group_args(units, base, tiered), want_keys)
    buf = data.draw(corrupted(buf))
    positions, offsets, sizes, tags, tiered = _group_args(data.draw(bent_units(units)), base, tiered)
    view = data.draw(st.sampled_from([bytes, bytearray, memoryview]))(buf)
    same("build_group", view, positions, offsets, sizes, tags, tiered, want_keys)


def test_build_group_odd_arguments_agree():
    units, buf = _big_batch(n=3, body=10, prop_crc=True)
    positions, offsets, sizes, tags, tiered = _group_args(units, 500, 7)
    same("build_group", buf, positions, offsets, sizes, tags, tiered)
    same("build_group", buf, tuple(positions), offsets, sizes, tags, tiered, 0)
    same("build_group", buf, positions, offsets, sizes, tags, (1 << 63) - 10)
    same("build_group", buf, positions, offsets, sizes, tags, 7.0)
    same("build_group", buf, positions, offsets, sizes, [0, 1 << 64, 0], tiered)
    same("build_group", buf, positions, offsets, [sizes[0], -1, sizes[2]], tags, tiered)
    same("build_group", buf, positions, offsets, sizes[:2], tags, tiered)
    same("build_group", buf, [0, "x", 0], offsets, sizes, tags, tiered)
    same("build_group", buf, iter(positions), offsets, sizes, tags, tiered)
    same("build_group", "not a buffer", positions, offsets, sizes, tags, tiered)
    same("build_group", memoryview(buf[:len(buf) // 4 * 4]).cast("I"), positions, offsets, sizes, tags, tiered)
    same("build_group", buf, [], [], [], [], tiered)


@pytest.mark.parametrize("prop_crc", [False, True])
def test_every_single_bit_flip_agrees_for_the_batch_kernels(prop_crc):
    units, buf = _three_messages(prop_crc)
    for i in range(len(buf)):
        for bit in (0, 7):
            bad = bytearray(buf)
            bad[i] ^= 1 << bit
            bad = bytes(bad)
            for policy in (PropCrcPolicy.IGNORE, PropCrcPolicy.IF_PRESENT, PropCrcPolicy.REQUIRE):
                same("scan_units", *_scan_args(units, bad, 1000, "TopicA", 5, 100, prop_crc=policy))
            same("build_group", bad, *_group_args(units, 1000, 1 << 33))
            same("build_group", bad, *_group_args(units, 1000, 0), False)
    for cut in range(len(buf) + 1):
        same("scan_units", *_scan_args(units, buf[:cut], 1000, "TopicA", 5, 100))
        same("build_group", buf[:cut], *_group_args(units, 1000, 3))


@SETTINGS
@given(st.data(), batches())
def test_lazy_message_ext_agrees(data, batch):
    topic, _queue_id, _q0, base, units, buf = batch
    for unit in units:
        raw = buf[unit[0] - base:unit[0] - base + unit[1]]
        same("lazy_message_ext", raw)
        same("lazy_message_ext", raw, topic)
        assert pure.lazy_message_ext(raw) == pure.decode_message(raw)
        assert compiled.lazy_message_ext(raw, topic) == pure.decode_message(raw)
        bad = data.draw(corrupted(raw))  # not validated: whatever the oracle does, the twin does
        same("lazy_message_ext", bad)
        same("lazy_message_ext", bad, data.draw(st.sampled_from([None, topic, b"x", 3])))
        same("lazy_message_ext", bytearray(raw))


def test_lazy_message_ext_fields_stay_assignable():
    units, buf = _three_messages(True)
    for unit in units:
        raw = buf[unit[0] - 1000:unit[0] - 1000 + unit[1]]
        m = compiled.lazy_message_ext(raw)
        assert m._layout is None  # the fast path filled the slots (the header is unpacked on need)
        m.topic = "other"
        m.properties = {"a": "b"}
        p = pure.lazy_message_ext(raw)
        p.topic = "other"
        p.properties = {"a": "b"}
        assert m == p and m.born_host == p.born_host and m.store_host == p.store_host
        import pickle
        assert pickle.loads(pickle.dumps(m)) == p


_KEY_TEXTS = ["", " ", "a", "a b", " a  b a ", "\x1c", "a\x1fb", "\t", "k\u00e9", "u", "u u", "x\u00a0"]


@pytest.mark.parametrize("uniq", [None, "", "u", " ", "\x1f", "a", "k\u00e9"])
def test_build_group_index_keys_agree(uniq):
    """Every mix of KEYS and UNIQ_KEY values (blank, repeated, whitespace, non-ASCII), also
    repeated or emptied pairs: the index keys are those of the oracle."""
    buf = bytearray()
    for keys_text in [None, *_KEY_TEXTS]:
        props = {"a": "b"}
        if keys_text:
            props["KEYS"] = keys_text
        if uniq:
            props["UNIQ_KEY"] = uniq
        msg = Message("T", b"body", properties=props)
        buf += pure.encode_message(msg, queue_id=0, queue_offset=0, store_timestamp=1, physical_offset=len(buf))
    # hand-made property texts: repeated names, empty values, a name that ends another
    for text in ["KEYS\x01a\x02KEYS\x01b", "KEYS\x01a\x02KEYS\x01", "XKEYS\x01a", "UNIQ_KEY\x01u\x02KEYS\x01u",
                 "UNIQ_KEY\x01\x02KEYS\x01a b", "KEYS\x01a\x02", "\x02KEYS\x01a", "KEYS\x01a\x01b"]:
        raw = bytearray(pure.encode_message(Message("T", b"body"), queue_id=0, queue_offset=0, store_timestamp=1,
                                            physical_offset=len(buf)))
        props_b = text.encode()
        raw[-2:] = len(props_b).to_bytes(2, "big") + props_b
        raw[0:4] = len(raw).to_bytes(4, "big")
        buf += raw
    buf = bytes(buf)
    positions, sizes = [], []
    pos = 0
    while pos < len(buf):
        size = int.from_bytes(buf[pos:pos + 4], "big")
        positions.append(pos)
        sizes.append(size)
        pos += size
    got = same("build_group", buf, positions, positions, sizes, [0] * len(sizes), 0)
    assert got[1][8] is None and got[1][1] == len(sizes)


# -- the key index insert loop -------------------------------------------------------------------

index_keys_st = st.text(st.characters(min_codepoint=1, max_codepoint=0x10FFFF, blacklist_categories=()),
                        min_size=1, max_size=6)


@SETTINGS
@given(st.data(), st.integers(1, 40), st.integers(0, 60))
def test_link_items_agrees(data, slot_count, count):
    slots = bytearray(28 + 8 * slot_count)
    for s in range(slot_count):  # empty, a valid head, garbage past the count, negative
        slots[28 + 8 * s:32 + 8 * s] = data.draw(st.sampled_from(
            [0, data.draw(st.integers(0, max(count, 0))), count + 5, -3])).to_bytes(4, "big", signed=True)
    n = data.draw(st.integers(0, 6))
    keys = [data.draw(st.lists(st.one_of(words, uwords, index_keys_st), max_size=4, unique=True)) for _ in range(n)]
    offsets = [data.draw(int64) for _ in range(n)]
    sizes = [data.draw(int32) for _ in range(n)]
    diffs = [data.draw(int32) for _ in range(n)]
    topic = data.draw(st.one_of(words, uwords, index_keys_st))
    args = (slot_count, count, topic, data.draw(int32), data.draw(int32), keys, offsets, sizes, diffs)
    same("link_items", bytes(slots), *args)
    same("link_items", data.draw(st.sampled_from([bytearray, memoryview]))(slots), *args)


def test_link_items_odd_arguments_agree():
    slots = bytes(28 + 8 * 4)
    keys, offsets, sizes, diffs = [["a", "b"], [], ["c\U0001F600", "\ud800x"]], [1, 2, 3], [10, 20, 30], [0, 1, 2]
    same("link_items", slots, 4, 0, "T", 1, 2, keys, offsets, sizes, diffs)
    same("link_items", slots, 4, (1 << 31) - 2, "T", 1, 2, keys, offsets, sizes, diffs)
    same("link_items", slots, 0, 0, "T", 1, 2, keys, offsets, sizes, diffs)
    same("link_items", slots, 400, 0, "T", 1, 2, keys, offsets, sizes, diffs)
    same("link_items", slots, 4, 0, "T", 1 << 40, 2, keys, offsets, sizes, diffs)
    same("link_items", slots, 4, 0, "T", 1, 2, keys, [1, 2, 1 << 64], sizes, diffs)
    same("link_items", slots, 4, 0, "T", 1, 2, keys, offsets, [10, 20, 1.5], diffs)
    same("link_items", slots, 4, 0, "T", 1, 2, keys, offsets, sizes, diffs[:2])
    same("link_items", slots, 4, 0, "T", 1, 2, [["a", 3]], offsets, sizes, diffs)
    same("link_items", slots, 4, 0, b"T", 1, 2, keys, offsets, sizes, diffs)
    same("link_items", slots, 4, 0, "T", 1, 2, (("a",),), (1,), (2,), (3,))
    same("link_items", "not a buffer", 4, 0, "T", 1, 2, keys, offsets, sizes, diffs)
    same("link_items", slots, 4, 0, "T", 1, 2, iter(keys), offsets, sizes, diffs)


# -- the units of a read ---------------------------------------------------------------------------


@SETTINGS
@given(st.data(), st.lists(st.tuples(st.one_of(st.integers(0, 1 << 40), int64), int32, int64), max_size=12))
def test_cq_span_agrees(data, units):
    if units and data.draw(st.booleans()):  # mostly ascending, back to back, as a queue holds them
        off = units[0][0] % (1 << 40)
        units = [(off + 100 * i, 100, t) for i, (_o, _s, t) in enumerate(units)]
        if data.draw(st.booleans()):
            i = data.draw(st.integers(0, len(units) - 1))
            units[i] = (units[i][0] + data.draw(st.integers(-300, 300)), units[i][1], units[i][2])
    cq = pure.encode_cq_units([ConsumeQueueUnit(*u) for u in units]) if all(
        0 <= o and 0 < s for o, s, _ in units) else b"".join(
        o.to_bytes(8, "big", signed=True) + s.to_bytes(4, "big", signed=True) + t.to_bytes(8, "big", signed=True)
        for o, s, t in units)
    cq += bytes(data.draw(st.integers(0, 19)))  # a partial unit at the end is not one
    max_bytes = data.draw(st.one_of(st.integers(-10, 5000), st.just(1 << 70), st.just(-(1 << 70)), int64))
    same("cq_span", cq, max_bytes)
    same("cq_span", data.draw(st.sampled_from([bytearray, memoryview]))(cq), max_bytes)


def test_cq_span_odd_arguments_agree():
    cq = pure.encode_cq_units([ConsumeQueueUnit(10, 100, 1), ConsumeQueueUnit(110, 100, 2)])
    for args in [(cq, 1.5), (cq, None), ("x", 10), (memoryview(cq).cast("I"), 500), (b"", 10), (cq[:19], 10)]:
        same("cq_span", *args)


@SETTINGS
@given(st.data(), st.lists(st.tuples(st.one_of(st.integers(0, 1 << 40), int64), int32, int64), max_size=12))
def test_cq_units_ends_agrees(data, units):
    if units and data.draw(st.booleans()):  # a healthy queue's units, maybe with one moved or emptied
        off = units[0][0] % (1 << 40)
        gap = data.draw(st.integers(0, 5))
        units = [(off + (100 + gap) * i, 100, t) for i, (_o, _s, t) in enumerate(units)]
        if data.draw(st.booleans()):
            i = data.draw(st.integers(0, len(units) - 1))
            units[i] = (units[i][0] + data.draw(st.integers(-300, 300)), data.draw(st.integers(-1, 200)), units[i][2])
    cq = b"".join(o.to_bytes(8, "big", signed=True) + s.to_bytes(4, "big", signed=True)
                  + t.to_bytes(8, "big", signed=True) for o, s, t in units)
    cq += bytes(data.draw(st.integers(0, 19)))  # a partial unit at the end is not one
    got = same("cq_units_ends", cq)
    same("cq_units_ends", data.draw(st.sampled_from([bytearray, memoryview]))(cq))
    if got[0] == "ok" and units and all(s > 0 for _o, s, _t in units) and \
            all(o + s <= units[k + 1][0] for k, (o, s, _t) in enumerate(units[:-1])):
        assert got[1][1] == [o + s for o, s, _t in units]  # a healthy queue's units: their ends


def test_cq_units_ends_odd_arguments_agree():
    healthy = pure.encode_cq_units([ConsumeQueueUnit(10, 100, 1), ConsumeQueueUnit(110, 100, 2)])
    overflow = (0x7FFFFFFFFFFFFFF0).to_bytes(8, "big") + (100).to_bytes(4, "big") + bytes(8)
    for args in [(healthy,), ("x",), (memoryview(healthy).cast("I"),), (b"",), (healthy[:19],), (overflow,),
                 (None,)]:
        same("cq_units_ends", *args)
    assert pure.cq_units_ends(healthy) == ([(10, 100, 1), (110, 100, 2)], [110, 210])
    assert pure.cq_units_ends(healthy[20:] + healthy[:20])[1] is None  # out of order: no ends


@SETTINGS
@given(st.data(), st.binary(max_size=200), st.integers(-5, 1 << 40))
def test_batch_items_agrees(data, buf, base):
    units = data.draw(st.lists(st.tuples(st.integers(base - 3, base + 210), st.integers(-2, 60), int64), max_size=8))
    q0 = data.draw(st.one_of(st.integers(0, 1 << 40), st.just((1 << 63) - 2), int64))
    same("batch_items", units, buf, base, q0)
    same("batch_items", [ConsumeQueueUnit(*u) for u in units], buf, base, q0)
    same("batch_items", units, data.draw(st.sampled_from([bytearray, memoryview]))(buf), base, q0)


def test_batch_items_odd_arguments_agree():
    for args in [([(0, 1, 2)], b"ab", 0, 0.5), ([(0, 1)], b"ab", 0, 0), ([(0, 1, 2)], b"ab", 0.0, 0),
                 ((((0, 1, 2)),), b"ab", 0, 0), ([[0, 1, 2]], b"ab", 0, 0), ([(1 << 70, 1, 2)], b"ab", 0, 0),
                 ([(0, 1, True)], b"ab", 0, 0), ([], b"", 0, 0)]:
        same("batch_items", *args)


# -- the Arrow columns of the Spark read path (compiled message_columns vs the Arrow-kernel builder)


def _arrow_both(units, buf, base, topic, queue_id, q0, *, from_cq=False, start=0, stop=None):
    """The batch, its record batch by the compiled columns, and by the Arrow-kernel reference.
    The compiled kernels are put in place here: under ``TIERED_PURE_PYTHON=1`` the module's own
    are None, and the comparison would be of the reference with itself. ``from_cq``: the batch
    keeps its units as consume-queue bytes (a segment read's batches), which the compiled
    build reads itself (``message_columns_cq``)."""
    from tiered_core.flat.batch_check import check_batch, check_cq_batch
    from tiered_core.spark.source import arrow_rows as arrow_batch
    from tiered_core.spark.source.schema import arrow_schema

    if from_cq:
        batch = check_cq_batch(_cq_bytes(units), buf, base, topic=topic, queue_id=queue_id, queue_offset=q0)
        assert batch.cq_bytes() is not None
    else:
        batch = check_batch([tuple(u) for u in units], buf, base, topic=topic, queue_id=queue_id, queue_offset=q0)
    schema = arrow_schema()
    chosen = arrow_batch.message_columns, arrow_batch.message_columns_cq
    arrow_batch.message_columns, arrow_batch.message_columns_cq = compiled.message_columns, compiled.message_columns_cq
    try:
        got = arrow_batch.batch_to_arrow(batch, schema, start=start, stop=stop)
    finally:
        arrow_batch.message_columns, arrow_batch.message_columns_cq = chosen
    return batch, got, arrow_batch.batch_to_arrow(batch, schema, start=start, stop=stop, use_compiled=False)


@SETTINGS
@given(batches())
def test_message_columns_build_the_same_record_batch(batch):
    pytest.importorskip("pyarrow")
    topic, queue_id, q0, base, units, buf = batch
    checked, got, reference = _arrow_both(units, buf, base, topic, queue_id, q0)
    assert len(got) == len(checked)
    assert got.schema == reference.schema
    assert got.equals(reference), (got.to_pylist(), reference.to_pylist())
    if len(checked):  # the compiled core really built it (no fallback for these messages)
        positions = [off - checked.base for off, _size, _tags in checked.units]
        assert compiled.message_columns(checked.data, positions) is not None


@SETTINGS
@given(st.data(), batches())
def test_message_columns_from_consume_queue_bytes_build_the_same_record_batch(data, batch):
    """A segment read's batch keeps its units as the consume queue stored them: the compiled
    build takes the positions from those bytes and gives the reference's rows, whole or sliced."""
    pytest.importorskip("pyarrow")
    topic, queue_id, q0, base, units, buf = batch
    start = data.draw(st.integers(-len(units), len(units)))
    stop = data.draw(st.one_of(st.none(), st.integers(-len(units), len(units) + 2)))
    checked, got, reference = _arrow_both(units, buf, base, topic, queue_id, q0, from_cq=True, start=start, stop=stop)
    assert got.schema == reference.schema
    assert got.equals(reference), (got.to_pylist(), reference.to_pylist())
    assert got.num_rows == len(checked.units[start:stop])
    cq = checked.cq_bytes(start, stop)
    positions = [off - base for off, _size, _tags in checked.units[start:stop]]
    assert compiled.message_columns_cq(buf, cq, base) == compiled.message_columns(buf, positions)
    if positions:  # the compiled core really built it (no fallback for these messages)
        assert compiled.message_columns_cq(buf, cq, base) is not None


def test_message_columns_from_consume_queue_bytes_slice_as_the_units_do():
    """``start`` and ``stop`` of a batch kept as consume-queue bytes mean what they mean on its
    list of units, negative ones too (a positive start with a negative stop once gave no rows):
    ``MessageBatch.cq_bytes`` slices as the list does."""
    pytest.importorskip("pyarrow")
    buf, units = bytearray(), []
    for i in range(5):
        raw = pure.encode_message(Message("T", b"b%d" % i), queue_id=0, queue_offset=i, store_timestamp=5,
                                  physical_offset=100 + len(buf))
        units.append(ConsumeQueueUnit(100 + len(buf), len(raw), 0))
        buf += raw
    for start, stop in [(1, -1), (-3, -1), (-2, None), (2, 4), (0, -5), (4, 2), (9, None)]:
        checked, got, reference = _arrow_both(units, bytes(buf), 100, "T", 0, 0, from_cq=True, start=start, stop=stop)
        assert got.num_rows == len(checked.units[start:stop]) == reference.num_rows, (start, stop)
        assert got.equals(reference), (start, stop)
        assert checked.cq_bytes(start, stop) == _cq_bytes(checked.units[start:stop]), (start, stop)


def test_message_columns_from_consume_queue_bytes_odd_arguments():
    msg = Message("T", b"body", keys=["k"], tags="t")
    raw = pure.encode_message(msg, queue_id=0, queue_offset=0, store_timestamp=5, physical_offset=100)
    cq = _cq_bytes([(100, len(raw), 0)])
    assert compiled.message_columns_cq(raw, cq, 100) == compiled.message_columns(raw, [0]) is not None
    assert compiled.message_columns_cq(raw, cq[:-1], 100) is None  # not whole units
    assert compiled.message_columns_cq(raw, bytearray(cq), 100) is None
    assert compiled.message_columns_cq(bytearray(raw), cq, 100) is None
    assert compiled.message_columns_cq(raw, cq, 101) is None  # lands inside the message
    assert compiled.message_columns_cq(raw, cq, 99) is None
    assert compiled.message_columns_cq(raw, cq, 200) is None  # before the buffer
    assert compiled.message_columns_cq(raw, _cq_bytes([(-1 << 63, 10, 0)]), 1 << 62) is None  # wraps
    assert compiled.message_columns_cq(raw, _cq_bytes([(100 + len(raw), 10, 0)]), 100) is None  # past the end
    assert compiled.message_columns_cq(raw, b"", 100) == compiled.message_columns(raw, [])


def test_message_columns_leave_repeated_names_to_the_reference():
    pytest.importorskip("pyarrow")
    msg = Message("T", b"body", properties={"a": "1", "b": "2"}, keys=["k"], tags="t")
    raw = bytearray(pure.encode_message(msg, queue_id=0, queue_offset=0, store_timestamp=5, physical_offset=0))
    at = raw.index(b"b\x012")
    raw[at:at + 1] = b"a"  # "a" twice: parse_properties keeps its first place and last value
    unit = ConsumeQueueUnit(0, len(raw), 0)
    checked, got, reference = _arrow_both([unit], bytes(raw), 0, "T", 0, 0)
    assert len(checked) == 1 and compiled.message_columns(checked.data, [0]) is None
    assert got.equals(reference) and got.column("properties").to_pylist()[0][0] == ("a", "2")


def test_message_columns_odd_arguments():
    assert compiled.message_columns(bytearray(b"x"), [0]) is None
    assert compiled.message_columns(b"x", (0,)) is None
    assert compiled.message_columns(b"\x00" * 100, [0]) is None  # not a message frame
    assert compiled.message_columns(b"", []) is not None  # nothing to build: empty buffers


def _slot_table(slots) -> bytes:
    return b"".join(pos.to_bytes(4, "big", signed=True) + length.to_bytes(4, "big", signed=True)
                    for pos, length in slots)


@SETTINGS
@given(st.data(), st.integers(0, 5000), st.integers(0, 5000))
def test_every_slot_fits_agrees(data, start, width):
    end = start + width
    # Mostly slots that fit (so a wrong one is often the only one), then every way of not fitting.
    fitting = st.one_of(st.builds(lambda p, n: (p, n * 28), st.integers(start, end), st.integers(0, 8)),
                        st.sampled_from([(start, 0), (end, 0)]))  # the area's edges are inside
    position = st.one_of(st.integers(start, end), st.integers(start - 40, start - 1), st.integers(end + 1, end + 40),
                         st.sampled_from([start - 1, start, end - 28, end - 27, end, end + 1]), int32)
    length = st.one_of(st.just(0), st.integers(1, 8).map(lambda n: n * 28), st.integers(1, 300), st.integers(-300, -1),
                       int32)
    slots = data.draw(st.lists(st.one_of(fitting, fitting, fitting, st.tuples(position, length)), max_size=60))
    table = _slot_table(slots)
    same("every_slot_fits", table, start, end)
    assert pure.every_slot_fits(table, start, end) == (
        bool(slots) and all(start <= p <= end and (n == 0 or (n > 0 and n % 28 == 0 and p + n <= end))
                            for p, n in slots))


def test_every_slot_fits_odd_arguments_agree():
    table = _slot_table([(40, 28), (96, 0), (68, 56)])
    edges = [[(124, 0)], [(40, 0)], [(96, 28)], [(97, 28)], [(39, 0)], [(125, 0)], [(40, -28)], [(40, 27)]]
    for slots in edges:  # inside: the area's two ends (empty) and a run ending at its end
        same("every_slot_fits", _slot_table(slots), 40, 124)
    assert [pure.every_slot_fits(_slot_table(slots), 40, 124) for slots in edges] == [True] * 3 + [False] * 5
    for args in ((table, 40, 124), (table, 41, 124), (table, 40, 123), (b"", 0, 10), (table[:-4], 40, 124),
                 (table[:-1], 40, 124), (bytearray(table), 40, 124), (memoryview(table), 40, 124),
                 (table, -(1 << 70), 1 << 70), (table, 40, 1 << 70), (table, 40.0, 124), (table, None, 124),
                 (_slot_table([(2**31 - 1, 2**31 - 1)]), 0, 2**33)):
        same("every_slot_fits", *args)


def test_every_slot_fits_judges_a_table_in_c():
    """The twin answers a bytes table of whole slots itself: its oracle is not asked (the
    hypothesis test compares answers, which the oracle alone would also get right)."""
    from tiered_core._speedups import _core

    def oracle(*args):
        raise AssertionError(f"the oracle was asked: {args!r}")

    table = _slot_table([(40, 28)] * 1000 + [(40, 0)])
    try:
        _core.bind_index({**_impl.ORACLES, "every_slot_fits": oracle})
        assert compiled.every_slot_fits(table, 40, 68) is True
        assert compiled.every_slot_fits(table, 40, 67) is False
        with pytest.raises(AssertionError, match="oracle was asked"):
            compiled.every_slot_fits(bytearray(table), 40, 68)
    finally:
        _core.bind_index(_impl.ORACLES)
