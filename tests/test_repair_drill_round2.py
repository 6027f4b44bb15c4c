"""`tiered repair` / `tiered verify` after the second operator drill: each test plants the
damage one drill report found (lost metadata with a garbage tail, a lost row of the newest
segment, a prefix another store took over, a lost disk, a lost consume-queue row, a flipped
unit, expired local files, a run cut short) and checks what verify says and what repair
plans and does. Posix backend, SQLite metadata, the store of tests/test_repair.py."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from test_repair import assert_every_message_in_the_tier, base, drill, read_object, run_json  # noqa: F401
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, encode_cq_unit
from tiered_core.common import FileSegmentType
from tiered_core.ops.reconcile import backend_path
from tiered_core.ops.verify_local import local_findings

#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")


def segments(config, topic: str, qid: int, file_type: FileSegmentType) -> list:
    metadata = config.open_metadata()
    try:
        return sorted((m for m in metadata.iterate_file_segments(int(file_type)) if m.path.endswith(f"/{topic}/{qid}")),
                      key=lambda m: m.base_offset)
    finally:
        metadata.close()


def lose_metadata(config) -> None:
    for path in glob.glob(config.effective_metadata_path() + "*"):
        os.remove(path)


# -- 1: lost metadata and a garbage tail on the last commit-log segment ---------------------------


def test_lost_metadata_keeps_the_valid_head_of_a_last_segment_with_a_garbage_tail(drill, capsys):
    """The metadata is lost and garbage follows the messages of a queue's last commit-log
    segment: repair adopts its whole messages (as the rebuild does) and cuts only the
    garbage (a copy into the quarantine), never moves the segment or the consume queue
    that points into it; every message reads back from the tier."""
    config, conf, put = drill
    last = segments(config, "orders", 0, FileSegmentType.COMMIT_LOG)[-1]
    path = backend_path(config.cluster, last)
    cq_paths = {backend_path(config.cluster, m) for m in segments(config, "orders", 0, FileSegmentType.CONSUME_QUEUE)}
    good = read_object(config, path)
    lose_metadata(config)
    full = Path(config.driver_options["root"]) / path
    os.chmod(full, 0o644)
    with open(full, "ab") as fh:
        fh.write(b"\xab" * 333)
    code, plan = run_json(capsys, "repair", "--config", conf)
    (step,) = [a for a in plan["actions"] if a["subject"] == path]
    assert step["action"] == "adopt" and "cut the 333 bytes" in step["detail"], step
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    moved = {(m["original"], m["then"]) for m in result["moved"]}
    assert not [p for p, then in moved if p in cq_paths], moved
    assert [then for p, then in moved if p == path] != ["removed"] and read_object(config, path) == good, moved
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert not [f for f in report["findings"] if f["severity"] == "error"], report["findings"]
    assert_every_message_in_the_tier(config, put)


def test_an_unlisted_segment_of_this_store_past_a_gap_is_not_moved(drill, capsys):
    """The rows of a queue's last two commit-log segments are lost: the last one does not
    continue the committed end, but it begins with this store's message at its base offset,
    so repair leaves it (a manual step) instead of moving messages the tier holds nowhere
    else into the quarantine."""
    config, conf, _put = drill
    cl = segments(config, "orders", 0, FileSegmentType.COMMIT_LOG)
    assert len(cl) >= 3
    metadata = config.open_metadata()
    try:
        for m in cl[-2:]:
            metadata.delete_file_segment(int(m.type), m.path, m.base_offset)
        metadata.flush()
    finally:
        metadata.close()
    # the next-to-last one fails its read-back (a damaged message): repair must not guess
    second = Path(config.driver_options["root"]) / backend_path(config.cluster, cl[-2])
    os.chmod(second, 0o644)
    data = bytearray(second.read_bytes())
    data[len(data) // 2] ^= 0xFF
    second.write_bytes(bytes(data))
    last = backend_path(config.cluster, cl[-1])
    before = read_object(config, last)
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert code == 1 and not [a for a in plan["actions"] if a["subject"] == last], plan["actions"]
    assert [m for m in plan["manual"] if m["subject"] == last], plan["manual"]
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert not [m for m in result["moved"] if m["original"] in (last, backend_path(config.cluster, cl[-2]))]
    assert read_object(config, last) == before


# -- 1 / 7: verify's local findings ------------------------------------------------------------------


def _local_store(root: Path, units: list[int], commit_log_start: int) -> str:
    """A local store whose consume queue t/0 holds ``units`` (commit-log offsets, 100 bytes
    each) and whose commit log starts at ``commit_log_start`` (retention deleted the rest)."""
    cq = root / "consumequeue" / "t" / "0"
    cq.mkdir(parents=True)
    (cq / f"{0:020d}").write_bytes(b"".join(encode_cq_unit(o, 100) for o in units))
    (root / "commitlog").mkdir()
    (root / "commitlog" / f"{commit_log_start:020d}").write_bytes(b"\0" * (units[-1] + 100 - commit_log_start))
    return str(root)


def test_local_min_is_the_first_message_the_local_commit_log_holds(tmp_path):
    """Retention deleted the commit-log files of offsets 0..6: the local min is 7, not the
    first unit of the consume queue."""
    store = _local_store(tmp_path, [i * 100 for i in range(10)], 700)
    (finding,) = local_findings(store, {("t", 0): 8}, retention_hours=0)
    assert finding.facts["local_min"] == 7 and finding.facts["pending"] == 2, finding


def test_local_pending_does_not_count_messages_that_exist_nowhere(tmp_path):
    """The tier ends at 3 and the local store starts at 7: offsets 3..6 are neither tiered
    nor local -- not pending."""
    store = _local_store(tmp_path, [i * 100 for i in range(10)], 700)
    (finding,) = local_findings(store, {("t", 0): 3}, retention_hours=0)
    assert finding.queue_offsets == (7, 10) and finding.facts["pending"] == 3, finding
    assert "3..6 are neither tiered nor local" in finding.detail


# -- 2: a finding the steps mend is not reported as unmendable ------------------------------------


def test_findings_the_adoption_mends_are_not_left_as_manual(drill, capsys):
    """The row of a queue's newest commit-log segment is lost (the object intact): verify
    finds the units pointing past the commit log (a manual finding) and the unlisted
    segment; adopting the segment mends both, so --apply reports the first as mended and
    exits 0."""
    config, conf, put = drill
    last = segments(config, "orders", 0, FileSegmentType.COMMIT_LOG)[-1]
    metadata = config.open_metadata()
    try:
        metadata.delete_file_segment(int(last.type), last.path, last.base_offset)
        metadata.flush()
    finally:
        metadata.close()
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert code == 1 and [m["kind"] for m in plan["manual"]] == ["unit_outside_commit_log"], plan["manual"]
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 0 and result["manual"] == [], result
    assert [(m["kind"], m["done"] is not None) for m in result["mended"]] == [("unit_outside_commit_log", True)]
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert code == 0, report["findings"]
    assert_every_message_in_the_tier(config, put)


# -- 3: a prefix another store owns ------------------------------------------------------------------


def test_a_prefix_another_store_owns_is_not_compared_and_nothing_is_adopted(drill, capsys):
    """Another store took the prefix over and wrote a segment: verify stops after the
    ownership finding (saying the listing was not compared), and the dry run plans no
    adoption of the other store's objects."""
    from test_repair import planted

    config, conf, _put = drill
    planted(config, "stale_owner")
    planted(config, "unlisted_segment")
    code, report = run_json(capsys, "verify", "--config", conf)
    assert [f["kind"] for f in report["findings"]] == ["owner_other"], report["findings"]
    assert "not compared" in report["findings"][0]["detail"]
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert code == 1 and plan["actions"] == [] and [m["kind"] for m in plan["manual"]] == ["owner_other"], plan


# -- 4: a lost local disk -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["verify", "repair"])
def test_a_lost_disk_names_takeover_create(drill, capsys, command):
    """Everything in store_path is lost but a directory (here: lost+found; by default the
    tier root lives there): the tier's owner record names the lost store, so the hint is
    `tiered takeover --create` (which recovers it), not `tiered metadata rebuild` (which
    refuses a prefix owned by a store id the directory no longer holds)."""
    import shutil

    from tiered_core.cli import main

    config, conf, _put = drill
    for name in os.listdir(config.store_path):
        path = os.path.join(config.store_path, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    os.mkdir(os.path.join(config.store_path, "lost+found"))
    code = main([command, "--config", conf])
    err = capsys.readouterr().err
    assert code == 3 and f"tiered takeover --config {conf} --create" in err, err
    assert "metadata rebuild" not in err


# -- 5: a lost queue row ------------------------------------------------------------------------------


def test_a_lost_queue_row_is_found_and_recorded_again(drill, capsys):
    """The metadata lost a queue's row (its segments' rows intact): reads of the queue find
    nothing, so verify reports it, and repair records the row from the consume-queue
    segments; every message reads back from the tier again."""
    import sqlite3

    config, conf, put = drill
    db = sqlite3.connect(config.effective_metadata_path())
    assert db.execute("delete from queues where topic='orders' and queue_id=0").rowcount == 1
    db.commit()
    db.close()
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    (found,) = [f for f in report["findings"] if f["subject"] == "orders/0"]
    assert code == 1 and found["kind"] == "unlisted_object" and found["facts"]["missing"] == "queue_row", found
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert [(a["subject"], a["action"]) for a in plan["actions"]] == [("orders/0", "record_queue")], plan
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 0 and all(s["done"] for s in result["steps"]), result
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert code == 0, report["findings"]
    assert_every_message_in_the_tier(config, put)


# -- 6: a damaged consume-queue unit -----------------------------------------------------------------


@pytest.mark.parametrize("deep", [False, True])
def test_a_damaged_unit_names_the_consume_queue_object(drill, capsys, deep):
    """A flipped byte turns a tiered consume-queue unit into no unit at all: the finding
    names the consume-queue object and says the unit is damaged, not that the message is
    lost from the commit log (its bytes are intact)."""
    config, conf, _put = drill
    cq = segments(config, "orders", 0, FileSegmentType.CONSUME_QUEUE)[1]
    path = backend_path(config.cluster, cq)
    full = Path(config.driver_options["root"]) / path
    os.chmod(full, 0o644)
    data = bytearray(full.read_bytes())
    data[2 * CQ_UNIT_SIZE] ^= 0xFF  # the commit-log offset's top byte: negative
    full.write_bytes(bytes(data))
    q = cq.base_offset // CQ_UNIT_SIZE + 2
    code, report = run_json(capsys, "verify", "--config", conf, *(["--deep"] if deep else []))
    (found,) = [f for f in report["findings"] if f["kind"] == "unit_outside_commit_log"]
    assert code == 4 and found["subject"] == path and found["queue_offsets"] == [q, q + 1], found
    assert "damaged" in found["detail"] and "consume-queue object" in found["fix"], found
    assert "commit-log segment" not in found["fix"]


# -- 8: the dry run lists an earlier run's unfinished moves -------------------------------------------


def test_the_dry_run_lists_the_moves_apply_will_finish(drill, capsys, monkeypatch):
    """A run cut short between the quarantine copy and the rewrite: the dry run names that
    move (in JSON and in words) as one --apply finishes first."""
    from test_repair import planted

    from tiered_core.cli import main
    from tiered_core.errors import DriverError
    from tiered_core.ops.quarantine import Quarantine

    config, conf, _put = drill
    _kind, subject = planted(config, "bad_tail")

    def crash(self, entry):
        raise DriverError("injected: the process died here", retryable=False, path=entry.original)

    monkeypatch.setattr(Quarantine, "finish", crash)
    code, _result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 1
    monkeypatch.undo()
    code, plan = run_json(capsys, "repair", "--config", conf)
    (pending,) = plan["unfinished_from_earlier_runs"]
    assert pending["original"] == subject and pending["would_finish"] is True, pending
    main(["repair", "--config", conf])
    out = capsys.readouterr().out
    assert "UNFINISHED MOVES (1)" in out and subject in out and "would: finish it first" in out, out
