"""What a driver can do, as one flat, documented record.

The conformance suite selects its tests by these fields, never by driver name. A test
run against an emulator that lacks a feature of the real service overrides the field
(:meth:`Capabilities.override`) and records why, so the skip is declared, not hidden.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from tiered_core.errors import InvalidOption


@dataclass(frozen=True)
class Capabilities:
    """Features of one backend. Every field defaults to the conservative answer."""

    #: ``write`` at a wrong position is rejected by the backend itself, atomically, even
    #: when two writers race (a conditional append: Azure ``appendpos_condition``, GCS
    #: ``ifGenerationMatch``). Without it the driver still checks the position, but only
    #: against its own view, so two racing writers may both pass the check.
    conditional_append: bool = False

    #: ``seal`` is enforced by the backend: later writes fail with ``SegmentSealed``.
    seal: bool = True

    #: ``list(prefix)`` enumerates stored objects (needed for metadata rebuild and Spark).
    list: bool = True

    #: Bytes written through one driver instance are visible to a fresh instance created
    #: with the same options (a real backend; an in-process memory store shares a
    #: namespace).
    persistent: bool = True

    #: Bytes survive the death of this process (files, object stores; not memory).
    survives_process_exit: bool = True

    #: Several threads may call the driver at once for different paths.
    concurrent_paths: bool = True

    #: One ``write`` call either stores all of its bytes or none of them. When False a
    #: failed write may leave a prefix behind, and ``size`` tells how much.
    atomic_write: bool = False

    #: ``write_if_absent`` is atomic in the backend: of several callers (threads, processes,
    #: machines) creating the same path at once, exactly one succeeds and the others see
    #: False, and a reader never sees a partly written object (POSIX ``link``, GCS
    #: ``ifGenerationMatch=0``, Azure ``If-None-Match: *``). Without it the driver checks
    #: and then writes, so two racing callers may both believe they created the object.
    #: Tier-prefix ownership relies on it to refuse a second store.
    create_if_absent: bool = False

    #: Largest ``data`` one ``write`` call accepts; ``None`` means unbounded. FileSegment
    #: splits larger commits into calls of at most this size.
    max_write_size: int | None = None

    #: Why fields were overridden for this run (field name -> reason), e.g. emulator gaps.
    overridden: Mapping[str, str] = field(default_factory=dict, compare=False)

    def override(self, reason: str, **changes: Any) -> "Capabilities":
        """A copy with ``changes`` applied and ``reason`` recorded for each field."""
        names = {f.name for f in dataclasses.fields(self)} - {"overridden"}
        for key in changes:
            if key not in names:
                raise InvalidOption(
                    f"unknown capability {key!r}; known: {', '.join(sorted(names))}",
                    option=key,
                )
        reasons = dict(self.overridden)
        reasons.update({key: reason for key in changes})
        return dataclasses.replace(self, overridden=reasons, **changes)

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["overridden"] = dict(self.overridden)
        return out

    @classmethod
    def fields(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.name != "overridden"]
