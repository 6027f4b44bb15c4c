"""Which keys of a message the tiered index records (RocketMQ ``constructIndexFile``)."""

from __future__ import annotations

from typing import Any, Mapping

from tiered_core.codec.message import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_UNIQ_KEY


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


__all__ = ["message_index_keys"]
