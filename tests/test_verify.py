"""``tiered verify`` (issue 21): every planted fault found with its kind, severity and exit
code and nothing else of warning or worse; a clean store exits 0; verify writes nothing;
beside a running producer and dispatcher it reports nothing of warning or worse.

Real parts: a posix tier, SQLite metadata, a store written through
:class:`TieredMessageStore` (local store, dispatcher, key index uploaded), faults planted
with the drill kit (:mod:`tiered_conformance.drills`) in a copy of it, verify run through
the CLI (``tiered_core.cli.main``, ``--json``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from snapshots import changes, snapshot
from store_workload import Workload, dispatch_until_tiered, small_config
from tiered_conformance.drills import CHECKSUMS, DEEP, FAULTS, copy_store, plant
from tiered_core import Message
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, decode_cq_units
from tiered_core.common import FileSegmentType, SegmentStatus
from tiered_core.config import StoreConfig
from tiered_core.flat.ownership import tier_prefix
from tiered_core.ops.findings import FindingKind, Severity
from tiered_core.ops.reconcile import backend_path
from tiered_core.ops.verify import verify_store, worst_findings


@pytest.fixture(autouse=True)
def _settle_pauses_only_beside_a_running_store(request) -> None:
    """verify pauses between its looks at a suspect so that a running store can finish the
    step it was in: kept for the tests marked ``running_store``, zero for the others, whose
    stores are closed (tests/conftest.py ``no_verify_settle``)."""
    if request.node.get_closest_marker("running_store") is None:
        request.getfixturevalue("no_verify_settle")


#: Small segments so that every queue has several of each kind (sealed ones among them).
SEGMENTS = dict(commit_log_max_size=32 << 10, consume_queue_max_size=20 * 50)


def build_store(root: Path, messages: int = 400) -> StoreConfig:
    """A posix store with 2 topics x 2 queues, every message tiered, the key index uploaded."""
    config = small_config(root, "posix", {"root": str(root / "tier")}, **SEGMENTS)
    workload = Workload(topics=("orders", "audit"), queues=2, seed=21)
    with TieredMessageStore.open(config) as store:
        workload.put(store, messages)
        dispatch_until_tiered(store, workload)
        store.index.roll_file()
        store.index.compact_and_upload()
    return config


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> StoreConfig:
    return build_store(tmp_path_factory.mktemp("verify-original"))


def write_conf(config: StoreConfig, where: Path) -> str:
    path = where / "tiered.toml"
    path.write_text(config.to_toml())
    return str(path)


def run_verify(capsys, conf: str, *extra: str) -> tuple[int, dict]:
    code = main(["verify", "--config", conf, "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def serious(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["severity"] != Severity.INFO.value]


@pytest.mark.parametrize("deep", [False, True], ids=["shallow", "deep"])
def test_a_clean_store_exits_0(original, tmp_path, capsys, deep):
    copy = copy_store(original, tmp_path / "copy")
    code, report = run_verify(capsys, write_conf(copy, tmp_path), *(["--deep"] if deep else []))
    assert code == 0 and serious(report) == [], report
    summary = report["summary"]
    assert summary["exit_code"] == 0 and summary["deep"] is deep
    assert summary["queues_checked"] == 4 and summary["index_files_checked"] == 1
    if deep:  # every message and every key-index entry was read
        assert summary["messages_read"] == 400 and summary["index_entries_checked"] == 400


@pytest.mark.parametrize("fault", FAULTS)
def test_each_planted_fault_is_found(original, tmp_path, capsys, fault):
    copy = copy_store(original, tmp_path / "copy")
    planted = plant(copy, fault, seed=7)
    conf = write_conf(copy, tmp_path)
    code, report = run_verify(capsys, conf, *(["--deep"] if fault in DEEP else ["--checksums"] if fault in CHECKSUMS
                                              else []))
    found = serious(report)
    assert [f["kind"] for f in found] == [planted.expected_kind.value], (planted, found)
    finding = found[0]
    assert finding["subject"] == planted.subject
    assert finding["severity"] == planted.expected_kind.severity.value
    assert code == report["summary"]["exit_code"] == (4 if planted.expected_kind.severity is Severity.CORRUPT else 1)
    if planted.queue_offsets is not None and planted.expected_kind is FindingKind.CHECKSUM_MISMATCH:
        # a checksum covers a segment's bytes, not its messages: the finding names the bytes
        lo, hi = finding["file_offsets"]
        assert finding["queue_offsets"] is None and hi > lo
        assert (finding["topic"], finding["queue_id"]) == (planted.topic, planted.queue_id)
    elif planted.queue_offsets is not None:
        assert tuple(finding["queue_offsets"]) == planted.queue_offsets
        assert (finding["topic"], finding["queue_id"]) == (planted.topic, planted.queue_id)
    if fault in DEEP:  # only a deep walk reads what it damaged
        code, report = run_verify(capsys, conf)
        assert code == 0 and serious(report) == [], report
    if fault in CHECKSUMS:  # every read check passes: only the checksum tells
        code, report = run_verify(capsys, conf, "--deep")
        assert code == 0 and serious(report) == [], report


def test_an_unlisted_segment_that_continues_its_file_is_adoptable_and_a_stray_object_is_not(original, tmp_path,
                                                                                             capsys):
    copy = copy_store(original, tmp_path / "copy")
    segment = plant(copy, "unlisted_segment", seed=1)
    stray = plant(copy, "extra_object", seed=1)
    _code, report = run_verify(capsys, write_conf(copy, tmp_path))
    facts = {f["subject"]: f["facts"] for f in serious(report)}
    assert facts[segment.subject]["adoptable"] is True
    assert facts[segment.subject]["type"] == "CONSUME_QUEUE" and facts[segment.subject]["broker"] == copy.broker
    assert facts[stray.subject] == {"size": 100, "adoptable": False, "looks_like": "not a segment path"}


def test_topics_restricts_the_queues_walked(original, tmp_path, capsys):
    copy = copy_store(original, tmp_path / "copy")
    planted = plant(copy, "flipped_byte", topic="orders", seed=3)
    conf = write_conf(copy, tmp_path)
    code, report = run_verify(capsys, conf, "--deep", "--topics", "audit,nosuch")
    assert code == 0 and report["summary"]["queues_checked"] == 2, report
    code, report = run_verify(capsys, conf, "--deep", "--topics", "orders")
    assert code == 4 and [f["subject"] for f in serious(report)] == [planted.subject]


def stat_tree(root: str) -> dict:
    """``{path: (size, mtime_ns)}`` of every file and directory under ``root``: the store
    directory's local index files are hundreds of MiB of holes, too many to hash each time."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            st = os.stat(os.path.join(dirpath, name))
            out[os.path.join(dirpath, name)] = (st.st_size, st.st_mtime_ns)
    return out


def watched(config: StoreConfig) -> dict:
    """The tier and the metadata file byte for byte, the store directory by size and time."""
    path = config.effective_metadata_path()
    return {**snapshot(config.effective_driver_options()["root"], path, path + "-wal", path + "-shm"),
            "store": stat_tree(config.store_path)}


@pytest.mark.parametrize("fault", [None, "bad_tail", "unlisted_segment", "flipped_byte"])
def test_verify_writes_nothing(original, tmp_path, capsys, fault):
    copy = copy_store(original, tmp_path / "copy")
    if fault is not None:
        plant(copy, fault, seed=2)
    conf = write_conf(copy, tmp_path)
    before = watched(copy)
    for extra in ([], ["--deep"]):
        run_verify(capsys, conf, *extra)
        assert main(["verify", "--config", conf, *extra]) in (0, 1, 4)
        capsys.readouterr()
    assert changes(before, watched(copy)) == {}


def test_verify_of_a_tier_without_its_local_store(original, tmp_path, capsys):
    """The metadata kept outside a store directory that is gone: the tier is verified alone."""
    copy = copy_store(original, tmp_path / "copy")
    root = tmp_path / "tier-only"
    meta = root / "tiered-metadata.db"
    root.mkdir()
    Path(copy.effective_metadata_path()).rename(meta)
    tier = Path(copy.effective_driver_options()["root"]).rename(root / "tier")
    alone = copy.replace(store_path=str(tmp_path / "gone"), metadata_path=str(meta),
                         driver_options={"root": str(tier)})
    code, report = run_verify(capsys, write_conf(alone, tmp_path), "--deep")
    assert code == 0 and serious(report) == [], report
    assert not (tmp_path / "gone").exists()


def test_human_output_names_the_fix_and_the_summary(original, tmp_path, capsys):
    copy = copy_store(original, tmp_path / "copy")
    planted = plant(copy, "bad_tail", seed=5)
    code = main(["verify", "--config", write_conf(copy, tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "WARNING (1)" in out and f"bad_tail: {planted.subject}" in out
    assert "fix: bytes past the committed end that fail the read-back check" in out
    assert out.strip().splitlines()[-1].startswith(f"findings: {tier_prefix(copy.cluster, copy.broker)} (shallow): 1 warning")


def test_bad_input(tmp_path, capsys):
    code = main(["verify", "--config", str(tmp_path / "nope.toml"), "--json"])
    assert code == 2 and json.loads(capsys.readouterr().out)["error"]["code"] == "CONFIG"
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tier")})
    code = main(["verify", "--config", write_conf(config, tmp_path), "--json"])
    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 3 and error["code"] == "NOT_FOUND" and "store_path" in error["message"]
    assert not Path(config.store_path).exists()
    code = main(["verify", "--config", write_conf(config, tmp_path), "--topics", "a/b", "--json"])
    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and error["code"] == "ILLEGAL_PARAM" and "'a/b'" in error["message"]


def test_help_explains_the_exit_codes(capsys):
    assert main(["verify", "--help"]) == 0
    out = capsys.readouterr().out
    assert "0 clean" in out and "1 findings" in out and "4 corrupt data" in out


@pytest.mark.running_store
def test_beside_a_running_producer_and_dispatcher(tmp_path):
    """Puts and dispatch rounds (segments rolled and sealed, key-index files uploaded, local
    retention, tiered expiry of head segments) run in threads while ``verify --deep`` runs
    again and again: nothing of warning or worse."""
    from tiered_core.ops.verify_listing import SETTLE_S

    assert SETTLE_S[-1] > 0  # the pauses a running store needs are kept here
    config = build_store(tmp_path, messages=200)
    reserve_ms = config.file_reserved_hours * 3_600_000
    stop = threading.Event()
    errors: list[BaseException] = []
    counts = {"puts": 0, "rounds": 0}

    with TieredMessageStore.open(config) as store:
        def produce() -> None:
            i = 0
            try:
                while not stop.is_set():
                    body = (f"live-{i}|".encode() * 40)[:200 + i % 300]
                    res = store.put_message(Message(topic="orders" if i % 3 else "audit", body=body,
                                                    keys=[f"live-{i}"], tags="t"), i % 2)
                    assert res.ok
                    i += 1
                    counts["puts"] = i
                    time.sleep(0.002)  # a steady stream, not a flood the dispatcher never catches up with
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        def dispatch() -> None:
            n = 0
            try:
                while not stop.is_set():
                    store.dispatch(force=True)
                    n += 1
                    counts["rounds"] = n
                    if n % 3 == 0:
                        store.index.roll_file()
                        store.index.compact_and_upload()
                    if n % 5 == 0:  # local retention, and tiered expiry of what is older than 2 s
                        store.delete_expired_local()
                        store.delete_expired_tiered(int(time.time() * 1000) + reserve_ms - 2000)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        threads = [threading.Thread(target=produce, daemon=True), threading.Thread(target=dispatch, daemon=True)]
        for t in threads:
            t.start()
        reports = []
        try:
            deadline = time.monotonic() + 120

            def expired() -> bool:
                return any(f.commit_log.min_offset > 0 for f in store.flat_files.files())

            # (until tiered expiry has run at least once too: on a loaded machine every round
            # above can end before a head segment is 2 s old)
            while (len(reports) < 5 or counts["rounds"] < 10 or counts["puts"] < 300 or not expired()) \
                    and time.monotonic() < deadline:
                reports.append(verify_store(config, deep=True))
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        assert not errors, errors
        # tiered expiry ran while verify walked: head segments are gone
        assert any(f.commit_log.min_offset > 0 for f in store.flat_files.files())
    assert len(reports) >= 5 and counts["puts"] >= 300 and counts["rounds"] >= 10, (len(reports), counts)
    for report in reports:
        assert worst_findings(report) == [], [f.describe() for f in worst_findings(report)]
        assert report.exit_code == 0
    # the walks saw the store move (segments added and expired between them)
    assert len({(r.stats.messages_read, r.stats.objects_listed) for r in reports}) > 1
    assert any(report.of_kind(FindingKind.LOCAL_PENDING) for report in reports)


def test_local_store_pending_and_retention_held(tmp_path, capsys):
    """Messages put but not dispatched: every queue's are pending, and the expired local
    commit-log files that hold them are kept by local retention; both are information only."""
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tier")}, local_commit_log_file_size=64 << 10,
                          local_retention_hours=0)
    workload = Workload(topics=("orders",), queues=2, seed=5)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 600)
        assert store.delete_expired_local() == 0  # retention deletes nothing that is not tiered
    files = sorted(os.listdir(os.path.join(config.store_path, "commitlog")))
    assert len(files) >= 3
    code, report = run_verify(capsys, write_conf(config, tmp_path))
    assert code == 0 and serious(report) == [], report
    pending = {(f["topic"], f["queue_id"]): f for f in report["findings"] if f["kind"] == "local_pending"}
    assert {k: tuple(f["queue_offsets"]) for k, f in pending.items()} == {
        key: (0, len(sent)) for key, sent in workload.sent.items()}
    held = [f for f in report["findings"] if f["kind"] == "local_retention_held"]
    assert len(held) == 1 and held[0]["facts"]["files"] == files[:-1], held
    assert held[0]["facts"]["oldest_untiered_commitlog_offset"] == 0
    code, report = run_verify(capsys, write_conf(config, tmp_path), "--topics", "nosuch")
    assert code == 0 and not [f for f in report["findings"] if f["kind"].startswith("local_")]


def test_bytes_past_the_committed_end_that_read_back_are_an_uncommitted_tail(original, tmp_path, capsys):
    """A crash after the last upload and before its metadata update: the last commit-log
    segment holds one message, the last consume-queue segment one unit more than recorded."""
    copy = copy_store(original, tmp_path / "copy")
    metadata = copy.open_metadata()
    try:
        metas = {FileSegmentType(t): max((m for m in metadata.iterate_file_segments(int(t))
                                          if m.path.endswith("/orders/1")), key=lambda m: m.base_offset)
                 for t in (FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE)}
        cq, cl = metas[FileSegmentType.CONSUME_QUEUE], metas[FileSegmentType.COMMIT_LOG]
        assert cq.size >= 2 * CQ_UNIT_SIZE
        driver = copy.open_driver()
        try:
            last = decode_cq_units(driver.read(backend_path(copy.cluster, cq), cq.size - CQ_UNIT_SIZE,
                                               CQ_UNIT_SIZE))[0]
        finally:
            driver.close()
        assert last.commitlog_offset + last.size == cl.base_offset + cl.size
        cq.size -= CQ_UNIT_SIZE
        cl.size -= last.size
        metadata.update_file_segment(cq)
        metadata.update_file_segment(cl)
    finally:
        metadata.close()
    code, report = run_verify(capsys, write_conf(copy, tmp_path), "--deep")
    assert code == 0 and serious(report) == [], report
    tails = {f["facts"]["type"]: f for f in report["findings"] if f["kind"] == "uncommitted_tail"}
    assert tails["COMMIT_LOG"]["facts"]["records"] == 1 and tails["COMMIT_LOG"]["facts"]["tail_bytes"] == last.size
    assert tails["CONSUME_QUEUE"]["facts"]["records"] == 1


def test_a_segment_expiry_marked_deleted_is_not_a_stray(original, tmp_path, capsys):
    """Expiry marks a segment DELETED, then deletes its object, then the record: a crash in
    between leaves an object whose record says DELETED. It is the store's (its next expiry
    deletes it), not an unlisted object."""
    copy = copy_store(original, tmp_path / "copy")
    metadata = copy.open_metadata()
    try:
        head = min((m for m in metadata.iterate_file_segments(int(FileSegmentType.COMMIT_LOG))
                    if m.path.endswith("/orders/0")), key=lambda m: m.base_offset)
        head.status = SegmentStatus.DELETED
        metadata.update_file_segment(head)
    finally:
        metadata.close()
    code, report = run_verify(capsys, write_conf(copy, tmp_path), "--deep")
    assert code == 0 and serious(report) == [], report


def test_a_consume_queue_tail_into_an_unlisted_commit_log_segment(original, tmp_path, capsys):
    """Metadata that lost the record of a queue's last commit-log segment and of the units
    pointing into it: the segment is an adoptable unlisted object; the consume queue's tail
    reads back (its units name messages that segment holds), so it is no bad tail."""
    copy = copy_store(original, tmp_path / "copy")
    metadata = copy.open_metadata()
    try:
        def last(ftype):
            return max((m for m in metadata.iterate_file_segments(int(ftype)) if m.path.endswith("/orders/0")),
                       key=lambda m: m.base_offset)
        cl, cq = last(FileSegmentType.COMMIT_LOG), last(FileSegmentType.CONSUME_QUEUE)
        driver = copy.open_driver()
        try:
            units = decode_cq_units(driver.read(backend_path(copy.cluster, cq), 0, cq.size))
        finally:
            driver.close()
        into = sum(1 for u in units if u.commitlog_offset >= cl.base_offset)
        assert 0 < into < len(units) and cl.base_offset > 0
        metadata.delete_file_segment(int(FileSegmentType.COMMIT_LOG), cl.path, cl.base_offset)
        cq.size -= into * CQ_UNIT_SIZE
        metadata.update_file_segment(cq)
    finally:
        metadata.close()
    code, report = run_verify(capsys, write_conf(copy, tmp_path))
    found = serious(report)
    assert code == 1 and [f["kind"] for f in found] == ["unlisted_object"], report
    assert found[0]["subject"] == backend_path(copy.cluster, cl) and found[0]["facts"]["adoptable"] is True
    tail = [f for f in report["findings"] if f["kind"] == "uncommitted_tail"]
    assert [f["facts"]["records"] for f in tail] == [into]
