"""Sparse files in the test tooling: ``tiered_conformance.drills.data_regions`` (shared by
``copy_sparse`` and ``tests/snapshots.content_digest``). A store's local index files are
preallocated and mostly holes: copies keep them holes, digests skip them, and where holes
cannot be told the whole file counts as data, never as a hole."""

from __future__ import annotations

import errno
import os

from snapshots import content_digest

from tiered_conformance import drills
from tiered_conformance.drills import copy_sparse, data_regions

MIB = 1 << 20


def sparse_file(path, size: int = 64 * MIB) -> bytes:
    """A ``size``-byte file with data at its start and at 32 MiB, holes elsewhere; its bytes."""
    with open(path, "wb") as f:
        f.truncate(size)
        f.write(b"head" * 1024)
        f.seek(32 * MIB)
        f.write(b"middle" * 1024)
    with open(path, "rb") as f:
        return f.read()


def regions_of(path) -> list[tuple[int, int]]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return data_regions(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def test_a_copy_keeps_the_bytes_and_the_holes(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    content = sparse_file(src)
    regions = regions_of(src)
    assert regions and sum(end - start for start, end in regions) < 8 * MIB  # the holes are told apart
    copy_sparse(str(src), str(dst))
    assert dst.read_bytes() == content
    assert os.stat(dst).st_blocks * 512 < 8 * MIB  # still sparse
    assert os.stat(dst).st_mtime_ns == os.stat(src).st_mtime_ns
    assert content_digest(str(dst)) == content_digest(str(src))


def test_where_holes_cannot_be_told_everything_is_data(tmp_path, monkeypatch):
    src, dst = tmp_path / "src", tmp_path / "dst"
    content = sparse_file(src)
    real_lseek = os.lseek

    def refusing(fd, pos, how):
        if how in (os.SEEK_DATA, os.SEEK_HOLE):
            raise OSError(errno.EINVAL, "not supported here")
        return real_lseek(fd, pos, how)

    monkeypatch.setattr(drills.os, "lseek", refusing)
    assert regions_of(src) == [(0, len(content))]
    copy_sparse(str(src), str(dst))
    assert dst.read_bytes() == content  # a copy that guessed "hole" would hold zeros at 32 MiB


def test_the_digest_sees_a_changed_byte_and_a_write_into_a_hole(tmp_path):
    path = tmp_path / "f"
    sparse_file(path)
    before = content_digest(str(path))
    with open(path, "r+b") as f:
        f.seek(32 * MIB)
        f.write(b"X")
    changed = content_digest(str(path))
    with open(path, "r+b") as f:
        f.seek(32 * MIB)
        f.write(b"m")
    assert changed != before and content_digest(str(path)) == before
    with open(path, "r+b") as f:  # zeros written into a hole: same bytes, but a write
        f.seek(48 * MIB)
        f.write(bytes(4096))
    assert content_digest(str(path)) != before
