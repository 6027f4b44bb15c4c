"""The options of the ``tiered`` data source, declared once in :data:`OPTIONS`, and their parsing.

Each :class:`SparkOption` states its name, its value type, its default, which readers accept
it (:data:`BATCH` ``spark.read``, :data:`STREAM` ``spark.readStream``, :data:`STATIC_BATCH` /
:data:`STATIC_STREAM` the same over a static topic, option ``static_topic``) and what it
means; the accepted names of a reader, the options that make a definition a stream, and
the check of each value are all derived from the table. Every error is an
:class:`~tiered_core.errors.InvalidOption` naming its option (Spark hands names over
lower-cased: they are matched case-insensitively). Checks that need the store's metadata
(JSON offsets naming a queue that does not exist) are made by the readers themselves.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tiered_core.codec.naming import validate_topic
from tiered_core.errors import IllegalParam, InvalidOption
from tiered_core.spark.config_source import CONFIG_FORMATS, ClusterSource, ConfigSource, config_source

#: The readers an option may belong to.
BATCH, STREAM, STATIC_BATCH, STATIC_STREAM = "batch", "stream", "static batch", "static stream"
#: How errors name each reader.
READER_NAMES = {
    BATCH: "data source 'tiered'",
    STREAM: "the 'tiered' streaming source",
    STATIC_BATCH: "a static-topic read of data source 'tiered'",
    STATIC_STREAM: "a static-topic stream (option 'static_topic')",
}

#: ``startingOffsets`` / per-queue JSON values meaning "the oldest message the tier holds" and "the end".
EARLIEST, LATEST = "earliest", "latest"
#: Kafka's per-partition sentinels, accepted in the JSON map too.
JSON_EARLIEST, JSON_LATEST = -2, -1
#: Consume-queue units read by one input partition at most (a segment is split beyond it).
DEFAULT_MAX_UNITS_PER_PARTITION = 1_000_000

#: Offsets as the stream readers exchange them with Spark: ``{topic: {str(queue_id): next_offset}}``.
OffsetMap = dict[str, dict[str, int]]
#: ``startingOffsets`` given as JSON, checked and frozen: ``((topic, ((queue_id, offset), ...)), ...)``.
FrozenOffsets = tuple[tuple[str, tuple[tuple[int, int], ...]], ...]


def _bad(option: str, value: Any, expected: str) -> InvalidOption:
    return InvalidOption(f"option {option!r} of data source 'tiered' must be {expected}, got {value!r}",
                         option=option, value=value)


# -- value parsers: (option name, raw value) -> value, InvalidOption naming the option ------


def _text(option: str, value: Any) -> str:
    return str(value)


def _one_of(*choices: str) -> Callable[[str, Any], str]:
    def parse(option: str, value: Any) -> str:
        text = str(value).strip()
        if text.lower() not in choices:
            raise _bad(option, value, " or ".join(map(repr, choices)))
        return text.lower()
    return parse


def _split(value: Any) -> list[str]:
    if isinstance(value, (list, tuple, set, frozenset)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def _topic(option: str, name: Any) -> str:
    if not isinstance(name, str):
        raise _bad(option, name, "a topic name")
    try:
        return validate_topic(name)
    except IllegalParam as exc:
        raise InvalidOption(f"option {option!r}: {exc.message}", option=option, value=name) from None


def _topic_option(option: str, value: Any) -> str:
    return _topic(option, str(value).strip())


def _topics(option: str, value: Any) -> frozenset[str]:
    names = _split(value)
    if not names:
        raise _bad(option, value, "a comma-separated list of topic names")
    return frozenset(_topic(option, name) for name in names)


def _queue_ids(option: str, value: Any) -> frozenset[int]:
    parts = _split(value)
    if not parts or not all(part.isdigit() for part in parts):
        raise _bad(option, value, "a comma-separated list of queue ids (ints >= 0)")
    return frozenset(int(part) for part in parts)


def parse_time(option: str, value: Any) -> int:
    """Epoch milliseconds from an int, a string of digits, or an ISO 8601 date/time (naive = UTC)."""
    if isinstance(value, bool):
        raise _bad(option, value, "epoch milliseconds or an ISO 8601 time")
    if isinstance(value, int):
        return value
    if isinstance(value, _dt.datetime):
        parsed = value
    else:
        text = str(value).strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            parsed = _dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
        except ValueError:
            raise _bad(option, value, "epoch milliseconds or an ISO 8601 time (e.g. 2024-05-01T12:00:00Z)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=_dt.timezone.utc)
    return int(parsed.timestamp() * 1000)


def _time_since_epoch(option: str, value: Any) -> int:
    ms = parse_time(option, value)
    if ms < 0:
        raise _bad(option, value, "a time at or after the epoch")
    return ms


def _positive_int(option: str, value: Any) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.lstrip("+").isdigit() or int(text) <= 0:
        raise _bad(option, value, "an integer > 0")
    return int(text)


def _flag(option: str, value: Any) -> bool:
    flag = str(value).strip().lower()
    if flag not in ("true", "false"):
        raise _bad(option, value, "'true' or 'false'")
    return flag == "true"


def _pattern(option: str, value: Any) -> "re.Pattern[str]":
    text = str(value)
    if not text.strip():
        raise _bad(option, text, "a regular expression matching topic names")
    try:
        return re.compile(text)
    except re.error as exc:
        raise _bad(option, text, f"a valid regular expression ({exc})") from None


def parse_offsets_json(option: str, text: str) -> FrozenOffsets:
    """``{"topic": {"0": 12, "1": -2}}`` checked and frozen (sorted); :class:`InvalidOption` naming ``option``."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise _bad(option, text, f"'earliest', 'latest' or a JSON object {{topic: {{queue_id: offset}}}} ({exc})") \
            from None
    if not isinstance(raw, dict) or not raw:
        raise _bad(option, text, "a non-empty JSON object {topic: {queue_id: offset}}")
    out = []
    for topic, queues in raw.items():
        topic = _topic(option, topic)
        if not isinstance(queues, dict) or not queues:
            raise _bad(option, text, f"a non-empty JSON object of queue ids for topic {topic!r}")
        pairs = []
        for qid, offset in queues.items():
            if not str(qid).isdigit():
                raise _bad(option, text, f"queue ids (ints >= 0) as keys for topic {topic!r}, not {qid!r}")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < JSON_EARLIEST:
                raise _bad(option, text, f"offsets >= 0 (or -2 earliest, -1 latest) for {topic!r} queue {qid}")
            pairs.append((int(qid), offset))
        out.append((topic, tuple(sorted(pairs))))
    return tuple(sorted(out))


def _starting_offsets(option: str, value: Any) -> str | FrozenOffsets:
    raw = str(value).strip()
    return raw.lower() if raw.lower() in (EARLIEST, LATEST) else parse_offsets_json(option, raw)


# -- the table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SparkOption:
    """One option of the ``tiered`` data source: ``name`` (its canonical spelling), ``type``
    (the accepted values, as errors and docs state them), ``default`` (None: not set),
    ``readers`` accepting it, ``doc``, and ``parse(name, raw) -> value`` raising
    :class:`InvalidOption` naming it."""

    name: str
    type: str
    default: Any
    readers: frozenset[str]
    doc: str
    parse: Callable[[str, Any], Any] = _text


def _opt(name: str, type_: str, default: Any, readers: tuple[str, ...], doc: str,
         parse: Callable[[str, Any], Any] = _text) -> SparkOption:
    return SparkOption(name, type_, default, frozenset(readers), doc, parse)


_STORE = (BATCH, STREAM)
_STATIC = (STATIC_BATCH, STATIC_STREAM)

#: Every option of the ``tiered`` data source, once.
OPTIONS: tuple[SparkOption, ...] = (
    _opt("config", "path", None, _STORE,
         "the store's tiered.toml or broker.conf, read where Spark plans (its text, not its path, goes to executors)"),
    _opt("path", "path", None, _STORE, "the same as 'config' (``load(path)``)"),
    _opt("config_text", "text", None, _STORE, "the configuration itself, instead of 'config'"),
    _opt("config_format", "'toml' or 'properties'", "toml", _STORE, "the format of 'config_text'",
         _one_of(*CONFIG_FORMATS)),
    _opt("config_base_dir", "path", None, _STORE,
         "the directory relative paths of 'config_text' are taken from (default: the working directory)"),
    _opt("cluster", "path", None, _STATIC, "a cluster TOML file listing the brokers of a static topic"),
    _opt("static_topic", "topic name", None, _STATIC, "the static topic to read by logic queue", _topic_option),
    _opt("topics", "comma list of topic names", None, _STORE, "the topics to read (default: all)", _topics),
    _opt("queues", "comma list of queue ids", None, (BATCH, STATIC_BATCH),
         "the queue ids to read (a static topic: logic queue ids; default: all)", _queue_ids),
    _opt("start_time", "epoch ms or ISO 8601", None, (BATCH,),
         "messages stored at or after this time (naive times are UTC)", parse_time),
    _opt("end_time", "epoch ms or ISO 8601", None, (BATCH,),
         "messages stored at or before this time (naive times are UTC)", parse_time),
    _opt("max_units_per_partition", "int > 0", DEFAULT_MAX_UNITS_PER_PARTITION, (BATCH,),
         "consume-queue units one input partition reads at most (a segment is split beyond it)", _positive_int),
    _opt("subscribePattern", "regular expression", None, (STREAM,),
         "the topics to read: those the pattern matches whole (instead of 'topics')", _pattern),
    _opt("startingOffsets", "'earliest', 'latest' or JSON {topic: {queue_id: offset}}", EARLIEST,
         (STREAM, STATIC_STREAM), "where a new query starts (-2: earliest, -1: latest in the JSON)",
         _starting_offsets),
    _opt("startingTimestamp", "epoch ms or ISO 8601", None, (STREAM,),
         "a new query starts at each queue's first message stored at or after this time", _time_since_epoch),
    _opt("maxMessagesPerTrigger", "int > 0", None, (STREAM, STATIC_STREAM),
         "messages per micro-batch at most, shared max-min fairly between queues", _positive_int),
    _opt("maxBytesPerTrigger", "int > 0", None, (STREAM,),
         "commit-log bytes per micro-batch at most (estimated per queue)", _positive_int),
    _opt("failOnDataLoss", "'true' or 'false'", True, (STREAM, STATIC_STREAM),
         "whether offsets expired from the tier fail the query (false: skipped with a WARNING)", _flag),
)

_BY_NAME = {o.name.lower(): o for o in OPTIONS}
#: The options naming where the configuration comes from (:func:`~tiered_core.spark.config_source.config_source`).
CONFIG_OPTIONS = ("config", "path", "config_text", "config_format", "config_base_dir")


def option_names(reader: str) -> tuple[str, ...]:
    """The options ``reader`` accepts, in table order."""
    return tuple(o.name for o in OPTIONS if reader in o.readers)


OPTION_NAMES = option_names(BATCH)
STREAM_OPTION_NAMES = option_names(STREAM)
STATIC_OPTION_NAMES = option_names(STATIC_BATCH)
STATIC_STREAM_OPTION_NAMES = option_names(STATIC_STREAM)
#: Options only ``spark.readStream`` has: their presence makes a definition a stream.
STREAM_ONLY = frozenset(o.name for o in OPTIONS
                        if o.readers & {STREAM, STATIC_STREAM} and not o.readers & {BATCH, STATIC_BATCH})


def canonical_name(name: Any) -> str | None:
    """The declared spelling of option ``name`` (any case); None when no reader has it."""
    option = _BY_NAME.get(str(name).lower())
    return option.name if option else None


def is_static(options: Mapping[str, Any]) -> bool:
    """Whether ``options`` read a static topic (option ``static_topic``)."""
    return any(str(k).lower() == "static_topic" for k in options)


def is_stream_only(options: Mapping[str, Any]) -> bool:
    """Whether ``options`` name an option only a stream accepts."""
    return any(canonical_name(k) in STREAM_ONLY for k in options)


def _accepted(options: Mapping[str, Any], reader: str) -> dict[str, Any]:
    """``options`` by canonical name; :class:`InvalidOption` naming the first option (sorted)
    that ``reader`` does not accept, listing those it does."""
    out: dict[str, Any] = {}
    refused: list[tuple[str, bool]] = []
    for key, value in options.items():
        option = _BY_NAME.get(str(key).lower())
        if option is None or reader not in option.readers:
            refused.append((option.name if option else str(key), option is not None))
        else:
            out[option.name] = value
    if refused:
        name, known = sorted(refused)[0]
        accepted = ", ".join(option_names(reader))
        if known:
            raise InvalidOption(f"option {name!r} is not supported by {READER_NAMES[reader]}; accepted: {accepted}",
                                option=name)
        raise InvalidOption(f"{READER_NAMES[reader]} has no option {name!r}; accepted: {accepted}", option=name)
    return out


def _values(options: Mapping[str, Any], reader: str, *, blank_is_unset: bool) -> dict[str, Any]:
    """Each option ``reader`` accepts, parsed by its declaration; ``blank_is_unset``: an empty
    value counts as not given."""
    out = {}
    for name, raw in _accepted(options, reader).items():
        if raw is None or (blank_is_unset and str(raw).strip() == ""):
            continue
        out[name] = _BY_NAME[name.lower()].parse(name, raw)
    return out


# -- what each reader gets --------------------------------------------------------------------


@dataclass(frozen=True)
class ReadOptions:
    """What to read: ``None`` means no restriction. Times are epoch milliseconds, both inclusive."""

    topics: frozenset[str] | None = None
    queues: frozenset[int] | None = None
    start_time: int | None = None
    end_time: int | None = None
    max_units_per_partition: int = DEFAULT_MAX_UNITS_PER_PARTITION

    def wants_topic(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics

    def wants_queue(self, queue_id: int) -> bool:
        return self.queues is None or queue_id in self.queues

    def overlaps(self, begin: int, end: int) -> bool:
        """Whether messages stored in ``[begin, end]`` can match the time range."""
        if self.start_time is not None and end < self.start_time:
            return False
        if self.end_time is not None and begin > self.end_time:
            return False
        return True

    def wants_time(self, ts: int) -> bool:
        return ((self.start_time is None or ts >= self.start_time)
                and (self.end_time is None or ts <= self.end_time))


@dataclass(frozen=True)
class StreamOptions:
    """What a streaming query reads and how much per micro-batch.

    ``topics``: exact names (None: any); ``pattern``: a compiled ``subscribePattern`` (None:
    any; matched with ``fullmatch``); ``starting``: ``"earliest"``, ``"latest"`` or a JSON map
    (``{topic: {queue id: offset}}``, -2 earliest, -1 latest); ``starting_timestamp``: epoch ms
    (None: not set); ``max_messages`` / ``max_bytes``: per-trigger limits (None: none);
    ``fail_on_data_loss``: whether a start below what the tier still holds is an error.
    """

    topics: frozenset[str] | None = None
    pattern: "re.Pattern[str] | None" = None
    starting: str | FrozenOffsets = EARLIEST
    starting_timestamp: int | None = None
    max_messages: int | None = None
    max_bytes: int | None = None
    fail_on_data_loss: bool = True

    def wants_topic(self, topic: str) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        return self.pattern is None or self.pattern.fullmatch(topic) is not None

    @property
    def starting_map(self) -> dict[str, dict[int, int]] | None:
        """The JSON ``startingOffsets`` as ``{topic: {queue_id: offset}}``; None for earliest/latest."""
        if isinstance(self.starting, str):
            return None
        return {topic: dict(queues) for topic, queues in self.starting}


def parse_read_options(options: Mapping[str, Any]) -> ReadOptions:
    """The row selection of ``spark.read``; :class:`InvalidOption` naming a bad or unknown option
    (listing the accepted ones). Empty values count as not given."""
    values = _values(options, BATCH, blank_is_unset=True)
    start, end = values.get("start_time"), values.get("end_time")
    if start is not None and end is not None and start > end:
        raise InvalidOption(f"option 'end_time' ({end}) is before option 'start_time' ({start})",
                            option="end_time", start_time=start, end_time=end)
    return ReadOptions(values.get("topics"), values.get("queues"), start, end,
                       values.get("max_units_per_partition", DEFAULT_MAX_UNITS_PER_PARTITION))


def _stream_settings(values: Mapping[str, Any], given: Mapping[str, Any]) -> StreamOptions:
    """The :class:`StreamOptions` of parsed ``values``; ``given`` (canonical names, raw) for the
    pairs of options that exclude each other."""
    present = {k for k, v in given.items() if v is not None and str(v).strip() != ""}
    if {"topics", "subscribePattern"} <= present:
        raise InvalidOption("give option 'topics' or option 'subscribePattern', not both", option="subscribePattern")
    if "startingTimestamp" in values and "startingOffsets" in present:
        raise InvalidOption("give option 'startingOffsets' or option 'startingTimestamp', not both",
                            option="startingTimestamp")
    return StreamOptions(values.get("topics"), values.get("subscribePattern"),
                         values.get("startingOffsets", EARLIEST), values.get("startingTimestamp"),
                         values.get("maxMessagesPerTrigger"), values.get("maxBytesPerTrigger"),
                         values.get("failOnDataLoss", True))


def parse_stream_options(options: Mapping[str, Any]) -> tuple[ConfigSource, StreamOptions]:
    """The configuration and the checked options of ``spark.readStream``; :class:`InvalidOption`
    (or :class:`~tiered_core.errors.ConfigError` for the config itself) naming the option."""
    values = _values(options, STREAM, blank_is_unset=False)
    settings = _stream_settings(values, _accepted(options, STREAM))
    source = config_source({k: v for k, v in values.items() if k in CONFIG_OPTIONS})
    return source, settings


def _cluster(values: Mapping[str, Any]) -> ClusterSource:
    path = values.get("cluster")
    if not path:
        raise InvalidOption("a static-topic read needs the option 'cluster' (a cluster TOML file)", option="cluster")
    return ClusterSource.from_file(str(path))


def parse_static_options(options: Mapping[str, Any]) -> tuple[ClusterSource, str, set[int] | None]:
    """``(cluster source, topic, logic queues or None)`` of a static-topic ``spark.read``;
    :class:`InvalidOption` naming a bad or unknown option, :class:`~tiered_core.errors.ConfigError`
    when the cluster file cannot be read."""
    values = _values(options, STATIC_BATCH, blank_is_unset=True)
    if "static_topic" not in values:
        raise _bad("static_topic", options.get("static_topic"), "a topic name")
    queues = values.get("queues")
    return _cluster(values), values["static_topic"], set(queues) if queues is not None else None


def parse_static_stream_options(options: Mapping[str, Any]) -> tuple[ClusterSource, str, StreamOptions]:
    """``(cluster source, static topic, streaming options)`` of a static-topic stream.

    Accepted: :data:`STATIC_STREAM_OPTION_NAMES`. Raises :class:`InvalidOption` naming the
    option for any other one (``startingTimestamp``, ``maxBytesPerTrigger``, ``topics``,
    ``subscribePattern``, ``queues`` and the ``config*`` options are refused with a static
    topic), a bad value, or JSON ``startingOffsets`` naming a topic other than ``static_topic``;
    :class:`~tiered_core.errors.ConfigError` when the cluster file cannot be read. Logic queue
    ids are checked against the mapping by the reader.
    """
    given = _accepted(options, STATIC_STREAM)
    topic = _topic("static_topic", str(given.get("static_topic", "")).strip())
    source = _cluster({"cluster": given.get("cluster")})
    values = _values({k: v for k, v in given.items() if k not in ("cluster", "static_topic")}, STATIC_STREAM,
                     blank_is_unset=False)
    settings = _stream_settings(values, given)
    others = sorted(set(settings.starting_map or {}) - {topic})
    if others:
        raise InvalidOption(f"option 'startingOffsets' names topic {others[0]!r}; a static-topic stream reads "
                            f"only {topic!r} (option 'static_topic')", option="startingOffsets", topic=others[0])
    return source, topic, settings


__all__ = [
    "BATCH", "DEFAULT_MAX_UNITS_PER_PARTITION", "EARLIEST", "JSON_EARLIEST", "JSON_LATEST", "LATEST", "OPTIONS",
    "OPTION_NAMES", "OffsetMap", "ReadOptions", "STATIC_BATCH", "STATIC_OPTION_NAMES", "STATIC_STREAM",
    "STATIC_STREAM_OPTION_NAMES", "STREAM", "STREAM_ONLY", "STREAM_OPTION_NAMES", "SparkOption", "StreamOptions",
    "canonical_name", "is_static", "is_stream_only", "option_names", "parse_offsets_json", "parse_read_options",
    "parse_static_options", "parse_static_stream_options", "parse_stream_options", "parse_time",
]
