"""Per-broker persistence of static-topic mappings: ``{store_path}/config/topicQueueMapping.json``.

The file has RocketMQ's ``TopicQueueMappingManager`` shape::

    {"topicQueueMappingInfoMap": {"<topic>": <TopicQueueMappingDetail>, ...},
     "dataVersion": {"counter": N, "stateVersion": 0, "timestamp": ms}}

It is its own file (seed 002, "File Isolation"): never part of the topic config, so
copying ``topics.json`` between brokers cannot copy a mapping. Every detail names its
broker; a file whose details belong to another broker is refused on load
(:class:`~tiered_core.errors.MappingError`, field ``bname``), never used.

Writes are atomic and durable: the whole document goes to ``<file>.tmp``, is fsynced,
renamed over the file, and the directory is fsynced. A reader sees the old or the new
file, never a mix. fastjson's bare integer keys are accepted on load.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable

from tiered_core.common import fsync_dir, now_ms
from tiered_core.errors import MappingError, MetadataError
from tiered_core.metadata.json_store import parse_json
from tiered_core.static_topic.mapping import LogicQueueMappingItem, TopicQueueMappingDetail

FILE_NAME = "topicQueueMapping.json"


def mapping_path(store_path: str) -> str:
    """The mapping file of the broker whose local store is ``store_path``."""
    return os.path.join(store_path, "config", FILE_NAME)


class TopicQueueMappingStore:
    """The static-topic mappings of one broker (``broker``), kept in memory and in its file.

    Contract: :meth:`get` returns copies; :meth:`put` and :meth:`remove` validate, then
    persist atomically before they return (after a crash the file holds the state before
    or after the call); ``dataVersion.counter`` grows by one per write. Thread-safe.
    """

    def __init__(self, store_path: str, broker: str) -> None:
        self.path = mapping_path(store_path)
        self.broker = broker
        self._lock = threading.RLock()
        self._details: dict[str, TopicQueueMappingDetail] = {}
        self.data_version = loaded_data_version(None)
        self._load()

    # -- loading ------------------------------------------------------------------------

    def _load(self) -> None:
        doc = read_json_document(self.path, "static-topic mapping")
        if doc is None:
            return
        if not isinstance(doc, dict):
            raise MappingError(f"{self.path!r}: the document must be an object", topic=None, queue=None,
                               field="topicQueueMappingInfoMap", broker=self.broker, path=self.path)
        table = doc.get("topicQueueMappingInfoMap") or {}
        if not isinstance(table, dict):
            raise MappingError(f"{self.path!r}: topicQueueMappingInfoMap must be an object", topic=None, queue=None,
                               field="topicQueueMappingInfoMap", broker=self.broker, path=self.path)
        details = {}
        for topic, detail_doc in table.items():
            try:
                details[topic] = TopicQueueMappingDetail.from_json(detail_doc, topic=topic,
                                                                   expected_broker=self.broker)
            except MappingError as exc:
                exc.context["path"] = self.path
                exc.path = self.path  # type: ignore[attr-defined]
                raise
        self.data_version = loaded_data_version(doc)
        self._details = details

    # -- access ---------------------------------------------------------------------------

    def get(self, topic: str) -> TopicQueueMappingDetail | None:
        """A copy of this broker's detail of ``topic`` (None: no mapping)."""
        with self._lock:
            detail = self._details.get(topic)
            return detail.copy() if detail is not None else None

    def leader(self, topic: str, queue: int) -> tuple[int, "LogicQueueMappingItem | None"] | None:
        """``(totalQueues, newest item of logic queue queue or None)`` without copying the
        detail (the put path); None when this broker has no mapping of ``topic``."""
        with self._lock:
            detail = self._details.get(topic)
            return None if detail is None else (detail.totalQueues, detail.leader(queue))

    def maps(self, topic: str) -> bool:
        """Whether this broker has a mapping of ``topic`` (O(1): the put path asks it)."""
        return topic in self._details

    def logic_queue_of(self, topic: str, queue_id: int) -> tuple[int, LogicQueueMappingItem] | None:
        """``(logic queue, item)`` of the generation on this broker whose physical queue is
        ``queue_id`` (None: no generation this broker's file keeps uses it). A scan: for errors."""
        with self._lock:
            detail = self._details.get(topic)
            for q, items in (detail.hostedQueues.items() if detail is not None else ()):
                for item in items:
                    if item.bname == self.broker and item.queueId == queue_id:
                        return q, item
            return None

    def topics(self) -> list[str]:
        with self._lock:
            return sorted(self._details)

    def put(self, detail: TopicQueueMappingDetail) -> None:
        """Validate ``detail`` (it must belong to this broker), then store it durably."""
        detail = detail.copy()
        detail.rebuild_id_map()
        detail.check(self.broker)
        with self._lock:
            old = self._details.get(detail.topic)
            self._details[detail.topic] = detail
            try:
                self._persist()
            except BaseException:
                if old is None:
                    self._details.pop(detail.topic, None)
                else:
                    self._details[detail.topic] = old
                raise

    def remove(self, topic: str) -> None:
        with self._lock:
            if self._details.pop(topic, None) is not None:
                self._persist()

    # -- persistence ------------------------------------------------------------------------

    def _persist(self) -> None:  # lock held
        self.data_version = write_versioned_json(self.path, self.data_version, {
            "topicQueueMappingInfoMap": {t: d.to_json() for t, d in sorted(self._details.items())}})


def read_json_document(path: str, what: str) -> Any:
    """The JSON document of a broker config file (``what`` names it in errors), or None when
    the file is absent or blank. fastjson's bare integer keys are accepted. An unreadable
    file, one that is not UTF-8 or not JSON raises :class:`MetadataError` naming the path."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MetadataError(f"cannot read {what} {path!r}: {exc}", path=path) from exc
    if not raw.strip():
        return None
    try:
        return parse_json(raw.decode("utf-8"), path)
    except UnicodeDecodeError as exc:
        raise MetadataError(f"{path!r} is not UTF-8 text", path=path) from exc


def loaded_data_version(doc: Any) -> dict[str, int]:
    """The ``dataVersion`` of a RocketMQ config document (its integer fields over the
    defaults); the defaults for a new file (``doc`` None)."""
    version = {"counter": 0, "stateVersion": 0, "timestamp": now_ms()}
    found = doc.get("dataVersion") if isinstance(doc, dict) else None
    if isinstance(found, dict):
        version.update({k: v for k, v in found.items() if isinstance(v, int) and not isinstance(v, bool)})
    return version


def write_versioned_json(path: str, version: dict[str, int], body: dict) -> dict[str, int]:
    """Write ``{"dataVersion": next, **body}`` atomically (:func:`write_json_atomically`), ``next``
    being ``version`` with the counter one up and the time now; returns ``next`` (the caller
    keeps its old version when the write raises)."""
    following = {**version, "counter": version.get("counter", 0) + 1, "timestamp": now_ms()}
    write_json_atomically(path, {"dataVersion": following, **body})
    return following


def _compact_encoder() -> Callable[[Any], str]:
    """Compact JSON of one value (keys sorted, ``ensure_ascii``). One C encoder made once and
    reused: ``json.dumps`` builds a new one per call, which costs more than encoding a
    mapping item; ``indent`` would select the pure-Python encoder."""
    fallback = json.JSONEncoder(sort_keys=True, separators=(", ", ": "))
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no _json accelerator on this interpreter
        return fallback.encode
    encode = make(None, fallback.default, json.encoder.encode_basestring_ascii, None, ": ", ", ", True, False, True)
    return lambda value: "".join(encode(value, 0))


_compact = _compact_encoder()


def dumps_layered(doc: Any, depth: int, indent: int = 1) -> str:
    """``doc`` as JSON text: the outer ``depth`` levels of objects and lists one member a
    line (``indent`` spaces a level, keys sorted), every deeper value compact on its
    member's line. Linear in the size of ``doc`` and mostly the C encoder's work: a mapping
    of 100,000 logic queues is one line per queue, written in a fraction of the time
    ``json.dumps(indent=...)`` (the pure-Python encoder) takes."""
    out: list[str] = []
    _layered(doc, depth, " " * indent, "\n", out)
    return "".join(out)


def _layered(value: Any, depth: int, step: str, newline: str, out: list[str]) -> None:
    if depth <= 0 or not isinstance(value, (dict, list)) or not value:
        out.append(_compact(value))
        return
    pad = newline + step
    if isinstance(value, dict):
        out.append("{")
        for n, key in enumerate(sorted(value)):
            out.append(("," if n else "") + pad + _compact(key) + ": ")
            _layered(value[key], depth - 1, step, pad, out)
        out.append(newline + "}")
    else:
        out.append("[")
        for n, item in enumerate(value):
            out.append(("," if n else "") + pad)
            _layered(item, depth - 1, step, pad, out)
        out.append(newline + "]")


def write_json_atomically(path: str, doc: dict) -> None:
    """Write ``doc`` as JSON to ``path`` so that a crash leaves the old or the new file:
    temp file + fsync + rename + directory fsync. The outer four levels are one member a
    line (:func:`dumps_layered`: a static topic's mapping is one line per logic queue)."""
    data = dumps_layered(doc, 4).encode("utf-8")
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(directory)
