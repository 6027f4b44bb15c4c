"""Snapshots of directories and files, to prove an operation wrote nothing there.

:func:`snapshot` records every directory and file under the given paths (a path that does
not exist is recorded as absent): for a file its size, modification time in nanoseconds and
:func:`content_digest`. Two snapshots compare equal exactly when nothing was created, removed
or changed.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from tiered_conformance.drills import data_regions


def content_digest(path: str) -> str:
    """SHA-256 over the file's data regions and where each lies (:func:`data_regions`): a store's
    index files are preallocated sparse files of hundreds of MiB, mostly holes, which a plain
    read would hash byte by byte (about 5 s per snapshot of one small store). Where the
    filesystem cannot tell holes, the whole file is one region."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        for start, end in data_regions(fd, size):
            digest.update(f"{start}-{end}:".encode())
            pos = start
            while pos < end:
                chunk = os.pread(fd, min(end - pos, 1 << 20), pos)
                if not chunk:
                    break
                digest.update(chunk)
                pos += len(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()


def _file(path: str) -> tuple[int, int, str]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, content_digest(path)


def snapshot(*paths: Any) -> dict[str, Any]:
    """``{path: "absent" | "dir" | (size, mtime_ns, sha256)}`` of every path under ``paths``."""
    out: dict[str, Any] = {}
    for root in map(os.fspath, paths):
        if not os.path.lexists(root):
            out[root] = "absent"
        elif os.path.isfile(root):
            out[root] = _file(root)
        else:
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                out[dirpath] = "dir"
                for name in sorted(filenames):
                    full = os.path.join(dirpath, name)
                    out[full] = _file(full)
    return out


def changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{path: (before, after)}`` of every path that differs (empty: nothing changed)."""
    return {p: (before.get(p, "absent"), after.get(p, "absent"))
            for p in sorted(set(before) | set(after)) if before.get(p, "absent") != after.get(p, "absent")}
