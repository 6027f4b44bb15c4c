"""Snapshots of directories and files, to prove an operation wrote nothing there.

:func:`snapshot` records every directory and file under the given paths (a path that does
not exist is recorded as absent): for a file its size, modification time in nanoseconds and
SHA-256. Two snapshots compare equal exactly when nothing was created, removed or changed.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any


def _file(path: str) -> tuple[int, int, str]:
    st = os.stat(path)
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    return st.st_size, st.st_mtime_ns, digest


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
