"""Local disk failures (issue 18, finding 5): a full disk, a file past ``ulimit -f``, a failing
device. Each is a ``LocalIOError`` naming the file (exit 5 ``LOCAL_IO`` in the CLI) that says
whether the message of a put was stored, and the next open recovers cleanly.

Real files throughout: a small tmpfs (mounted in a user and mount namespace, so no root is
needed; skipped where the kernel forbids those) for a real ENOSPC, ``RLIMIT_FSIZE`` in a child
process for a real EFBIG, and a fault-injecting ``os.pwrite`` / ``os.fsync`` /
``os.posix_fallocate`` only where one call must fail.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiered_core import Message
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli.exit_codes import ExitCode
from tiered_core.codec.consume_queue import decode_cq_units
from tiered_core.config import StoreConfig
from tiered_core.errors import LocalIOError
from tiered_core.index.service import INDEX_DIR_NAME, IndexStoreService
from tiered_core.index.store_file import IndexStoreFile
from tiered_core.local.index_file import IndexService
from tiered_core.local.local_store import FlushMode, LocalMessageStore, LocalStoreConfig

TIERED = Path(sys.executable).with_name("tiered")
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "full_disk_child.py")
#: The file size limit of the RLIMIT_FSIZE runs: far below a local index file (420 MB sparse).
LIMIT = 200 << 10


def write_config(tmp_path: Path, store: Path | None = None, extra: str = "") -> str:
    path = tmp_path / "tiered.toml"
    path.write_text(f'[tiered]\nstore_path = "{store or tmp_path / "store"}"\n'
                    f'metadata_path = "{tmp_path / "meta.db"}"\n'
                    f'local_commit_log_file_size = "1MiB"\n{extra}'
                    f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    return str(path)


def tiered(*args: str, file_limit: int | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The installed console script, as an operator runs it (under ``ulimit -f`` when asked)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return subprocess.run([str(TIERED), *args], input=stdin, capture_output=True, text=True, timeout=120,
                          preexec_fn=limit if file_limit is not None else None)


def error_of(proc: subprocess.CompletedProcess) -> dict:
    return json.loads(proc.stdout)["error"]


def empty_files(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and p.stat().st_size == 0
                  and p.name != "lock")


# -- ulimit -f: EFBIG ----------------------------------------------------------------------------------

def test_put_whose_key_index_passes_the_file_limit_says_it_was_stored(tmp_path):
    cfg = write_config(tmp_path)
    proc = tiered("put", "--config", cfg, "--topic", "orders", "--key", "k1", "--body", "hello", "--json",
                  file_limit=LIMIT)
    assert proc.returncode == ExitCode.BACKEND, proc.stderr
    err = error_of(proc)
    assert (err["code"], err["type"], err["reason"], err["stored"]) == ("LOCAL_IO", "LocalIOError", "EFBIG", True)
    assert err["path"].startswith(str(tmp_path / "store" / "index"))
    assert err["put"]["queue_offset"] == 0 and "do not put it again" in err["message"]
    assert "Traceback" not in proc.stderr and "[LOCAL_IO]" in proc.stderr
    assert empty_files(tmp_path / "store" / "index") == []  # no file half made
    # The next open (no limit) indexes the key again; the message is there once.
    got = tiered("get", "--config", cfg, "--topic", "orders", "--key", "k1", "--json")
    assert got.returncode == 0, got.stderr
    assert [m["body"] for m in json.loads(got.stdout)["messages"]] == ["hello"]
    again = tiered("put", "--config", cfg, "--topic", "orders", "--body", "next", "--json")
    assert json.loads(again.stdout)["queue_offset"] == 1


def test_put_whose_commit_log_append_passes_the_file_limit_is_not_stored(tmp_path):
    cfg = write_config(tmp_path)
    body = "x" * (300 << 10)  # the commit log would pass the limit
    proc = tiered("put", "--config", cfg, "--topic", "orders", "--json", stdin=body, file_limit=LIMIT)
    assert proc.returncode == ExitCode.BACKEND, proc.stderr
    err = error_of(proc)
    assert (err["code"], err["reason"], err["stored"]) == ("LOCAL_IO", "EFBIG", False)
    assert err["path"] == str(tmp_path / "store" / "commitlog" / "00000000000000000000")
    assert os.path.getsize(err["path"]) == 0  # the partial append was cut
    missing = tiered("get", "--config", cfg, "--topic", "orders", "--json")
    assert missing.returncode == ExitCode.NOT_FOUND
    again = tiered("put", "--config", cfg, "--topic", "orders", "--body", "small", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["queue_offset"] == 0  # nothing was used up


def test_tiered_index_file_that_could_not_be_sized_is_dropped_and_its_keys_indexed_again(tmp_path):
    cfg = write_config(tmp_path)
    assert tiered("put", "--config", cfg, "--topic", "orders", "--key", "k0", "--body", "zero").returncode == 0
    proc = tiered("put", "--config", cfg, "--topic", "orders", "--key", "k1", "--body", "one", "--dispatch",
                  "--json", file_limit=LIMIT)
    assert proc.returncode == ExitCode.BACKEND, proc.stderr
    err = error_of(proc)
    assert err["code"] == "LOCAL_IO" and err["stored"] is True and INDEX_DIR_NAME in err["message"]
    index_dir = tmp_path / "store" / INDEX_DIR_NAME
    assert empty_files(index_dir) == []
    # The next dispatch (no limit) tiers both messages with their keys; nothing is set aside.
    ok = tiered("put", "--config", cfg, "--topic", "orders", "--body", "two", "--dispatch", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert not list(index_dir.rglob("*.corrupt"))
    with TieredMessageStore.open(StoreConfig.load(cfg)) as store:
        assert [r.tiered_commit for r in store.stat()] == [3]
        flat = store.flat_files.get("orders", 0)
        unit = decode_cq_units(flat.get_consume_queue(1))[0]  # where the tier holds message 1
        entries = store.index.query("orders", "k1", 8, 0, 1 << 62)
        assert [(e.offset, e.size) for e in entries] == [(unit.commitlog_offset, unit.size)]


def test_an_empty_tiered_index_file_left_by_a_kill_is_removed_not_renamed_corrupt(tmp_path):
    config = StoreConfig.load(write_config(tmp_path))
    with TieredMessageStore.open(config) as store:
        store.put_message(Message(topic="orders", body=b"x", keys=["k"]), 0)
        store.dispatch(force=True)
    empty = tmp_path / "store" / INDEX_DIR_NAME / "1700000000000"
    empty.write_bytes(b"")  # created, then killed before it was sized
    with TieredMessageStore.open(config) as store:
        assert [e.offset for e in store.index.query("orders", "k", 8, 0, 1 << 62)] == [0]
    assert not empty.exists() and not list(empty.parent.glob("*.corrupt"))


def test_a_tiered_index_file_whose_sizing_fails_is_not_left_behind(tmp_path, monkeypatch):
    real = os.ftruncate

    def too_large(fd, length):  # fault injection: the file size limit
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(os, "ftruncate", too_large)
    with pytest.raises(LocalIOError) as err:
        IndexStoreFile.create(str(tmp_path), 1700000000000, slot_count=16, max_items=64)
    monkeypatch.setattr(os, "ftruncate", real)
    assert err.value.path == str(tmp_path / "1700000000000") and err.value.errno == errno.EFBIG
    assert os.listdir(tmp_path) == []


# -- a real full disk: a small tmpfs ---------------------------------------------------------------------

def _namespace_tmpfs(directory: Path) -> str | None:
    """Why a tmpfs cannot be mounted in a new user and mount namespace here (None: it can)."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    directory.mkdir(exist_ok=True)
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                            f"mount -t tmpfs -o size=1m tmpfs '{directory}'"],
                           capture_output=True, text=True, timeout=30)
    return None if probe.returncode == 0 else f"cannot mount a tmpfs: {probe.stderr.strip()}"


def _in_tmpfs(tmp_path: Path, mib: int, steps: str) -> tuple[str, Path, subprocess.CompletedProcess]:
    """Run the shell ``steps`` (``{cfg}`` and ``{report}`` filled in) in a user and mount
    namespace where the store's directory is a tmpfs of ``mib`` MiB; returns the config's path,
    the report's and the finished process. Skips where no such tmpfs can be mounted."""
    mnt = tmp_path / "mnt"
    why = _namespace_tmpfs(mnt)
    if why is not None:
        pytest.skip(why)
    cfg = write_config(tmp_path, store=mnt / "store")
    report = tmp_path / "report.json"
    script = f"mount -t tmpfs -o size={mib}m tmpfs '{mnt}' || exit 99\n" + steps.format(
        py=sys.executable, child=CHILD, cfg=cfg, report=report, mnt=mnt)
    proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
                          capture_output=True, text=True, timeout=600)
    return cfg, report, proc


@pytest.mark.parametrize("shape", ["bodies", "keys"])
def test_a_full_disk_is_a_typed_error_and_the_store_recovers(tmp_path, shape):
    """Fill a 4 MiB tmpfs: with big bodies the commit-log append (almost always) meets the full
    disk; with many keys the key index's slot pages fill it (a write through its map was a
    SIGBUS that killed the process). Then give the tmpfs room and reopen: every acknowledged
    message reads back with its keys, and the next put continues right after them."""
    _cfg, report, proc = _in_tmpfs(tmp_path, 4, (
        "'{py}' '{child}' fill '{cfg}' '{report}' %s; echo \"fill=$?\" >&2\n"
        "mount -o remount,size=64m '{mnt}' || exit 98\n"
        "exec '{py}' '{child}' check '{cfg}' '{report}' %s\n") % (shape, shape))
    assert "fill=0" in proc.stderr, proc.stderr  # not killed (SIGBUS: 135), no untyped error (3)
    assert proc.returncode == 0, proc.stderr
    fill = json.loads(report.read_text())
    failed = fill["failed"]
    assert failed is not None and failed["errno"] == errno.ENOSPC, fill
    acked = fill["acked"]
    assert acked == list(range(len(acked))) and len(acked) > 10
    # Which write meets the full disk first depends on page sizes; each answers rightly.
    if failed["where"] == "put":  # the commit-log append: nothing of the message was stored
        assert failed["stored"] is False and "/commitlog/" in failed["path"]
        assert "the message was NOT stored" in failed["message"]
    else:  # a consume-queue unit or key after the append (the put itself succeeded)
        assert failed["where"] == "reput" and failed["stored"] is None
        assert "/consumequeue/" in failed["path"] or "/index/" in failed["path"]
    check = json.loads(proc.stdout)
    assert check == {"bad": [], "unkeyed": [], "max_offset": len(acked), "next_offset": len(acked)}


def test_key_lookups_on_a_full_disk_answer_instead_of_killing_the_process(tmp_path):
    """Load-and-faults drill s15 F3: on a full tmpfs, a key lookup read a slot-table page of the
    sparse index file that was never written, through the shared map; tmpfs needs a block for
    that page even to read it, and the kernel killed the process with SIGBUS. Such pages are
    read through the file now (a hole reads as zeros, no block needed)."""
    _cfg, report, proc = _in_tmpfs(tmp_path, 16, "exec '{py}' '{child}' lookup '{cfg}' '{report}' keys\n")
    assert proc.returncode == 0, (proc.returncode, proc.stderr)  # 135 = SIGBUS
    assert json.loads(report.read_text()) == {"answered": 200, "found": [["key-3"]]}


# -- injected faults --------------------------------------------------------------------------------------

def _local(tmp_path: Path, **changes) -> LocalMessageStore:
    config = LocalStoreConfig(**{"commit_log_file_size": 1 << 20, "index_hash_slots": 1024,
                                 "index_max_items": 4096, "background_services": False, **changes})
    return LocalMessageStore(tmp_path / "local", config)


def _msg(i: int) -> Message:
    return Message(topic="orders", body=b"body-%d" % i, keys=[f"key-{i}"])


def _failing_on(monkeypatch, name: str, part: str, err: int, calls: list | None = None) -> None:
    """Make ``os.<name>`` fail with ``err`` on file descriptors whose path contains ``part``."""
    real = getattr(os, name)

    def fail(fd, *args):
        if part in os.readlink(f"/proc/self/fd/{fd}"):
            if calls is not None:
                calls.append(fd)
            raise OSError(err, os.strerror(err))
        return real(fd, *args)

    monkeypatch.setattr(os, name, fail)


def test_a_sync_put_whose_fsync_fails_was_stored(tmp_path, monkeypatch):
    store = _local(tmp_path, flush_mode=FlushMode.SYNC)
    store.put_message("orders", 0, _msg(0))
    _failing_on(monkeypatch, "fsync", "commitlog", errno.EIO)
    with pytest.raises(LocalIOError) as err:
        store.put_message("orders", 0, _msg(1))
    monkeypatch.undo()
    assert err.value.stored is True and err.value.errno == errno.EIO and "/commitlog/" in err.value.path
    assert "orders/0@1" in err.value.message and "do not put it again" in err.value.message
    store.reput()
    assert [m.body for m in store.get_messages("orders", 0, 0)] == [b"body-0", b"body-1"]
    store.close()


def test_a_consume_queue_write_that_fails_is_written_again_by_the_next_reput(tmp_path, monkeypatch):
    store = _local(tmp_path)
    for i in range(3):
        store.put_message("orders", 0, _msg(i))
    _failing_on(monkeypatch, "pwrite", "consumequeue", errno.ENOSPC)
    with pytest.raises(LocalIOError) as err:
        store.reput()
    assert "/consumequeue/orders/0/" in err.value.path and err.value.stored is None
    assert store.reput_offset == 0 and store.reput_error is err.value
    with pytest.raises(LocalIOError):
        store.close()  # still flushes the commit log and writes the checkpoint before it says so
    monkeypatch.undo()
    store = _local(tmp_path)
    assert [m.keys for m in store.get_messages("orders", 0, 0)] == [["key-0"], ["key-1"], ["key-2"]]
    assert [m.queue_offset for m in store.query_message("orders", "key-2")] == [2]
    store.close()


def test_key_index_items_are_not_duplicated_when_the_disk_fills_mid_batch(tmp_path, monkeypatch):
    """A batch stopped by a full disk keeps the messages whose keys are in; the retry puts only
    the rest (the file's pages are allocated before the map writes them)."""
    index = IndexService(str(tmp_path), hash_slots=1 << 16, max_items=1000)  # 64 slot-table pages
    real = os.posix_fallocate
    calls = {"n": 0}

    def full_after_a_few(fd, offset, length):  # fault injection: the disk fills up
        calls["n"] += 1
        if calls["n"] > 6:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", full_after_a_few)
    keys = [f"{(i * 2654435761) % (1 << 32):08x}" for i in range(200)]  # spread over the slot table
    entries = [("orders", [keys[i]], 100 + i, 1_700_000_000_000) for i in range(200)]
    with pytest.raises(LocalIOError) as err:
        index.put_batch(entries)
    assert err.value.errno == errno.ENOSPC and err.value.path.startswith(str(tmp_path))
    partial = index.files[0].item_count
    assert 0 < partial < 200
    monkeypatch.setattr(os, "posix_fallocate", real)
    assert index.put_batch(entries) == 200 - partial
    assert index.files[0].item_count == 200
    for i in (0, partial - 1, partial, 199):
        assert index.query("orders", keys[i], 4) == [100 + i]
    index.close()


def test_a_failing_background_reput_is_logged_once_not_at_every_retry(tmp_path, monkeypatch, caplog):
    store = _local(tmp_path, background_services=True)
    _failing_on(monkeypatch, "pwrite", "consumequeue", errno.ENOSPC)
    caplog.set_level(logging.ERROR, logger="tiered_core.local.local_store")
    store.put_message("orders", 0, _msg(0))  # the reput thread fails on it, and retries
    deadline = time.monotonic() + 10
    while store.reput_error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    errors = [r for r in caplog.records if "reput failed" in r.getMessage()]
    assert len(errors) == 1 and errors[0].exc_info is None and "ENOSPC" in errors[0].getMessage()
    monkeypatch.undo()
    deadline = time.monotonic() + 10
    while store.reput_error is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.get_max_offset_in_queue("orders", 0) == 1
    store.close()


@pytest.mark.parametrize("err, reason, hint", [
    (errno.ENOSPC, "ENOSPC", "the disk is full"),
    (errno.EDQUOT, "EDQUOT", "quota"),
    (errno.EFBIG, "EFBIG", "ulimit -f"),
    (errno.EROFS, "EROFS", "read-only"),
    (errno.EACCES, "EACCES", "no permission"),
    (errno.EIO, "EIO", "the device failed"),
])
def test_a_failed_commit_log_append_stored_nothing_whatever_the_errno(tmp_path, monkeypatch, err, reason, hint):
    store = _local(tmp_path)
    first = store.put_message("orders", 0, _msg(0))
    _failing_on(monkeypatch, "pwrite", "commitlog", err)
    with pytest.raises(LocalIOError) as info:
        store.put_message("orders", 0, _msg(1))
    monkeypatch.undo()
    e = info.value
    assert (e.errno, e.reason, e.stored) == (err, reason, False) and hint in e.message
    assert e.path.endswith("/commitlog/00000000000000000000") and "the message was NOT stored" in e.message
    again = store.put_message("orders", 0, _msg(2))
    assert again.queue_offset == 1 and again.commitlog_offset == first.commitlog_offset + len(
        store.get_message_bytes(first.commitlog_offset))
    store.close()


def test_a_first_put_whose_queue_floor_cannot_be_written_stored_nothing(tmp_path, monkeypatch):
    """A queue's first put may raise its first offset past what the tier holds (a floor file
    in the consume queue's directory) before the append: a disk failure there stores nothing."""
    store = _local(tmp_path)
    store.set_floor_provider(lambda topic, queue_id: (5, -1))
    real = os.fsync

    def failing(fd):  # fault injection: the floor file's fsync
        if "floor" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EIO, "Input/output error")
        return real(fd)

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(LocalIOError) as info:
        store.put_message("orders", 0, _msg(0))
    monkeypatch.undo()
    assert info.value.stored is False and info.value.errno == errno.EIO
    assert "/consumequeue/orders/0" in info.value.path
    assert store.get_commit_log_max_offset() == 0
    assert store.put_message("orders", 0, _msg(1)).queue_offset == 5
    store.close()
