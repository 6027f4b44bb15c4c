# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled twins of tiered_core.codec functions. See tiered_core/_speedups/__init__.py.

Every kernel is a fast path that only *accepts*: it handles the well-formed, in-range
case in C and, at the first thing it does not like (a bad byte, an odd argument type,
an int out of range, a buffer without the simple buffer protocol), hands the call -- or
the rest of a batch from the first doubtful unit on -- to its pure-Python oracle, which
then returns or raises exactly what it always does. A kernel must never accept what
its oracle rejects; rejecting more only costs speed.

The module imports nothing from tiered_core: :func:`bind` (called by
``tiered_core.codec._impl``) hands it the pure functions and the value types.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.ref cimport PyObject
from cpython.long cimport PyLong_Check, PyLong_FromLong, PyLong_FromLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset


cdef extern from "crc32_clmul.h":
    uint32_t tiered_crc32(uint32_t crc, const unsigned char *p, size_t n) nogil
    uint32_t tiered_crc32_with(uint32_t crc, const unsigned char *p, size_t n, int use_clmul) nogil
    int tiered_crc32_has_clmul() nogil

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    bint PyTuple_Check(object o)
    Py_ssize_t PyTuple_GET_SIZE(object o)
    PyObject* PyTuple_GET_ITEM(object o, Py_ssize_t i)

cdef extern from *:
    """
    /* A tuple subclass without extra fields (a NamedTuple) built like tuple_subtype_new does,
       without the intermediate plain tuple. */
    static PyObject* ts_new3(PyObject* cls, PyObject* a, PyObject* b, PyObject* c) {
        PyTypeObject* t = (PyTypeObject*)cls;
        PyObject* o = t->tp_alloc(t, 3);
        if (o == NULL) return NULL;
        Py_INCREF(a); PyTuple_SET_ITEM(o, 0, a);
        Py_INCREF(b); PyTuple_SET_ITEM(o, 1, b);
        Py_INCREF(c); PyTuple_SET_ITEM(o, 2, c);
        return o;
    }
    """
    object ts_new3(object cls, object a, object b, object c)


# -- what bind() hands over -------------------------------------------------------------

cdef object CorruptData = None
cdef object MessageExt = None
cdef object ConsumeQueueUnit = None
cdef object UnitCheck = None
cdef object Message = None
cdef object V1 = None
cdef object V2 = None
cdef object DEFAULT_HOST = None
cdef object IGNORE = None
cdef object REQUIRE = None
cdef object PropCrcPolicy = None
cdef object host_of = None  # message._host (lru-cached Host)
cdef object host_parts = None  # message._cached_host_parts
cdef object tags_hash_code = None
cdef object p_check_units = None
cdef object p_decode_message = None
cdef object p_validate_message = None
cdef object p_encode_message = None
cdef object p_encode_message_buffer = None
cdef object p_encode_cq_unit = None
cdef object p_encode_cq_units = None
cdef object p_decode_cq_units = None
cdef object p_pack_item = None
cdef object p_java_crc32 = None
cdef dict p_peek = {}
cdef object SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
cdef object _tuple_new = tuple.__new__
cdef bint bound = False


class _Missing:
    def __repr__(self):
        return "<default>"


cdef object MISSING = _Missing()


def bind(ns):
    """Take the pure oracles and value types from ``ns`` (a mapping). Idempotent."""
    global CorruptData, MessageExt, ConsumeQueueUnit, UnitCheck, Message, V1, V2
    global DEFAULT_HOST, IGNORE, REQUIRE, PropCrcPolicy, host_of, host_parts, tags_hash_code
    global p_check_units, p_decode_message, p_validate_message
    global p_encode_message, p_encode_message_buffer, p_encode_cq_unit, p_encode_cq_units, p_decode_cq_units
    global p_pack_item, p_java_crc32, p_peek, SCHEDULE_TOPIC, bound
    CorruptData = ns["CorruptData"]
    MessageExt = ns["MessageExt"]
    ConsumeQueueUnit = ns["ConsumeQueueUnit"]
    UnitCheck = ns["UnitCheck"]
    Message = ns["Message"]
    V1 = ns["V1"]
    V2 = ns["V2"]
    DEFAULT_HOST = ns["DEFAULT_HOST"]
    PropCrcPolicy = ns["PropCrcPolicy"]
    IGNORE = PropCrcPolicy.IGNORE
    REQUIRE = PropCrcPolicy.REQUIRE
    host_of = ns["host_of"]
    host_parts = ns["host_parts"]
    tags_hash_code = ns["tags_hash_code"]
    SCHEDULE_TOPIC = ns["SCHEDULE_TOPIC"]
    p_check_units = ns["check_units"]
    p_decode_message = ns["decode_message"]
    p_validate_message = ns["validate_message"]
    p_encode_message = ns["encode_message"]
    p_encode_message_buffer = ns["encode_message_buffer"]
    p_encode_cq_unit = ns["encode_cq_unit"]
    p_encode_cq_units = ns["encode_cq_units"]
    p_decode_cq_units = ns["decode_cq_units"]
    p_pack_item = ns["pack_item"]
    p_java_crc32 = ns["java_crc32"]
    for cls in (ConsumeQueueUnit,):  # ts_new3 builds it as a bare tuple
        if not issubclass(cls, tuple) or cls.__basicsize__ != tuple.__basicsize__ or hasattr(cls, "__dict__") and "__dict__" in cls.__dict__:
            raise TypeError(f"{cls!r} is not a plain NamedTuple")
    p_peek = {name: ns[name] for name in (
        "peek_total_size", "peek_magic", "peek_queue_id", "peek_queue_offset",
        "peek_physical_offset", "peek_sys_flag", "peek_born_timestamp", "peek_store_timestamp")}
    bound = True


# -- byte helpers -------------------------------------------------------------------------

cdef extern from *:
    """
    #define TS_MAGIC_V1 0xDAA320A7u
    #define TS_MAGIC_V2 0xDAA320ABu
    #define TS_MIN_SIZE 91
    #define TS_RESERVED 20
    #define TS_NO_PROP_CRC (-2)
    """
    const uint32_t MAGIC_V1 "TS_MAGIC_V1"
    const uint32_t MAGIC_V2 "TS_MAGIC_V2"
    const Py_ssize_t MIN_SIZE "TS_MIN_SIZE"  # message._MIN_SIZE_V1
    const Py_ssize_t RESERVED "TS_RESERVED"  # prop_crc.CRC32_RESERVED_LEN
    const int64_t NO_PROP_CRC "TS_NO_PROP_CRC"


cdef inline uint32_t ru32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline int32_t r32(const uint8_t* p) noexcept nogil:
    return <int32_t>ru32(p)


cdef inline int64_t r64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<uint64_t>ru32(p) << 32) | <uint64_t>ru32(p + 4))


cdef inline void w32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef inline void w64(uint8_t* p, uint64_t v) noexcept nogil:
    w32(p, <uint32_t>(v >> 32))
    w32(p + 4, <uint32_t>v)


cdef inline int32_t jcrc(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """Java UtilAll.crc32: zlib crc32 & 0x7FFFFFFF."""
    return <int32_t>(tiered_crc32(0, p, <size_t>n) & 0x7FFFFFFF)


cdef inline bint is_ascii(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i = 0
    cdef uint64_t acc = 0, w
    while i + 8 <= n:
        memcpy(&w, p + i, 8)
        acc |= w
        i += 8
    while i < n:
        acc |= p[i]
        i += 1
    return (acc & 0x8080808080808080ULL) == 0


cdef struct Parsed:
    Py_ssize_t total
    int v2
    int32_t sys_flag
    Py_ssize_t hdr          # fixed header bytes (72 + both host lengths)
    Py_ssize_t bh           # born host length (8 or 20)
    Py_ssize_t body_start
    Py_ssize_t body_end
    Py_ssize_t topic_start
    Py_ssize_t topic_end
    Py_ssize_t props_start
    Py_ssize_t end


cdef inline int frame_parse(const uint8_t* b, Py_ssize_t limit, Py_ssize_t pos, bint verify_crc,
                            Parsed* m) noexcept nogil:
    """message._frame + message._parse: 0 when valid, -1 when not (the oracle says why)."""
    cdef uint32_t magic
    cdef int64_t total
    cdef Py_ssize_t sh, tl, end
    cdef int32_t body_len
    cdef Py_ssize_t topic_len, props_len
    if pos < 0 or pos + 8 > limit:
        return -1
    total = r32(b + pos)
    magic = ru32(b + pos + 4)
    if magic == MAGIC_V1:
        m.v2 = 0
        tl = 1
    elif magic == MAGIC_V2:
        m.v2 = 1
        tl = 2
    else:
        return -1
    if total < MIN_SIZE or total > limit - pos:
        return -1
    m.total = <Py_ssize_t>total
    end = pos + m.total
    m.sys_flag = r32(b + pos + 36)
    m.bh = 20 if m.sys_flag & 0x10 else 8
    sh = 20 if m.sys_flag & 0x20 else 8
    m.hdr = 72 + m.bh + sh
    if m.hdr + tl + 2 > m.total:
        return -1
    body_len = r32(b + pos + m.hdr - 4)
    if body_len < 0:
        return -1
    m.body_start = pos + m.hdr
    m.body_end = m.body_start + body_len
    if m.body_end + tl + 2 > end:
        return -1
    if tl == 1:
        topic_len = b[m.body_end]
    else:
        topic_len = (<Py_ssize_t>b[m.body_end] << 8) | b[m.body_end + 1]
    m.topic_start = m.body_end + tl
    m.topic_end = m.topic_start + topic_len
    if m.topic_end + 2 > end:
        return -1
    props_len = (<Py_ssize_t>b[m.topic_end] << 8) | b[m.topic_end + 1]
    m.props_start = m.topic_end + 2
    if m.props_start + props_len != end:
        return -1
    m.end = end
    if verify_crc and jcrc(b + m.body_start, body_len) != r32(b + pos + 8):
        return -1
    return 0


cdef inline int64_t stored_prop_crc(const uint8_t* b, Py_ssize_t pos, Py_ssize_t total) noexcept nogil:
    """prop_crc.stored_prop_crc: NO_PROP_CRC for None, -1 for unreadable digits."""
    cdef Py_ssize_t start, end, k
    cdef int64_t value = 0
    if total < RESERVED:
        return NO_PROP_CRC
    start = pos + total - RESERVED
    if memcmp(b + start, b"__CRC32#\x01", 9) != 0 or b[pos + total - 1] != 2:
        return NO_PROP_CRC
    end = pos + total - 1
    for k in range(end - 10, end):
        if b[k] < 48 or b[k] > 57:
            return -1
    k = end - 1
    while k >= end - 10:
        value = value * 10 + (b[k] - 48)
        k -= 1
    if value == 0:
        return NO_PROP_CRC
    return value if value <= 0x7FFFFFFF else -1


cdef inline Py_ssize_t find_tags(const uint8_t* p, Py_ssize_t n, Py_ssize_t* vstart) noexcept nogil:
    """checks._tags_value over properties p[0:n]: the value's end (its start in *vstart), or -1."""
    cdef Py_ssize_t k = n - 5, stop
    while k >= 0:
        if (k == 0 or p[k - 1] == 2) and memcmp(p + k, b"TAGS\x01", 5) == 0:
            stop = k + 5
            while stop < n and p[stop] != 2:
                stop += 1
            if stop > k + 5:
                vstart[0] = k + 5
                return stop
            k -= 6  # the next match must end before this one starts (rfind(..., 0, j))
        else:
            k -= 1
    return -1


cdef inline int32_t java_hash_ascii(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef uint32_t h = 0
    cdef Py_ssize_t i
    for i in range(n):
        h = 31 * h + p[i]
    return <int32_t>h


cdef inline int64_t i64(object o) except? -1:
    """A Python int as int64 (TypeError for anything else, even with __int__/__index__;
    OverflowError out of range): the caller then lets the oracle judge."""
    if not PyLong_Check(o):
        raise TypeError
    return o


cdef inline int unpack3(object u, int64_t* a, int64_t* b, int64_t* c) except -1:
    """A (sub)tuple of three Python ints as int64s: 1, or 0 when it is anything else."""
    if not PyTuple_Check(u) or PyTuple_GET_SIZE(u) != 3:
        return 0
    a[0] = i64(<object>PyTuple_GET_ITEM(u, 0))
    b[0] = i64(<object>PyTuple_GET_ITEM(u, 1))
    c[0] = i64(<object>PyTuple_GET_ITEM(u, 2))
    return 1


cdef inline object utf8(const uint8_t* p, Py_ssize_t n):
    return PyUnicode_DecodeUTF8(<const char*>p, n, NULL)


# -- split + validate ---------------------------------------------------------------------


def check_units(units, buf, buf_offset=None, *, topic, queue_id, queue_offset, verify_crc=True,
                prop_crc=MISSING, check_tags=True):
    """Twin of codec.checks.check_units."""
    if type(topic) is not str:
        return p_check_units(units, buf, buf_offset, topic=topic, queue_id=queue_id,
                             queue_offset=queue_offset, verify_crc=verify_crc,
                             prop_crc=IGNORE if prop_crc is MISSING else prop_crc,
                             check_tags=check_tags)
    if type(units) is not list:
        units = list(units)
    if prop_crc is MISSING:
        prop_crc = IGNORE
    cdef list positions = []
    if not units:
        return UnitCheck(positions, None)
    cdef Py_buffer view
    cdef int64_t base, qid, q = 0, cl_off, size, tags_code, stored, pos
    cdef bint has_q, tags_on, vcrc, policy_ignore, policy_require
    cdef const uint8_t* b
    cdef Py_ssize_t limit, i = 0, n = len(units), topic_len, vstart, vend
    cdef bytes topic_b
    cdef const char* tb
    cdef Parsed m
    cdef int32_t expected
    try:
        policy = PropCrcPolicy(prop_crc)
        base = i64(units[0][0] if buf_offset is None else buf_offset)
        qid = i64(queue_id)
        if type(queue_id) is not int or qid < -0x80000000 or qid > 0x7FFFFFFF:
            raise OverflowError
        has_q = queue_offset is not None
        if has_q:
            q = i64(queue_offset)
            if q < 0 or q > 0x7FFFFFFFFFFFFFFF - n:
                raise OverflowError
        topic_b = topic.encode("utf-8", "surrogatepass")
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    except Exception:
        return p_check_units(units, buf, buf_offset, topic=topic, queue_id=queue_id,
                             queue_offset=queue_offset, verify_crc=verify_crc, prop_crc=prop_crc,
                             check_tags=check_tags)
    tb = PyBytes_AS_STRING(topic_b)
    topic_len = len(topic_b)
    tags_on = bool(check_tags) and topic != SCHEDULE_TOPIC
    vcrc = bool(verify_crc)
    policy_ignore = policy is IGNORE
    policy_require = policy is REQUIRE
    b = <const uint8_t*>view.buf
    limit = view.len
    try:
        while i < n:
            unit = units[i]
            try:
                if not unpack3(unit, &cl_off, &size, &tags_code):
                    break
            except Exception:
                break
            if base < 0 or cl_off < 0:
                break
            pos = cl_off - base
            if pos < 0 or size < MIN_SIZE or size > limit - pos:
                break
            stored = NO_PROP_CRC if policy_ignore else stored_prop_crc(b, pos, size)
            if frame_parse(b, limit, pos, vcrc and stored == NO_PROP_CRC, &m) != 0 or m.total != size:
                break
            if not is_ascii(b + m.props_start, m.end - m.props_start):
                try:
                    utf8(b + m.props_start, m.end - m.props_start)
                except UnicodeDecodeError:
                    break
            if m.topic_end - m.topic_start != topic_len or memcmp(b + m.topic_start, tb, topic_len) != 0:
                break
            if r32(b + pos + 12) != qid:
                break
            if has_q and r64(b + pos + 20) != q + i:
                break
            if r64(b + pos + 28) != cl_off:
                break
            if tags_on and tags_code != 0 and -0x80000000 <= tags_code <= 0x7FFFFFFF:
                vend = find_tags(b + m.props_start, m.end - m.props_start, &vstart)
                if vend < 0:
                    expected = 0
                elif is_ascii(b + m.props_start + vstart, vend - vstart):
                    expected = java_hash_ascii(b + m.props_start + vstart, vend - vstart)
                else:
                    expected = tags_hash_code(utf8(b + m.props_start + vstart, vend - vstart))
                if expected != tags_code:
                    break
            if stored != NO_PROP_CRC:
                if jcrc(b + pos, size - RESERVED) != stored:
                    break
            elif policy_require:
                break
            positions.append(pos)
            i += 1
    finally:
        PyBuffer_Release(&view)
    if i == n:
        return UnitCheck(positions, None)
    rest = p_check_units(units[i:], buf, base, topic=topic, queue_id=queue_id,
                         queue_offset=(q + i) if has_q else None, verify_crc=verify_crc,
                         prop_crc=prop_crc, check_tags=check_tags)
    positions.extend(rest[0])
    return UnitCheck(positions, rest[1])


# -- decode --------------------------------------------------------------------------------


cdef inline bint next_pair(const uint8_t* p, Py_ssize_t n, Py_ssize_t start, Py_ssize_t* stop,
                           Py_ssize_t* sep) noexcept nogil:
    """The properties pair at p[start:]: it ends at ``stop`` (a \x02 or n), its name is
    p[start:sep] and its value p[sep+1:stop]; True when parse_properties keeps it (a \x01,
    and both name and value non-empty)."""
    cdef Py_ssize_t e = start, s
    while e < n and p[e] != 2:
        e += 1
    s = start
    while s < e and p[s] != 1:
        s += 1
    stop[0] = e
    sep[0] = s
    return s < e and start < s and s + 1 < e


cdef inline dict parse_props(const uint8_t* p, Py_ssize_t n):
    """message.parse_properties over UTF-8 bytes already known valid."""
    cdef dict out = {}
    cdef Py_ssize_t start = 0, stop, sep
    while start <= n:
        if next_pair(p, n, start, &stop, &sep):
            out[utf8(p + start, sep - start)] = utf8(p + sep + 1, stop - sep - 1)
        start = stop + 1
    return out


# The last born and store host seen (a fetch batch mostly repeats them): raw ip+port -> Host.
cdef bytes born_key = b""
cdef object born_val = None
cdef bytes store_key = b""
cdef object store_val = None


cdef inline object host_at(bint store, const uint8_t* p, Py_ssize_t n):
    """message._host of the ip (n - 4 bytes) and port at p."""
    global born_key, born_val, store_key, store_val
    cdef bytes key = store_key if store else born_key
    if PyBytes_GET_SIZE(key) == n and memcmp(PyBytes_AS_STRING(key), p, n) == 0:
        return store_val if store else born_val
    val = host_of(PyBytes_FromStringAndSize(<const char*>p, n - 4), r32(p + n - 4))
    key = PyBytes_FromStringAndSize(<const char*>p, n)
    if store:
        store_val = val
        store_key = key
    else:
        born_val = val
        born_key = key
    return val


cdef object build_ext(const uint8_t* b, Py_ssize_t pos, Parsed* m):
    cdef Py_ssize_t bh = m.bh, sp = 48 + bh  # store timestamp position
    cdef Py_ssize_t sh = m.hdr - 72 - bh
    cdef Py_ssize_t props_n = m.end - m.props_start
    topic = utf8(b + m.topic_start, m.topic_end - m.topic_start)
    if props_n == 0:
        props = {}
    else:
        if not is_ascii(b + m.props_start, props_n):
            utf8(b + m.props_start, props_n)  # raises UnicodeDecodeError like the oracle's str()
        props = parse_props(b + m.props_start, props_n)
    keys_text = props.get("KEYS")
    if keys_text:
        keys = [k for k in keys_text.split(" ") if k]
    else:
        keys = []
    born = host_at(False, b + pos + 48, bh)
    store = host_at(True, b + pos + sp + 8, sh)
    return MessageExt(
        topic, PyLong_FromLong(r32(b + pos + 12)), PyLong_FromLongLong(r64(b + pos + 20)),
        PyLong_FromLongLong(r64(b + pos + 28)), PyLong_FromLongLong(r64(b + pos + sp)),
        PyLong_FromLongLong(r64(b + pos + 40)), keys, props.get("TAGS"), props,
        PyBytes_FromStringAndSize(<const char*>b + m.body_start, m.body_end - m.body_start),
        m.sys_flag, PyLong_FromLong(r32(b + pos + 8)), m.total, born, store,
        PyLong_FromLong(r32(b + pos + sp + 8 + sh)), PyLong_FromLongLong(r64(b + pos + sp + 8 + sh + 4)),
        PyLong_FromLong(r32(b + pos + 16)), V2 if m.v2 else V1,
    )


cdef object frame_in(buf, offset, bint verify_crc, bint build):
    """The message at ``offset`` of ``buf``: its MessageExt (``build``) or its total size; None
    when anything is doubtful (the oracle then decides, and raises what it raises)."""
    cdef Py_buffer view
    cdef Parsed m
    result = None
    if type(offset) is not int or offset < 0:
        return None
    try:
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    except Exception:
        return None
    try:
        if frame_parse(<const uint8_t*>view.buf, view.len, <Py_ssize_t>offset, verify_crc, &m) == 0:
            result = build_ext(<const uint8_t*>view.buf, <Py_ssize_t>offset, &m) if build else m.total
    except Exception:
        result = None
    finally:
        PyBuffer_Release(&view)
    return result


def decode_message(buf, offset=0, *, verify_crc=True, base_offset=0):
    """Twin of codec.message.decode_message."""
    result = frame_in(buf, offset, bool(verify_crc), True)
    if result is None:
        return p_decode_message(buf, offset, verify_crc=verify_crc, base_offset=base_offset)
    return result


def validate_message(buf, offset=0, *, verify_crc=True, base_offset=0):
    """Twin of codec.message.validate_message."""
    result = frame_in(buf, offset, bool(verify_crc), False)
    if result is None:
        return p_validate_message(buf, offset, verify_crc=verify_crc, base_offset=base_offset)
    return result


# -- peeks ---------------------------------------------------------------------------------

cdef enum:
    K_TOTAL = 0
    K_MAGIC = 1
    K_I32 = 2
    K_I64 = 3
    K_STORE_TS = 4


cdef object peek(str name, int kind, Py_ssize_t rel, buf, offset):
    cdef Py_buffer view
    cdef const uint8_t* b
    cdef Py_ssize_t pos, n
    cdef uint32_t magic
    result = None
    if type(offset) is int and offset >= 0:
        try:
            PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        except Exception:
            pass
        else:
            try:
                b = <const uint8_t*>view.buf
                n = view.len
                pos = offset
                if kind == K_TOTAL:
                    if pos + 4 <= n:
                        result = PyLong_FromLong(r32(b + pos))
                elif pos + 8 <= n:
                    magic = ru32(b + pos + 4)
                    if kind == K_MAGIC:
                        result = magic
                    elif magic == MAGIC_V1 or magic == MAGIC_V2:
                        if kind == K_STORE_TS:
                            if pos + 40 <= n:
                                rel = 68 if r32(b + pos + 36) & 0x10 else 56
                                if pos + rel + 8 <= n:
                                    result = PyLong_FromLongLong(r64(b + pos + rel))
                        elif kind == K_I32:
                            if pos + rel + 4 <= n:
                                result = PyLong_FromLong(r32(b + pos + rel))
                        elif pos + rel + 8 <= n:
                            result = PyLong_FromLongLong(r64(b + pos + rel))
            except Exception:
                result = None
            finally:
                PyBuffer_Release(&view)
    if result is None:
        return p_peek[name](buf, offset)
    return result


cdef class _Peeker:
    """``peek_<field>(buf, offset=0)``: one fixed-position header field (the pure
    ``codec.message.peek_<field>`` on anything :func:`peek` doubts)."""
    cdef str name
    cdef int kind
    cdef Py_ssize_t rel

    def __init__(self, str name, int kind, Py_ssize_t rel):
        self.name, self.kind, self.rel = name, kind, rel

    def __call__(self, buf, offset=0):
        return peek(self.name, self.kind, self.rel, buf, offset)


peek_total_size = _Peeker("peek_total_size", K_TOTAL, 0)
peek_magic = _Peeker("peek_magic", K_MAGIC, 4)
peek_queue_id = _Peeker("peek_queue_id", K_I32, 12)
peek_queue_offset = _Peeker("peek_queue_offset", K_I64, 20)
peek_physical_offset = _Peeker("peek_physical_offset", K_I64, 28)
peek_sys_flag = _Peeker("peek_sys_flag", K_I32, 36)
peek_born_timestamp = _Peeker("peek_born_timestamp", K_I64, 40)
peek_store_timestamp = _Peeker("peek_store_timestamp", K_STORE_TS, 0)


# -- encode --------------------------------------------------------------------------------


# The last born and store host objects encoded (tuples: immutable) and their packed parts.
cdef object enc_born_obj = None
cdef object enc_born_parts = None
cdef object enc_store_obj = None
cdef object enc_store_parts = None


cdef inline object parts_of(bint store, host):
    """message._cached_host_parts(host, "born_host" / "store_host"), remembering the last tuple."""
    global enc_born_obj, enc_born_parts, enc_store_obj, enc_store_parts
    if store:
        if host is enc_store_obj:
            return enc_store_parts
    elif host is enc_born_obj:
        return enc_born_parts
    parts = host_parts(host, "store_host" if store else "born_host")
    if PyTuple_Check(host):
        if store:
            enc_store_parts = parts
            enc_store_obj = host
        else:
            enc_born_parts = parts
            enc_born_obj = host
    return parts


cdef inline bint has_sep(const char* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] == 1 or p[i] == 2:
            return True
    return False


cdef object encode_fast(msg, o_queue_id, o_queue_offset, o_store_timestamp, o_physical_offset,
                        store_host, sys_flag_arg, version, bint prop_crc, bint buffer=False):
    """encode_message (a bytearray when ``buffer``) for a plain Message with in-range fields;
    None to let the oracle decide."""
    cdef Py_ssize_t topic_len, props_len = 0, ln, lv, body_len, total, hdr, w
    cdef const char* tp
    cdef const char* kp
    cdef const char* vp
    cdef bint v2
    cdef int32_t flag, reconsume, sys32
    cdef int64_t born_ts, prep
    cdef uint8_t* o
    cdef int32_t crc
    cdef int k
    if type(msg) is not Message:
        return None
    cdef int64_t queue_offset = i64(o_queue_offset), store_timestamp = i64(o_store_timestamp)
    cdef int64_t physical_offset = i64(o_physical_offset), qid = i64(o_queue_id)
    if qid < -0x80000000 or qid > 0x7FFFFFFF:
        return None
    cdef int32_t queue_id = <int32_t>qid
    topic = msg.topic
    body = msg.body
    if type(topic) is not str or type(body) is not bytes:
        return None
    props = dict(msg.properties)
    keys = msg.keys
    if keys:
        if type(keys) is str:
            keys = [key for key in keys.split(" ") if key]
        elif type(keys) is list or type(keys) is tuple:
            for key in keys:
                if type(key) is not str or not key or " " in key:
                    return None
        else:
            return None
        if keys:
            props["KEYS"] = " ".join(keys)
    tags = msg.tags
    if tags:
        props["TAGS"] = tags
    if prop_crc:
        props.pop("__CRC32#", None)
    items = list(props.items())
    for name, value in items:
        if type(name) is not str or type(value) is not str or not name or not value:
            return None
        kp = PyUnicode_AsUTF8AndSize(name, &ln)
        vp = PyUnicode_AsUTF8AndSize(value, &lv)
        if has_sep(kp, ln) or has_sep(vp, lv):
            return None
        props_len += ln + lv + 2
    if prop_crc:
        props_len += RESERVED
    tp = PyUnicode_AsUTF8AndSize(topic, &topic_len)
    if version is None:
        v2 = topic_len > 127
    elif isinstance(version, int) and not isinstance(version, bool) and (version == 1 or version == 2):
        v2 = version == 2
    else:
        return None
    if topic_len > (32767 if v2 else 127) or props_len > 32767:
        return None
    born_ip, born_port, born_v6 = parts_of(False, msg.born_host)
    store_ip, store_port, store_v6 = parts_of(True, store_host)
    sf = msg.sys_flag if sys_flag_arg is None else sys_flag_arg
    if type(sf) is not int:
        return None
    sf &= ~0x30
    if born_v6:
        sf |= 0x10
    if store_v6:
        sf |= 0x20
    sys32 = sf
    if not PyLong_Check(msg.flag) or not PyLong_Check(msg.reconsume_times):
        return None
    flag = msg.flag
    born_ts = i64(msg.born_timestamp)
    reconsume = msg.reconsume_times
    prep = i64(msg.prepared_transaction_offset)
    hdr = 72 + (20 if born_v6 else 8) + (20 if store_v6 else 8)
    body_len = len(body)
    total = hdr + body_len + (2 if v2 else 1) + topic_len + 2 + props_len
    if total > 0x7FFFFFFF:
        return None
    if buffer:
        out = PyByteArray_FromStringAndSize(NULL, total)
        o = <uint8_t*>PyByteArray_AS_STRING(out)
    else:
        out = PyBytes_FromStringAndSize(NULL, total)
        o = <uint8_t*>PyBytes_AS_STRING(out)
    w32(o, <uint32_t>total)
    w32(o + 4, MAGIC_V2 if v2 else MAGIC_V1)
    w32(o + 8, <uint32_t>jcrc(<const uint8_t*>PyBytes_AS_STRING(body), body_len))
    w32(o + 12, <uint32_t>queue_id)
    w32(o + 16, <uint32_t>flag)
    w64(o + 20, <uint64_t>queue_offset)
    w64(o + 28, <uint64_t>physical_offset)
    w32(o + 36, <uint32_t>sys32)
    w64(o + 40, <uint64_t>born_ts)
    w = 48
    memcpy(o + w, PyBytes_AS_STRING(born_ip), len(born_ip))
    w += len(born_ip)
    w32(o + w, <uint32_t><int32_t>born_port)
    w += 4
    w64(o + w, <uint64_t>store_timestamp)
    w += 8
    memcpy(o + w, PyBytes_AS_STRING(store_ip), len(store_ip))
    w += len(store_ip)
    w32(o + w, <uint32_t><int32_t>store_port)
    w += 4
    w32(o + w, <uint32_t>reconsume)
    w64(o + w + 4, <uint64_t>prep)
    w32(o + w + 12, <uint32_t>body_len)
    w += 16
    memcpy(o + w, PyBytes_AS_STRING(body), body_len)
    w += body_len
    if v2:
        o[w] = <uint8_t>(topic_len >> 8)
        o[w + 1] = <uint8_t>topic_len
        w += 2
    else:
        o[w] = <uint8_t>topic_len
        w += 1
    memcpy(o + w, tp, topic_len)
    w += topic_len
    o[w] = <uint8_t>(props_len >> 8)
    o[w + 1] = <uint8_t>props_len
    w += 2
    for name, value in items:
        kp = PyUnicode_AsUTF8AndSize(name, &ln)
        vp = PyUnicode_AsUTF8AndSize(value, &lv)
        memcpy(o + w, kp, ln)
        o[w + ln] = 1
        memcpy(o + w + ln + 1, vp, lv)
        o[w + ln + 1 + lv] = 2
        w += ln + lv + 2
    if prop_crc:
        memcpy(o + w, b"__CRC32#\x01", 9)
        crc = jcrc(o, total - RESERVED)
        for k in range(10):
            o[w + 9 + k] = <uint8_t>(48 + crc % 10)
            crc //= 10
        o[w + 19] = 2
    return out


cdef object encode_or_oracle(oracle, bint buffer, msg, queue_id, queue_offset, store_timestamp, physical_offset,
                             store_host, sys_flag, version, prop_crc):
    """encode_fast (``buffer``: into a bytearray), or ``oracle`` when it declines or fails."""
    if store_host is MISSING:
        store_host = DEFAULT_HOST
    try:
        out = encode_fast(msg, queue_id, queue_offset, store_timestamp, physical_offset, store_host,
                          sys_flag, version, bool(prop_crc), buffer)
    except Exception:
        out = None
    if out is None:
        return oracle(msg, queue_id=queue_id, queue_offset=queue_offset, store_timestamp=store_timestamp,
                      physical_offset=physical_offset, store_host=store_host, sys_flag=sys_flag, version=version,
                      prop_crc=prop_crc)
    return out


def encode_message(msg, *, queue_id, queue_offset, store_timestamp, physical_offset=0,
                   store_host=MISSING, sys_flag=None, version=None, prop_crc=False):
    """Twin of codec.message.encode_message."""
    return encode_or_oracle(p_encode_message, False, msg, queue_id, queue_offset, store_timestamp, physical_offset,
                            store_host, sys_flag, version, prop_crc)


def encode_message_buffer(msg, *, queue_id, queue_offset, store_timestamp, physical_offset=0,
                          store_host=MISSING, sys_flag=None, version=None, prop_crc=False):
    """Twin of codec.message.encode_message_buffer (a new bytearray, the put path)."""
    return encode_or_oracle(p_encode_message_buffer, True, msg, queue_id, queue_offset, store_timestamp,
                            physical_offset, store_host, sys_flag, version, prop_crc)


# -- consume-queue units ------------------------------------------------------------------


cdef inline int put_unit(uint8_t* o, object u) except -1:
    """Write one unit: 1 when written, 0 when the oracle must judge it."""
    cdef int64_t off, tags
    cdef int64_t size
    if not unpack3(u, &off, &size, &tags):
        return 0
    if off < 0 or size <= 0 or size > 0x7FFFFFFF:
        return 0
    w64(o, <uint64_t>off)
    w32(o + 8, <uint32_t>size)
    w64(o + 12, <uint64_t>tags)
    return 1


def encode_cq_unit(commitlog_offset, size, tags_code=0):
    """Twin of codec.consume_queue.encode_cq_unit."""
    out = PyBytes_FromStringAndSize(NULL, 20)
    try:
        if put_unit(<uint8_t*>PyBytes_AS_STRING(out), (commitlog_offset, size, tags_code)):
            return out
    except Exception:
        pass
    return p_encode_cq_unit(commitlog_offset, size, tags_code)


def encode_cq_units(units):
    """Twin of codec.consume_queue.encode_cq_units (a generator is consumed whole first)."""
    if type(units) is not list:
        units = list(units)
    cdef Py_ssize_t i, n = len(units)
    out = PyBytes_FromStringAndSize(NULL, 20 * n)
    cdef uint8_t* o = <uint8_t*>PyBytes_AS_STRING(out)
    try:
        for i in range(n):
            if not put_unit(o + 20 * i, units[i]):
                return p_encode_cq_units(units)
    except Exception:
        return p_encode_cq_units(units)
    return out


def decode_cq_units(buf, *, base_offset=0):
    """Twin of codec.consume_queue.decode_cq_units."""
    cdef Py_buffer view
    cdef const uint8_t* b
    cdef Py_ssize_t i, n
    cdef list out
    if isinstance(buf, memoryview) and (buf.format != "B" or buf.ndim != 1):
        return p_decode_cq_units(buf, base_offset=base_offset)  # its len() counts items
    try:
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    except Exception:
        return p_decode_cq_units(buf, base_offset=base_offset)
    try:
        n = view.len
        if n % 20:
            return p_decode_cq_units(buf, base_offset=base_offset)
        b = <const uint8_t*>view.buf
        out = []
        cls = ConsumeQueueUnit
        for i in range(0, n, 20):
            out.append(ts_new3(cls, PyLong_FromLongLong(r64(b + i)), PyLong_FromLong(r32(b + i + 8)),
                               PyLong_FromLongLong(r64(b + i + 12))))
        return out
    finally:
        PyBuffer_Release(&view)


# -- index items ---------------------------------------------------------------------------


def pack_item(hash_code, topic_id, queue_id, offset, size, time_diff, item_index=0):
    """Twin of codec.tiered_index.pack_item."""
    cdef int32_t h, t, q, s, d, x
    cdef int64_t off
    cdef uint8_t* o
    if (type(hash_code) is int and type(topic_id) is int and type(queue_id) is int
            and type(offset) is int and type(size) is int and type(time_diff) is int
            and type(item_index) is int):
        try:
            h = hash_code
            t = topic_id
            q = queue_id
            off = offset
            s = size
            d = time_diff
            x = item_index
        except OverflowError:
            pass
        else:
            out = PyBytes_FromStringAndSize(NULL, 32)
            o = <uint8_t*>PyBytes_AS_STRING(out)
            w32(o, <uint32_t>h)
            w32(o + 4, <uint32_t>t)
            w32(o + 8, <uint32_t>q)
            w64(o + 12, <uint64_t>off)
            w32(o + 20, <uint32_t>s)
            w32(o + 24, <uint32_t>d)
            w32(o + 28, <uint32_t>x)
            return out
    return p_pack_item(hash_code, topic_id, queue_id, offset, size, time_diff, item_index)


# -- crc -------------------------------------------------------------------------------------


def java_crc32(buf, start=0, end=None):
    """Twin of codec.prop_crc.java_crc32."""
    cdef Py_buffer view
    cdef Py_ssize_t s, e, n
    cdef int32_t crc
    if type(start) is int and (end is None or type(end) is int):
        try:
            PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        except Exception:
            pass
        else:
            try:
                n = view.len
                s = start if -n <= start <= n else (0 if start < 0 else n)
                if s < 0:
                    s += n
                if end is None:
                    e = n
                else:
                    e = end if -n <= end <= n else (0 if end < 0 else n)
                    if e < 0:
                        e += n
                if e < s:
                    e = s
                if e - s >= 65536:  # long enough to let other threads run meanwhile
                    with nogil:
                        crc = jcrc(<const uint8_t*>view.buf + s, e - s)
                else:
                    crc = jcrc(<const uint8_t*>view.buf + s, e - s)
                return crc
            finally:
                PyBuffer_Release(&view)
    return p_java_crc32(buf, start, end)


# -- batch kernels (codec.batch, codec.dispatch_batch, codec.message) ----------------------

cdef object p_scan_units = None
cdef object p_scan_cq_units = None
cdef object p_build_group = None
cdef object p_lazy_message_ext = None
cdef object GroupBuild = None
cdef object index_keys_of = None  # keys.message_index_keys_from_properties


def bind_batch(ns):
    """Take the batch kernels' oracles and helpers from ``ns`` (a mapping). Idempotent."""
    global p_scan_units, p_scan_cq_units, p_build_group, p_lazy_message_ext, GroupBuild, index_keys_of
    p_scan_units = ns["scan_units"]
    p_scan_cq_units = ns["scan_cq_units"]
    p_build_group = ns["build_group"]
    p_lazy_message_ext = ns["lazy_message_ext"]
    GroupBuild = ns["GroupBuild"]
    index_keys_of = ns["message_index_keys_from_properties"]
    bind_ext(ns["MessageExt"], ns["UNSET"], ns["V1"], ns["V2"])


# scan_units flags (codec.batch)
cdef enum:
    F_VERIFY_CRC = 1
    F_CHECK_TAGS = 2
    F_CHECK_Q = 4
    F_PROP_IF_PRESENT = 8
    F_PROP_REQUIRE = 16

# scan_loop outcomes
cdef enum:
    S_DONE = 0      # every unit passed
    S_DOUBT = 1     # the oracle must judge unit *i
    S_UTF8 = 2      # unit *i passed all but the checks that need the GIL (UTF-8, non-ASCII tags)


cdef struct ScanArgs:
    const uint8_t* b
    Py_ssize_t limit
    int64_t base
    const char* topic
    Py_ssize_t topic_len
    int64_t queue_id
    int64_t q
    int flags
    const int64_t* units  # (offset, size, tags) triples
    Py_ssize_t n
    # where the last looked-at unit's properties lie (for S_UTF8)
    Py_ssize_t props_start
    Py_ssize_t props_end
    Py_ssize_t tags_start
    Py_ssize_t tags_end
    bint tags_need_hash   # the tags value is not ASCII: the caller hashes it
    bint props_need_utf8  # the properties are not ASCII: the caller checks UTF-8


cdef int scan_loop(ScanArgs* a, Py_ssize_t* at) noexcept nogil:
    """codec.batch.scan_units's accept path from unit *at on: S_DONE, or where it stopped."""
    cdef Py_ssize_t i = at[0], vstart, vend
    cdef int64_t cl_off, size, tags_code, pos, stored
    cdef Parsed m
    cdef const uint8_t* b = a.b
    cdef int flags = a.flags
    cdef bint prop_crc = (flags & (F_PROP_IF_PRESENT | F_PROP_REQUIRE)) != 0
    cdef int32_t expected
    while i < a.n:
        cl_off = a.units[3 * i]
        size = a.units[3 * i + 1]
        tags_code = a.units[3 * i + 2]
        at[0] = i
        pos = cl_off - a.base
        if pos < 0 or size < MIN_SIZE or size > a.limit - pos:
            return S_DOUBT
        stored = stored_prop_crc(b, pos, size) if prop_crc else NO_PROP_CRC
        if stored == -1:
            return S_DOUBT
        if frame_parse(b, a.limit, pos, (flags & F_VERIFY_CRC) != 0 and stored == NO_PROP_CRC, &m) != 0 \
                or m.total != size:
            return S_DOUBT
        if m.topic_end - m.topic_start != a.topic_len \
                or memcmp(b + m.topic_start, a.topic, a.topic_len) != 0:
            return S_DOUBT
        if r32(b + pos + 12) != a.queue_id:
            return S_DOUBT
        if flags & F_CHECK_Q and r64(b + pos + 20) != a.q + i:
            return S_DOUBT
        if r64(b + pos + 28) != cl_off:
            return S_DOUBT
        if stored != NO_PROP_CRC:
            if jcrc(b + pos, size - RESERVED) != stored:
                return S_DOUBT
        elif flags & F_PROP_REQUIRE:
            return S_DOUBT
        a.props_need_utf8 = not is_ascii(b + m.props_start, m.end - m.props_start)
        a.tags_need_hash = False
        if flags & F_CHECK_TAGS and tags_code != 0 and -0x80000000 <= tags_code <= 0x7FFFFFFF:
            vend = find_tags(b + m.props_start, m.end - m.props_start, &vstart)
            if vend < 0:
                expected = 0
            elif is_ascii(b + m.props_start + vstart, vend - vstart):
                expected = java_hash_ascii(b + m.props_start + vstart, vend - vstart)
            else:
                a.tags_need_hash = True
                a.tags_start = m.props_start + vstart
                a.tags_end = m.props_start + vend
                expected = 0
            if not a.tags_need_hash and expected != tags_code:
                return S_DOUBT
        if a.props_need_utf8 or a.tags_need_hash:
            a.props_start = m.props_start
            a.props_end = m.end
            return S_UTF8
        i += 1
    at[0] = i
    return S_DONE


cdef extern from "stdlib.h":
    void* malloc(size_t n) nogil
    void free(void* p) nogil


#: A batch spanning at least this many bytes is checked with the GIL released.
cdef Py_ssize_t NOGIL_SPAN = 65536


cdef int scan_all(ScanArgs* a, Py_ssize_t* at, bint released):
    """scan_loop from unit *at on, with the checks that need Python objects done between
    its stops (non-ASCII properties or tags): S_DONE, or S_DOUBT at the unit *at."""
    cdef int rc
    while True:
        if released:
            with nogil:
                rc = scan_loop(a, at)
        else:
            rc = scan_loop(a, at)
        if rc != S_UTF8:
            return rc
        try:
            if a.props_need_utf8:
                utf8(a.b + a.props_start, a.props_end - a.props_start)
            if a.tags_need_hash:
                if tags_hash_code(utf8(a.b + a.tags_start, a.tags_end - a.tags_start)) != a.units[3 * at[0] + 2]:
                    return S_DOUBT
        except Exception:
            return S_DOUBT
        at[0] += 1


cdef bint scan_begin(ScanArgs* a, Py_buffer* view, data, base, queue_id, queue_offset, flags,
                     Py_ssize_t n):
    """The scalar arguments of a scan of ``n`` units into ``a`` and ``data``'s buffer into
    ``view``: False (nothing acquired) when they are not what the C loop takes, and the
    caller hands the scan to the oracle."""
    if type(flags) is not int or type(base) is not int or type(queue_id) is not int \
            or type(queue_offset) is not int \
            or (isinstance(data, memoryview) and (data.format != "B" or data.ndim != 1)):
        return False
    try:
        a.base = base
        a.queue_id = queue_id
        a.q = queue_offset
        a.flags = flags
        if a.q < -1 or a.q > 0x7FFFFFFFFFFFFFFF - n or a.flags < 0 or a.flags > 31:
            raise OverflowError
        PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    except Exception:
        return False
    return True


cdef inline void widen_span(int64_t off, int64_t size, int64_t* lo, int64_t* hi) noexcept:
    if off < lo[0]:
        lo[0] = off
    if size > 0 and off < 0x7FFFFFFFFFFFFFFF - size and off + size > hi[0]:
        hi[0] = off + size


cdef int scan_filled(ScanArgs* a, Py_buffer* view, bytes topic, int64_t* arr, Py_ssize_t k,
                     int64_t span_lo, int64_t span_hi, Py_ssize_t* at):
    """scan_all over the ``k`` units filled into ``arr`` (spanning ``span_lo``..``span_hi``
    of the commit log), the GIL released when they span NOGIL_SPAN bytes or more."""
    a.b = <const uint8_t*>view.buf
    a.limit = view.len
    a.topic = PyBytes_AS_STRING(topic)
    a.topic_len = PyBytes_GET_SIZE(topic)
    a.units = arr
    a.n = k
    return scan_all(a, at, k > 1 and span_hi > span_lo
                    and <uint64_t>span_hi - <uint64_t>span_lo >= <uint64_t>NOGIL_SPAN)


def scan_cq_units(cq, data, base, topic, queue_id, queue_offset, flags):
    """Twin of codec.batch_kernels.scan_cq_units: the units come straight from the
    consume-queue bytes, never as Python objects (unless a unit needs the oracle)."""
    cdef Py_buffer view
    cdef ScanArgs a
    cdef int64_t* arr = NULL
    cdef const uint8_t* c
    cdef Py_ssize_t i = 0, n, k
    cdef int64_t span_lo = 0x7FFFFFFFFFFFFFFF, span_hi = -0x7FFFFFFFFFFFFFFF
    cdef int rc = S_DOUBT
    if type(cq) is not bytes or type(topic) is not bytes or len(cq) < 20:
        return p_scan_cq_units(cq, data, base, topic, queue_id, queue_offset, flags)
    n = len(cq) // 20
    if not scan_begin(&a, &view, data, base, queue_id, queue_offset, flags, n):
        return p_scan_cq_units(cq, data, base, topic, queue_id, queue_offset, flags)
    try:
        arr = <int64_t*>malloc(sizeof(int64_t) * 3 * n)
        if arr == NULL:
            raise MemoryError
        c = <const uint8_t*>PyBytes_AS_STRING(cq)
        for k in range(n):
            arr[3 * k] = r64(c + 20 * k)
            arr[3 * k + 1] = r32(c + 20 * k + 8)
            arr[3 * k + 2] = r64(c + 20 * k + 12)
            widen_span(arr[3 * k], arr[3 * k + 1], &span_lo, &span_hi)
        rc = scan_filled(&a, &view, topic, arr, n, span_lo, span_hi, &i)
    finally:
        free(arr)
        PyBuffer_Release(&view)
    if rc == S_DONE:
        return (i, None, "")
    valid, reason, detail = p_scan_cq_units(cq[20 * i:], data, base, topic, queue_id, queue_offset + i, flags)
    return (valid + i, reason, detail)


def scan_units(units, data, base, topic, queue_id, queue_offset, flags):
    """Twin of codec.batch.scan_units."""
    cdef Py_buffer view
    cdef ScanArgs a
    cdef int64_t* arr = NULL
    cdef Py_ssize_t i = 0, n, k
    cdef int64_t c_off, c_size, c_tags
    cdef int64_t span_lo = 0x7FFFFFFFFFFFFFFF, span_hi = -0x7FFFFFFFFFFFFFFF
    cdef int rc = S_DOUBT
    if type(units) is not list:
        units = list(units)
    n = len(units)
    if n == 0 or type(topic) is not bytes \
            or not scan_begin(&a, &view, data, base, queue_id, queue_offset, flags, n):
        return p_scan_units(units, data, base, topic, queue_id, queue_offset, flags)
    try:
        arr = <int64_t*>malloc(sizeof(int64_t) * 3 * n)
        if arr == NULL:
            raise MemoryError
        # the units as C ints, up to the first that is not three Python int64s
        k = 0
        while k < n:
            try:
                if not unpack3(units[k], &c_off, &c_size, &c_tags):
                    break
            except Exception:
                break
            arr[3 * k] = c_off
            arr[3 * k + 1] = c_size
            arr[3 * k + 2] = c_tags
            widen_span(c_off, c_size, &span_lo, &span_hi)
            k += 1
        rc = scan_filled(&a, &view, topic, arr, k, span_lo, span_hi, &i)
        if rc == S_DONE and k < n:
            rc = S_DOUBT  # i == k: the unit that was not three ints
    finally:
        free(arr)
        PyBuffer_Release(&view)
    if rc == S_DONE:
        return (i, None, "")
    valid, reason, detail = p_scan_units(units[i:], data, base, topic, queue_id, queue_offset + i, flags)
    return (valid + i, reason, detail)



# -- the dispatch group loop ----------------------------------------------------------------


cdef extern from "string.h":
    void* memmem(const void* hay, size_t hn, const void* needle, size_t nn) nogil
    void* memchr(const void* p, int c, size_t n) nogil


cdef inline Py_ssize_t find_value(const uint8_t* p, Py_ssize_t n, const char* name, Py_ssize_t ln,
                                  Py_ssize_t* vstart) noexcept nogil:
    """keys._last_value: the end of the value parse_properties keeps for ``name`` (``NAME\\x01``,
    ln bytes) in properties p[0:n] (its start in *vstart), or -1 when there is none."""
    cdef Py_ssize_t k = n - ln, stop
    while k >= 0:
        if (k == 0 or p[k - 1] == 2) and memcmp(p + k, name, ln) == 0:
            stop = k + ln
            while stop < n and p[stop] != 2:
                stop += 1
            if stop > k + ln:
                vstart[0] = k + ln
                return stop
            k -= ln + 1
        else:
            k -= 1
    return -1


cdef inline bint ascii_blank(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """str.strip() of ASCII p[0:n] is empty (str.isspace: \\t..\\r, \\x1c..\\x1f, space)."""
    cdef Py_ssize_t i
    for i in range(n):
        if not (9 <= p[i] <= 13 or 28 <= p[i] <= 32):
            return False
    return True


cdef object ascii_index_keys(const uint8_t* p, Py_ssize_t n):
    """keys.message_index_keys_from_properties of ASCII properties p[0:n]."""
    cdef Py_ssize_t ks = 0, ke, us = 0, ue
    cdef bint u_ok
    cdef dict keys
    ke = find_value(p, n, b"KEYS\x01", 5, &ks)
    ue = find_value(p, n, b"UNIQ_KEY\x01", 9, &us)
    if ke >= 0 and memchr(p + ks, 32, ke - ks) == NULL:  # one key (or none)
        if ue < 0:
            return () if ascii_blank(p + ks, ke - ks) else (utf8(p + ks, ke - ks),)
        u_ok = not ascii_blank(p + us, ue - us)
        if ascii_blank(p + ks, ke - ks):
            return (utf8(p + us, ue - us),) if u_ok else ()
        if not u_ok:
            return (utf8(p + ks, ke - ks),)
        if ke - ks == ue - us and memcmp(p + ks, p + us, ke - ks) == 0:
            return (utf8(p + us, ue - us),)
        return (utf8(p + us, ue - us), utf8(p + ks, ke - ks))
    if ke < 0:
        if ue < 0 or ascii_blank(p + us, ue - us):
            return ()
        return (utf8(p + us, ue - us),)
    keys = {}
    if ue >= 0 and not ascii_blank(p + us, ue - us):
        keys[utf8(p + us, ue - us)] = None
    for key in utf8(p + ks, ke - ks).split(" "):
        if key.strip():
            keys[key] = None
    return tuple(keys)


def build_group(buf, positions, offsets, sizes, tags_codes, tiered_offset, want_keys=True):
    """Twin of codec.dispatch_batch.build_group."""
    cdef Py_buffer view
    cdef Py_ssize_t n, i = 0, out = 0, k, props_n
    cdef int64_t total_size = 0, sz, size, pos, tags, tiered, stored
    cdef int64_t* c_sizes = NULL
    cdef const uint8_t* b
    cdef uint8_t* d
    cdef uint8_t* u
    cdef Parsed m
    cdef int32_t crc
    cdef list timestamps, keys
    cdef bint with_keys = bool(want_keys), doubt = False
    cdef bytes last_topic = None
    if type(positions) is not list and type(positions) is not tuple \
            or type(offsets) is not list and type(offsets) is not tuple \
            or type(sizes) is not list and type(sizes) is not tuple \
            or type(tags_codes) is not list and type(tags_codes) is not tuple \
            or type(tiered_offset) is not int \
            or (isinstance(buf, memoryview) and (buf.format != "B" or buf.ndim != 1)):
        return p_build_group(buf, positions, offsets, sizes, tags_codes, tiered_offset, want_keys)
    n = len(positions)
    if len(sizes) < n:
        return p_build_group(buf, positions, offsets, sizes, tags_codes, tiered_offset, want_keys)
    c_sizes = <int64_t*>malloc(sizeof(int64_t) * (n + 1))
    if c_sizes == NULL:
        raise MemoryError
    try:
        try:
            for k in range(n):
                sz = i64(sizes[k])
                if sz < 0 or sz > 0x7FFFFFFF:
                    raise OverflowError
                c_sizes[k] = sz
                total_size += sz
            tiered = i64(tiered_offset)
            PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        except Exception:
            return p_build_group(buf, positions, offsets, sizes, tags_codes, tiered_offset, want_keys)
        try:
            data = bytearray(total_size)
            units = bytearray(20 * n)
            d = <uint8_t*>(<char*>data)
            u = <uint8_t*>(<char*>units)
            timestamps = []
            keys = [] if with_keys else None
            b = <const uint8_t*>view.buf
            while i < n:
                size = c_sizes[i]
                try:
                    pos = i64(positions[i])
                    tags = i64(tags_codes[i])
                except Exception:
                    break
                if size < 40 or pos < 0 or pos > view.len - size or tiered > 0x7FFFFFFFFFFFFFFF - size:
                    break
                if frame_parse(b, view.len, pos, True, &m) != 0 or m.total != size:
                    break
                props_n = m.end - m.props_start
                try:
                    if not is_ascii(b + m.topic_start, m.topic_end - m.topic_start):
                        topic = PyBytes_FromStringAndSize(<const char*>b + m.topic_start, m.topic_end - m.topic_start)
                        if topic != last_topic:
                            utf8(b + m.topic_start, m.topic_end - m.topic_start)
                            last_topic = topic
                    if not is_ascii(b + m.props_start, props_n):
                        utf8(b + m.props_start, props_n)
                except UnicodeDecodeError:
                    break
                stored = stored_prop_crc(b, pos, size)
                if stored == -1:
                    break
                if stored != NO_PROP_CRC and jcrc(b + pos, size - RESERVED) != stored:
                    break
                if with_keys:
                    if props_n >= 3 and memmem(b + m.props_start, props_n, b"KEY", 3) != NULL:
                        try:
                            if is_ascii(b + m.props_start, props_n):
                                item = ascii_index_keys(b + m.props_start, props_n)
                            else:
                                item = index_keys_of(utf8(b + m.props_start, props_n))
                        except Exception:
                            break
                    else:
                        item = ()
                memcpy(d + out, b + pos, size)
                w64(d + out + 28, <uint64_t>tiered)
                if stored != NO_PROP_CRC:
                    crc = jcrc(d + out, size - RESERVED)
                    for k in range(10):
                        d[out + size - 11 + k] = <uint8_t>(48 + crc % 10)
                        crc //= 10
                w64(u + 20 * i, <uint64_t>tiered)
                w32(u + 20 * i + 8, <uint32_t>size)
                w64(u + 20 * i + 12, <uint64_t>tags)
                timestamps.append(PyLong_FromLongLong(r64(b + pos + 48 + m.bh)))
                if with_keys:
                    keys.append(item)
                out += size
                tiered += size
                i += 1
        finally:
            PyBuffer_Release(&view)
    finally:
        free(c_sizes)
    if i == n:
        return GroupBuild(n, data, units, timestamps, keys, None)
    rest = p_build_group(buf, positions[i:], offsets[i:], sizes[i:], tags_codes[i:], tiered, want_keys)
    del data[out:]
    del units[20 * i:]
    data += rest[1]
    units += rest[2]
    timestamps.extend(rest[3])
    if keys is not None:
        keys.extend(rest[4])
    return GroupBuild(i + rest[0], data, units, timestamps, keys, rest[5])


# -- the lazy decode -------------------------------------------------------------------------

cdef extern from *:
    """
    #include "structmember.h"
    static Py_ssize_t ts_slot_offset(PyObject* descr) {
        PyMemberDef* d;
        if (Py_TYPE(descr) != &PyMemberDescr_Type) return -1;
        d = ((PyMemberDescrObject*)descr)->d_member;
        if (d->type != T_OBJECT_EX || (d->flags & READONLY)) return -1;
        return d->offset;
    }
    /* Store v (a new reference, stolen) in the slot at off of o. */
    static void ts_set_slot(PyObject* o, Py_ssize_t off, PyObject* v) {
        PyObject** p = (PyObject**)((char*)o + off);
        PyObject* old = *p;
        *p = v;
        Py_XDECREF(old);
    }
    static void ts_set_slot_borrowed(PyObject* o, Py_ssize_t off, PyObject* v) {
        Py_INCREF(v);
        ts_set_slot(o, off, v);
    }
    static PyObject* ts_alloc(PyObject* cls) {
        PyTypeObject* t = (PyTypeObject*)cls;
        return t->tp_alloc(t, 0);
    }
    """
    Py_ssize_t ts_slot_offset(object descr)
    void ts_set_slot(object o, Py_ssize_t off, PyObject* v)
    void ts_set_slot_borrowed(object o, Py_ssize_t off, object v)
    object ts_alloc(object cls)


cdef enum:
    X_TOPIC = 0
    X_QUEUE_ID
    X_QUEUE_OFFSET
    X_COMMITLOG_OFFSET
    X_STORE_TIMESTAMP
    X_BORN_TIMESTAMP
    X_BODY
    X_SYS_FLAG
    X_BODY_CRC
    X_STORE_SIZE
    X_RECONSUME
    X_PREP
    X_FLAG
    X_VERSION
    X_KEYS
    X_TAGS
    X_PROPERTIES
    X_BORN_HOST
    X_STORE_HOST
    X_RAW
    X_LAYOUT
    X_COUNT

_EXT_SLOTS = ("topic", "queue_id", "queue_offset", "commitlog_offset", "store_timestamp", "born_timestamp",
              "body", "sys_flag", "body_crc", "store_size", "reconsume_times", "prepared_transaction_offset",
              "flag", "version", "_keys", "_tags", "_properties", "_born_host", "_store_host", "_raw", "_layout")

cdef Py_ssize_t ext_off[X_COUNT]
cdef bint ext_ok = False
cdef object ExtClass = None
cdef object UNSET = None


cdef bind_ext(cls, unset, v1, v2):
    """Find the slot offsets of MessageExt; without them lazy_message_ext is the oracle."""
    global ext_ok, ExtClass, UNSET
    cdef int k
    ext_ok = False
    ExtClass = cls
    UNSET = unset
    if type(cls) is not type or "__dict__" in cls.__dict__ or "__weakref__" in cls.__dict__ \
            or cls.__new__ is not object.__new__ or len(_EXT_SLOTS) != X_COUNT \
            or sorted(cls.__dict__.get("__slots__", ())) != sorted(_EXT_SLOTS):  # every slot filled
        return
    for k in range(X_COUNT):
        descr = cls.__dict__.get(_EXT_SLOTS[k])
        if descr is None:
            return
        ext_off[k] = ts_slot_offset(descr)
        if ext_off[k] < 0:
            return
    ext_ok = True


def lazy_message_ext(raw, topic=None):
    """Twin of codec.message.lazy_message_ext."""
    cdef const uint8_t* b
    cdef Py_ssize_t n, bh, sh, hs, sp, tl, t_start, t_end
    cdef int32_t sys_flag, body_len
    cdef bint v2
    if not ext_ok or type(raw) is not bytes or (topic is not None and type(topic) is not str):
        return p_lazy_message_ext(raw, topic)
    b = <const uint8_t*>PyBytes_AS_STRING(raw)
    n = PyBytes_GET_SIZE(raw)
    if n < 40:
        return p_lazy_message_ext(raw, topic)
    sys_flag = r32(b + 36)
    bh = 20 if sys_flag & 0x10 else 8
    sh = 20 if sys_flag & 0x20 else 8
    hs = 72 + bh + sh
    if n < hs:
        return p_lazy_message_ext(raw, topic)
    body_len = r32(b + hs - 4)
    if body_len < 0 or body_len > n - hs:
        return p_lazy_message_ext(raw, topic)
    v2 = ru32(b + 4) == MAGIC_V2
    if topic is None:
        tl = 2 if v2 else 1
        if hs + body_len + tl > n:
            return p_lazy_message_ext(raw, topic)
        if v2:
            t_start = hs + body_len + 2
            t_end = t_start + ((<Py_ssize_t>b[hs + body_len] << 8) | b[hs + body_len + 1])
        else:
            t_start = hs + body_len + 1
            t_end = t_start + b[hs + body_len]
        if t_end > n:
            return p_lazy_message_ext(raw, topic)
        try:
            topic = utf8(b + t_start, t_end - t_start)
        except UnicodeDecodeError:
            return p_lazy_message_ext(raw, None)
    sp = 48 + bh
    body = PyBytes_FromStringAndSize(<const char*>b + hs, body_len)
    o = ts_alloc(ExtClass)
    ts_set_slot_borrowed(o, ext_off[X_TOPIC], topic)
    ts_set_slot_borrowed(o, ext_off[X_QUEUE_ID], PyLong_FromLong(r32(b + 12)))
    ts_set_slot_borrowed(o, ext_off[X_QUEUE_OFFSET], PyLong_FromLongLong(r64(b + 20)))
    ts_set_slot_borrowed(o, ext_off[X_COMMITLOG_OFFSET], PyLong_FromLongLong(r64(b + 28)))
    ts_set_slot_borrowed(o, ext_off[X_STORE_TIMESTAMP], PyLong_FromLongLong(r64(b + sp)))
    ts_set_slot_borrowed(o, ext_off[X_BORN_TIMESTAMP], PyLong_FromLongLong(r64(b + 40)))
    ts_set_slot_borrowed(o, ext_off[X_BODY], body)
    ts_set_slot_borrowed(o, ext_off[X_SYS_FLAG], PyLong_FromLong(sys_flag))
    ts_set_slot_borrowed(o, ext_off[X_BODY_CRC], PyLong_FromLong(r32(b + 8)))
    ts_set_slot_borrowed(o, ext_off[X_STORE_SIZE], PyLong_FromLong(r32(b)))
    ts_set_slot_borrowed(o, ext_off[X_RECONSUME], PyLong_FromLong(r32(b + sp + 8 + sh)))
    ts_set_slot_borrowed(o, ext_off[X_PREP], PyLong_FromLongLong(r64(b + sp + 8 + sh + 4)))
    ts_set_slot_borrowed(o, ext_off[X_FLAG], PyLong_FromLong(r32(b + 16)))
    ts_set_slot_borrowed(o, ext_off[X_VERSION], V2 if v2 else V1)
    ts_set_slot_borrowed(o, ext_off[X_KEYS], UNSET)
    ts_set_slot_borrowed(o, ext_off[X_TAGS], UNSET)
    ts_set_slot_borrowed(o, ext_off[X_PROPERTIES], UNSET)
    ts_set_slot_borrowed(o, ext_off[X_BORN_HOST], UNSET)
    ts_set_slot_borrowed(o, ext_off[X_STORE_HOST], UNSET)
    ts_set_slot_borrowed(o, ext_off[X_RAW], raw)
    ts_set_slot_borrowed(o, ext_off[X_LAYOUT], None)
    return o


# -- the key index insert loop (codec.index_batch) ---------------------------------------------

cdef object p_link_items = None
cdef object p_every_slot_fits = None
cdef enum:
    COMPACT_ITEM = 28  # codec.tiered_index.COMPACT_ITEM_SIZE: a compacted index item's bytes


def bind_index(ns):
    """Take link_items's and every_slot_fits's oracles from ``ns`` (a mapping). Idempotent."""
    global p_link_items, p_every_slot_fits
    p_link_items = ns["link_items"]
    p_every_slot_fits = ns["every_slot_fits"]


def every_slot_fits(table, start, end):
    """Twin of codec.tiered_index.every_slot_fits: one pass over the big-endian ``(position,
    length)`` pairs, no Python object per slot. Anything but a non-empty bytes table of whole
    slots and int bounds that fit 64 bits goes to the oracle."""
    cdef const uint8_t* c
    cdef Py_ssize_t n, k
    cdef int64_t lo, hi, pos, length
    if type(table) is not bytes or type(start) is not int or type(end) is not int \
            or len(table) == 0 or len(table) % 8:
        return p_every_slot_fits(table, start, end)
    try:
        lo = start
        hi = end
    except OverflowError:
        return p_every_slot_fits(table, start, end)
    n = len(table) // 8
    c = <const uint8_t*>PyBytes_AS_STRING(table)
    for k in range(n):
        pos = r32(c + 8 * k)
        if pos < lo or pos > hi:
            return False
        length = r32(c + 8 * k + 4)
        if length != 0 and (length < 0 or length % COMPACT_ITEM != 0 or pos + length > hi):
            return False
    return True


cdef inline uint32_t hash_units(uint32_t h, str s) except? 0xFFFFFFFF:
    """Java's hashCode continued from ``h`` over the UTF-16 code units of ``s``."""
    cdef Py_UCS4 ch
    cdef uint32_t c
    for ch in s:
        c = <uint32_t>ch
        if c > 0xFFFF:
            c -= 0x10000
            h = 31 * h + (0xD800 + (c >> 10))
            h = 31 * h + (0xDC00 + (c & 0x3FF))
        else:
            h = 31 * h + c
    return h


def link_items(slots, slot_count, count, topic, topic_id, queue_id, keys, offsets, sizes, diffs):
    """Twin of codec.index_batch.link_items (all or nothing: any doubt hands the call over)."""
    cdef Py_buffer view
    cdef Py_ssize_t m, nm, k, nk, total = 0, at
    cdef int64_t c_slot_count, c_count, off, slot
    cdef int32_t tid, qid, size, diff, prev, hash_code
    cdef uint32_t prefix, h
    cdef uint8_t* o
    cdef const uint8_t* b
    cdef dict heads
    cdef int64_t new_slots = 0
    if type(topic) is not str or type(slot_count) is not int or type(count) is not int \
            or type(topic_id) is not int or type(queue_id) is not int \
            or type(keys) is not list and type(keys) is not tuple \
            or type(offsets) is not list and type(offsets) is not tuple \
            or type(sizes) is not list and type(sizes) is not tuple \
            or type(diffs) is not list and type(diffs) is not tuple:
        return p_link_items(slots, slot_count, count, topic, topic_id, queue_id, keys, offsets, sizes, diffs)
    try:
        nm = len(keys)
        if len(offsets) < nm or len(sizes) < nm or len(diffs) < nm:
            raise IndexError
        for m in range(nm):
            ks = keys[m]
            if type(ks) is not list and type(ks) is not tuple:
                raise TypeError
            for key in ks:
                if type(key) is not str:
                    raise TypeError
            total += len(ks)
        c_slot_count = slot_count
        c_count = count
        tid = topic_id
        qid = queue_id
        if c_slot_count <= 0 or c_count < -0x80000000 or c_count > 0x7FFFFFFF - total:
            raise OverflowError
        PyObject_GetBuffer(slots, &view, PyBUF_SIMPLE)
    except Exception:
        return p_link_items(slots, slot_count, count, topic, topic_id, queue_id, keys, offsets, sizes, diffs)
    items = bytearray(32 * total)
    o = <uint8_t*>(<char*>items)
    heads = {}
    at = 0
    try:
        b = <const uint8_t*>view.buf
        prefix = hash_units(hash_units(0, topic), "#")
        for m in range(nm):
            ks = keys[m]
            if not len(ks):
                continue
            o_off, o_size, o_diff = offsets[m], sizes[m], diffs[m]
            if type(o_off) is not int or type(o_size) is not int or type(o_diff) is not int:
                raise TypeError
            off = o_off
            size = o_size
            diff = o_diff
            for key in ks:
                h = hash_units(prefix, key)
                hash_code = <int32_t>h
                if hash_code == <int32_t>0x80000000:
                    hash_code = 0
                elif hash_code < 0:
                    hash_code = -hash_code
                slot = hash_code % c_slot_count
                got = heads.get(slot)
                if got is None:
                    if 28 + slot * 8 + 4 > view.len:
                        raise IndexError
                    prev = r32(b + 28 + slot * 8)
                    if not 0 <= prev <= c_count:
                        prev = 0
                    if prev == 0:
                        new_slots += 1
                else:
                    prev = got
                c_count += 1
                w32(o + at, <uint32_t>hash_code)
                w32(o + at + 4, <uint32_t>tid)
                w32(o + at + 8, <uint32_t>qid)
                w64(o + at + 12, <uint64_t>off)
                w32(o + at + 20, <uint32_t>size)
                w32(o + at + 24, <uint32_t>diff)
                w32(o + at + 28, <uint32_t>prev)
                at += 32
                heads[slot] = c_count
    except Exception:
        return p_link_items(slots, slot_count, count, topic, topic_id, queue_id, keys, offsets, sizes, diffs)
    finally:
        PyBuffer_Release(&view)
    return items, heads, new_slots


# -- the units of a read (codec.batch.cq_span) ---------------------------------------------------

cdef object p_cq_span = None
cdef object p_cq_span_items = None
cdef object p_cq_units_ends = None
cdef object p_cq_runs = None


def bind_span(ns):
    """Take cq_span's, cq_units_ends's and batch_items's oracles from ``ns`` (a mapping). Idempotent."""
    global p_cq_span, p_cq_span_items, p_cq_units_ends, p_cq_runs
    p_cq_span = ns["cq_span"]
    p_cq_span_items = ns["batch_items"]
    p_cq_units_ends = ns["cq_units_ends"]
    p_cq_runs = ns["cq_runs"]


def cq_runs(cq, bases, max_bytes):
    """Twin of codec.batch_kernels.cq_runs (no Python object per unit)."""
    cdef Py_buffer view
    cdef const uint8_t* b
    cdef Py_ssize_t n, i, j, lo, hi, mid, nb, k
    cdef int64_t off, size, prev_end = 0, first, limit, mb
    cdef int64_t* ends = NULL
    cdef int64_t* cb = NULL
    cdef list runs
    if type(max_bytes) is not int or type(bases) is not list or type(cq) is not bytes:
        return p_cq_runs(cq, bases, max_bytes)
    nb = len(bases)
    n = len(cq) // 20
    if n == 0 or nb == 0:
        return p_cq_runs(cq, bases, max_bytes)
    try:
        mb = max_bytes
        if mb <= 0:
            raise OverflowError
        cb = <int64_t*>malloc(sizeof(int64_t) * nb)
        if cb == NULL:
            raise MemoryError
        for k in range(nb):
            if type(bases[k]) is not int:
                raise TypeError
            cb[k] = bases[k]
    except Exception:
        free(cb)
        return p_cq_runs(cq, bases, max_bytes)
    try:
        b = <const uint8_t*>PyBytes_AS_STRING(cq)
        ends = <int64_t*>malloc(sizeof(int64_t) * n)
        if ends == NULL:
            raise MemoryError
        for i in range(n):
            off = r64(b + 20 * i)
            size = r32(b + 20 * i + 8)
            if size <= 0 or (i and prev_end > off):
                return None
            if off > 0x7FFFFFFFFFFFFFFF - size - mb:
                return p_cq_runs(cq, bases, max_bytes)  # sums could overflow: Python ints decide
            prev_end = off + size
            ends[i] = prev_end
        if r64(b) < cb[0]:
            return None
        runs = []
        i = 0
        while i < n:
            first = r64(b + 20 * i)
            # the segment holding first: bisect_right(bases, first) - 1
            lo, hi = 0, nb
            while lo < hi:
                mid = (lo + hi) // 2
                if first < cb[mid]:
                    hi = mid
                else:
                    lo = mid + 1
            limit = first + mb
            if lo < nb and cb[lo] < limit:
                limit = cb[lo]
            # bisect_right(ends, limit, i + 1, n)
            lo, hi = i + 1, n
            while lo < hi:
                mid = (lo + hi) // 2
                if limit < ends[mid]:
                    hi = mid
                else:
                    lo = mid + 1
            j = lo
            runs.append((i, j, first, ends[j - 1]))
            i = j
        return runs
    finally:
        free(ends)
        free(cb)


def cq_units_ends(cq):
    """Twin of codec.batch_kernels.cq_units_ends."""
    cdef Py_buffer view
    cdef const uint8_t* b
    cdef Py_ssize_t n, i
    cdef int64_t off, size, prev_end = 0
    cdef bint ordered = True
    cdef list units, ends
    if isinstance(cq, memoryview) and (cq.format != "B" or cq.ndim != 1):
        return p_cq_units_ends(cq)  # its len() counts items
    try:
        PyObject_GetBuffer(cq, &view, PyBUF_SIMPLE)
    except Exception:
        return p_cq_units_ends(cq)
    try:
        b = <const uint8_t*>view.buf
        n = view.len // 20
        units = []
        ends = []
        for i in range(n):
            off = r64(b + 20 * i)
            size = r32(b + 20 * i + 8)
            units.append((PyLong_FromLongLong(off), PyLong_FromLong(size), PyLong_FromLongLong(r64(b + 20 * i + 12))))
            if ordered:
                if size <= 0 or (i and prev_end > off):
                    ordered = False
                elif off > 0x7FFFFFFFFFFFFFFF - size:
                    return p_cq_units_ends(cq)  # off + size overflows: Python ints decide
                else:
                    prev_end = off + size
                    ends.append(PyLong_FromLongLong(prev_end))
        return units, (ends if ordered and n else None)
    finally:
        PyBuffer_Release(&view)


def cq_span(cq, max_bytes):
    """Twin of codec.batch.cq_span."""
    cdef Py_buffer view
    cdef const uint8_t* b
    cdef Py_ssize_t n, i, keep
    cdef int64_t first, limit, off, size, end = 0, mb
    cdef list units
    if type(max_bytes) is not int or (isinstance(cq, memoryview) and (cq.format != "B" or cq.ndim != 1)):
        return p_cq_span(cq, max_bytes)
    try:
        mb = max_bytes
        PyObject_GetBuffer(cq, &view, PyBUF_SIMPLE)
    except Exception:
        return p_cq_span(cq, max_bytes)
    try:
        b = <const uint8_t*>view.buf
        n = view.len // 20
        if n == 0:
            return [], 0
        first = r64(b)
        if (mb > 0 and first > 0x7FFFFFFFFFFFFFFF - mb) or (mb < 0 and first < -0x7FFFFFFFFFFFFFFF - mb):
            return p_cq_span(cq, max_bytes)
        limit = first + mb
        keep = n
        for i in range(n):
            off = r64(b + 20 * i)
            size = r32(b + 20 * i + 8)
            if off > 0x7FFFFFFFFFFFFFFF - 0x80000000 or off < -0x7FFFFFFFFFFFFFFF + 0x80000000:
                return p_cq_span(cq, max_bytes)  # off + size could overflow: Python ints decide
            if i and off + size > limit:
                keep = i
                break
            if i == 0 or off + size > end:
                end = off + size
            if off < first:
                keep = i + 1
                break
        units = []
        for i in range(keep):
            units.append((PyLong_FromLongLong(r64(b + 20 * i)), PyLong_FromLong(r32(b + 20 * i + 8)),
                          PyLong_FromLongLong(r64(b + 20 * i + 12))))
        return units, end
    finally:
        PyBuffer_Release(&view)


def batch_items(units, data, base, queue_offset):
    """Twin of codec.batch.batch_items (bytes data and plain (int, int, int) tuples only)."""
    cdef Py_ssize_t i, n, limit
    cdef int64_t c_base, q, off, size, tags
    cdef const char* b
    cdef list out
    if type(units) is not list or type(data) is not bytes or type(base) is not int \
            or type(queue_offset) is not int:
        return p_cq_span_items(units, data, base, queue_offset)
    n = len(units)
    try:
        c_base = base
        q = queue_offset
        if q > 0x7FFFFFFFFFFFFFFF - n or q < -0x7FFFFFFFFFFFFFFF:
            raise OverflowError
    except Exception:
        return p_cq_span_items(units, data, base, queue_offset)
    b = PyBytes_AS_STRING(data)
    limit = PyBytes_GET_SIZE(data)
    out = []
    for i in range(n):
        unit = units[i]
        try:
            if not unpack3(unit, &off, &size, &tags):
                return p_cq_span_items(units, data, base, queue_offset)
        except Exception:
            return p_cq_span_items(units, data, base, queue_offset)
        if off < c_base or size < 0 or off - c_base > limit or size > limit - (off - c_base):
            return p_cq_span_items(units, data, base, queue_offset)  # a slice Python would clip
        out.append((PyLong_FromLongLong(q + i), PyBytes_FromStringAndSize(b + (off - c_base), size),
                    <object>PyTuple_GET_ITEM(unit, 2)))
    return out


def zlib_crc32(data, unsigned int crc=0, bint clmul=True):
    """zlib.crc32(data, crc) computed by the core's CRC kernel (``clmul=False``: zlib's code
    only). For the oracle tests: both must equal ``zlib.crc32`` on every input."""
    cdef Py_buffer view
    cdef uint32_t out
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        out = tiered_crc32_with(crc, <const unsigned char*>view.buf, <size_t>view.len, 1 if clmul else 0)
    finally:
        PyBuffer_Release(&view)
    return out


def crc32_uses_clmul():
    """True when this CPU runs the carry-less-multiplication CRC path."""
    return bool(tiered_crc32_has_clmul())


# -- Arrow columns of validated messages (the Spark read path) ------------------------------


cdef struct PropWalk:
    Py_ssize_t pairs         # kept (name, value) pairs
    Py_ssize_t name_bytes
    Py_ssize_t value_bytes
    Py_ssize_t keys          # non-empty words of KEYS
    Py_ssize_t key_bytes
    Py_ssize_t tag_bytes
    bint has_tags
    bint repeated            # a name occurs twice: the dict semantics are the pure builder's
    bint non_ascii


cdef inline bint same_bytes(const uint8_t* a, Py_ssize_t an, const uint8_t* b, Py_ssize_t bn) noexcept nogil:
    return an == bn and memcmp(a, b, an) == 0


cdef void walk_props(const uint8_t* p, Py_ssize_t n, PropWalk* w,
                     int32_t* name_off, uint8_t* name_data, int32_t* value_off, uint8_t* value_data,
                     int32_t* key_off, uint8_t* key_data, uint8_t* tag_data) noexcept nogil:
    """parse_properties over p[0:n]: count (output pointers NULL) or write the kept pairs, the
    words of KEYS and the value of TAGS, continuing the counters in ``w``. Marks a repeated name."""
    cdef Py_ssize_t start = 0, stop, sep, k, ws, first = w.pairs
    cdef Py_ssize_t nlen, vlen
    cdef const uint8_t* name
    cdef const uint8_t* value
    for k in range(n):
        if p[k] >= 0x80:
            w.non_ascii = True
            break
    while start <= n:
        if next_pair(p, n, start, &stop, &sep):
            name = p + start
            nlen = sep - start
            value = p + sep + 1
            vlen = stop - sep - 1
            if name_off != NULL:
                memcpy(name_data + w.name_bytes, name, nlen)
                memcpy(value_data + w.value_bytes, value, vlen)
            w.name_bytes += nlen
            w.value_bytes += vlen
            w.pairs += 1
            if name_off != NULL:
                name_off[w.pairs] = <int32_t>w.name_bytes
                value_off[w.pairs] = <int32_t>w.value_bytes
            if same_bytes(name, nlen, <const uint8_t*>b"KEYS", 4):
                k = 0
                while k < vlen:
                    while k < vlen and value[k] == 32:
                        k += 1
                    ws = k
                    while k < vlen and value[k] != 32:
                        k += 1
                    if k > ws:
                        if key_off != NULL:
                            memcpy(key_data + w.key_bytes, value + ws, k - ws)
                        w.key_bytes += k - ws
                        w.keys += 1
                        if key_off != NULL:
                            key_off[w.keys] = <int32_t>w.key_bytes
            elif same_bytes(name, nlen, <const uint8_t*>b"TAGS", 4):
                if tag_data != NULL:
                    memcpy(tag_data + w.tag_bytes, value, vlen)
                w.tag_bytes += vlen
                w.has_tags = True
        start = stop + 1
    if name_off == NULL:
        w.repeated = w.repeated or has_repeat(p, n, w.pairs - first)


cdef bint has_repeat(const uint8_t* p, Py_ssize_t n, Py_ssize_t pairs) noexcept nogil:
    """Whether two kept pairs of p[0:n] share a name (quadratic: a message has few properties)."""
    cdef Py_ssize_t a_start = 0, a_stop, a_sep, b_start, b_stop, b_sep
    if pairs < 2:
        return False
    while a_start <= n:
        if next_pair(p, n, a_start, &a_stop, &a_sep):
            b_start = a_stop + 1
            while b_start <= n:
                if (next_pair(p, n, b_start, &b_stop, &b_sep)
                        and same_bytes(p + a_start, a_sep - a_start, p + b_start, b_sep - b_start)):
                    return True
                b_start = b_stop + 1
        a_start = a_stop + 1
    return False


cdef inline void put_i64(bytearray buf, Py_ssize_t i, int64_t v) noexcept:
    memcpy(PyByteArray_AS_STRING(buf) + 8 * i, &v, 8)


def message_columns(data, positions):
    """The Arrow buffers of the validated messages at ``positions`` of ``data`` (``bytes``), for
    :func:`tiered_core.spark.source.arrow_rows.batch_to_arrow`: ``None`` when the pure builder must
    decide (a repeated property name, text that is not UTF-8, a frame that does not parse,
    offsets beyond int32), else a tuple of buffers (native-endian int64 / int32):

    ``(queue_offsets, physical_offsets, store_us, born_us, body_offsets, body_data, map_offsets,
    name_offsets, name_data, value_offsets, value_data, key_list_offsets, key_offsets, key_data,
    tag_validity, tag_offsets, tag_data, tag_nulls)``.
    Properties follow ``parse_properties``; keys are the non-empty words of ``KEYS``; tags the
    value of ``TAGS`` (null when absent); times are milliseconds x 1000 (wrapping, as Arrow's
    ``multiply``)."""
    cdef Py_ssize_t n, i
    cdef Py_ssize_t* at
    if type(data) is not bytes or type(positions) is not list:
        return None
    n = len(positions)
    # A private copy: the passes re-read the positions after allocations that may run Python
    # code (a finalizer could change the caller's list between the sizing pass and the copies).
    at = <Py_ssize_t*>PyMem_Malloc((n + 1) * sizeof(Py_ssize_t))
    if at == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            item = positions[i]
            if type(item) is not int:
                return None
            at[i] = item
        return _columns_at(data, at, n)
    finally:
        PyMem_Free(at)


def message_columns_cq(data, cq, Py_ssize_t base):
    """:func:`message_columns` of the messages that the consume-queue units ``cq`` (``bytes``,
    20 bytes a unit, as stored) point at: each unit's commit-log offset minus ``base`` is a
    position in ``data``. Spares the reader a tuple and an int per message. ``None`` as there,
    or when ``cq`` is not whole units."""
    cdef Py_ssize_t n, i
    cdef Py_ssize_t* at
    cdef const uint8_t* c
    if type(data) is not bytes or type(cq) is not bytes or PyBytes_GET_SIZE(cq) % 20:
        return None
    n = PyBytes_GET_SIZE(cq) // 20
    c = <const uint8_t*>PyBytes_AS_STRING(cq)
    at = <Py_ssize_t*>PyMem_Malloc((n + 1) * sizeof(Py_ssize_t))
    if at == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            # frame_parse refuses a position outside data; one that wrapped is negative or huge
            at[i] = <Py_ssize_t>(<uint64_t>r64(c + 20 * i) - <uint64_t>base)
        return _columns_at(data, at, n)
    finally:
        PyMem_Free(at)


cdef object _columns_at(bytes data, const Py_ssize_t* at, Py_ssize_t n):
    """The buffers of :func:`message_columns` for the ``n`` messages at positions ``at``."""
    cdef Py_ssize_t i, pos, limit, body_total = 0, props_total = 0
    cdef const uint8_t* b
    cdef Parsed m
    cdef PropWalk w
    b = <const uint8_t*>PyBytes_AS_STRING(data)
    limit = PyBytes_GET_SIZE(data)
    memset(&w, 0, sizeof(w))
    for i in range(n):
        pos = at[i]
        if frame_parse(b, limit, pos, False, &m) != 0:
            return None
        body_total += m.body_end - m.body_start
        props_total += m.end - m.props_start
        walk_props(b + m.props_start, m.end - m.props_start, &w, NULL, NULL, NULL, NULL, NULL, NULL, NULL)
        if w.repeated:
            return None
    if body_total > 0x7FFFFFFF or props_total > 0x7FFFFFFF:
        return None
    if w.non_ascii:
        for i in range(n):
            frame_parse(b, limit, at[i], False, &m)
            try:
                PyUnicode_DecodeUTF8(<const char*>(b + m.props_start), m.end - m.props_start, NULL)
            except UnicodeDecodeError:
                return None
    cdef bytearray queue_offsets = PyByteArray_FromStringAndSize(NULL, 8 * n)
    cdef bytearray physical = PyByteArray_FromStringAndSize(NULL, 8 * n)
    cdef bytearray store_us = PyByteArray_FromStringAndSize(NULL, 8 * n)
    cdef bytearray born_us = PyByteArray_FromStringAndSize(NULL, 8 * n)
    cdef bytearray body_offsets = PyByteArray_FromStringAndSize(NULL, 4 * (n + 1))
    cdef bytearray body_data = PyByteArray_FromStringAndSize(NULL, body_total)
    cdef bytearray map_offsets = PyByteArray_FromStringAndSize(NULL, 4 * (n + 1))
    cdef bytearray name_offsets = PyByteArray_FromStringAndSize(NULL, 4 * (w.pairs + 1))
    cdef bytearray name_data = PyByteArray_FromStringAndSize(NULL, w.name_bytes)
    cdef bytearray value_offsets = PyByteArray_FromStringAndSize(NULL, 4 * (w.pairs + 1))
    cdef bytearray value_data = PyByteArray_FromStringAndSize(NULL, w.value_bytes)
    cdef bytearray key_list_offsets = PyByteArray_FromStringAndSize(NULL, 4 * (n + 1))
    cdef bytearray key_offsets = PyByteArray_FromStringAndSize(NULL, 4 * (w.keys + 1))
    cdef bytearray key_data = PyByteArray_FromStringAndSize(NULL, w.key_bytes)
    cdef bytearray tag_validity = PyByteArray_FromStringAndSize(NULL, (n + 7) // 8)
    cdef bytearray tag_offsets = PyByteArray_FromStringAndSize(NULL, 4 * (n + 1))
    cdef bytearray tag_data = PyByteArray_FromStringAndSize(NULL, w.tag_bytes)
    cdef int32_t* bo = <int32_t*>PyByteArray_AS_STRING(body_offsets)
    cdef int32_t* mo = <int32_t*>PyByteArray_AS_STRING(map_offsets)
    cdef int32_t* klo = <int32_t*>PyByteArray_AS_STRING(key_list_offsets)
    cdef int32_t* to = <int32_t*>PyByteArray_AS_STRING(tag_offsets)
    cdef uint8_t* tv = <uint8_t*>PyByteArray_AS_STRING(tag_validity)
    cdef uint8_t* bd = <uint8_t*>PyByteArray_AS_STRING(body_data)
    cdef int32_t* no = <int32_t*>PyByteArray_AS_STRING(name_offsets)
    cdef int32_t* vo = <int32_t*>PyByteArray_AS_STRING(value_offsets)
    cdef int32_t* ko = <int32_t*>PyByteArray_AS_STRING(key_offsets)
    cdef Py_ssize_t body_at = 0, tag_nulls = 0
    memset(tv, 0, (n + 7) // 8)
    bo[0] = mo[0] = klo[0] = to[0] = no[0] = vo[0] = ko[0] = 0
    memset(&w, 0, sizeof(w))
    for i in range(n):
        pos = at[i]
        frame_parse(b, limit, pos, False, &m)
        put_i64(queue_offsets, i, r64(b + pos + 20))
        put_i64(physical, i, r64(b + pos + 28))
        put_i64(store_us, i, <int64_t>(<uint64_t>r64(b + pos + 48 + m.bh) * 1000u))
        put_i64(born_us, i, <int64_t>(<uint64_t>r64(b + pos + 40) * 1000u))
        memcpy(bd + body_at, b + m.body_start, m.body_end - m.body_start)
        body_at += m.body_end - m.body_start
        bo[i + 1] = <int32_t>body_at
        w.has_tags = False
        walk_props(b + m.props_start, m.end - m.props_start, &w,
                   no, <uint8_t*>PyByteArray_AS_STRING(name_data), vo, <uint8_t*>PyByteArray_AS_STRING(value_data),
                   ko, <uint8_t*>PyByteArray_AS_STRING(key_data), <uint8_t*>PyByteArray_AS_STRING(tag_data))
        mo[i + 1] = <int32_t>w.pairs
        klo[i + 1] = <int32_t>w.keys
        to[i + 1] = <int32_t>w.tag_bytes
        if w.has_tags:
            tv[i >> 3] |= <uint8_t>(1 << (i & 7))
        else:
            tag_nulls += 1
    return (queue_offsets, physical, store_us, born_us, body_offsets, body_data, map_offsets,
            name_offsets, name_data, value_offsets, value_data, key_list_offsets, key_offsets, key_data,
            tag_validity, tag_offsets, tag_data, tag_nulls)
