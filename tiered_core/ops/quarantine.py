"""The quarantine of ``tiered repair``: where an object goes instead of being deleted.

Repair never deletes a backend object outright. An object it must take away (an orphan
it cannot adopt, an unreadable index file) or cut back (a segment with a tail that fails
the read-back check) is first *moved aside*::

    {cluster dir}/{broker}/.quarantine/{repair id}/{path relative to the prefix}
    {cluster dir}/{broker}/.quarantine/{repair id}/manifest.json

A move (:meth:`Quarantine.move`) copies the object (read, create, write in chunks, seal),
reads the copy back and compares its size and CRC-32 with the original's, records the copy
in the manifest, and only then removes the original or rewrites it with its first ``keep``
bytes (read from the checked copy, then read back and compared too); a last manifest
record says it is done. ``.quarantine`` is a reserved directory of the prefix
(:func:`~tiered_core.flat.ownership.is_reserved_path`): no listing of the store counts what
it holds.

**The manifest** is JSON Lines: one JSON object per line, appended (objects cannot be
rewritten in place on every backend). Each line is one step of one object: ``state``
``"copied"`` (the copy is checked; the original is still there or being changed) then
``"done"`` (removed or rewritten), and ``"purged"`` when :func:`purge` deleted the copy.
Every line carries the whole entry: ``original`` (backend path), ``path`` (relative to the
prefix), ``copy``, ``size``, ``crc32`` (of the whole object), ``sealed``, ``reason``,
``kind`` (the finding kind), ``at_ms`` (when it was copied), ``repair_id``, ``then`` (what
was done next, in words: ``"removed"`` or ``"rewritten with its first N committed
bytes"``) and ``keep`` (N, or null). The last line naming an object is its state; a torn
last line (a crash while appending) is ignored.

**A crash** between the steps leaves the original, or a checked copy plus a manifest line
``"copied"`` saying what to finish: :meth:`Quarantine.finish_pending` (which ``tiered
repair --apply`` runs first) completes such entries of earlier runs after the caller's
re-check of the live state, and is harmless when there is nothing to finish.

**The only way out** of the quarantine is :func:`purge`: it deletes copies a manifest lists
as done whose move is older than a limit, then the manifest once all its copies are gone.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
import zlib
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

from tiered_core.errors import CorruptData, Fenced, IllegalParam, NotFound, StateConflict, TieredStoreError
from tiered_core.flat.ownership import QUARANTINE_DIR
from tiered_core.spi.driver import SegmentDriver

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
#: Bytes read or written per request while copying.
CHUNK = 4 << 20

COPIED, DONE, PURGED = "copied", "done", "purged"
REMOVED = "removed"


def new_repair_id(now_s: float | None = None) -> str:
    """A fresh repair id: ``r{UTC time}-{6 hex}`` (sorts by time; unique per run)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now_s is None else now_s))
    return f"r{stamp}-{secrets.token_hex(3)}"


def rewritten(keep: int) -> str:
    """The manifest's words for a rewrite that keeps the first ``keep`` bytes."""
    return f"rewritten with its first {keep} committed bytes"


@dataclass(frozen=True)
class QuarantineEntry:
    """One object moved into the quarantine (one manifest line; see the module doc)."""

    original: str
    path: str
    copy: str
    size: int
    crc32: int
    sealed: bool
    reason: str
    kind: str
    at_ms: int
    repair_id: str
    then: str
    keep: int | None = None
    state: str = COPIED

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "QuarantineEntry":
        keep = data.get("keep")
        return cls(str(data["original"]), str(data["path"]), str(data["copy"]), int(data["size"]),
                   int(data["crc32"]), bool(data.get("sealed", False)), str(data.get("reason", "")),
                   str(data.get("kind", "")), int(data["at_ms"]), str(data["repair_id"]),
                   str(data.get("then", REMOVED)), None if keep is None else int(keep),
                   str(data.get("state", COPIED)))


@dataclass
class QuarantineRun:
    """What one repair run put into the quarantine: its ``entries`` (the last state of each
    object), the manifest's path, and ``unlisted``: objects in its directory no manifest
    line names (a copy cut short before its manifest line; never purged)."""

    repair_id: str
    manifest: str
    entries: list[QuarantineEntry] = field(default_factory=list)
    unlisted: list[tuple[str, int]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"repair_id": self.repair_id, "manifest": self.manifest,
                "entries": [e.as_dict() for e in self.entries],
                "unlisted": [{"path": p, "size": n} for p, n in self.unlisted]}


def quarantine_dir(prefix: str) -> str:
    """``{prefix}.quarantine/`` of a tier prefix (``{cluster dir}/{broker}/``)."""
    return f"{prefix}{QUARANTINE_DIR}/"


# -- copying and checking -------------------------------------------------------------------


def _crc_of(driver: SegmentDriver, path: str, length: int) -> int:
    """CRC-32 of the first ``length`` bytes of ``path`` (chunked reads)."""
    crc, pos = 0, 0
    while pos < length:
        data = driver.read(path, pos, min(CHUNK, length - pos))
        if not data:
            raise CorruptData(f"{path!r} ends at {pos}, before {length} bytes", path=path, offset=pos)
        crc = zlib.crc32(data, crc)
        pos += len(data)
    return crc


def _copy(driver: SegmentDriver, src: str, dst: str, length: int, start: int = 0) -> int:
    """Append bytes ``[start, length)`` of ``src`` to ``dst`` (whose size is ``start``);
    returns the CRC-32 of the bytes written."""
    crc, pos = 0, start
    while pos < length:
        data = driver.read(src, pos, min(CHUNK, length - pos))
        if not data:
            raise CorruptData(f"{src!r} ends at {pos}, before {length} bytes", path=src, offset=pos)
        driver.write(dst, pos, data)
        crc = zlib.crc32(data, crc)
        pos += len(data)
    return crc


def _check(driver: SegmentDriver, path: str, size: int, crc: int, what: str) -> None:
    """Raise :class:`CorruptData` unless ``path`` holds ``size`` bytes with CRC ``crc``."""
    got = driver.size(path)
    if got != size:
        raise CorruptData(f"{what} {path!r} holds {got} bytes, not {size}: nothing was removed",
                          path=path, size=got, expected=size)
    got_crc = _crc_of(driver, path, size)
    if got_crc != crc:
        raise CorruptData(f"{what} {path!r} reads back with CRC-32 {got_crc:#010x}, not {crc:#010x}: "
                          "nothing was removed", path=path, crc32=got_crc, expected=crc)


# -- the quarantine of one repair run ---------------------------------------------------------


class Quarantine:
    """The quarantine directory of one repair run under tier prefix ``prefix``.

    ``driver`` must be the writer's driver of that prefix (held under the store lock and the
    prefix claim, fenced), since :meth:`move` removes and rewrites originals. Every method
    raises the driver's typed errors; :meth:`move` raises :class:`CorruptData` when the copy
    does not read back equal (the original is then untouched) and :class:`StateConflict`
    when the original changed during the copy.
    """

    def __init__(self, driver: SegmentDriver, prefix: str, repair_id: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.driver = driver
        self.prefix = prefix
        self.repair_id = repair_id or new_repair_id(clock())
        self.clock = clock
        self.root = f"{quarantine_dir(prefix)}{self.repair_id}/"
        self.manifest = f"{self.root}{MANIFEST}"
        #: Entries this run moved (their last state).
        self.moved: list[QuarantineEntry] = []
        #: Earlier runs' entries :meth:`finish_pending` left: (entry, why, whether finishing
        #: it failed -- else the caller's re-check said to leave it).
        self.unfinished: list[tuple[QuarantineEntry, str, bool]] = []

    def relative(self, path: str) -> str:
        if not path.startswith(self.prefix):
            raise StateConflict(f"{path!r} is not under the tier prefix {self.prefix!r}: not moved",
                                path=path, prefix=self.prefix)
        return path[len(self.prefix):]

    def move(self, path: str, *, reason: str, kind: str, keep: int | None = None) -> QuarantineEntry:
        """Move ``path`` into this run's quarantine: copy, check the copy, record it, then
        remove the original (``keep`` None) or rewrite it with its first ``keep`` bytes.
        Returns the entry (state ``done``)."""
        rel = self.relative(path)
        size = self.driver.size(path)
        sealed = self.driver.is_sealed(path)
        if keep is not None and not 0 <= keep <= size:
            raise StateConflict(f"cannot keep {keep} bytes of {path!r}, which holds {size}", path=path,
                                size=size, keep=keep)
        copy = f"{self.root}{rel}"
        if self.driver.exists(copy):
            raise StateConflict(f"{copy!r} exists already: {path!r} was moved twice in repair "
                                f"{self.repair_id}", path=copy)
        self.driver.create(copy)
        crc = _copy(self.driver, path, copy, size)
        self.driver.seal(copy)
        _check(self.driver, copy, size, crc, "the quarantined copy")
        if self.driver.size(path) != size:
            raise StateConflict(f"{path!r} changed while it was copied into the quarantine ({size} -> "
                                f"{self.driver.size(path)} bytes): nothing was removed", path=path)
        entry = QuarantineEntry(path, rel, copy, size, crc, sealed, reason, kind, int(self.clock() * 1000),
                                self.repair_id, REMOVED if keep is None else rewritten(keep), keep)
        self._record(entry)
        return self.finish(entry)

    def finish(self, entry: QuarantineEntry) -> QuarantineEntry:
        """Do what ``entry`` (state ``copied``, its copy checked) says comes next: remove the
        original or rewrite it with its first ``keep`` bytes from the copy; record ``done``.
        Safe to repeat after a crash at any point: an original already removed, or already
        (partly) rewritten from the copy, is recognised."""
        d = self.driver
        exists = d.exists(entry.original)
        if entry.keep is None:
            if exists:
                _check(d, entry.original, entry.size, entry.crc32, "the original")
                d.delete(entry.original)
        else:
            keep_crc = _crc_of(d, entry.copy, entry.keep)
            size = d.size(entry.original) if exists else -1
            if exists and size == entry.size and entry.keep != entry.size:
                _check(d, entry.original, entry.size, entry.crc32, "the original")
                d.delete(entry.original)
                exists, size = False, -1
            if not exists:
                d.create(entry.original)
                size = 0
            if size > entry.keep:
                raise StateConflict(f"{entry.original!r} holds {size} bytes, neither the {entry.size} moved "
                                    f"nor the {entry.keep} to keep: left as it is (see {entry.copy!r})",
                                    path=entry.original)
            if size and _crc_of(d, entry.original, size) != _crc_of(d, entry.copy, size):
                raise StateConflict(f"{entry.original!r} does not begin with the bytes of its copy "
                                    f"{entry.copy!r}: left as it is", path=entry.original)
            if size < entry.keep:
                _copy(d, entry.copy, entry.original, entry.keep, start=size)
            if entry.sealed and not d.is_sealed(entry.original):
                d.seal(entry.original)
            _check(d, entry.original, entry.keep, keep_crc, "the rewritten object")
        done = replace(entry, state=DONE)
        self._record(done)
        self.moved.append(done)
        log.info("repair %s: %s %s (copy in %s)", self.repair_id, entry.original, entry.then, entry.copy)
        return done

    def finish_pending(self, check: Callable[[QuarantineEntry], str | None]) -> list[QuarantineEntry]:
        """Finish the entries earlier runs left ``copied`` (a crash between the copy and the
        removal or rewrite). ``check(entry)`` re-checks the live state first and returns why
        the entry must be left alone (None: go on). Returns the entries finished; those
        left, and why, are in :attr:`unfinished` (a failure is logged, the others go on)."""
        out = []
        for run in list_quarantine(self.driver, self.prefix):
            for entry in run.entries:
                if entry.state != COPIED:
                    continue
                why, failed = check(entry), False
                if why is None:
                    try:
                        _check(self.driver, entry.copy, entry.size, entry.crc32, "the quarantined copy")
                        out.append(Quarantine(self.driver, self.prefix, entry.repair_id, self.clock).finish(entry))
                        continue
                    except Fenced:
                        raise
                    except TieredStoreError as exc:
                        why, failed = f"finishing it failed: {exc}", True
                log.warning("repair %s: %s is left as it is: %s", entry.repair_id, entry.original, why)
                self.unfinished.append((entry, why, failed))
        return out

    def _record(self, entry: QuarantineEntry) -> None:
        _append_line(self.driver, self.manifest, entry.as_dict())


def _append_line(driver: SegmentDriver, path: str, record: dict[str, Any]) -> None:
    line = json.dumps(record, sort_keys=True).encode() + b"\n"
    if not driver.exists(path):
        driver.create(path)
    size = driver.size(path)
    if size and driver.read(path, size - 1, 1) != b"\n":
        line = b"\n" + line  # a torn line of a crash: end it, so this one stands alone
    driver.write(path, size, line)


# -- listing and purging ----------------------------------------------------------------------


def _read_manifest(driver: SegmentDriver, path: str) -> list[QuarantineEntry]:
    size = driver.size(path)
    text = driver.read(path, 0, size).decode("utf-8", errors="replace") if size else ""
    last: dict[str, QuarantineEntry] = {}
    for line in text.splitlines():
        try:
            entry = QuarantineEntry.from_dict(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue  # a torn line (crash while appending): the line before it stands
        last[entry.copy] = entry
    return list(last.values())


def list_quarantine(driver: SegmentDriver, prefix: str) -> list[QuarantineRun]:
    """Every repair run's quarantine under ``prefix``: its entries (last state each) and the
    objects no manifest names. Reads only."""
    root = quarantine_dir(prefix)
    objects: dict[str, list[tuple[str, int]]] = {}
    for path, size in driver.list(root):
        repair_id = path[len(root):].split("/", 1)[0]
        objects.setdefault(repair_id, []).append((path, size))
    runs = []
    for repair_id in sorted(objects):
        manifest = f"{root}{repair_id}/{MANIFEST}"
        listed = dict(objects[repair_id])
        entries = _read_manifest(driver, manifest) if manifest in listed else []
        named = {e.copy for e in entries} | {manifest}
        runs.append(QuarantineRun(repair_id, manifest, entries,
                                  sorted((p, n) for p, n in listed.items() if p not in named)))
    return runs


@dataclass
class PurgeReport:
    """What :func:`purge` deleted (``purged``: copies, ``manifests``: manifests removed) and
    what it kept, with why (``kept``: ``(copy, why)``)."""

    purged: list[QuarantineEntry] = field(default_factory=list)
    manifests: list[str] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(e.size for e in self.purged)

    def as_dict(self) -> dict[str, Any]:
        return {"purged": [e.as_dict() for e in self.purged], "bytes": self.bytes,
                "manifests_removed": list(self.manifests),
                "kept": [{"copy": c, "why": w} for c, w in self.kept]}


def _not_a_copy(driver: SegmentDriver, entry: QuarantineEntry, run_root: str) -> str | None:
    """Why ``entry.copy`` must not be deleted as its run's quarantined copy (None: it may):
    the manifest is only text in the tier, so a copy is deleted only inside its run's
    directory and when it still has the size and CRC-32 the manifest recorded."""
    copy = entry.copy
    if not copy.startswith(run_root) or ".." in copy[len(run_root):].split("/"):
        return f"the manifest names a copy outside its run's quarantine directory {run_root!r}"
    try:
        size = driver.size(copy)
    except NotFound:
        return None  # gone already: nothing is deleted
    if size != entry.size:
        return f"it holds {size} bytes, not the {entry.size} its manifest recorded"
    if _crc_of(driver, copy, size) != entry.crc32:
        return "its CRC-32 is not the one its manifest recorded"
    return None


def purge(driver: SegmentDriver, prefix: str, older_than_s: float, now: float | None = None) -> PurgeReport:
    """Delete the quarantined copies under ``prefix`` that a manifest lists as done and
    that were moved more than ``older_than_s`` seconds before ``now`` (seconds since the
    epoch; default: the clock), recording each in its manifest; then each manifest whose
    copies are all gone. Copies of unfinished moves (possibly the only copy of committed
    bytes), copies too young and objects no manifest names are kept. ``driver`` must be
    the prefix owner's (fenced) driver."""
    if older_than_s < 0:
        raise IllegalParam(f"older_than_s must not be negative, got {older_than_s}", older_than_s=older_than_s)
    now = time.time() if now is None else now
    limit_ms = int((now - older_than_s) * 1000)
    report = PurgeReport()
    for run in list_quarantine(driver, prefix):
        for path, _size in run.unlisted:
            report.kept.append((path, "no manifest lists it"))
        remaining = 0
        for entry in run.entries:
            if entry.state == PURGED:
                continue
            if entry.state != DONE:
                report.kept.append((entry.copy, "its move was not finished (run `tiered repair --apply`)"))
            elif entry.at_ms > limit_ms:
                report.kept.append((entry.copy, f"moved {max(0, (int(now * 1000) - entry.at_ms) // 1000)} s ago"))
            elif (why := _not_a_copy(driver, entry, f"{quarantine_dir(prefix)}{run.repair_id}/")) is not None:
                log.error("purge: %s: %s; kept", entry.copy, why)
                report.kept.append((entry.copy, why))
            else:
                try:
                    driver.delete(entry.copy)
                except NotFound:
                    pass
                gone = replace(entry, state=PURGED)
                _append_line(driver, run.manifest, gone.as_dict())
                report.purged.append(gone)
                continue
            remaining += 1
        if remaining == 0 and not run.unlisted and driver.exists(run.manifest):
            driver.delete(run.manifest)
            report.manifests.append(run.manifest)
    return report


__all__ = [
    "CHUNK", "MANIFEST", "PurgeReport", "Quarantine", "QuarantineEntry", "QuarantineRun", "list_quarantine",
    "new_repair_id", "purge", "quarantine_dir", "rewritten",
]
