"""Names and paths of tiered segments, laid out like RocketMQ's ``PosixFileSegment``.

A segment path (relative to a driver's root) is::

    {md5(cluster)[:8]}_{cluster}/{broker}/{topic}/{queueId}/{TYPE}/{md5(str(base))[:8]}{base:020d}

with ``TYPE`` one of ``COMMIT_LOG``, ``CONSUME_QUEUE``, ``INDEX``; the key index lives
under topic ``rmq_sys_INDEX``, queue 0. Every name that becomes a path component is
validated here, so no input can make a path leave its directory; a listing can be
turned back into (cluster, broker, topic, queue, type, base offset) for rebuilds.
"""

from __future__ import annotations

import hashlib
import re
from typing import NamedTuple

from tiered_core.errors import IllegalParam
from tiered_core.common import INT_MAX, LONG_MAX, FileSegmentType

INDEX_TOPIC = "rmq_sys_INDEX"
INDEX_QUEUE_ID = 0
TOPIC_MAX_LENGTH = 127
FILE_NAME_LENGTH = 28  # 8 hash characters + 20 digits

_TOPIC_RE = re.compile(r"[%|a-zA-Z0-9_-]+")
_DIGITS20_RE = re.compile(r"[0-9]{20}")
_QUEUE_ID_RE = re.compile(r"0|[1-9][0-9]{0,9}")


def md5_prefix(text: str) -> str:
    """First 8 hex digits of the MD5 of ``text`` (RocketMQ ``MessageStoreUtil.getHash``).

    IllegalParam for text that has no UTF-8 form (a lone surrogate, as a listing of
    undecodable file names yields).
    """
    return hashlib.md5(_utf8(text, "name")).hexdigest()[:8]


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise IllegalParam(f"{what} {text!r} is not valid Unicode text (a lone surrogate at "
                           f"character {exc.start}): it has no UTF-8 form for a path",
                           **{what: text}) from None


def offset_to_file_name(offset: int) -> str:
    """``md5(str(offset))[:8]`` + the offset zero-padded to 20 digits (28 characters)."""
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= LONG_MAX:
        raise IllegalParam(f"file offset {offset!r} must be an int in 0..2^63-1", offset=offset)
    text = str(offset)
    return md5_prefix(text) + text.zfill(20)


def file_name_to_offset(name: str, *, strict: bool = False) -> int:
    """The offset in a segment file name: its last 20 characters (as RocketMQ reads it).

    With ``strict`` the whole name must be exactly ``offset_to_file_name(offset)``.
    IllegalParam names a bad name.
    """
    if not isinstance(name, str) or len(name) < 20 or not _DIGITS20_RE.fullmatch(name[-20:]):
        raise IllegalParam(f"{name!r} is not a segment file name (it must end in 20 digits)",
                           name=name)
    offset = int(name[-20:])
    if offset > LONG_MAX or (strict and name != offset_to_file_name(offset)):
        raise IllegalParam(f"{name!r} is not a segment file name (expected "
                           f"{md5_prefix(str(offset))}{name[-20:]})", name=name)
    return offset


def validate_topic(topic: str) -> str:
    """RocketMQ's topic rule: ``^[%|a-zA-Z0-9_-]+$``, at most 127 characters.

    Returns ``topic``; IllegalParam naming it otherwise.
    """
    if not isinstance(topic, str) or not topic:
        raise IllegalParam(f"topic {topic!r} must be a non-empty string", topic=topic)
    if len(topic) > TOPIC_MAX_LENGTH:
        raise IllegalParam(f"topic {topic!r} is {len(topic)} characters; at most "
                           f"{TOPIC_MAX_LENGTH} are allowed", topic=topic)
    if not _TOPIC_RE.fullmatch(topic):
        raise IllegalParam(f"topic {topic!r} may only contain letters, digits and % | _ -",
                           topic=topic)
    return topic


def _validate_component(value: str, what: str) -> str:
    """A cluster or broker name: any text that stays one path component."""
    if not isinstance(value, str) or not value:
        raise IllegalParam(f"{what} name {value!r} must be a non-empty string", **{what: value})
    if value in (".", "..") or "/" in value or "\\" in value or any(ord(c) < 0x20 for c in value):
        raise IllegalParam(f"{what} name {value!r} must not be '.', '..' or contain '/', '\\' "
                           "or control characters", **{what: value})
    _utf8(value, what)
    return value


def _validate_queue_id(queue_id: int) -> int:
    if isinstance(queue_id, bool) or not isinstance(queue_id, int) or not 0 <= queue_id <= INT_MAX:
        raise IllegalParam(f"queue id {queue_id!r} must be an int in 0..2^31-1", queue_id=queue_id)
    return queue_id


def _file_type(file_type: FileSegmentType | str | int) -> FileSegmentType:
    try:
        if isinstance(file_type, str):
            return FileSegmentType[file_type]
        return FileSegmentType(file_type)
    except (KeyError, ValueError):
        raise IllegalParam(f"file type {file_type!r} is not one of "
                           f"{[t.name for t in FileSegmentType]}", file_type=file_type) from None


def cluster_dir(cluster: str) -> str:
    """``{md5(cluster)[:8]}_{cluster}``: the top directory of a cluster's segments."""
    return f"{md5_prefix(_validate_component(cluster, 'cluster'))}_{cluster}"


def is_cluster_dir(name: str) -> bool:
    """Whether a directory name is :func:`cluster_dir` of some cluster (the top directory of
    a tier's segments: its md5 prefix matches the name after it)."""
    prefix, sep, cluster = name.partition("_")
    return bool(sep and cluster) and len(prefix) == 8 and md5_prefix(cluster) == prefix


def queue_path(broker: str, topic: str, queue_id: int) -> str:
    """RocketMQ's ``toFilePath``: ``{broker}/{topic}/{queueId}``."""
    return (f"{_validate_component(broker, 'broker')}/{validate_topic(topic)}/"
            f"{_validate_queue_id(queue_id)}")


def index_queue_path(broker: str) -> str:
    """``{broker}/rmq_sys_INDEX/0``: where the key index's segments live."""
    return queue_path(broker, INDEX_TOPIC, INDEX_QUEUE_ID)


def segment_dir(cluster: str, broker: str, topic: str, queue_id: int,
                file_type: FileSegmentType | str | int) -> str:
    """The directory holding one flat file's segments (no trailing slash)."""
    type_name = _file_type(file_type).name
    return f"{cluster_dir(cluster)}/{queue_path(broker, topic, queue_id)}/{type_name}"


def segment_path(cluster: str, broker: str, topic: str, queue_id: int,
                 file_type: FileSegmentType | str | int, base_offset: int) -> str:
    """The relative path of the segment of one flat file starting at ``base_offset``."""
    return (f"{segment_dir(cluster, broker, topic, queue_id, file_type)}/"
            f"{offset_to_file_name(base_offset)}")


def index_path(cluster: str, broker: str, base_offset: int) -> str:
    """The relative path of an index segment: ``.../{broker}/rmq_sys_INDEX/0/INDEX/{name}``."""
    return segment_path(cluster, broker, INDEX_TOPIC, INDEX_QUEUE_ID, FileSegmentType.INDEX,
                        base_offset)


class SegmentPathInfo(NamedTuple):
    """What a segment path says (the inverse of :func:`segment_path`)."""

    cluster: str
    broker: str
    topic: str
    queue_id: int
    file_type: FileSegmentType
    base_offset: int


def parse_segment_path(path: str) -> SegmentPathInfo:
    """Split a relative segment path (as listed by a driver) into its parts.

    Every component is checked, including both MD5 prefixes, so that a stray file under
    the root is rejected with IllegalParam rather than mistaken for a segment.
    """
    if not isinstance(path, str):
        raise IllegalParam(f"segment path {path!r} must be a string", path=path)
    parts = path.split("/")
    if len(parts) != 6:
        raise IllegalParam(f"{path!r} is not a segment path (expected 6 components "
                           "cluster/broker/topic/queue/type/file, got "
                           f"{len(parts)})", path=path)
    cdir, broker, topic, queue, type_name, file_name = parts
    try:
        if len(cdir) < 10 or cdir[8] != "_":
            raise IllegalParam(f"cluster directory {cdir!r} is not md5prefix_cluster", path=path)
        cluster = cdir[9:]
        if cluster_dir(cluster) != cdir:
            raise IllegalParam(f"cluster directory {cdir!r} has the wrong hash prefix", path=path)
        _validate_component(broker, "broker")
        validate_topic(topic)
        if not _QUEUE_ID_RE.fullmatch(queue):
            raise IllegalParam(f"queue directory {queue!r} is not a queue id", path=path)
        queue_id = _validate_queue_id(int(queue))
        if type_name not in FileSegmentType.__members__:
            raise IllegalParam(f"type directory {type_name!r} is not a file type", path=path)
        base_offset = file_name_to_offset(file_name, strict=True)
    except IllegalParam as exc:
        raise IllegalParam(f"{path!r} is not a segment path: {exc.message}", path=path) from None
    return SegmentPathInfo(cluster, broker, topic, queue_id, FileSegmentType[type_name],
                           base_offset)


__all__ = [
    "is_cluster_dir",
    "INDEX_TOPIC",
    "INDEX_QUEUE_ID",
    "TOPIC_MAX_LENGTH",
    "FILE_NAME_LENGTH",
    "md5_prefix",
    "offset_to_file_name",
    "file_name_to_offset",
    "validate_topic",
    "cluster_dir",
    "queue_path",
    "index_queue_path",
    "segment_dir",
    "segment_path",
    "index_path",
    "SegmentPathInfo",
    "parse_segment_path",
]
