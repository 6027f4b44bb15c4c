"""What ``tiered verify`` finds and ``tiered repair`` acts on: one record per finding.

Each :class:`FindingKind` is declared once, with its severity, whether ``tiered repair``
can mend it without losing a byte, and the fix in words (the command to run, or the manual
step when repair cannot mend it). A :class:`Finding` is one occurrence: the kind, the
backend object or queue it concerns, the offsets, and what exactly is wrong. A
:class:`VerifyReport` collects them with the walk's counters and decides the exit status:

====  =============================================================================
exit  when
====  =============================================================================
0     clean: no finding, or only ``info`` ones (what is waiting to be tiered...)
1     findings: at least one ``warning`` or ``error``, none ``corrupt``
4     corrupt data: at least one ``corrupt`` finding (bytes the store acknowledged
      fail the read checks or are gone)
====  =============================================================================

The values of :class:`FindingKind` and :class:`Severity` are part of the ``--json``
interface (``kind``, ``severity``); the texts are not.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable


class Severity(str, enum.Enum):
    """How bad a finding is, in increasing order (see the module doc for the exit codes)."""

    INFO = "info"  # a state worth knowing, nothing wrong (does not change the exit status)
    WARNING = "warning"  # wrong but harmless to reads (metadata that disagrees, stray objects)
    ERROR = "error"  # the store cannot work as it should (refuses to open, someone else owns it)
    CORRUPT = "corrupt"  # acknowledged bytes are gone or fail the read checks

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2, Severity.CORRUPT: 3}


@dataclass(frozen=True)
class KindInfo:
    """What one finding kind means: its ``severity``, whether ``tiered repair --apply`` can
    mend it (``mendable``) and ``fix``: what repair does about it, or the manual step."""

    severity: Severity
    mendable: bool
    fix: str
    area: str


class FindingKind(str, enum.Enum):
    """Every kind of finding, grouped by the area of the walk that finds it."""

    # -- ownership of the tier prefix ----------------------------------------------------
    OWNER_MISSING = "owner_missing"
    OWNER_OTHER = "owner_other"
    OWNER_UNREADABLE = "owner_unreadable"
    IDENTITY_MISMATCH = "identity_mismatch"
    # -- metadata <-> backend listing ----------------------------------------------------
    UNLISTED_OBJECT = "unlisted_object"
    MISSING_OBJECT = "missing_object"
    LOST_BYTES = "lost_bytes"
    UNCOMMITTED_TAIL = "uncommitted_tail"
    BAD_TAIL = "bad_tail"
    SEALED_MISMATCH = "sealed_mismatch"
    STRAY_OBJECT = "stray_object"
    LEFTOVER_PARTS = "leftover_parts"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    # -- one queue's segments and messages -----------------------------------------------
    SEGMENT_GAP = "segment_gap"
    UNIT_OUTSIDE_COMMIT_LOG = "unit_outside_commit_log"
    CORRUPT_MESSAGE = "corrupt_message"
    TIME_BOUNDS_MISMATCH = "time_bounds_mismatch"
    # -- the key index ---------------------------------------------------------------------
    INDEX_MISSING = "index_missing"
    INDEX_UNREADABLE = "index_unreadable"
    INDEX_ENTRY_WRONG = "index_entry_wrong"
    # -- the local store -------------------------------------------------------------------
    LOCAL_PENDING = "local_pending"
    LOCAL_RETENTION_HELD = "local_retention_held"

    @property
    def info(self) -> KindInfo:
        return KINDS[self]

    @property
    def severity(self) -> Severity:
        return KINDS[self].severity

    @property
    def mendable(self) -> bool:
        return KINDS[self].mendable


#: The declaration of every kind (one entry each; tests check none is missing).
KINDS: dict[FindingKind, KindInfo] = {
    FindingKind.OWNER_MISSING: KindInfo(
        Severity.WARNING, True, "repair claims the prefix for this store (as its next open would)", "ownership"),
    FindingKind.OWNER_OTHER: KindInfo(
        Severity.ERROR, False, "another store owns the prefix: if this store is to replace it, run "
        "`tiered takeover --config FILE`; otherwise give this store its own broker name", "ownership"),
    FindingKind.OWNER_UNREADABLE: KindInfo(
        Severity.ERROR, False, "the newest owner record cannot be read (a store's claim writes its record whole: "
        "most likely an object put there by hand or by a tool): if no other store writes under the prefix, move "
        "that object out of .tiered-owner/ (keep a copy) and the store opens as before. `tiered takeover --config "
        "FILE` would claim it too, but sets this store's messages not yet tiered aside and hands their offsets "
        "out again", "ownership"),
    FindingKind.IDENTITY_MISMATCH: KindInfo(
        Severity.ERROR, False, "the config names another cluster, broker, driver or tier location than the store "
        "was created with: set it back (verify checked nothing else: the config does not describe this store)",
        "ownership"),
    FindingKind.UNLISTED_OBJECT: KindInfo(
        Severity.ERROR, True, "repair adopts it into the metadata when it is a segment that continues its "
        "queue and passes the read-back check, else moves it into the quarantine", "listing"),
    FindingKind.STRAY_OBJECT: KindInfo(
        Severity.WARNING, False, "the store never reads, counts or deletes it: find out who wrote it (another "
        "driver or tool writing below this prefix, or a writer that crashed), then remove it yourself or leave "
        "it", "listing"),
    FindingKind.LEFTOVER_PARTS: KindInfo(
        Severity.WARNING, True, "pieces of a sealed segment that an interrupted clean-up left after copying their "
        "bytes into it (nothing reads or counts them; they only take space): repair removes them, as the "
        "segment's seal does", "listing"),
    FindingKind.MISSING_OBJECT: KindInfo(
        Severity.CORRUPT, False, "the object is gone: restore it from a copy of the bucket; until then reads "
        "of the offsets it held answer as damaged", "listing"),
    FindingKind.LOST_BYTES: KindInfo(
        Severity.CORRUPT, False, "the backend holds fewer bytes than were committed: restore the object from a "
        "copy of the bucket; until then reads past its end answer as damaged", "listing"),
    FindingKind.UNCOMMITTED_TAIL: KindInfo(
        Severity.INFO, True, "bytes written after the last metadata update that pass the read-back check: "
        "the store adopts them at its next open, repair adopts them now", "listing"),
    FindingKind.BAD_TAIL: KindInfo(
        Severity.WARNING, True, "bytes past the committed end that fail the read-back check: repair copies the "
        "object into the quarantine and rewrites it with its committed bytes only", "listing"),
    FindingKind.CHECKSUM_MISMATCH: KindInfo(
        Severity.CORRUPT, False, "the object is not the one this store wrote (another object put in its place, or "
        "its bytes changed): restore this store's object from a copy of the bucket. Do not run `tiered metadata "
        "rebuild`: it would record the object found as this store's, and its offsets would name other messages",
        "listing"),
    FindingKind.SEALED_MISMATCH: KindInfo(
        Severity.WARNING, True, "repair seals the object, or records it as sealed, so that both agree", "listing"),
    FindingKind.SEGMENT_GAP: KindInfo(
        Severity.CORRUPT, False, "the queue's segments do not join: the bytes between them are lost; restore the "
        "missing segment from a copy of the bucket", "queue"),
    FindingKind.UNIT_OUTSIDE_COMMIT_LOG: KindInfo(
        Severity.CORRUPT, False, "a consume-queue unit points past the commit log: the commit-log bytes it names "
        "are lost (restore the commit-log segment from a copy of the bucket), or the unit is damaged (restore the "
        "consume-queue object)", "queue"),
    FindingKind.CORRUPT_MESSAGE: KindInfo(
        Severity.CORRUPT, False, "the message fails the read checks: restore the segment from a copy of the "
        "bucket (reads of the other messages are unaffected)", "queue"),
    FindingKind.TIME_BOUNDS_MISMATCH: KindInfo(
        Severity.WARNING, True, "repair records the segment's times read from its messages where the metadata "
        "has none; messages stored outside times it does record may be another store's object of the same name: "
        "repair then says what to check", "queue"),
    FindingKind.INDEX_MISSING: KindInfo(
        Severity.WARNING, True, "repair indexes the keys of the messages the file covered again", "index"),
    FindingKind.INDEX_UNREADABLE: KindInfo(
        Severity.WARNING, True, "repair moves the file into the quarantine and indexes the keys of the messages "
        "it covered again", "index"),
    FindingKind.INDEX_ENTRY_WRONG: KindInfo(
        Severity.WARNING, False, "key queries skip the entry (each is checked against its message); it stays until "
        "its index file expires (file_reserved_hours); `tiered spark reindex` indexes the messages' keys again "
        "so that lookups find them", "index"),
    FindingKind.LOCAL_PENDING: KindInfo(
        Severity.INFO, False, "messages the local store holds that are not tiered yet: the dispatcher copies "
        "them", "local"),
    FindingKind.LOCAL_RETENTION_HELD: KindInfo(
        Severity.INFO, False, "local retention keeps these files until their messages are tiered", "local"),
}


@dataclass(frozen=True)
class Finding:
    """One thing verify found: ``kind``, the ``subject`` (a backend object path, a
    ``topic/queue``, or the tier prefix), what is wrong (``detail``), the queue and the
    offsets concerned when known (``queue_offsets``: ``[from, to)`` of the queue;
    ``file_offsets``: ``[from, to)`` of the segment's flat file) and ``facts``
    (machine-readable values: sizes, the owner record, whose an object looks like). ``fix``
    overrides the kind's fix when the finding knows better; ``manual``: repair must not mend
    this one although its kind is mendable (the fix says what to do instead)."""

    kind: FindingKind
    subject: str
    detail: str
    topic: str | None = None
    queue_id: int | None = None
    queue_offsets: tuple[int, int] | None = None
    file_offsets: tuple[int, int] | None = None
    facts: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    fix_text: str | None = None
    manual: bool = False

    @property
    def severity(self) -> Severity:
        return self.kind.severity

    @property
    def mendable(self) -> bool:
        return self.kind.mendable and not self.manual

    @property
    def fix(self) -> str:
        return self.fix_text or self.kind.info.fix

    def describe(self) -> str:
        """One line: severity, kind, subject, what is wrong."""
        where = ""
        if self.queue_offsets is not None:
            where = f" (queue offsets {self.queue_offsets[0]}..{self.queue_offsets[1] - 1})"
        return f"{self.severity.value:<7} {self.kind.value}: {self.subject}{where}: {self.detail}"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "severity": self.severity.value, "subject": self.subject,
                "detail": self.detail, "topic": self.topic, "queue_id": self.queue_id,
                "queue_offsets": None if self.queue_offsets is None else list(self.queue_offsets),
                "file_offsets": None if self.file_offsets is None else list(self.file_offsets),
                "mendable": self.mendable, "fix": self.fix, "facts": dict(self.facts)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        """The finding ``as_dict`` wrote (a Spark task's result, a saved report)."""
        qo, fo = data.get("queue_offsets"), data.get("file_offsets")
        kind = FindingKind(data["kind"])
        fix = data.get("fix")
        return cls(kind, data["subject"], data["detail"], data.get("topic"), data.get("queue_id"),
                   None if qo is None else (int(qo[0]), int(qo[1])),
                   None if fo is None else (int(fo[0]), int(fo[1])),
                   dict(data.get("facts") or {}), None if fix == kind.info.fix else fix)


@dataclass
class VerifyStats:
    """The walk's counters (what was looked at, how long it took)."""

    objects_listed: int = 0
    segments_checked: int = 0
    queues_checked: int = 0
    messages_read: int = 0
    bytes_read: int = 0
    index_files_checked: int = 0
    index_entries_checked: int = 0
    #: ``--checksums``: segments hashed, and segments holding bytes that have no recorded
    #: checksum to compare with (written before checksums were kept, or rebuilt): not hashed.
    objects_hashed: int = 0
    objects_without_checksum: int = 0
    elapsed_s: float = 0.0

    def add(self, other: "VerifyStats") -> None:
        for name in self.__dataclass_fields__:
            if name != "elapsed_s":
                setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class VerifyReport:
    """Every finding of one walk, its counters, and the exit status they call for."""

    prefix: str
    deep: bool
    #: Whether every segment was hashed against its recorded checksum.
    checksums: bool = False
    findings: list[Finding] = field(default_factory=list)
    stats: VerifyStats = field(default_factory=VerifyStats)

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    def extend(self, findings: Iterable[Finding]) -> None:
        self.findings.extend(findings)

    def of_kind(self, *kinds: FindingKind) -> list[Finding]:
        return [f for f in self.findings if f.kind in kinds]

    @property
    def worst(self) -> Severity:
        return max((f.severity for f in self.findings), key=lambda s: s.rank, default=Severity.INFO)

    @property
    def exit_code(self) -> int:
        """0 clean (info only), 1 findings, 4 corrupt data (module doc)."""
        worst = self.worst
        if worst is Severity.CORRUPT:
            return 4
        return 1 if worst.rank >= Severity.WARNING.rank else 0

    def summary(self) -> dict[str, Any]:
        by_kind: dict[str, int] = {}
        by_severity = {s.value: 0 for s in Severity}
        for f in self.findings:
            by_kind[f.kind.value] = by_kind.get(f.kind.value, 0) + 1
            by_severity[f.severity.value] += 1
        return {"prefix": self.prefix, "deep": self.deep, "checksums": self.checksums, "exit_code": self.exit_code,
                "findings": len(self.findings), "by_severity": by_severity, "by_kind": by_kind,
                "mendable": sum(1 for f in self.findings if f.mendable and f.severity is not Severity.INFO),
                **{k: getattr(self.stats, k) for k in self.stats.__dataclass_fields__}}

    def as_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "findings": [f.as_dict() for f in self.findings]}


__all__ = ["Finding", "FindingKind", "KINDS", "KindInfo", "Severity", "VerifyReport", "VerifyStats"]
