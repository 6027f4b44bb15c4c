"""Parsing of the suite's command-line settings (shared by the pytest plugin and the CLI).

``--tiered-option key=value`` values are strings here; the driver class converts them
(:meth:`SegmentDriver.coerce_options`). ``--tiered-capability field=value[:reason]``
overrides one :class:`Capabilities` field for the run and records why.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, Iterable

from tiered_core.errors import InvalidOption
from tiered_core.spi.capabilities import Capabilities
from tiered_core.spi.driver import SegmentDriver

#: Reason recorded for a ``--tiered-capability`` given without one.
DEFAULT_OVERRIDE_REASON = "declared with --tiered-capability"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class CapabilityOverride:
    """One capability field forced to ``value`` for this run, with the reason why."""

    field: str
    value: Any
    reason: str


@dataclass
class SuiteSettings:
    """What ``--tiered-*`` options selected: the driver, its options, capability overrides."""

    driver_name: str | None = None
    driver_cls: type[SegmentDriver] | None = None
    #: ``--tiered-metadata-store``: the store the metadata store suite runs against.
    metadata_store_name: str | None = None
    metadata_store_cls: type | None = None
    options: dict[str, str] = field(default_factory=dict)
    overrides: list[CapabilityOverride] = field(default_factory=list)
    hypothesis_examples: int | None = None

    def apply_overrides(self, caps: Capabilities) -> Capabilities:
        return apply_overrides(caps, self.overrides)

    def describe(self) -> str:
        if self.driver_cls is None:
            if self.metadata_store_cls is not None:
                return self._describe_store()
            return "no driver selected"
        cls = self.driver_cls
        opts = cls.redact_options(self.options)
        text = f"driver {self.driver_name!r} ({cls.__module__}.{cls.__qualname__})"
        if opts:
            text += f", options {opts}"
        if self.overrides:
            text += ", capability overrides " + ", ".join(
                f"{o.field}={o.value!r} ({o.reason})" for o in self.overrides)
        if self.metadata_store_cls is not None:
            text += "; " + self._describe_store()
        return text

    def _describe_store(self) -> str:
        cls = self.metadata_store_cls
        return f"metadata store {self.metadata_store_name!r} ({cls.__module__}.{cls.__qualname__})"


def parse_assignments(items: Iterable[str], flag: str) -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; a malformed item or an empty (or blank) value raises
    :class:`InvalidOption` naming it: ``root=`` would run the suite in the working directory,
    or fail every test, rather than say what is wrong."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidOption(f"{flag} expects KEY=VALUE, got {item!r}", option=item)
        if not value.strip():
            raise InvalidOption(f"{flag} {key}= has an empty value: give {key!r} a value, or leave the "
                                "option out to use the driver's test location", option=key, flag=flag)
        out[key] = value
    return out


def parse_capability_overrides(items: Iterable[str], flag: str = "--tiered-capability") -> list[CapabilityOverride]:
    """Parse ``field=value[:reason]`` items, converting ``value`` to the field's type."""
    hints = typing.get_type_hints(Capabilities)
    known = Capabilities.fields()
    out = []
    for item in items:
        key, sep, rest = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidOption(f"{flag} expects FIELD=VALUE[:REASON], got {item!r}", option=item)
        if key not in known:
            raise InvalidOption(f"{flag}: unknown capability {key!r}; known: {', '.join(known)}", option=key)
        text, _, reason = rest.partition(":")
        out.append(CapabilityOverride(key, _convert(key, text.strip(), hints[key], flag),
                                      reason.strip() or DEFAULT_OVERRIDE_REASON))
    return out


def _convert(key: str, text: str, hint: Any, flag: str) -> Any:
    candidates = typing.get_args(hint) or (hint,)
    low = text.lower()
    if type(None) in candidates and low in ("none", "null", ""):
        return None
    if bool in candidates:
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    if int in candidates:
        try:
            return int(text)
        except ValueError:
            pass
    names = ", ".join(getattr(t, "__name__", str(t)) for t in candidates)
    raise InvalidOption(f"{flag}: capability {key!r} must be {names}, got {text!r}", option=key)


def apply_overrides(caps: Capabilities, overrides: Iterable[CapabilityOverride]) -> Capabilities:
    """``caps`` with each override applied and its reason recorded."""
    for o in overrides:
        caps = caps.override(o.reason, **{o.field: o.value})
    return caps


def resolve_settings(driver: str | None, options: Iterable[str] = (), capabilities: Iterable[str] = (),
                     hypothesis_examples: int | None = None, metadata_store: str | None = None, *,
                     option_flag: str = "--tiered-option") -> SuiteSettings:
    """Check everything the command line selected; raise a typed error naming a bad input
    (``option_flag`` is how errors name the driver-option flag: ``tiered conformance`` says
    ``--option``).

    The driver and the metadata store are looked up in the registry (name, alias or
    ``module:Class``); option
    names are checked against the driver class now, their values converted later,
    merged with the driver's conformance environment (``tiered_conformance_environment``).
    """
    settings = SuiteSettings(options=parse_assignments(options, option_flag),
                             overrides=parse_capability_overrides(capabilities),
                             hypothesis_examples=hypothesis_examples)
    if hypothesis_examples is not None and hypothesis_examples < 1:
        raise InvalidOption(f"--tiered-hypothesis-examples must be >= 1, got {hypothesis_examples}",
                            option="--tiered-hypothesis-examples")
    if driver:
        from tiered_core.plugins import get_registry

        cls = get_registry().driver_class(driver)
        accepted = cls.option_names()
        for key in settings.options:
            if key not in accepted:
                raise InvalidOption(
                    f"driver {cls.name!r} has no option {key!r}; accepted options: "
                    f"{', '.join(sorted(accepted)) or '(none)'}", option=key, driver=cls.name)
        settings.driver_name = driver
        settings.driver_cls = cls
    elif settings.options:
        raise InvalidOption("--tiered-option needs --tiered-driver NAME", option="--tiered-option")
    if metadata_store:
        from tiered_core.plugins import get_registry

        settings.metadata_store_cls = get_registry().metadata_store_class(metadata_store)
        settings.metadata_store_name = metadata_store
    return settings
