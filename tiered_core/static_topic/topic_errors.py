"""Errors of static topics that the generic ones in :mod:`tiered_core.errors` do not name.

Each subclasses the generic error callers already catch, and carries its own code where
the exit status must differ (``tiered static-topic status`` of an unknown topic is exit 3,
not the exit 2 of a broken mapping).
"""

from __future__ import annotations

from tiered_core.errors import ErrorCode, IllegalParam, MappingError


class UnknownStaticTopic(MappingError, LookupError):
    """No open broker has a mapping of ``topic``: it is not a static topic (or not one of
    this cluster). Code ``NOT_FOUND`` (exit 3); still a :class:`MappingError` for callers
    that catch that. Context: ``topic``, ``field`` ("topic") and ``known`` (the static
    topics the open brokers do map, at most 20)."""

    code = ErrorCode.NOT_FOUND


class DirectPutRefused(IllegalParam):
    """A put went straight into a physical queue of a static topic instead of through its
    logic queue: only the cluster writes those queues (a put there would be outside the
    mapping: unreadable through the logic queue, or inside another logic queue's range).
    Code ``ILLEGAL_PARAM`` (exit 2). Context: ``topic``, ``queue_id`` (the physical queue),
    ``broker``, ``logic_queue`` (the logic queue it belongs to, None when no generation of
    this broker's mapping uses it) and ``fix`` (what to run instead). Nothing was written."""
