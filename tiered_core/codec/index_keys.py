"""Which keys of a message the tiered index records (RocketMQ ``constructIndexFile``)."""

from __future__ import annotations

from typing import Any, Mapping

from tiered_core.codec.message import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_UNIQ_KEY,
)


def message_index_keys(message_or_properties: Any) -> list[str]:
    """``UNIQ_KEY`` (when set) and every entry of ``KEYS`` (space separated), without blanks
    or duplicates, in that order. Accepts a message (anything with ``properties``) or the
    properties mapping itself. The offset message id is not indexed: it changes in the
    tiered store."""
    props: Mapping[str, str] = getattr(message_or_properties, "properties", message_or_properties) or {}
    listed = getattr(message_or_properties, "keys", None)  # Message/MessageExt keep KEYS parsed
    if listed is None or callable(listed):  # a mapping's .keys is a method
        listed = props.get(PROPERTY_KEYS) or ""
    if isinstance(listed, str):
        listed = listed.split(KEY_SEPARATOR)
    keys: dict[str, None] = {}
    uniq = props.get(PROPERTY_UNIQ_KEY)
    if uniq and uniq.strip():
        keys[uniq] = None
    for key in listed:
        if isinstance(key, str) and key.strip():
            keys[key] = None
    return list(keys)


def _last_value(hay: str, marker: str) -> str | None:
    """The value :func:`~tiered_core.codec.message.parse_properties` keeps for the property
    ``marker`` names (``"\\x02NAME\\x01"``) in ``hay`` (``"\\x02"`` + properties text): that
    of the last pair with a non-empty value."""
    end = len(hay)
    while True:
        j = hay.rfind(marker, 0, end)
        if j < 0:
            return None
        start = j + len(marker)
        stop = hay.find(PROPERTY_SEPARATOR, start)
        if stop < 0:
            stop = len(hay)
        if stop > start:
            return hay[start:stop]
        end = j


_KEYS_MARKER = PROPERTY_SEPARATOR + PROPERTY_KEYS + NAME_VALUE_SEPARATOR
_UNIQ_MARKER = PROPERTY_SEPARATOR + PROPERTY_UNIQ_KEY + NAME_VALUE_SEPARATOR


def message_index_keys_from_properties(text: str) -> tuple[str, ...]:
    """:func:`message_index_keys` of a message whose stored properties text (``key\\x01value\\x02``
    pairs) is ``text``, without parsing every property: the two values are picked exactly as
    :func:`~tiered_core.codec.message.parse_properties` keeps them (the last pair with a
    non-empty value wins), then the rule above applies."""
    hay = PROPERTY_SEPARATOR + text
    listed = _last_value(hay, _KEYS_MARKER) if _KEYS_MARKER in hay else None
    uniq = _last_value(hay, _UNIQ_MARKER) if _UNIQ_MARKER in hay else None
    if uniq is None:
        if listed is None:
            return ()
        if KEY_SEPARATOR not in listed:  # one key: the rule reduces to "not blank"
            return (listed,) if listed.strip() else ()
    props = {}
    if uniq is not None:
        props[PROPERTY_UNIQ_KEY] = uniq
    if listed is not None:
        props[PROPERTY_KEYS] = listed
    return tuple(message_index_keys(props))


__all__ = ["message_index_keys", "message_index_keys_from_properties"]
