"""Copies of store directories, as a backup restores them, with sparse files kept sparse.

A store's local index files are preallocated sparse files (420,000,040 and 136,000,028
bytes, mostly holes). ``shutil.copytree`` writes every hole out as zeros: over half a GB
per copy of even a small store. :func:`copy_tree` copies only the data regions
(``SEEK_DATA``/``SEEK_HOLE``, on Linux) and sets the size, so the copy holds the same bytes;
modes and modification times are kept as ``shutil.copy2`` keeps them.
"""

from __future__ import annotations

import errno
import os
import shutil
from typing import Any


def copy_file(src: str, dst: str, *, follow_symlinks: bool = True) -> str:
    """``shutil.copy2`` with holes left as holes (where the filesystem can tell them)."""
    if not hasattr(os, "SEEK_DATA") or (not follow_symlinks and os.path.islink(src)):
        return shutil.copy2(src, dst, follow_symlinks=follow_symlinks)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fin.fileno(), pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # a hole from pos to the end
                    break
                raise
            end = os.lseek(fin.fileno(), start, os.SEEK_HOLE)
            _copy_range(fin.fileno(), fout.fileno(), start, end)
            pos = end
        fout.truncate(size)
    shutil.copystat(src, dst)
    return dst


def _copy_range(fin: int, fout: int, start: int, end: int) -> None:
    """Bytes ``[start, end)`` of ``fin`` to the same place in ``fout`` (in the kernel where it can)."""
    while start < end:
        try:
            done = os.copy_file_range(fin, fout, end - start, start, start)
        except OSError:  # not between these filesystems: through user space
            done = os.pwrite(fout, os.pread(fin, min(end - start, 1 << 20), start), start)
        if not done:
            return
        start += done


def copy_tree(src: Any, dst: Any) -> str:
    """``shutil.copytree(src, dst)`` through :func:`copy_file`."""
    return shutil.copytree(src, dst, copy_function=copy_file)
