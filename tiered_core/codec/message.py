"""The RocketMQ stored-message format (commit-log records), byte-compatible with Java.

Layout (big-endian; ``H`` is the host length: 8 for IPv4 ``ip4+port``, 20 for IPv6
``ip16+port``, chosen per host by the sysFlag bits ``BORNHOST_V6_FLAG`` and
``STOREHOSTADDRESS_V6_FLAG``)::

    0  totalSize int          4  magic int           8  bodyCRC int
    12 queueId int            16 flag int            20 queueOffset long
    28 physicalOffset long    36 sysFlag int         40 bornTimestamp long
    48 bornHost (H)           48+H storeTimestamp long
    56+H storeHost (H')       ... reconsumeTimes int, preparedTransactionOffset long,
    bodyLength int, body, topicLength (1 byte in V1, 2 bytes in V2), topic (UTF-8),
    propertiesLength short, properties (UTF-8 ``key\\x01value\\x02`` pairs)

The body CRC is ``zlib.crc32(body) & 0x7FFFFFFF`` (Java ``UtilAll.crc32``).

Readers here never trust the bytes: every decode checks magic, that the declared
total size fits the buffer and equals the sum of the parts, and (unless asked not to)
the body CRC, and raises :class:`~tiered_core.errors.CorruptData` naming the offset
and a ``reason`` (``truncated``, ``bad_magic``, ``blank``, ``length_mismatch``,
``crc_mismatch``, ``bad_encoding``). A raw ``struct.error`` or ``IndexError`` never
escapes. Unlike RocketMQ's ``MessageFormatUtil`` (fixed offsets 56/64), the store
timestamp and host are located from the sysFlag, so IPv6 messages read correctly.
"""

from __future__ import annotations

import calendar
import enum
import functools
import ipaddress
import itertools
import os
import socket
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, NamedTuple, Union

from tiered_core.common import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN, now_ms
from tiered_core.codec.prop_crc import CRC32_PLACEHOLDER, CRC32_RESERVED_LEN, PROPERTY_CRC32, prop_crc_digits
from tiered_core.errors import CorruptData, IllegalParam

Buffer = Union[bytes, bytearray, memoryview]

# -- constants -----------------------------------------------------------------------

MAGIC_V1 = 0xDAA320A7  # Java int -626843481
MAGIC_V2 = 0xDAA320AB  # Java int -626843477: 2-byte topic length
BLANK_MAGIC = 0xCBD43194  # Java int -875286124: end-of-file filler / 16-byte coda

# Fixed field positions (valid for every host kind up to sysFlag/bornHost).
TOTAL_SIZE_POS = 0
MAGIC_POS = 4
BODY_CRC_POS = 8
QUEUE_ID_POS = 12
FLAG_POS = 16
QUEUE_OFFSET_POS = 20
PHYSICAL_OFFSET_POS = 28
#: Bytes from a message's start that cover its queue offset.
QUEUE_OFFSET_END = QUEUE_OFFSET_POS + 8  # 28
SYS_FLAG_POS = 36
BORN_TIMESTAMP_POS = 40
BORN_HOST_POS = 48
#: Bytes from a message's start that hold its totalSize and magic code (enough to tell
#: whether bytes start like a message, and how long it says it is).
MAGIC_END = MAGIC_POS + 4  # 8
#: Bytes from a message's start that always cover its store timestamp (an IPv6 born host
#: puts it at 68..76): read this much to peek it without knowing the host sizes.
STORE_TIMESTAMP_END = 80
#: storeTimestamp follows the born host: 8 bytes (IPv4) or 20 (IPv6) from BORN_HOST_POS
#: (:func:`store_timestamp_position` picks by sysFlag).
STORE_TIMESTAMP_POS_V4 = BORN_HOST_POS + 8  # 56
STORE_TIMESTAMP_POS_V6 = BORN_HOST_POS + 20  # 68
#: A message whose born and store hosts are both IPv4 (``sysFlag & HOST_V6_FLAGS == 0``, the
#: usual case) has a fixed header of this many bytes, up to and including bodyLength.
HEADER_SIZE_V4 = 88
#: bodyLength (4 bytes), the last field of that fixed header; the body follows it.
BODY_LENGTH_POS_V4 = HEADER_SIZE_V4 - 4  # 84

# MessageSysFlag bits.
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x1 << 1
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x1 << 2
TRANSACTION_COMMIT_TYPE = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
BORNHOST_V6_FLAG = 0x1 << 4
STOREHOSTADDRESS_V6_FLAG = 0x1 << 5
NEED_UNWRAP_FLAG = 0x1 << 6
INNER_BATCH_FLAG = 0x1 << 7
COMPRESSION_LZ4_TYPE = 0x1 << 8
COMPRESSION_ZSTD_TYPE = 0x2 << 8
COMPRESSION_ZLIB_TYPE = 0x3 << 8
COMPRESSION_TYPE_COMPARATOR = 0x7 << 8
#: The sysFlag bits that make a host IPv6 (a longer header).
HOST_V6_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
_HOST_FLAGS = HOST_V6_FLAGS

# Property names (MessageConst).
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "

MAX_V1_TOPIC_BYTES = 127  # Byte.MAX_VALUE: beyond it the broker switches to V2
MAX_V2_TOPIC_BYTES = 32767  # Short.MAX_VALUE
MAX_PROPERTIES_BYTES = 32767  # Short.MAX_VALUE (the broker rejects longer)
MAX_TOTAL_SIZE = 0x7FFFFFFF



class MessageVersion(enum.IntEnum):
    """Message format version; V2 differs only by a 2-byte topic length."""

    V1 = 1
    V2 = 2

    @property
    def magic(self) -> int:
        return MAGIC_V1 if self is MessageVersion.V1 else MAGIC_V2

    @property
    def topic_length_size(self) -> int:
        return 1 if self is MessageVersion.V1 else 2

    @classmethod
    def for_topic(cls, topic_bytes: int) -> "MessageVersion":
        """RocketMQ's rule (``autoMessageVersionOnTopicLen``): V2 only for long topics.

        RocketMQ compares the topic's Java char count with 127; we compare its UTF-8
        byte count, which agrees for every valid (ASCII) topic and never writes a V1
        length byte that Java would read back as negative.
        """
        return cls.V2 if topic_bytes > MAX_V1_TOPIC_BYTES else cls.V1


_V2 = MessageVersion.V2
_CRC32_PLACEHOLDER_TEXT = CRC32_PLACEHOLDER.decode("ascii")
_MAGIC_TO_VERSION = {MAGIC_V1: MessageVersion.V1, MAGIC_V2: MessageVersion.V2}

# -- structs -------------------------------------------------------------------------

#: The first 8 bytes of every message (and of a blank end-of-file record): totalSize, magic.
HEAD8 = struct.Struct(">iI")
_HEAD8 = HEAD8
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")


def _layout(born_v6: bool, store_v6: bool) -> struct.Struct:
    born = "16si" if born_v6 else "4si"
    store = "16si" if store_v6 else "4si"
    # totalSize magic crc queueId flag queueOffset physOffset sysFlag bornTs
    # bornIp bornPort storeTs storeIp storePort reconsume prepTx bodyLen
    return struct.Struct(">iIiiiqqiq" + born + "q" + store + "iqi")


# Keyed by sysFlag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG).
_LAYOUTS = {
    0: _layout(False, False),
    BORNHOST_V6_FLAG: _layout(True, False),
    STOREHOSTADDRESS_V6_FLAG: _layout(False, True),
    _HOST_FLAGS: _layout(True, True),
}
_MIN_SIZE_V1 = _LAYOUTS[0].size + 1 + 2  # 91: empty body, topic and properties


def _host_len(v6: bool) -> int:
    return 20 if v6 else 8


# -- value types ---------------------------------------------------------------------


class Host(NamedTuple):
    """A socket address as stored in a message: IP literal (v4 or v6) and port."""

    host: str
    port: int


DEFAULT_HOST = Host("127.0.0.1", 0)


@dataclass(slots=True)
class Message:
    """What a producer hands to the store.

    ``keys`` (index keys, stored space-separated under ``KEYS``) and ``tags`` (under
    ``TAGS``) are kept apart from the other ``properties``; when set they take
    precedence over the same names in ``properties``. A ``str`` given as ``keys`` is
    split on spaces, like RocketMQ's ``setKeys(String)``. Nothing is validated until
    :func:`encode_message`, which raises :class:`~tiered_core.errors.IllegalParam`.
    """

    topic: str
    body: bytes = b""
    keys: list[str] = field(default_factory=list)
    tags: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    born_timestamp: int = field(default_factory=now_ms)
    born_host: tuple[str, int] = DEFAULT_HOST
    sys_flag: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    def all_properties(self) -> dict[str, str]:
        """The property map as stored: ``properties`` plus ``KEYS`` and ``TAGS``."""
        props = dict(self.properties)
        keys = _normalize_keys(self.keys)
        if keys:
            props[PROPERTY_KEYS] = KEY_SEPARATOR.join(keys)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        return props


_EXT_FIELDS = (
    "topic", "queue_id", "queue_offset", "commitlog_offset", "store_timestamp", "born_timestamp", "keys",
    "tags", "properties", "body", "sys_flag", "body_crc", "store_size", "born_host", "store_host",
    "reconsume_times", "prepared_transaction_offset", "flag", "version",
)


_UNSET: object = object()  # a lazy field not decoded yet


def _lazy(slot: str, compute: Callable[["MessageExt"], object]) -> property:
    """A field kept in ``slot``: ``compute(message)`` on first read (while the slot holds
    ``_UNSET``), then the stored value; assignable."""
    def get(self: "MessageExt") -> object:
        value = getattr(self, slot)
        if value is _UNSET:
            value = compute(self)
            setattr(self, slot, value)
        return value

    def set_(self: "MessageExt", value: object) -> None:
        setattr(self, slot, value)

    return property(get, set_)


def _split_keys(text: str | None) -> list[str]:
    return [k for k in text.split(KEY_SEPARATOR) if k] if text else []


class MessageExt:
    """A stored message as decoded from its bytes.

    ``commitlog_offset`` is the physical-offset field (in the tiered store: the
    tiered commit-log offset). ``properties`` is the full stored map including
    ``KEYS``, ``TAGS`` and ``UNIQ_KEY``; ``keys`` and ``tags`` are parsed from it.
    ``body`` is the stored body (still compressed if ``sys_flag`` says so).
    ``store_size`` is the record's total size in bytes.

    Built like a dataclass (the fields in this order, positionally or by keyword; ``==``
    compares every field; every field can be assigned). The batch read path builds it
    from the message's validated bytes with one ``unpack_from``
    (:func:`lazy_message_ext`); ``properties``, ``keys``, ``tags`` and the two hosts are
    then decoded on first access.
    """

    __slots__ = ("topic", "queue_id", "queue_offset", "commitlog_offset", "store_timestamp", "born_timestamp",
                 "_keys", "_tags", "_properties", "body", "sys_flag", "body_crc", "store_size", "_born_host",
                 "_store_host", "reconsume_times", "prepared_transaction_offset", "flag", "version",
                 "_raw", "_layout")
    __match_args__ = _EXT_FIELDS
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value (like the dataclass)

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    store_timestamp: int
    born_timestamp: int
    body: bytes
    sys_flag: int
    body_crc: int
    store_size: int
    reconsume_times: int
    prepared_transaction_offset: int
    flag: int
    version: MessageVersion

    def __init__(self, topic: str, queue_id: int, queue_offset: int, commitlog_offset: int, store_timestamp: int,
                 born_timestamp: int, keys: list[str], tags: str | None, properties: dict[str, str], body: bytes,
                 sys_flag: int = 0, body_crc: int = 0, store_size: int = 0, born_host: Host = DEFAULT_HOST,
                 store_host: Host = DEFAULT_HOST, reconsume_times: int = 0, prepared_transaction_offset: int = 0,
                 flag: int = 0, version: MessageVersion = MessageVersion.V1) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commitlog_offset = commitlog_offset
        self.store_timestamp = store_timestamp
        self.born_timestamp = born_timestamp
        self._keys = keys
        self._tags = tags
        self._properties = properties
        self.body = body
        self.sys_flag = sys_flag
        self.body_crc = body_crc
        self.store_size = store_size
        self._born_host = born_host
        self._store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.flag = flag
        self.version = version
        self._raw = None
        self._layout = None

    # -- the lazy fields (decoded from the raw bytes on first access) ----------------------

    properties = _lazy("_properties", lambda m: _lazy_properties(m._raw, _ext_layout(m)))
    keys = _lazy("_keys", lambda m: _split_keys(m.properties.get(PROPERTY_KEYS)))
    tags = _lazy("_tags", lambda m: m.properties.get(PROPERTY_TAGS))
    born_host = _lazy("_born_host", lambda m: _host(*_ext_layout(m)[9:11]))
    store_host = _lazy("_store_host", lambda m: _host(*_ext_layout(m)[12:14]))

    # -- value semantics ---------------------------------------------------------------------

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in _EXT_FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return "MessageExt(" + ", ".join(f"{n}={v!r}" for n, v in zip(_EXT_FIELDS, self._values())) + ")"

    def __reduce__(self):
        return (MessageExt, self._values())

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def msg_id(self) -> str:
        """RocketMQ's offset message id: store host address+port and commit-log offset, hex."""
        return offset_msg_id(self.store_host, self.commitlog_offset)


_new_ext = object.__new__
_V1, _MAGIC2 = MessageVersion.V1, MAGIC_V2
#: (header struct, its size) by ``(sysFlag & 0x30) >> 4``.
_LAYOUT_BY_HOSTS = tuple((_LAYOUTS[k], _LAYOUTS[k].size) for k in (0, BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG,
                                                                  _HOST_FLAGS))


def lazy_message_ext(raw: bytes, topic: str | None = None) -> MessageExt:
    """A :class:`MessageExt` over ``raw``, exactly one message's bytes (``bytes``, never
    mutated), which must already be validated (e.g. by
    :func:`~tiered_core.codec.batch_kernels.scan_units`): the header fields come from one
    ``unpack_from``, the body is sliced, the rest is decoded on first access -- bad bytes
    here would give wrong fields, not an error. ``topic``: the message's topic when the
    caller knows it (validation compared it), else decoded. Equal to ``decode_message(raw)``."""
    layout, hs = _LAYOUT_BY_HOSTS[(raw[39] & 0x30) >> 4]  # the low byte of sysFlag@36
    f = layout.unpack_from(raw)
    m = _new_ext(MessageExt)
    m.topic = topic if topic is not None else message_layout_topic(raw, f, hs)
    m.queue_id = f[3]
    m.queue_offset = f[5]
    m.commitlog_offset = f[6]
    m.store_timestamp = f[11]
    m.born_timestamp = f[8]
    m.body = raw[hs:hs + f[16]]
    m.sys_flag = f[7]
    m.body_crc = f[2]
    m.store_size = f[0]
    m.reconsume_times = f[14]
    m.prepared_transaction_offset = f[15]
    m.flag = f[4]
    m.version = _V2 if f[1] == _MAGIC2 else _V1
    m._keys = m._tags = m._properties = m._born_host = m._store_host = _UNSET
    m._raw = raw
    m._layout = f
    return m


def message_fields(buf: Buffer, pos: int = 0) -> tuple[tuple, int, int]:
    """The validated message at ``pos`` of ``buf`` without building an object: its header
    fields (one ``unpack_from``; the tuple :func:`lazy_message_ext` reads: ``[0]`` total size,
    ``[3]`` queue id, ``[5]`` queue offset, ``[6]`` physical offset, ``[8]`` born time, ``[11]``
    store time, ``[16]`` body length), its header size (the body starts at ``pos`` + it) and
    where its properties text starts (it ends at ``pos + fields[0]``). Like
    :func:`lazy_message_ext`, bad bytes give wrong fields, not an error."""
    layout, hs = _LAYOUT_BY_HOSTS[(buf[pos + 39] & 0x30) >> 4]
    f = layout.unpack_from(buf, pos)
    body_end = pos + hs + f[16]
    if f[1] == _MAGIC2:
        props = body_end + 2 + _U16.unpack_from(buf, body_end)[0] + 2
    else:
        props = body_end + 1 + buf[body_end] + 2
    return f, hs, props


def _ext_layout(m: MessageExt) -> tuple:
    """The header fields of a lazy ``MessageExt`` (``_layout``), unpacked on first need when the
    maker left them to later (the compiled twin of :func:`lazy_message_ext` does)."""
    f = m._layout
    if f is None:
        raw = m._raw
        f = m._layout = _LAYOUT_BY_HOSTS[(raw[39] & 0x30) >> 4][0].unpack_from(raw)
    return f


def _topic_span(raw: bytes, f: tuple, hs: int) -> tuple[int, int]:
    body_end = hs + f[16]
    if f[1] == _MAGIC2:
        start = body_end + 2
        return start, start + _U16.unpack_from(raw, body_end)[0]
    return body_end + 1, body_end + 1 + raw[body_end]


def message_layout_topic(raw: bytes, f: tuple, hs: int) -> str:
    start, end = _topic_span(raw, f, hs)
    return str(raw[start:end], "utf-8")


def _lazy_properties(raw: bytes, f: tuple) -> dict[str, str]:
    _t_start, t_end = _topic_span(raw, f, _LAYOUT_BY_HOSTS[(f[7] & 0x30) >> 4][1])
    return parse_properties(str(raw[t_end + 2:f[0]], "utf-8"))


class MessageSpan(NamedTuple):
    """Where one validated message lies: absolute ``offset`` and byte ``size``."""

    offset: int
    size: int


# -- properties ----------------------------------------------------------------------


def _normalize_keys(keys: object) -> list[str]:
    if not keys:
        return []
    if isinstance(keys, str):
        return [k for k in keys.split(KEY_SEPARATOR) if k]
    out = list(keys)  # type: ignore[call-overload]
    for k in out:
        if not isinstance(k, str) or not k or KEY_SEPARATOR in k:
            raise IllegalParam(
                f"message key {k!r} must be a non-empty string without spaces "
                "(keys are stored space-separated)",
                key=k,
            )
    return out


def _property_error(name: object, value: object) -> IllegalParam | None:
    if not isinstance(name, str) or not isinstance(value, str):
        return IllegalParam(f"property {name!r}={value!r}: names and values must be str",
                            property=name)
    if not name or not value:
        return IllegalParam(f"property {name!r}={value!r}: empty names and values are "
                            "not stored by RocketMQ", property=name)
    if "\x01" in name or "\x02" in name or "\x01" in value or "\x02" in value:
        return IllegalParam(f"property {name!r}={value!r} contains a separator "
                            "character \\x01 or \\x02", property=name)
    return None


def format_properties(props: Mapping[str, str]) -> str:
    """``key\\x01value\\x02`` for each pair, in mapping order (RocketMQ's encoding).

    Raises IllegalParam for an empty name or value (Java readers drop such pairs) or a
    separator character inside a name or value.
    """
    parts = []
    for name, value in props.items():
        if not isinstance(name, str) or not isinstance(value, str) or not name or not value:
            raise _property_error(name, value) or IllegalParam(
                f"property {name!r}={value!r} is not storable", property=name)
        parts.append(f"{name}\x01{value}\x02")
    text = "".join(parts)
    # One separator of each kind per pair, unless a name or value holds one: then find it.
    if text.count("\x01") != len(parts) or text.count("\x02") != len(parts):
        for name, value in props.items():
            err = _property_error(name, value)
            if err is not None:
                raise err
    return text


def parse_properties(text: str) -> dict[str, str]:
    """Inverse of :func:`format_properties`, lenient like Java's ``string2messageProperties``.

    Pairs with an empty name or value are skipped; a missing trailing separator is fine.
    """
    out: dict[str, str] = {}
    if not text:
        return out
    for pair in text.split(PROPERTY_SEPARATOR):
        i = pair.find(NAME_VALUE_SEPARATOR)
        if 0 < i < len(pair) - 1:
            out[pair[:i]] = pair[i + 1:]
    return out


# -- hosts ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _pack_ip(host: str) -> tuple[bytes, bool]:
    try:
        addr = ipaddress.ip_address(host)
    except (ValueError, TypeError):
        raise IllegalParam(f"host {host!r} is not an IPv4 or IPv6 address literal",
                           host=host) from None
    return addr.packed, addr.version == 6


@functools.lru_cache(maxsize=1024)
def _unpack_ip(raw: bytes) -> str:
    if len(raw) == 4:
        return socket.inet_ntoa(raw)
    return str(ipaddress.IPv6Address(raw))


def _host_parts(host: object, what: str) -> tuple[bytes, int, bool]:
    try:
        name, port = host  # type: ignore[misc]
    except (TypeError, ValueError):
        raise IllegalParam(f"{what} {host!r} must be a (host, port) pair", **{what: host}) from None
    if not isinstance(port, int) or not 0 <= port <= 0xFFFF:
        raise IllegalParam(f"{what} port {port!r} must be an int in 0..65535", **{what: host})
    packed, v6 = _pack_ip(name)
    return packed, port, v6


_cached_host_parts = functools.lru_cache(maxsize=4096)(_host_parts)


def offset_msg_id(store_host: tuple[str, int], commitlog_offset: int) -> str:
    """RocketMQ's ``MessageDecoder.createMessageId``: hex of ip + port(int) + offset(long)."""
    packed, port, _ = _host_parts(store_host, "store_host")
    return (packed + _I32.pack(port) + _I64.pack(commitlog_offset)).hex().upper()


_uniq_counter = itertools.count()
_uniq_prefix: bytes | None = None


def new_uniq_key() -> str:
    """A new client-side unique id shaped like RocketMQ's ``MessageClientIDSetter``.

    32 upper-case hex digits: an address slot (4 bytes), pid (2 bytes), a random
    process tag (4 bytes), milliseconds since the start of the month (4 bytes) and a
    counter (2 bytes).
    """
    global _uniq_prefix
    if _uniq_prefix is None:
        # RocketMQ puts the host's IPv4 address first; resolving it can block on DNS,
        # so random bytes fill that slot (uniqueness comes from them plus pid and tag).
        _uniq_prefix = os.urandom(4) + struct.pack(">H", os.getpid() & 0xFFFF) + os.urandom(4)
    now = time.time()
    t = time.gmtime(now)
    month_start = calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, 0))
    diff = int((now - month_start) * 1000) & 0xFFFFFFFF
    tail = struct.pack(">IH", diff, next(_uniq_counter) & 0xFFFF)
    return (_uniq_prefix + tail).hex().upper()


# -- encoding ------------------------------------------------------------------------


def _check_ranges(**fields: tuple[int, int, int]) -> None:
    for name, (value, lo, hi) in fields.items():
        if not isinstance(value, int) or not lo <= value <= hi:
            raise IllegalParam(f"{name} {value!r} is out of range {lo}..{hi}", **{name: value})


def pack_message(
    host_kind: int,
    v2: bool,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_ip: bytes,
    born_port: int,
    store_timestamp: int,
    store_ip: bytes,
    store_port: int,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    topic: bytes,
    props: bytes,
) -> bytearray:
    """The encoder's inner step: one message's bytes from its fields, in a new ``bytearray``.

    ``host_kind`` is ``sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)`` (the IPs
    are 4 or 16 bytes to match), ``v2`` picks the 2-byte topic length. Computes the body
    CRC and the total size; one precompiled ``struct.Struct`` packs the whole head. Checks
    nothing beyond what ``struct`` does: a value out of its Java type's range raises
    ``struct.error`` (the callers check and name the field). Ints and bytes in, bytes out,
    so a compiled twin can take its place.
    """
    layout = _LAYOUTS[host_kind]
    body_len = len(body)
    buf = bytearray(layout.pack(
        layout.size + body_len + (2 if v2 else 1) + len(topic) + 2 + len(props),
        MAGIC_V2 if v2 else MAGIC_V1, zlib.crc32(body) & 0x7FFFFFFF, queue_id, flag, queue_offset,
        physical_offset, sys_flag, born_timestamp, born_ip, born_port, store_timestamp,
        store_ip, store_port, reconsume_times, prepared_transaction_offset, body_len,
    ))
    buf += body
    buf += _U16.pack(len(topic)) if v2 else _U8.pack(len(topic))
    buf += topic
    buf += _U16.pack(len(props))
    buf += props
    return buf


def _encode(
    topic: str,
    body: bytes,
    props_text: str,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: tuple[str, int],
    store_timestamp: int,
    store_host: tuple[str, int],
    reconsume_times: int,
    prepared_transaction_offset: int,
    version: MessageVersion | int | None,
) -> bytearray:
    try:
        topic_b = topic.encode("utf-8")
    except (UnicodeEncodeError, AttributeError):
        raise IllegalParam(f"topic {topic!r} is not an encodable string", topic=topic) from None
    try:
        props_b = props_text.encode("utf-8")
    except UnicodeEncodeError:
        raise IllegalParam(f"properties {props_text!r} are not UTF-8 encodable",
                           properties=props_text) from None
    if not isinstance(body, bytes):
        if not isinstance(body, (bytearray, memoryview)):
            raise IllegalParam(f"body must be bytes, got {type(body).__name__}", topic=topic)
        body = bytes(body)
    if version is None:
        v2 = len(topic_b) > MAX_V1_TOPIC_BYTES
    elif isinstance(version, int) and not isinstance(version, bool) and version in (1, 2):
        v2 = version == 2
    else:
        raise IllegalParam(f"message version {version!r} is not 1 or 2", version=version)
    max_topic = MAX_V2_TOPIC_BYTES if v2 else MAX_V1_TOPIC_BYTES
    if len(topic_b) > max_topic:
        ver = MessageVersion.V2 if v2 else MessageVersion.V1
        raise IllegalParam(f"topic {topic!r} is {len(topic_b)} bytes; message {ver.name} allows "
                           f"at most {max_topic}", topic=topic)
    if len(props_b) > MAX_PROPERTIES_BYTES:
        raise IllegalParam(f"properties of a message to {topic!r} are {len(props_b)} bytes; at "
                           f"most {MAX_PROPERTIES_BYTES} fit", topic=topic)
    try:
        born_ip, born_port, born_v6 = _cached_host_parts(born_host, "born_host")
        store_ip, store_port, store_v6 = _cached_host_parts(store_host, "store_host")
    except TypeError:  # unhashable: let the uncached path name the problem
        born_ip, born_port, born_v6 = _host_parts(born_host, "born_host")
        store_ip, store_port, store_v6 = _host_parts(store_host, "store_host")
    if not isinstance(sys_flag, int):
        raise IllegalParam(f"sys_flag {sys_flag!r} must be an int", sys_flag=sys_flag)
    # The host-kind bits follow the hosts actually written, whatever the caller said.
    sys_flag &= ~_HOST_FLAGS
    if born_v6:
        sys_flag |= BORNHOST_V6_FLAG
    if store_v6:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    layout = _LAYOUTS[sys_flag & _HOST_FLAGS]
    body_len = len(body)
    total = layout.size + body_len + (2 if v2 else 1) + len(topic_b) + 2 + len(props_b)
    if total > MAX_TOTAL_SIZE:
        raise IllegalParam(f"message to {topic!r} would be {total} bytes; at most "
                           f"{MAX_TOTAL_SIZE}", topic=topic, size=total)
    try:
        return pack_message(
            sys_flag & _HOST_FLAGS, v2, queue_id, flag, queue_offset, physical_offset, sys_flag,
            born_timestamp, born_ip, born_port, store_timestamp, store_ip, store_port,
            reconsume_times, prepared_transaction_offset, body, topic_b, props_b,
        )
    except struct.error:
        _check_ranges(
            queue_id=(queue_id, INT_MIN, INT_MAX),
            flag=(flag, INT_MIN, INT_MAX),
            queue_offset=(queue_offset, LONG_MIN, LONG_MAX),
            physical_offset=(physical_offset, LONG_MIN, LONG_MAX),
            sys_flag=(sys_flag, INT_MIN, INT_MAX),
            born_timestamp=(born_timestamp, LONG_MIN, LONG_MAX),
            store_timestamp=(store_timestamp, LONG_MIN, LONG_MAX),
            reconsume_times=(reconsume_times, INT_MIN, INT_MAX),
            prepared_transaction_offset=(prepared_transaction_offset, LONG_MIN, LONG_MAX),
        )
        raise  # pragma: no cover - every packed field is checked above


def encode_message(
    msg: Message,
    *,
    queue_id: int,
    queue_offset: int,
    store_timestamp: int,
    physical_offset: int = 0,
    store_host: tuple[str, int] = DEFAULT_HOST,
    sys_flag: int | None = None,
    version: MessageVersion | int | None = None,
    prop_crc: bool = False,
) -> bytes:
    """The stored bytes of ``msg`` as the broker would write them.

    ``sys_flag`` defaults to ``msg.sys_flag``; its IPv6 host bits are always set from
    the hosts themselves. ``version`` defaults to RocketMQ's rule (V2 only when the
    topic is longer than 127 bytes). Raises IllegalParam naming the bad field (a value
    out of its Java type's range, a non-IP host, keys with spaces, a topic or the
    properties too long, separators inside properties).

    ``prop_crc`` (RocketMQ ``enabledAppendPropCRC``) appends the whole-message CRC
    property ``__CRC32#`` as the last 20 bytes (:mod:`tiered_core.codec.prop_crc`),
    computed over these bytes: whoever changes a field afterwards (the commit log sets
    the physical offset) must recompute it with
    :func:`~tiered_core.codec.prop_crc.write_prop_crc`. A ``__CRC32#`` the producer put in
    ``properties`` is dropped then (only the broker's CRC is kept); without ``prop_crc``
    the bytes are exactly those of earlier releases.
    """
    return bytes(encode_message_buffer(
        msg, queue_id=queue_id, queue_offset=queue_offset, store_timestamp=store_timestamp,
        physical_offset=physical_offset, store_host=store_host, sys_flag=sys_flag, version=version,
        prop_crc=prop_crc))


def _properties_text(msg: Message, prop_crc: bool) -> str:
    """The stored properties of ``msg`` (:meth:`Message.all_properties`, formatted; with
    ``prop_crc`` any ``__CRC32#`` dropped and the placeholder appended)."""
    props = msg.properties
    tags = msg.tags
    if (PROPERTY_KEYS not in props and PROPERTY_TAGS not in props and PROPERTY_CRC32 not in props
            and (not tags or type(tags) is str)):
        # KEYS and TAGS go after the other properties: format those, then append them
        keys = _normalize_keys(msg.keys)  # (raises first, as all_properties does)
        text = format_properties(props) if props else ""
        joined = KEY_SEPARATOR.join(keys) if keys else ""
        if ("\x01" not in joined and "\x02" not in joined
                and (not tags or ("\x01" not in tags and "\x02" not in tags))):
            if joined:
                text = f"{text}KEYS\x01{joined}\x02"
            if tags:
                text = f"{text}TAGS\x01{tags}\x02"
            return text + _CRC32_PLACEHOLDER_TEXT if prop_crc else text
    props = msg.all_properties()
    if not prop_crc:
        return format_properties(props)
    props.pop(PROPERTY_CRC32, None)
    return format_properties(props) + _CRC32_PLACEHOLDER_TEXT


def encode_message_buffer(
    msg: Message,
    *,
    queue_id: int,
    queue_offset: int,
    store_timestamp: int,
    physical_offset: int = 0,
    store_host: tuple[str, int] = DEFAULT_HOST,
    sys_flag: int | None = None,
    version: MessageVersion | int | None = None,
    prop_crc: bool = False,
) -> bytearray:
    """:func:`encode_message` into a new ``bytearray`` (for a writer that patches fields in
    place before it writes, like the local commit log): the same bytes, one copy less."""
    data = _encode(  # (positional: this is the put path)
        msg.topic, msg.body, _properties_text(msg, prop_crc), queue_id, msg.flag, queue_offset,
        physical_offset, msg.sys_flag if sys_flag is None else sys_flag, msg.born_timestamp,
        msg.born_host, store_timestamp, store_host, msg.reconsume_times,
        msg.prepared_transaction_offset, version,
    )
    if prop_crc:
        crc = zlib.crc32(memoryview(data)[:-CRC32_RESERVED_LEN]) & 0x7FFFFFFF
        data[-11:-1] = prop_crc_digits(crc)
    return data


def encode_message_ext(m: MessageExt, *, version: MessageVersion | int | None = None) -> bytes:
    """Re-encode a decoded message (its full ``properties`` map, in order; CRC recomputed).

    ``version`` defaults to ``m.version``. ``decode_message(encode_message_ext(m))``
    equals ``m`` apart from ``body_crc``/``store_size``, which are recomputed.
    """
    return bytes(_encode(
        m.topic,
        m.body,
        format_properties(m.properties),
        queue_id=m.queue_id,
        flag=m.flag,
        queue_offset=m.queue_offset,
        physical_offset=m.commitlog_offset,
        sys_flag=m.sys_flag,
        born_timestamp=m.born_timestamp,
        born_host=m.born_host,
        store_timestamp=m.store_timestamp,
        store_host=m.store_host,
        reconsume_times=m.reconsume_times,
        prepared_transaction_offset=m.prepared_transaction_offset,
        version=m.version if version is None else version,
    ))


# -- validation and decoding ---------------------------------------------------------


def _corrupt(at: int, reason: str, detail: str) -> CorruptData:
    return CorruptData(f"message at offset {at}: {detail}", offset=at, reason=reason)


def _as_buffer(buf: Buffer) -> Buffer:
    if isinstance(buf, memoryview) and (buf.format != "B" or buf.ndim != 1):
        return buf.cast("B")
    return buf


def _check_offset(offset: int) -> None:
    if not isinstance(offset, int) or offset < 0:
        raise IllegalParam(f"offset {offset!r} must be an int >= 0", offset=offset)


def _frame(buf: Buffer, pos: int, limit: int, base: int) -> tuple[int, MessageVersion]:
    """Validate the 8-byte head at ``pos``: returns (totalSize, version)."""
    at = base + pos
    if pos + 8 > limit:
        raise _corrupt(at, "truncated", f"only {max(limit - pos, 0)} bytes left, "
                       "a message head needs 8")
    total, magic = _HEAD8.unpack_from(buf, pos)
    ver = _MAGIC_TO_VERSION.get(magic)
    if ver is None:
        if magic == BLANK_MAGIC:
            raise _corrupt(at, "blank", f"blank/end-of-file record of {total} bytes, "
                           "not a message")
        raise _corrupt(at, "bad_magic", f"bad magic 0x{magic:08X}")
    if total < _MIN_SIZE_V1:
        raise _corrupt(at, "length_mismatch", f"total size {total} is below the minimum "
                       f"{_MIN_SIZE_V1}")
    if pos + total > limit:
        raise _corrupt(at, "truncated", f"total size {total} but only {limit - pos} bytes "
                       "left in the buffer")
    return total, ver


def _parse(buf: Buffer, pos: int, total: int, ver: MessageVersion, base: int,
           verify_crc: bool) -> tuple:
    """Check every length of the record [pos, pos+total); returns the parsed pieces."""
    at = base + pos
    end = pos + total
    sys_flag = _I32.unpack_from(buf, pos + SYS_FLAG_POS)[0]
    layout = _LAYOUTS[sys_flag & _HOST_FLAGS]
    tl_size = 2 if ver is _V2 else 1
    if layout.size + tl_size + 2 > total:
        raise _corrupt(at, "length_mismatch", f"total size {total} is too small for its "
                       f"{layout.size}-byte header")
    fields = layout.unpack_from(buf, pos)
    body_len = fields[16]
    body_start = pos + layout.size
    body_end = body_start + body_len
    if body_len < 0 or body_end + tl_size + 2 > end:
        raise _corrupt(at, "length_mismatch", f"body length {body_len} does not fit the "
                       f"total size {total}")
    if tl_size == 1:
        topic_len = buf[body_end]
    else:
        topic_len = _U16.unpack_from(buf, body_end)[0]
    topic_start = body_end + tl_size
    topic_end = topic_start + topic_len
    if topic_end + 2 > end:
        raise _corrupt(at, "length_mismatch", f"topic length {topic_len} does not fit the "
                       f"total size {total}")
    props_len = _U16.unpack_from(buf, topic_end)[0]
    props_start = topic_end + 2
    if props_start + props_len != end:
        raise _corrupt(at, "length_mismatch", f"parts add up to "
                       f"{props_start + props_len - pos} bytes but total size is {total}")
    if verify_crc:
        crc = zlib.crc32(memoryview(buf)[body_start:body_end]) & 0x7FFFFFFF
        if crc != fields[2]:
            raise _corrupt(at, "crc_mismatch", f"body CRC {crc} does not match the stored "
                           f"{fields[2]}")
    return fields, body_start, body_end, topic_start, topic_end, props_start, end


@functools.lru_cache(maxsize=4096)
def _host(raw: bytes, port: int) -> Host:
    return Host(_unpack_ip(raw), port)


def _build(buf: Buffer, pos: int, parsed: tuple, ver: MessageVersion, base: int) -> MessageExt:
    fields, body_start, body_end, topic_start, topic_end, props_start, end = parsed
    try:
        topic = str(buf[topic_start:topic_end], "utf-8")
        props = parse_properties(str(buf[props_start:end], "utf-8"))
    except UnicodeDecodeError as exc:
        raise _corrupt(base + pos, "bad_encoding",
                       f"topic or properties are not UTF-8 ({exc.reason})") from None
    (total, _magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts,
     born_ip, born_port, store_ts, store_ip, store_port, reconsume, prep, _blen) = fields
    keys_text = props.get(PROPERTY_KEYS)
    # Positional, in field order: noticeably faster than keywords on the read path.
    return MessageExt(
        topic, queue_id, queue_offset, phys, store_ts, born_ts,
        [k for k in keys_text.split(KEY_SEPARATOR) if k] if keys_text else [],
        props.get(PROPERTY_TAGS), props, bytes(buf[body_start:body_end]),
        sys_flag, crc, total, _host(born_ip, born_port), _host(store_ip, store_port),
        reconsume, prep, flag, ver,
    )


def decode_message(buf: Buffer, offset: int = 0, *, verify_crc: bool = True,
                   base_offset: int = 0) -> MessageExt:
    """Decode the message starting at ``buf[offset]``.

    The record must lie wholly inside ``buf``; bytes after it are ignored. Raises
    CorruptData with ``offset = base_offset + offset`` and a ``reason`` when the bytes
    are not a valid message; IllegalParam for a negative ``offset``.
    """
    _check_offset(offset)
    buf = _as_buffer(buf)
    total, ver = _frame(buf, offset, len(buf), base_offset)
    parsed = _parse(buf, offset, total, ver, base_offset, verify_crc)
    return _build(buf, offset, parsed, ver, base_offset)


def validate_message(buf: Buffer, offset: int = 0, *, verify_crc: bool = True,
                     base_offset: int = 0) -> int:
    """Check the message at ``buf[offset]`` like :func:`decode_message`; return its size."""
    _check_offset(offset)
    buf = _as_buffer(buf)
    total, ver = _frame(buf, offset, len(buf), base_offset)
    _parse(buf, offset, total, ver, base_offset, verify_crc)
    return total


def _skip_blank(buf: Buffer, pos: int, limit: int, base: int) -> int:
    """If a BLANK record (coda or end-of-file filler) starts at ``pos``, its size; else 0."""
    if pos + 8 > limit:
        return 0
    total, magic = _HEAD8.unpack_from(buf, pos)
    if magic != BLANK_MAGIC:
        return 0
    if total < 8 or pos + total > limit:
        raise _corrupt(base + pos, "truncated", f"blank record of size {total} does not fit "
                       f"the {limit - pos} bytes left")
    return total


def split_messages(buf: Buffer, base_offset: int = 0, *, verify_crc: bool = True,
                   skip_blank: bool = True) -> Iterator[MessageSpan]:
    """Walk a buffer of back-to-back messages; yield each one's absolute offset and size.

    ``base_offset`` is the offset of ``buf[0]`` (errors and spans use absolute offsets;
    the position inside ``buf`` is ``span.offset - base_offset``). Every message is
    fully validated first. BLANK records are skipped when ``skip_blank``; otherwise,
    like any other bad record or trailing partial bytes, they raise CorruptData.
    """
    buf = _as_buffer(buf)
    limit = len(buf)
    pos = 0
    while pos < limit:
        if skip_blank:
            blank = _skip_blank(buf, pos, limit, base_offset)
            if blank:
                pos += blank
                continue
        total, ver = _frame(buf, pos, limit, base_offset)
        _parse(buf, pos, total, ver, base_offset, verify_crc)
        yield MessageSpan(base_offset + pos, total)
        pos += total


def decode_messages(buf: Buffer, base_offset: int = 0, *, verify_crc: bool = True,
                    skip_blank: bool = True) -> Iterator[MessageExt]:
    """Like :func:`split_messages` but yields the decoded messages."""
    buf = _as_buffer(buf)
    limit = len(buf)
    pos = 0
    while pos < limit:
        if skip_blank:
            blank = _skip_blank(buf, pos, limit, base_offset)
            if blank:
                pos += blank
                continue
        total, ver = _frame(buf, pos, limit, base_offset)
        parsed = _parse(buf, pos, total, ver, base_offset, verify_crc)
        yield _build(buf, pos, parsed, ver, base_offset)
        pos += total


# -- field access without a full decode ----------------------------------------------


def _peek(buf: Buffer, offset: int, rel: int, st: struct.Struct, what: str) -> int:
    _check_offset(offset)
    buf = _as_buffer(buf)
    if offset + 8 > len(buf):
        raise _corrupt(offset, "truncated", f"only {max(len(buf) - offset, 0)} bytes, "
                       f"cannot read {what}")
    magic = _HEAD8.unpack_from(buf, offset)[1]
    if magic not in _MAGIC_TO_VERSION:
        raise _corrupt(offset, "bad_magic", f"bad magic 0x{magic:08X} reading {what}")
    if offset + rel + st.size > len(buf):
        raise _corrupt(offset, "truncated", f"only {len(buf) - offset} bytes, cannot read "
                       f"{what} at +{rel}")
    return st.unpack_from(buf, offset + rel)[0]


def peek_total_size(buf: Buffer, offset: int = 0) -> int:
    """totalSize@0 (also of BLANK records; no magic check)."""
    _check_offset(offset)
    buf = _as_buffer(buf)
    if offset + 4 > len(buf):
        raise _corrupt(offset, "truncated", "fewer than 4 bytes, cannot read the total size")
    return _I32.unpack_from(buf, offset)[0]


def peek_magic(buf: Buffer, offset: int = 0) -> int:
    """magic@4 as an unsigned 32-bit value (no check)."""
    _check_offset(offset)
    buf = _as_buffer(buf)
    if offset + 8 > len(buf):
        raise _corrupt(offset, "truncated", "fewer than 8 bytes, cannot read the magic")
    return _HEAD8.unpack_from(buf, offset)[1]


def _peeker(rel: int, st: struct.Struct, what: str) -> Callable[[Buffer, int], int]:
    """``peek_<field>(buf, offset=0)``: the fixed-position header field ``what`` of the
    message at ``offset`` (magic checked; CorruptData when the buffer is too short)."""
    def peek(buf: Buffer, offset: int = 0) -> int:
        return _peek(buf, offset, rel, st, what)
    peek.__doc__ = f"The {what} of the message at ``offset`` (magic checked, nothing else)."
    return peek


peek_body_crc = _peeker(BODY_CRC_POS, _I32, "body CRC")
peek_queue_id = _peeker(QUEUE_ID_POS, _I32, "queue id")
peek_flag = _peeker(FLAG_POS, _I32, "flag")
peek_queue_offset = _peeker(QUEUE_OFFSET_POS, _I64, "queue offset")
peek_physical_offset = _peeker(PHYSICAL_OFFSET_POS, _I64, "physical offset")
peek_sys_flag = _peeker(SYS_FLAG_POS, _I32, "sys flag")
peek_born_timestamp = _peeker(BORN_TIMESTAMP_POS, _I64, "born timestamp")


def store_timestamp_position(sys_flag: int) -> int:
    """Position of storeTimestamp: 56 for an IPv4 born host, 68 for IPv6."""
    return STORE_TIMESTAMP_POS_V6 if sys_flag & BORNHOST_V6_FLAG else STORE_TIMESTAMP_POS_V4


def peek_store_timestamp(buf: Buffer, offset: int = 0) -> int:
    rel = store_timestamp_position(peek_sys_flag(buf, offset))
    return _peek(buf, offset, rel, _I64, "store timestamp")


def peek_store_host(buf: Buffer, offset: int = 0) -> Host:
    buf = _as_buffer(buf)
    sys_flag = peek_sys_flag(buf, offset)
    rel = store_timestamp_position(sys_flag) + 8
    n = 16 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 4
    if offset + rel + n + 4 > len(buf):
        raise _corrupt(offset, "truncated", "buffer ends inside the store host")
    raw = bytes(buf[offset + rel:offset + rel + n])
    return Host(_unpack_ip(raw), _I32.unpack_from(buf, offset + rel + n)[0])


def rewrite_physical_offset(buf: bytearray | memoryview, offset: int, value: int) -> None:
    """Overwrite physicalOffset@28 of the message at ``buf[offset]`` in place.

    Checks the magic first (CorruptData) so non-message bytes are never clobbered;
    IllegalParam for a read-only buffer or a value outside a Java long.
    """
    if not isinstance(value, int) or not LONG_MIN <= value <= LONG_MAX:
        raise IllegalParam(f"physical offset {value!r} is not a 64-bit int", value=value)
    if isinstance(buf, bytes) or (isinstance(buf, memoryview) and buf.readonly):
        raise IllegalParam("rewrite_physical_offset needs a writable buffer (bytearray)",
                           offset=offset)
    _peek(buf, offset, PHYSICAL_OFFSET_POS, _I64, "physical offset")
    _I64.pack_into(_as_buffer(buf), offset + PHYSICAL_OFFSET_POS, value)


__all__ = [
    "HEAD8",
    "MAGIC_V1", "MAGIC_V2", "BLANK_MAGIC",
    "TOTAL_SIZE_POS", "MAGIC_POS", "BODY_CRC_POS", "QUEUE_ID_POS", "FLAG_POS",
    "QUEUE_OFFSET_POS", "PHYSICAL_OFFSET_POS", "SYS_FLAG_POS", "BORN_TIMESTAMP_POS",
    "BORN_HOST_POS", "MAGIC_END", "QUEUE_OFFSET_END", "STORE_TIMESTAMP_END", "STORE_TIMESTAMP_POS_V4", "STORE_TIMESTAMP_POS_V6",
    "HEADER_SIZE_V4", "BODY_LENGTH_POS_V4", "HOST_V6_FLAGS",
    "COMPRESSED_FLAG", "MULTI_TAGS_FLAG", "TRANSACTION_NOT_TYPE", "TRANSACTION_PREPARED_TYPE",
    "TRANSACTION_COMMIT_TYPE", "TRANSACTION_ROLLBACK_TYPE", "BORNHOST_V6_FLAG",
    "STOREHOSTADDRESS_V6_FLAG", "NEED_UNWRAP_FLAG", "INNER_BATCH_FLAG", "COMPRESSION_LZ4_TYPE",
    "COMPRESSION_ZSTD_TYPE", "COMPRESSION_ZLIB_TYPE", "COMPRESSION_TYPE_COMPARATOR",
    "PROPERTY_KEYS", "PROPERTY_TAGS", "PROPERTY_UNIQ_KEY", "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR", "KEY_SEPARATOR",
    "MAX_V1_TOPIC_BYTES", "MAX_V2_TOPIC_BYTES", "MAX_PROPERTIES_BYTES", "MAX_TOTAL_SIZE",
    "MessageVersion", "Host", "DEFAULT_HOST", "Message", "MessageExt", "MessageSpan", "lazy_message_ext",
    "message_fields",
    "format_properties", "parse_properties", "offset_msg_id", "new_uniq_key",
    "encode_message", "encode_message_buffer", "encode_message_ext", "pack_message",
    "decode_message", "validate_message",
    "split_messages", "decode_messages",
    "peek_total_size", "peek_magic", "peek_body_crc", "peek_queue_id", "peek_flag",
    "peek_queue_offset", "peek_physical_offset", "peek_sys_flag", "peek_born_timestamp",
    "store_timestamp_position", "peek_store_timestamp", "peek_store_host",
    "rewrite_physical_offset",
]
