"""The streaming sink of the ``tiered`` data source: ``df.writeStream.format("tiered")``.

Rows ``(topic, queue_id, body[, keys, tags, properties, store_timestamp, born_timestamp,
queue_offset])`` become tiered messages of the target store ("B"), exactly once per
micro-batch:

- ``write`` (executor tasks) only checks and converts its rows into
  :class:`~tiered_core.codec.message.Message` s and returns them in its commit message;
  nothing touches B there, so a failed or aborted batch leaves nothing behind.
- ``commit(messages, batch_id)`` (the Spark driver) opens a
  :class:`~tiered_core.access.writer_session.WriterSession` on B (its store lock and the
  claim of its prefix, like the import job), reads the sink's ledger (a store property of
  B's metadata, ``spark.sink/<sink id>``) and does nothing for a batch it already committed (a replay).
  Otherwise it appends the batch's messages, in a fixed order (partition, then row
  order; by queue offset when the rows carry one), to B's flat files through a scratch
  metadata seeded from B's, uploads them, and records queues, segments and the ledger in
  ONE metadata transaction: the batch becomes readable at that point, all of it or none.
- A crash after the upload but before that transaction leaves bytes beyond B's metadata.
  The replay of the batch (Spark replays the last uncommitted batch with the same rows)
  adopts them (flat-file recovery and :func:`~tiered_core.access.writer_session.adopt_unrecorded`)
  and skips, per queue, as many of the batch's messages as already landed; their store
  timestamps were fixed before the upload (the ledger's ``pending`` record, or the rows'
  own ``store_timestamp``), so the replay writes what the first attempt would have.

B is written only by the sink while a query runs: no broker, import or second sink on the
same store (the store lock refuses a concurrent writer on the same machine; the prefix
claim refuses another store).

Keys: before the metadata transaction the commit puts the keys (UNIQ_KEY and KEYS) of the
batch's messages into B's tiered key index (local index files under B's ``store_path``,
uploaded once full, as a broker's are), so ``query_message`` on B finds what the sink
wrote. A replay indexes again the messages it adopted (an interrupted attempt may have
died before indexing them); a key indexed twice, or an entry of a batch that never
commits, is harmless: a key query checks each entry against the consume queue.

The steps of a commit, in order, are the module's functions :func:`append_queue` (one
queue appended and uploaded), :func:`index_batch` (the keys) and :func:`record_batch`
(the metadata transaction), called by :func:`commit_batch` through the module's names:
crash tests wrap them to stop a commit between two steps.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage

from tiered_core.access.writer_session import WriterSession, open_staged_queue, queue_outcome, record_outcome
from tiered_core.codec.message import Message
from tiered_core.codec.naming import validate_topic
from tiered_core.common import FileSegmentType, now_ms
from tiered_core.errors import IllegalParam, InvalidOption, MetadataError, StateConflict
from tiered_core.spark.failures import spark_facing
from tiered_core.spark.config_source import ConfigSource, config_source, require_shared_backend

log = logging.getLogger(__name__)

#: Columns the sink needs.
REQUIRED_COLUMNS = ("topic", "queue_id", "body")
#: Columns it also takes: message fields, and for mirroring the source's times and offset.
OPTIONAL_COLUMNS = ("keys", "tags", "properties", "store_timestamp", "born_timestamp", "queue_offset")
#: Columns of the ``tiered`` read schema the sink accepts and ignores (B assigns its own).
IGNORED_COLUMNS = ("commitlog_offset",)
#: Options of the sink (Spark hands them over lower-cased).
SINK_OPTION_NAMES = ("config", "path", "config_text", "config_format", "config_base_dir",
                     "sinkid", "checkpointlocation", "queryname", "lock_timeout")
#: Ledger entries are store properties named ``LEDGER_PREFIX + sink id``.
LEDGER_PREFIX = "spark.sink/"
#: Seconds a commit waits for B's store lock by default.
DEFAULT_LOCK_TIMEOUT = 60.0

# -- options and schema -------------------------------------------------------------------


@dataclass(frozen=True)
class SinkOptions:
    """The parsed options of one sink: the target store, the sink id, the lock timeout."""

    source: ConfigSource
    sink_id: str
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    """Check the sink's options; raises :class:`InvalidOption` naming a bad or unknown one.

    The sink id is option ``sinkId``, else the absolute ``checkpointLocation``: one
    ledger per query, so a restarted query (same checkpoint) continues its own ledger.
    """
    opts = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(set(opts) - set(SINK_OPTION_NAMES))
    if unknown:
        raise InvalidOption(f"streaming sink 'tiered' has no option(s) {', '.join(map(repr, unknown))}; "
                            f"accepted: config, config_text, config_format, config_base_dir, sinkId, "
                            f"checkpointLocation, lock_timeout", option=unknown[0])
    sink_id = str(opts.get("sinkid") or "").strip()
    if not sink_id:
        location = str(opts.get("checkpointlocation") or "").strip()
        if not location:
            raise InvalidOption("streaming sink 'tiered' needs option 'sinkId' or a 'checkpointLocation' "
                                "(the sink's ledger in the target store is kept per sink id)", option="sinkId")
        sink_id = "checkpoint:" + (os.path.abspath(location) if "://" not in location else location)
    timeout = DEFAULT_LOCK_TIMEOUT
    if opts.get("lock_timeout") not in (None, ""):
        try:
            timeout = float(opts["lock_timeout"])
        except (TypeError, ValueError):
            timeout = -1.0
        if not timeout >= 0:
            raise InvalidOption(f"option 'lock_timeout' of streaming sink 'tiered' must be seconds >= 0, "
                                f"got {opts['lock_timeout']!r}", option="lock_timeout", value=opts["lock_timeout"])
    target = {k: v for k, v in opts.items() if k in ("config", "path", "config_text", "config_format",
                                                     "config_base_dir")}
    return SinkOptions(config_source(target), sink_id, timeout)


_TYPES = {
    "topic": ("string",), "queue_id": ("int", "bigint", "smallint", "tinyint"), "body": ("binary", "string"),
    "keys": ("array<string>",), "tags": ("string",), "properties": ("map<string,string>",),
    "store_timestamp": ("timestamp", "timestamp_ntz", "bigint", "int"),
    "born_timestamp": ("timestamp", "timestamp_ntz", "bigint", "int"),
    "queue_offset": ("bigint", "int"), "commitlog_offset": ("bigint", "int"),
}


def check_sink_schema(schema) -> tuple[str, ...]:
    """The column names of ``schema`` (a Spark ``StructType``) if the sink takes them.

    Raises :class:`InvalidOption` naming a missing, unknown or ill-typed column.
    """
    names = [f.name for f in schema.fields]
    for name in names:
        if name not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS + IGNORED_COLUMNS:
            raise InvalidOption(f"streaming sink 'tiered' does not know column {name!r}; it takes "
                                f"{', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)}", option=name, column=name)
    for name in REQUIRED_COLUMNS:
        if name not in names:
            raise InvalidOption(f"streaming sink 'tiered' needs column {name!r} (it takes "
                                f"{', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)})", option=name, column=name)
    for f in schema.fields:
        kind = f.dataType.simpleString()
        if kind not in _TYPES[f.name]:
            raise InvalidOption(f"column {f.name!r} of streaming sink 'tiered' has type {kind}; expected "
                                f"{' or '.join(_TYPES[f.name])}", option=f.name, column=f.name, type=kind)
    return tuple(names)


# -- executor side ------------------------------------------------------------------------


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one write task sends to the commit: its partition, the streaming query id and
    batch id it ran under, and its rows as ``(topic, queue_id, queue_offset,
    store_timestamp, message)`` (offset and time None when the rows carry none)."""

    partition: int
    query_id: str | None
    batch_id: int | None
    rows: list[tuple[str, int, int | None, int | None, Message]] = field(default_factory=list)


def _millis(value: Any, column: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:  # PySpark hands TimestampType over as naive local time
            return int(value.timestamp() * 1000)
        return int(value.astimezone(_dt.timezone.utc).timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise IllegalParam(f"column {column!r}: expected a timestamp or epoch milliseconds, got {value!r:.60}",
                       column=column)


def row_message(row: Mapping[str, Any]) -> tuple[str, int, int | None, int | None, Message]:
    """One sink row as ``(topic, queue_id, queue_offset, store_timestamp, message)``.

    Raises :class:`IllegalParam` naming the column of a bad value (topic, queue id, offset).
    """
    from tiered_core.spark.appender import message_from_row

    topic = row.get("topic")
    try:
        validate_topic(topic)
    except IllegalParam as exc:
        raise IllegalParam(f"column 'topic': {exc.message}", column="topic", topic=topic) from None
    queue_id = row.get("queue_id")
    if not isinstance(queue_id, int) or isinstance(queue_id, bool) or queue_id < 0:
        raise IllegalParam(f"column 'queue_id' of topic {topic!r} must be an int >= 0, got {queue_id!r}",
                           column="queue_id", topic=topic)
    offset = row.get("queue_offset")
    if offset is not None and (not isinstance(offset, int) or offset < 0):
        raise IllegalParam(f"column 'queue_offset' of {topic}/{queue_id} must be an int >= 0, got {offset!r}",
                           column="queue_offset", topic=topic, queue_id=queue_id)
    body = row.get("body")
    if isinstance(body, str):
        body = body.encode("utf-8")
    store_ts = _millis(row.get("store_timestamp"), "store_timestamp")
    born = _millis(row.get("born_timestamp"), "born_timestamp")
    message = message_from_row(topic, row.get("keys"), row.get("tags"), row.get("properties"),
                               bytes(body or b""), born if born is not None else store_ts)
    return topic, queue_id, offset, store_ts, message


# -- driver side: the commit ------------------------------------------------------------


@dataclass(frozen=True)
class SinkBatchResult:
    """What one commit did: messages appended, skipped (already stored), queues touched;
    ``replay`` when the batch had been committed before and nothing was done."""

    batch_id: int
    appended: int
    skipped: int
    queues: int
    replay: bool


@dataclass
class Ledger:
    """A sink's record in B's metadata: the last committed batch, the query that wrote it,
    the batch being committed (with its store timestamp) until it is, and the totals of the
    committed batches: messages ``appended`` (made readable by their batch's commit, those an
    interrupted attempt of it uploaded included) and rows ``skipped`` because B's metadata
    recorded their queue offsets before their batch."""

    committed: int = -1
    query_id: str | None = None
    pending: dict[str, int] | None = None
    appended: int = 0
    skipped: int = 0

    @staticmethod
    def key(sink_id: str) -> str:
        return LEDGER_PREFIX + sink_id

    @classmethod
    def read(cls, metadata, sink_id: str) -> "Ledger":
        raw = metadata.get_property(cls.key(sink_id))
        if raw is None:
            return cls()
        try:
            data = json.loads(raw)
            return cls(int(data.get("committed", -1)), data.get("query_id"), data.get("pending"),
                       int(data.get("appended", 0)), int(data.get("skipped", 0)))
        except (ValueError, TypeError, AttributeError) as exc:
            raise MetadataError(f"streaming sink {sink_id!r}: its ledger in {metadata.path!r} is unreadable "
                                f"({exc}); refusing to guess which batches were committed",
                                path=metadata.path, sink_id=sink_id) from None

    def write(self, metadata, sink_id: str) -> None:
        metadata.set_property(self.key(sink_id), json.dumps(dataclasses.asdict(self), sort_keys=True))


def read_ledger(config_path: str | os.PathLike, sink_id: str) -> Ledger:
    """The ledger of ``sink_id`` in the store of ``config_path`` (tools, tests), read without
    writing anything; an empty ledger when the store's metadata does not exist yet."""
    from tiered_core.config import StoreConfig
    from tiered_core.spark.config_source import StoreNotReadable, open_metadata_readonly

    try:
        metadata = open_metadata_readonly(StoreConfig.load(config_path))
    except StoreNotReadable:
        return Ledger()
    try:
        return Ledger.read(metadata, sink_id)
    finally:
        metadata.close()


def _ordered(messages: Sequence[SinkCommitMessage]) -> dict[tuple[str, int], list[tuple]]:
    """The batch's rows by queue, in partition then row order (by queue offset when given)."""
    groups: dict[tuple[str, int], list[tuple]] = {}
    for message in sorted(messages, key=lambda m: m.partition):
        for row in message.rows:
            groups.setdefault((row[0], row[1]), []).append(row)
    for key, rows in groups.items():
        with_offset = sum(1 for r in rows if r[2] is not None)
        if with_offset not in (0, len(rows)):
            raise IllegalParam(f"{key[0]}/{key[1]}: column 'queue_offset' is null in some rows of the batch but "
                               "not in others", column="queue_offset", topic=key[0], queue_id=key[1])
        if with_offset:
            rows.sort(key=lambda r: r[2])
    return groups


def _cq_end(metadata, flat_path: str) -> int | None:
    """The queue offset after the last consume-queue unit B's metadata records, or None."""
    from tiered_core.codec.consume_queue import CQ_UNIT_SIZE

    last = None
    for seg in metadata.iterate_file_segments(int(FileSegmentType.CONSUME_QUEUE), flat_path):
        last = seg
    return None if last is None else (last.base_offset + last.size) // CQ_UNIT_SIZE


def append_queue(session: WriterSession, topic: str, queue_id: int, rows: list[tuple], timestamp: int,
                 replay: bool, scratch_dir: str) -> tuple[dict[str, Any], "QueueKeys"]:
    """Step 1 of a commit, per queue: append the batch's rows of one queue to B's flat files
    (staged: their segments are recorded in a scratch metadata) and upload them. Returns the
    queue's outcome (what :func:`record_batch` records) and the keys to index."""
    from tiered_core.codec.naming import queue_path
    from tiered_core.spark.appender import QueueAppender

    seed = session.seed(topic, queue_id)
    before = _cq_end(session.metadata, queue_path(session.config.broker, topic, queue_id))
    with open_staged_queue(session.driver, session.config, seed,
                           os.path.join(scratch_dir, f"{topic}-{queue_id}.db")) as (flat, scratch):
        appender = QueueAppender(flat)
        if rows[0][2] is None:
            # Offsets assigned here: skip what an interrupted attempt of this batch left.
            start = flat.consume_queue_max_offset() if flat.initialized else 0
            base = before if before is not None else (flat.consume_queue.min_queue_offset
                                                      if flat.initialized else 0)
            landed = start - base
            if landed and (not replay or landed > len(rows)):
                raise StateConflict(
                    f"{topic}/{queue_id}: {landed} messages lie beyond the target's metadata, and they are "
                    f"not from an interrupted attempt of this batch ({len(rows)} rows): was the target "
                    "written by something else than this sink?", topic=topic, queue_id=queue_id, landed=landed)
            appender.stats.skipped = landed
            for _, _, _, store_ts, message in rows[landed:]:
                appender.append(start, message, timestamp if store_ts is None else store_ts)
                start += 1
        else:
            for _, _, offset, store_ts, message in rows:
                appender.append(offset, message, timestamp if store_ts is None else store_ts,
                                time_given=store_ts is not None)
        outcome = queue_outcome(scratch, flat, appender.finish())
        # Of the skipped rows, those B's metadata recorded before this batch were stored
        # before it; the others landed in an interrupted attempt of this batch (adopted).
        outcome["stored_before"] = 0 if rows[0][2] is None or before is None else \
            sum(1 for row in rows if row[2] < before)
        keys = _index_items(flat, rows, before, timestamp)
    return outcome, keys


@dataclass
class QueueKeys:
    """What one queue of a batch puts into the key index (the arguments of ``put_keys``)."""

    topic: str
    queue_id: int
    keys: list[list[str]] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)


def _index_items(flat, rows: list[tuple], before: int | None, timestamp: int) -> QueueKeys:
    """The keys of the batch's messages at or after ``before`` (B's recorded end: what lies
    below was indexed by the batch that recorded it), each located by its consume-queue unit
    (so messages adopted from an interrupted attempt are located like new ones)."""
    from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, decode_cq_unit
    from tiered_core.codec.index_keys import message_index_keys

    out = QueueKeys(flat.topic, flat.queue_id)
    if rows[0][2] is None:
        first = flat.consume_queue_max_offset() - len(rows)  # the batch's rows end the queue
        placed = [(first + i, row) for i, row in enumerate(rows)]
    else:
        placed = [(row[2], row) for row in rows]
    low = before if before is not None else flat.consume_queue_min_offset()
    placed = [(q, row) for q, row in placed if q >= low]
    if not placed:
        return out
    start = placed[0][0]
    units = flat.get_consume_queue(start, placed[-1][0] - start + 1)
    for q, (_, _, _, store_ts, message) in placed:
        keys = message_index_keys(message)
        if not keys:
            continue
        unit = decode_cq_unit(units, (q - start) * CQ_UNIT_SIZE)
        out.keys.append(keys)
        out.offsets.append(unit.commitlog_offset)
        out.sizes.append(unit.size)
        out.timestamps.append(timestamp if store_ts is None else store_ts)
    return out


def index_batch(session: WriterSession, batch_keys: list[QueueKeys]) -> None:
    """Step 2 of a commit: put the batch's keys into B's tiered key index and fsync it
    (closing the service), then upload what is full. Raises DriverError when a put fails (the commit fails before
    its metadata transaction; Spark retries the batch)."""
    from tiered_core.common import AppendResult
    from tiered_core.errors import DriverError
    from tiered_core.index.service import IndexStoreService

    todo = [k for k in batch_keys if k.keys]
    if not todo:
        return
    metadata = session.metadata
    index = IndexStoreService.from_store_config(session.config, session.driver, metadata)
    try:
        for item in todo:
            topic_id = metadata.add_topic(item.topic).topic_id  # the same id the transaction records
            result = index.put_keys(item.topic, topic_id, item.queue_id, item.keys, item.offsets, item.sizes,
                                    item.timestamps)
            if result is not AppendResult.SUCCESS:
                raise DriverError(f"{item.topic}/{item.queue_id}: the key index of the sink's target "
                                  f"({index.directory}) refused {len(item.keys)} messages' keys: {result.name}",
                                  retryable=True, topic=item.topic, queue_id=item.queue_id)
        index.compact_and_upload()  # full index files go to the tier, as a broker's do
    finally:
        index.shutdown()


def commit_batch(options: SinkOptions, batch_id: int, messages: Sequence[SinkCommitMessage | None]
                 ) -> SinkBatchResult:
    """Make micro-batch ``batch_id`` of the sink readable in the target store, exactly once.

    Raises :class:`StateConflict` when the store stays locked, when the ledger belongs to
    another streaming query (a new checkpoint reusing a sink id), or when bytes beyond
    the metadata cannot come from an interrupted attempt of this batch;
    :class:`~tiered_core.errors.IllegalOffset` for a gap in mirrored queue offsets.
    """
    present = [m for m in messages if m is not None]
    query_ids = {m.query_id for m in present if m.query_id}
    query_id = next(iter(query_ids)) if len(query_ids) == 1 else None
    config = options.source.load()
    require_shared_backend(config, "sink's target")
    # Every commit claims the prefix anew: a take-over by another store is seen here.
    with WriterSession(config, lock_timeout=options.lock_timeout, writer="streaming sink", appends=True) as session:
        return _commit(session, options.sink_id, batch_id, present, query_id)


def record_batch(session: WriterSession, outcome: list[dict[str, Any]], ledger: "Ledger", sink_id: str) -> None:
    """Step 3 of a commit: record the batch's queues and segments and the sink's ledger
    ``ledger`` in ONE metadata transaction (the batch becomes readable here)."""
    metadata = session.metadata
    with metadata.transaction():
        record_outcome(metadata, outcome)
        ledger.write(metadata, sink_id)


def _commit(session: WriterSession, sink_id: str, batch_id: int, messages: list[SinkCommitMessage],
            query_id: str | None) -> SinkBatchResult:
    metadata = session.metadata
    ledger = Ledger.read(metadata, sink_id)
    if query_id and ledger.query_id and ledger.query_id != query_id:
        raise StateConflict(f"streaming sink {sink_id!r}: the target's ledger was written by streaming query "
                            f"{ledger.query_id} (batch {ledger.committed}), not by this query {query_id}; a new "
                            "checkpoint needs a new sinkId (or a new target store)", sink_id=sink_id,
                            committed=ledger.committed)
    if batch_id <= ledger.committed:
        log.info("streaming sink %r: batch %d was committed before; nothing to do", sink_id, batch_id)
        return SinkBatchResult(batch_id, 0, 0, 0, True)
    replay = bool(ledger.pending) and ledger.pending.get("batch") == batch_id
    if replay:
        timestamp = int(ledger.pending["timestamp"])
    else:
        timestamp = now_ms()
        ledger.pending = {"batch": batch_id, "timestamp": timestamp}
        ledger.query_id = query_id or ledger.query_id
        ledger.write(metadata, sink_id)  # durable before a byte of the batch is uploaded
    groups = _ordered(messages)
    outcome = []
    batch_keys = []
    scratch_dir = tempfile.mkdtemp(prefix="tiered-sink-")
    try:
        for (topic, queue_id), rows in sorted(groups.items()):
            queue, keys = append_queue(session, topic, queue_id, rows, timestamp, replay, scratch_dir)
            outcome.append(queue)
            batch_keys.append(keys)
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)
    index_batch(session, batch_keys)
    appended, skipped = sum(i["appended"] for i in outcome), sum(i["skipped"] for i in outcome)
    stored_before = sum(i["stored_before"] for i in outcome)
    # The totals: messages this batch made readable (adopted ones too), rows B held before it.
    record_batch(session, outcome, Ledger(batch_id, query_id or ledger.query_id, None,
                                          ledger.appended + appended + skipped - stored_before,
                                          ledger.skipped + stored_before), sink_id)
    return SinkBatchResult(batch_id, appended, skipped, len(outcome), False)


class TieredStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("tiered").option("config", "b.toml").option("checkpointLocation", dir)``.

    Contract: every row of a committed micro-batch is stored in the target exactly once,
    per queue in batch order (partition, then row; by ``queue_offset`` when given, which
    is then kept as the message's queue offset: a mirror); a replayed batch writes
    nothing twice; a batch becomes readable all at once at its commit; an aborted batch
    leaves nothing readable (``write`` never touches the target). Store timestamps come
    from ``store_timestamp`` or are the commit's time. The target must be written by
    this sink only (see the module docstring).

    Raises :class:`InvalidOption` naming a bad option or column (when the query starts),
    :class:`IllegalParam` naming the column of a bad value (in the task), and what
    :func:`commit_batch` raises.
    """

    def __init__(self, options: SinkOptions, columns: tuple[str, ...]) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator) -> SinkCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        query_id = context.getLocalProperty("sql.streaming.queryId") if context is not None else None
        raw_batch = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        rows = [row_message(row.asDict(recursive=False)) for row in iterator]
        return SinkCommitMessage(partition, query_id, None if raw_batch is None else int(raw_batch), rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        result = commit_batch(self.options, batchId, messages)  # type: ignore[arg-type]
        log.info("streaming sink %r: batch %d: %d appended, %d skipped, %d queues%s", self.options.sink_id,
                 batchId, result.appended, result.skipped, result.queues, " (replay)" if result.replay else "")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        # write() stages nothing in the target: an aborted batch has nothing to undo.
        log.warning("streaming sink %r: batch %d aborted; nothing was written to the target",
                    self.options.sink_id, batchId)


def stream_writer(options: Mapping[str, Any], schema) -> TieredStreamWriter:
    """The sink for ``options`` and the query's ``schema`` (checked now, before any batch; a
    ``checkpointLocation`` in the target store is an :class:`~tiered_core.errors.InvalidPath`)."""
    from tiered_core.ops.output_paths import check_output_path

    columns = check_sink_schema(schema)
    parsed = parse_sink_options(options)
    location = next((str(v) for k, v in options.items() if str(k).lower() == "checkpointlocation" and v), None)
    if location:  # Spark writes it: never into the target store
        check_output_path(location, [parsed.source.load()], option="checkpointLocation", what="checkpoint")
    return SparkTieredStreamWriter(parsed, columns)


#: What Spark gets: :class:`TieredStreamWriter` whose typed errors reach the driver tagged.
SparkTieredStreamWriter = spark_facing(TieredStreamWriter, "SparkTieredStreamWriter", __name__)
