"""Options of the ``tiered`` data source: parsed once, checked, every error naming its option."""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from typing import Any, Mapping

from tiered_core.codec.naming import validate_topic
from tiered_core.errors import IllegalParam, InvalidOption, NotFound, TieredStoreError

#: Accepted option names (Spark hands them over lower-cased).
OPTION_NAMES = (
    "config", "path", "config_text", "config_format", "config_base_dir",
    "topics", "queues", "start_time", "end_time", "max_units_per_partition",
)

#: Consume-queue units read by one input partition at most (a segment is split beyond it).
DEFAULT_MAX_UNITS_PER_PARTITION = 1_000_000


@dataclass(frozen=True)
class ConfigSource:
    """A store configuration as text, so it can travel to executors (which may not see the file).

    ``text`` holds secrets (driver credentials): it is never logged or shown in ``repr``.
    """

    text: str
    fmt: str = "toml"
    base_dir: str = "."

    def __repr__(self) -> str:
        return f"ConfigSource(fmt={self.fmt!r}, base_dir={self.base_dir!r}, text=<{len(self.text)} chars>)"

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "ConfigSource":
        """Load ``path`` here (with ``TIERED_*`` overrides applied) and keep its full meaning as TOML."""
        from tiered_core.config import StoreConfig

        path = os.fspath(path)
        config = StoreConfig.load(path)
        return cls(config.to_toml(), "toml", os.path.dirname(os.path.abspath(path)))

    def load(self):
        """The :class:`~tiered_core.config.StoreConfig` (no environment overrides: they were applied
        where the file was read)."""
        from tiered_core.config import StoreConfig

        return StoreConfig.from_text(self.text, self.fmt, self.base_dir)


def require_shared_backend(config, role: str = "store") -> None:
    """Spark tasks run in other processes than the one that plans them: a backend whose bytes
    live inside one process (the memory driver) cannot be used. Raises :class:`ConfigError`."""
    from tiered_core.errors import ConfigError
    from tiered_core.plugins import driver_class

    if not driver_class(config.driver).capabilities.survives_process_exit:
        raise ConfigError(f"{config.source or 'config'}: the {role}'s driver {config.driver!r} keeps its bytes "
                          "inside one process, and Spark tasks run in others; use a shared backend "
                          "(posix, gcs, azure...)", key="driver", source=config.source)


class StoreNotReadable(NotFound):
    """A Spark read (the data source, the stream source, ``tiered spark export``) named a store
    whose metadata does not exist. Nothing was created: Spark reads never write a store."""

    def __init__(self, config) -> None:
        path = config.effective_metadata_path()
        where = f" (config {config.source!r})" if config.source else ""
        TieredStoreError.__init__(
            self, f"no tiered store to read at store_path {config.store_path!r}{where}: its metadata file "
                  f"{path!r} does not exist. Spark reads a store and never creates one: check the config's "
                  "store_path and metadata_path; if the tier still holds the data, `tiered metadata rebuild "
                  "--config FILE` rebuilds the metadata", path=path, key="metadata_path",
            store_path=config.store_path, source=config.source)


def open_metadata_readonly(config):
    """``config``'s metadata store opened read-only (nothing is created or written);
    :class:`StoreNotReadable` when it does not exist."""
    from tiered_core.metadata import open_metadata_for_reading

    try:
        return open_metadata_for_reading(config.metadata, config.effective_metadata_path())
    except NotFound:
        raise StoreNotReadable(config) from None


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


def _bad(option: str, value: Any, expected: str) -> InvalidOption:
    return InvalidOption(f"option {option!r} of data source 'tiered' must be {expected}, got {value!r}",
                         option=option, value=value)


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


def _split(value: Any) -> list[str]:
    if isinstance(value, (list, tuple, set, frozenset)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def parse_read_options(options: Mapping[str, Any]) -> ReadOptions:
    """Check the row-selection options; unknown names raise :class:`InvalidOption` listing the accepted ones."""
    opts = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(set(opts) - set(OPTION_NAMES))
    if unknown:
        raise InvalidOption(f"data source 'tiered' has no option(s) {', '.join(map(repr, unknown))}; "
                            f"accepted: {', '.join(OPTION_NAMES)}", option=unknown[0])
    topics = queues = start = end = None
    if opts.get("topics") not in (None, ""):
        names = _split(opts["topics"])
        for name in names:
            try:
                validate_topic(name)
            except IllegalParam as exc:
                raise InvalidOption(f"option 'topics': {exc.message}", option="topics", value=name) from None
        if not names:
            raise _bad("topics", opts["topics"], "a comma-separated list of topic names")
        topics = frozenset(names)
    if opts.get("queues") not in (None, ""):
        ids = []
        for part in _split(opts["queues"]):
            if not part.isdigit():
                raise _bad("queues", opts["queues"], "a comma-separated list of queue ids (ints >= 0)")
            ids.append(int(part))
        if not ids:
            raise _bad("queues", opts["queues"], "a comma-separated list of queue ids (ints >= 0)")
        queues = frozenset(ids)
    if opts.get("start_time") not in (None, ""):
        start = parse_time("start_time", opts["start_time"])
    if opts.get("end_time") not in (None, ""):
        end = parse_time("end_time", opts["end_time"])
    if start is not None and end is not None and start > end:
        raise InvalidOption(f"option 'end_time' ({end}) is before option 'start_time' ({start})",
                            option="end_time", start_time=start, end_time=end)
    max_units = DEFAULT_MAX_UNITS_PER_PARTITION
    if opts.get("max_units_per_partition") not in (None, ""):
        raw = opts["max_units_per_partition"]
        if isinstance(raw, bool) or not str(raw).strip().isdigit() or int(str(raw).strip()) <= 0:
            raise _bad("max_units_per_partition", raw, "an int > 0")
        max_units = int(str(raw).strip())
    return ReadOptions(topics, queues, start, end, max_units)


def config_source(options: Mapping[str, Any]) -> ConfigSource:
    """The configuration named by the options: ``config`` (or ``path``), a file read here, or
    ``config_text`` (+ ``config_format``, ``config_base_dir``) given inline."""
    opts = {str(k).lower(): v for k, v in options.items()}
    text = opts.get("config_text")
    path = opts.get("config") or opts.get("path")
    if text and path:
        raise InvalidOption("give option 'config' (a file) or option 'config_text', not both", option="config")
    if text:
        fmt = str(opts.get("config_format") or "toml")
        if fmt not in ("toml", "properties"):
            raise _bad("config_format", fmt, "'toml' or 'properties'")
        return ConfigSource(str(text), fmt, str(opts.get("config_base_dir") or os.getcwd()))
    if not path:
        raise InvalidOption("data source 'tiered' needs option 'config' (the store's tiered.toml or broker.conf)",
                            option="config")
    return ConfigSource.from_file(str(path))
