"""Options of the ``tiered`` streaming source, parsed once into a frozen :class:`StreamOptions`.

Every error is an :class:`~tiered_core.errors.InvalidOption` whose ``option`` (and message)
names the offending option; they are raised when the query is defined
(``readStream.format("tiered")...load()``), before it starts. Checks that need the
store's metadata (JSON offsets naming a queue that does not exist) are made by the
source itself (:mod:`tiered_core.spark.stream_source`). A static-topic stream (option
``static_topic`` with ``cluster``) has its own, smaller option set
(:func:`parse_static_stream_options`, read by :mod:`tiered_core.spark.stream_static`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from tiered_core.codec.naming import validate_topic
from tiered_core.errors import IllegalParam, InvalidOption
from tiered_core.spark.options import OPTION_NAMES as BATCH_OPTION_NAMES
from tiered_core.spark.options import ConfigSource, config_source, parse_read_options, parse_time

if TYPE_CHECKING:
    from tiered_core.spark.static_topic import ClusterSource

#: Accepted option names (Spark hands them over lower-cased; matched case-insensitively).
STREAM_OPTION_NAMES = (
    "config", "path", "config_text", "config_format", "config_base_dir",
    "topics", "subscribePattern", "startingOffsets", "startingTimestamp",
    "maxMessagesPerTrigger", "maxBytesPerTrigger", "failOnDataLoss",
)
_CANONICAL = {name.lower(): name for name in STREAM_OPTION_NAMES}
#: Options only the streaming source has: their presence makes a definition a stream.
_STREAM_ONLY = frozenset(name.lower() for name in STREAM_OPTION_NAMES[6:])

#: ``startingOffsets`` / per-queue JSON values meaning "the oldest message the tier holds" and "the end".
EARLIEST, LATEST = "earliest", "latest"
#: Kafka's per-partition sentinels, accepted in the JSON map too.
JSON_EARLIEST, JSON_LATEST = -2, -1

#: Offsets as the source exchanges them with Spark: ``{topic: {str(queue_id): next_offset}}``.
OffsetMap = dict[str, dict[str, int]]


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
    starting: str | tuple[tuple[str, tuple[tuple[int, int], ...]], ...] = EARLIEST
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


def _bad(option: str, value: Any, expected: str) -> InvalidOption:
    return InvalidOption(f"option {option!r} of the 'tiered' streaming source must be {expected}, got {value!r}",
                         option=option, value=value)


def _positive_int(option: str, value: Any) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.lstrip("+").isdigit() or int(text) <= 0:
        raise _bad(option, value, "an integer > 0")
    return int(text)


def _topic(option: str, name: Any) -> str:
    if not isinstance(name, str):
        raise _bad(option, name, "a map of topic names")
    try:
        return validate_topic(name)
    except IllegalParam as exc:
        raise InvalidOption(f"option {option!r}: {exc.message}", option=option, value=name) from None


def parse_offsets_json(option: str, text: str) -> tuple[tuple[str, tuple[tuple[int, int], ...]], ...]:
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


def parse_stream_options(options: Mapping[str, Any]) -> tuple[ConfigSource, StreamOptions]:
    """The configuration and the checked streaming options; raises :class:`InvalidOption`
    (or :class:`~tiered_core.errors.ConfigError` for the config itself) naming the option."""
    opts: dict[str, Any] = {}
    for key, value in options.items():
        name = _CANONICAL.get(str(key).lower())
        if name is None:
            if str(key).lower() == "static_topic":
                raise InvalidOption("option 'static_topic' makes a static-topic stream: see "
                                    "parse_static_stream_options (options "
                                    f"{', '.join(STATIC_STREAM_OPTION_NAMES)})", option="static_topic")
            raise InvalidOption(f"the 'tiered' streaming source has no option {key!r}; "
                                f"accepted: {', '.join(STREAM_OPTION_NAMES)}", option=str(key))
        opts[name] = value
    source = config_source({k: v for k, v in opts.items()
                            if k in ("config", "path", "config_text", "config_format", "config_base_dir")})
    return source, _stream_options(opts)


def _stream_options(opts: Mapping[str, Any]) -> StreamOptions:
    """The :class:`StreamOptions` of ``opts`` (canonical option names); :class:`InvalidOption` naming the option."""
    present = {k: v for k, v in opts.items() if v is not None and str(v).strip() != ""}
    topics = pattern = None
    if "topics" in present and "subscribePattern" in present:
        raise InvalidOption("give option 'topics' or option 'subscribePattern', not both", option="subscribePattern")
    if "topics" in opts:
        names = [part.strip() for part in str(opts["topics"]).split(",") if part.strip()]
        if not names:
            raise _bad("topics", opts["topics"], "a comma-separated list of topic names")
        topics = frozenset(_topic("topics", name) for name in names)
    if "subscribePattern" in opts:
        text = str(opts["subscribePattern"])
        if not text.strip():
            raise _bad("subscribePattern", text, "a regular expression matching topic names")
        try:
            pattern = re.compile(text)
        except re.error as exc:
            raise _bad("subscribePattern", text, f"a valid regular expression ({exc})") from None
    starting: Any = EARLIEST
    if "startingOffsets" in opts:
        raw = str(opts["startingOffsets"]).strip()
        if raw.lower() in (EARLIEST, LATEST):
            starting = raw.lower()
        else:
            starting = parse_offsets_json("startingOffsets", raw)
    timestamp = None
    if "startingTimestamp" in opts:
        if "startingOffsets" in present:
            raise InvalidOption("give option 'startingOffsets' or option 'startingTimestamp', not both",
                                option="startingTimestamp")
        timestamp = parse_time("startingTimestamp", opts["startingTimestamp"])
        if timestamp < 0:
            raise _bad("startingTimestamp", opts["startingTimestamp"], "a time at or after the epoch")
    max_messages = _positive_int("maxMessagesPerTrigger", opts["maxMessagesPerTrigger"]) \
        if "maxMessagesPerTrigger" in opts else None
    max_bytes = _positive_int("maxBytesPerTrigger", opts["maxBytesPerTrigger"]) \
        if "maxBytesPerTrigger" in opts else None
    fail = True
    if "failOnDataLoss" in opts:
        flag = str(opts["failOnDataLoss"]).strip().lower()
        if flag not in ("true", "false"):
            raise _bad("failOnDataLoss", opts["failOnDataLoss"], "'true' or 'false'")
        fail = flag == "true"
    return StreamOptions(topics, pattern, starting, timestamp, max_messages, max_bytes, fail)


#: Options of a static-topic stream (``static_topic`` with ``cluster``).
STATIC_STREAM_OPTION_NAMES = ("cluster", "static_topic", "startingOffsets", "maxMessagesPerTrigger", "failOnDataLoss")
_STATIC_CANONICAL = {name.lower(): name for name in STATIC_STREAM_OPTION_NAMES}


def parse_static_stream_options(options: Mapping[str, Any]) -> "tuple[ClusterSource, str, StreamOptions]":
    """``(cluster source, static topic, streaming options)`` of a static-topic stream.

    Accepted: :data:`STATIC_STREAM_OPTION_NAMES`. Raises :class:`InvalidOption` naming the
    option for any other one (``startingTimestamp``, ``maxBytesPerTrigger``, ``topics``,
    ``subscribePattern``, ``queues`` and the ``config*`` options are refused with a static
    topic), a bad value, or JSON ``startingOffsets`` naming a topic other than ``static_topic``;
    :class:`~tiered_core.errors.ConfigError` when the cluster file cannot be read. Logic queue
    ids are checked against the mapping by the reader
    (:class:`~tiered_core.spark.stream_static.StaticTopicStreamReader`).
    """
    from tiered_core.spark.static_topic import parse_static_options

    opts: dict[str, Any] = {}
    for key, value in options.items():
        name = _STATIC_CANONICAL.get(str(key).lower())
        if name is None:
            known = _CANONICAL.get(str(key).lower(), str(key))
            raise InvalidOption(f"option {known!r} is not supported by a static-topic stream (option "
                                f"'static_topic'); accepted: {', '.join(STATIC_STREAM_OPTION_NAMES)}", option=known)
        opts[name] = value
    topic = _topic("static_topic", str(opts.get("static_topic", "")).strip())
    source, _, _ = parse_static_options({"cluster": opts.get("cluster"), "static_topic": topic})
    settings = _stream_options({k: v for k, v in opts.items() if k not in ("cluster", "static_topic")})
    others = sorted(set(settings.starting_map or {}) - {topic})
    if others:
        raise InvalidOption(f"option 'startingOffsets' names topic {others[0]!r}; a static-topic stream reads "
                            f"only {topic!r} (option 'static_topic')", option="startingOffsets", topic=others[0])
    return source, topic, settings


def check_source_options(options: Mapping[str, Any]) -> None:
    """Where Spark defines a read (``load()``, through ``DataSource.schema``), before the batch
    reader or the stream reader exists: raise the :class:`InvalidOption` of options that
    cannot work. Options naming a streaming-only option are checked as a stream (with the
    store's metadata, as :class:`~tiered_core.spark.stream_source.TieredStreamReader` does);
    others must be valid batch options or valid streaming options."""
    opts = {str(k).lower(): v for k, v in options.items()}
    if "static_topic" in opts:
        if _STREAM_ONLY & set(opts):  # a static-topic stream: checked with the mapping, as its reader does
            from tiered_core.spark.stream_static import StaticTopicStreamReader

            StaticTopicStreamReader(*parse_static_stream_options(opts))
        return  # otherwise a static-topic batch read (or a stream with defaults): its reader checks its options
    if not _STREAM_ONLY & set(opts):
        try:
            parse_read_options(opts)
            return
        except InvalidOption as batch_error:
            try:
                parse_stream_options(opts)
            except InvalidOption as stream_error:
                name = str(batch_error.context.get("option"))
                if name == stream_error.context.get("option") and name.lower() not in _CANONICAL:
                    raise InvalidOption(
                        f"data source 'tiered' has no option {name!r}; spark.read accepts: "
                        f"{', '.join(BATCH_OPTION_NAMES)}; spark.readStream accepts: "
                        f"{', '.join(STREAM_OPTION_NAMES)}", option=name) from None
                raise batch_error from None
            return  # e.g. a stream with its defaults: valid for the streaming source
    from tiered_core.spark.stream_source import TieredStreamReader

    TieredStreamReader(*parse_stream_options(opts))


__all__ = ["EARLIEST", "LATEST", "OffsetMap", "STATIC_STREAM_OPTION_NAMES", "STREAM_OPTION_NAMES", "StreamOptions",
           "check_source_options", "parse_offsets_json", "parse_static_stream_options", "parse_stream_options"]
