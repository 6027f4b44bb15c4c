"""Which tiered messages the key index holds the keys of: one queue offset per queue.

The dispatcher indexes a group's keys before it commits the group, then marks the queue
covered up to its new commit offset (:meth:`KeyCoverage.mark`, keyless groups too); dispatch
rounds save the marks to ``{index dir}/covered.json`` (at most every few seconds, and at
shutdown; after the index's own writes, so a saved mark never runs ahead of the keys). The file lives beside the index's local file:
a restored old copy of the store directory brings back the marks of its own index, so the
store knows, per queue, exactly which tiered messages need their keys indexed again
(:mod:`tiered_core.access.key_repair`). A missing file (a lost disk, a store older than
this record) is *unknown*, not "nothing covered".
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

log = logging.getLogger(__name__)

COVERAGE_FILE = "covered.json"


class KeyCoverage:
    """Per queue, the queue offset below which every tiered message's keys are indexed.

    Thread-safe. :attr:`known` is False when no record was found at open (or it was
    unreadable, or :meth:`invalidate` was called): then the marks say nothing about what
    came before them. Saving is best effort: a failure is logged, and the record is left as
    it was (older marks only cause keys to be indexed twice, which queries tolerate).
    """

    def __init__(self, directory: str, *, read_only: bool = False) -> None:
        self.path = os.path.join(directory, COVERAGE_FILE)
        self.read_only = read_only
        self._lock = threading.Lock()
        self._marks: dict[tuple[str, int], int] = {}
        self._dirty = False
        self._saved_at = float("-inf")
        self.known = self._load()

    def _load(self) -> bool:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
            for entry in doc["queues"]:
                topic, queue_id, offset = entry
                if not (isinstance(topic, str) and isinstance(queue_id, int) and isinstance(offset, int)):
                    raise ValueError(f"bad entry {entry!r}")
                self._marks[(topic, queue_id)] = offset
            return True
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("key-index coverage %s is unreadable (%s): treated as unknown", self.path, exc)
            self._marks.clear()
            return False

    def get(self, topic: str, queue_id: int) -> int | None:
        """The queue offset below which keys are indexed (None: no mark for the queue)."""
        with self._lock:
            return self._marks.get((topic, queue_id))

    def mark(self, topic: str, queue_id: int, offset: int) -> None:
        """Every tiered message of the queue below ``offset`` has its keys indexed."""
        key = (topic, queue_id)
        with self._lock:
            if self._marks.get(key, -1) < offset:
                self._marks[key] = offset
                self._dirty = True

    def invalidate(self) -> None:
        """Forget every mark (the index lost keys it had): the record becomes unknown."""
        with self._lock:
            self._marks.clear()
            self._dirty = True
            self.known = False

    def save(self, *, min_interval_s: float = 0.0) -> None:
        """Write the marks (if they changed) to the record, atomically (no fsync: see the
        module docstring); with ``min_interval_s``, not sooner than that after the last
        write (older marks only mean more keys indexed twice after a restore)."""
        if self.read_only:
            return
        with self._lock:
            if not self._dirty or time.monotonic() - self._saved_at < min_interval_s:
                return
            self._saved_at = time.monotonic()
            body = json.dumps({"version": 1, "queues": [[t, q, o] for (t, q), o in sorted(self._marks.items())]})
            self._dirty = False
            known = self.known
        tmp = self.path + ".tmp"
        try:
            if not known:
                # An unknown record stays unknown on disk too until it covers everything again.
                if os.path.exists(self.path):
                    os.unlink(self.path)
                return
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(body)
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot save key-index coverage %s: %s", self.path, exc)
            with self._lock:
                self._dirty = True

    def declare_known(self) -> None:
        """The marks now describe everything (a repair from an unknown record finished)."""
        with self._lock:
            self.known = True
            self._dirty = True


__all__ = ["COVERAGE_FILE", "KeyCoverage"]
