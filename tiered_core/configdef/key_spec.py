"""``Key``: one config key's declaration (Kafka ``ConfigDef`` style), and what is made from it.

A :class:`Key` holds everything about one setting: name, type, unit, bounds, default, the
RocketMQ broker.conf key (with a converter where RocketMQ's unit differs, and the boolean
switch that turns the feature off), the environment variable and the documentation. From
the declarations in :mod:`tiered_core.configdef.keys` come the fields and defaults of
:class:`~tiered_core.config.StoreConfig`, its validation, the broker.conf mapping, the
``TIERED_*`` overrides, the README's key table (:func:`markdown_table`) and every
sub-config: a sub-config field bound with ``KEYS.name.field()`` takes its default from the
declaration, and :func:`section` builds the sub-config from a store config.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

from tiered_core.configdef.types import OPTIONS, RocketMQUnit, ValueType, shown
from tiered_core.errors import ConfigError

T = TypeVar("T")

#: Metadata entry of a sub-config field bound to a key: ``(key, convert or None)``.
_BOUND = "tiered_core.configdef.key_spec"


def bad_value(where: str, label: str, value: Any, accepted: str, key: str) -> ConfigError:
    """The error for ``value`` under ``label`` (as written in ``where``), naming the accepted values."""
    return ConfigError(f"{where}: {label} = {shown(value)} is invalid; accepted: {accepted}",
                       key=key, source=where, value=value, accepted=accepted)


@dataclass(frozen=True)
class Switch:
    """A RocketMQ boolean key that turns a feature off: ``rocketmq=false`` sets the key to
    ``off`` (and wins over the key's own broker.conf line); ``true``, RocketMQ's default,
    sets nothing."""

    rocketmq: str
    off: Any
    note: str = ""


@dataclass(frozen=True)
class Key:
    """One setting of :class:`~tiered_core.config.StoreConfig`, declared once.

    ``minimum`` / ``maximum`` bound the value (``why`` says why the minimum, ``why_max`` why the
    maximum: every size, count and duration has one); ``unit`` is
    shown in the README; ``rocketmq`` is the broker.conf key (``rocketmq_unit`` converts its
    raw string when RocketMQ counts in another unit); ``env`` defaults to ``TIERED_<NAME>``;
    ``requires`` names a package a (non-empty) value needs.
    """

    name: str
    type: ValueType
    default: Any
    doc: str
    unit: str = ""
    minimum: int | None = None
    maximum: int | None = None
    why: str = ""
    why_max: str = ""
    rocketmq: str | None = None
    rocketmq_unit: RocketMQUnit | None = None
    rocketmq_aliases: tuple[str, ...] = ()
    switch: Switch | None = None
    env: str = ""
    requires: str | None = None
    requires_hint: str = ""

    def __post_init__(self) -> None:
        if not self.env:
            object.__setattr__(self, "env", "TIERED_" + self.name.upper())
        if self.type is not OPTIONS:
            for value in (self.default, *((self.switch.off,) if self.switch else ())):
                if self.type.parse(value, self) != value:
                    raise AssertionError(f"{self.name}: {value!r} is not a normalized valid value")

    @property
    def accepted(self) -> str:
        """What the key accepts, as error messages say it."""
        return self.type.accepted(self)

    def check(self, value: Any, label: str, where: str) -> Any:
        """``value`` normalized, or a :class:`ConfigError` naming ``label``, ``where`` and the
        accepted values."""
        try:
            out = self.type.parse(value, self)
        except (ValueError, TypeError, OverflowError):
            raise bad_value(where, label, value, self.accepted, self.name) from None
        if self.requires and out is not None and importlib.util.find_spec(self.requires) is None:
            raise ConfigError(f"{where}: {label} = {shown(value)} needs the {self.requires} package, which "
                              f"is not installed (pip install {self.requires}); {self.requires_hint}",
                              key=self.name, source=where, value=value)
        return out

    def field(self, convert: Callable[[Any], Any] | None = None) -> Any:
        """A dataclass field of a sub-config bound to this key: its default is the key's
        (through ``convert`` when the sub-config counts in another unit), and
        :func:`section` fills it from a store config."""
        default = self.default if convert is None else convert(self.default)
        return dataclasses.field(default=default, metadata={_BOUND: (self, convert)})

    def __repr__(self) -> str:
        return f"Key({self.name!r})"


@dataclass(frozen=True)
class IgnoredKey:
    """A RocketMQ tiered-store key accepted without effect here; its value is still checked."""

    rocketmq: str
    type: ValueType
    doc: str
    minimum: int | None = None
    maximum: int | None = None
    why: str = ""
    why_max: str = ""

    @property
    def accepted(self) -> str:
        return self.type.accepted(self)  # type: ignore[arg-type]


class Keys:
    """The declared keys in order; ``KEYS.<name>`` is the :class:`Key` of that name."""

    def __init__(self, *keys: Key) -> None:
        self._by_name: dict[str, Key] = {}
        for key in keys:
            if key.name in self._by_name:
                raise AssertionError(f"config key {key.name!r} is declared twice")
            self._by_name[key.name] = key

    def __getattr__(self, name: str) -> Key:
        try:
            return self.__dict__["_by_name"][name]
        except KeyError:
            raise AttributeError(f"no config key {name!r}") from None

    def __getitem__(self, name: str) -> Key:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Key]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def names(self) -> list[str]:
        return list(self._by_name)


def bound_fields(cls: type) -> dict[str, tuple[Key, Callable[[Any], Any] | None]]:
    """The fields of dataclass ``cls`` bound to keys: field name -> (key, convert)."""
    return {f.name: f.metadata[_BOUND] for f in dataclasses.fields(cls) if _BOUND in f.metadata}


def section(cls: type[T], config: Any, **overrides: Any) -> T:
    """The sub-config ``cls`` (a dataclass whose key-bound fields were made by
    :meth:`Key.field`) with the values of ``config`` (any object with the keys as
    attributes, e.g. a :class:`~tiered_core.config.StoreConfig`); ``overrides`` set fields
    directly. The one way every sub-config is made from a store config."""
    values: dict[str, Any] = {}
    for name, (key, convert) in bound_fields(cls).items():
        value = getattr(config, key.name)
        values[name] = value if convert is None else convert(value)
    values.update(overrides)
    return cls(**values)


# -- the README table ------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _bounds(key: Key) -> str:
    if key.type.name in ("size", "count", "ms", "hours"):
        parts = [f">= {key.minimum or 0}"]
        if key.maximum is not None:
            parts.append(f"<= {key.type.show(key.maximum)}")
        return ", ".join(parts)
    if key.type.name == "component":
        return (f"<= {key.maximum} UTF-8 bytes; no `/`, `\\`, no leading or trailing whitespace"
                if key.maximum else "")
    if key.type.name in ("level", "flush", "recovery"):
        return key.accepted.replace(" | ", ", ")
    return ""


def _rocketmq(key: Key) -> str:
    parts = []
    if key.rocketmq:
        names = " / ".join(f"`{n}`" for n in (key.rocketmq, *key.rocketmq_aliases))
        parts.append(names + (f" ({key.rocketmq_unit.note})" if key.rocketmq_unit else ""))
    if key.switch:
        note = f" ({key.switch.note})" if key.switch.note else ""
        parts.append(f"`{key.switch.rocketmq}=false` sets {key.type.show(key.switch.off)}{note}")
    return "; ".join(parts)


def markdown_table(keys: Keys, ignored: tuple[IgnoredKey, ...] = ()) -> str:
    """The README's table of every key (and the RocketMQ keys accepted without effect)."""
    lines = ["| key | type | default | bounds | broker.conf | environment | meaning |",
             "|---|---|---|---|---|---|---|"]
    for key in keys:
        name = "`[tiered.options]`" if key.type is OPTIONS else f"`{key.name}`"
        kind = key.type.label + (f" ({key.unit})" if key.unit else "")
        meaning = key.doc + (f" Minimum: {key.why}." if key.why else "")
        meaning += f" Maximum: {key.why_max}." if key.why_max else ""
        if key.requires:
            meaning += f" Needs the `{key.requires}` package."
        lines.append("| " + " | ".join(_cell(c) for c in (
            name, kind, f"`{key.type.show(key.default)}`", _bounds(key), _rocketmq(key), f"`{key.env}`",
            meaning)) + " |")
    if ignored:
        lines += ["", "RocketMQ keys accepted without effect (their values are still checked):", ""]
        for key in ignored:
            lines.append(f"- `{key.rocketmq}` ({key.type.label}): {key.doc}")
    return "\n".join(lines) + "\n"


#: The README's generated key table lies between these two lines.
README_BEGIN = "<!-- config-keys:begin -->"
README_END = "<!-- config-keys:end -->"


def with_table(readme: str, table: str) -> str:
    """``readme`` with the text between :data:`README_BEGIN` and :data:`README_END` replaced
    by ``table``; ValueError when the markers are missing or out of order."""
    begin = readme.find(README_BEGIN)
    end = readme.find(README_END)
    if begin < 0 or end < begin or readme.count(README_BEGIN) != 1 or readme.count(README_END) != 1:
        raise ValueError(f"the README needs one {README_BEGIN} line and, after it, one {README_END} line")
    return readme[:begin + len(README_BEGIN)] + "\n" + table + readme[end:]
