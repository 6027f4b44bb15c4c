"""`tiered repair`: for each planted fault, verify finds it, the dry run plans it and changes
nothing, --apply mends what is mendable (a second `verify --deep` exits 0), every
acknowledged message reads back from the tier, key queries find every key, and the
quarantine holds what was moved; what repair cannot mend it names with the manual step and
leaves alone; it refuses a store open elsewhere and a prefix another store owns.

Posix backend, SQLite metadata, real stores built through the API (put, dispatch, key
index uploaded), faults planted with the drills kit (``tiered_conformance.drills``) in a
copy of the store.
"""

from __future__ import annotations

import json
import os
import stat
import zlib
from pathlib import Path

import pytest

from store_workload import tier_messages, tier_messages_around_damage
from tiered_conformance.drills import copy_store, plant
from tiered_core import Message, StoreConfig
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.cli.exit_codes import ExitCode
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.codec.message import SYS_FLAG_POS, store_timestamp_position
from tiered_core.common import NO_TIMESTAMP, FileSegmentType, SegmentStatus
from tiered_core.flat.ownership import tier_prefix
from tiered_core.ops.quarantine import list_quarantine
from tiered_core.ops.reconcile import backend_path

QUEUES = (("orders", 0), ("orders", 1), ("payments", 0))
PER_QUEUE = 40
#: Faults repair mends, and whether the object they name is moved into the quarantine.
MENDABLE = {"extra_object": True, "unlisted_segment": False, "wrong_sealed_flag": False,
            "wrong_sealed_flag@2": False, "bad_tail": True,
            "index_deleted": False, "index_unreadable": True, "owner_deleted": False,
            "uncommitted_tail": False}
#: Faults repair cannot mend. (bad_times moves a sealed segment's recorded times: repair cannot
#: tell that from an object replaced by another store's, so it records no times over known ones.)
NOT_MENDABLE = ("flipped_byte", "truncated_segment", "deleted_object", "metadata_past_end", "index_entry_wrong",
                "bad_times")


def config_text(root: Path) -> str:
    return (f'[tiered]\nstore_path = "{root / "store"}"\ndriver = "posix"\nlocal_commit_log_file_size = "1MiB"\n'
            f'commit_log_max_size = 3000\nconsume_queue_max_size = {12 * CQ_UNIT_SIZE}\n'
            f'[tiered.options]\nroot = "{root / "tier"}"\nfsync = false\n')


#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A store whose queues roll several segments, with its key index uploaded; returns
    (config, {(topic, queue, offset): (body, key)})."""
    root = tmp_path_factory.mktemp("repair-base")
    conf = root / "tiered.toml"
    conf.write_text(config_text(root))
    config = StoreConfig.load(str(conf), environ={})
    put = {}
    with TieredMessageStore.open(config) as store:
        for round_ in range(2):
            for i in range(PER_QUEUE // 2):
                for topic, qid in QUEUES:
                    n = round_ * (PER_QUEUE // 2) + i
                    key = f"{topic}-{qid}-k{n}"
                    body = f"{topic}/{qid}/{n} ".encode() * 10
                    result = store.put_message(Message(topic=topic, body=body, keys=[key]), qid)
                    put[(topic, qid, result.queue_offset)] = (body, key)
            store.dispatch()
            store.index.roll_file()
            assert store.index.compact_and_upload() >= 1
    return config, put


@pytest.fixture
def drill(base, tmp_path):
    """A copy of the base store and its config file."""
    config, put = base
    copy = copy_store(config, tmp_path / "drill")
    conf = tmp_path / "drill.toml"
    conf.write_text(config_text(tmp_path / "drill"))
    loaded = StoreConfig.load(str(conf), environ={})
    assert (loaded.store_path, loaded.driver_options["root"]) == (copy.store_path, copy.driver_options["root"])
    # The copy's tier root moved: a writable open proves the move (the tier holds this
    # store's owner record and segments) and records the new location, as an operator's
    # first open of a restored copy does; writer sessions (repair --apply) then accept it.
    with TieredMessageStore.open(loaded):
        pass
    return loaded, str(conf), put


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def snapshot(config: StoreConfig) -> dict:
    """Every backend file (bytes and mode: posix seals by mode) and every metadata row."""
    root = Path(config.driver_options["root"])
    files = {str(p.relative_to(root)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
             for p in root.rglob("*") if p.is_file()}
    metadata = config.open_metadata()
    try:
        rows = (sorted(repr(m) for m in metadata.iterate_file_segments()),
                sorted(repr(q) for q in metadata.iterate_queues()),
                sorted(repr(t) for t in metadata.iterate_topics()))
    finally:
        metadata.close()
    return {"files": files, "metadata": rows}


def assert_every_message_in_the_tier(config: StoreConfig, put: dict) -> None:
    got = tier_messages(config)
    assert {k: body for k, (body, _key) in put.items()} == got


def assert_every_key_found(config: StoreConfig, put: dict) -> None:
    with TieredMessageStore.open(config) as store:
        for (topic, qid, offset), (_body, key) in sorted(put.items()):
            found = store.query_message(topic, key, 4)
            assert [(m.queue_id, m.queue_offset) for m in found.messages] == [(qid, offset)], key


def plant_uncommitted_tail(config: StoreConfig) -> str:
    """Lower the committed size of the last consume-queue segment of orders/0 by 3 units, as
    a crash between the backend write and the metadata update leaves it."""
    metadata = config.open_metadata()
    try:
        cq = max((m for m in metadata.iterate_file_segments(int(FileSegmentType.CONSUME_QUEUE))
                  if m.path.endswith("/orders/0")), key=lambda m: m.base_offset)
        assert cq.size >= 3 * CQ_UNIT_SIZE
        cq.size -= 3 * CQ_UNIT_SIZE
        data = read_object(config, backend_path(config.cluster, cq))
        cq.checksum, cq.checksum_size = zlib.crc32(data[:cq.size]), cq.size  # the record of that commit
        metadata.update_file_segment(cq)
        queue = metadata.get_queue("orders", 0)
        queue.max_offset = (cq.base_offset + cq.size) // CQ_UNIT_SIZE
        metadata.update_queue(queue)
        metadata.flush()
        return backend_path(config.cluster, cq)
    finally:
        metadata.close()


def test_an_adopted_tail_extends_the_segments_checksum(drill, capsys):
    """Repair adopts an uncommitted tail as the store's open does, checksum included: the
    record then covers the whole object, and verify --checksums hashes all of it."""
    config, conf, _put = drill
    subject = plant_uncommitted_tail(config)
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 0, result
    metadata = config.open_metadata()
    try:
        (record,) = [m for m in metadata.iterate_file_segments() if backend_path(config.cluster, m) == subject]
    finally:
        metadata.close()
    data = read_object(config, subject)
    assert record.size == record.checksum_size == len(data) and record.checksum == zlib.crc32(data), record
    code, report = run_json(capsys, "verify", "--config", conf, "--checksums")
    assert code == 0, report["findings"]


def planted(config: StoreConfig, fault: str) -> tuple[str, str]:
    """Plant ``fault``; returns (expected finding kind, subject)."""
    if fault == "uncommitted_tail":
        return "uncommitted_tail", plant_uncommitted_tail(config)
    p = planted_fault(config, fault)
    return p.expected_kind.value, p.subject


def planted_fault(config: StoreConfig, fault: str):
    """Plant drill ``fault`` (``name@seed``, seed 7 by default); its PlantedFault."""
    name, _, seed = fault.partition("@")
    p = plant(config, name, seed=int(seed or 7))
    if fault == "wrong_sealed_flag":  # seed 7: the backend object sealed, the record open
        assert "in the backend" in p.detail, p.detail
    if fault == "wrong_sealed_flag@2":  # seed 2: the record sealed, the backend object open
        assert "in the metadata" in p.detail, p.detail
    return p


def read_object(config: StoreConfig, path: str) -> bytes | None:
    full = Path(config.driver_options["root"]) / path
    return full.read_bytes() if full.exists() else None


# -- mendable faults ----------------------------------------------------------------------------


@pytest.mark.parametrize("fault", sorted(MENDABLE))
def test_repair_mends_a_planted_fault(drill, capsys, fault):
    config, conf, put = drill
    kind, subject = planted(config, fault)
    original = read_object(config, subject) if MENDABLE[fault] else None
    # verify finds it
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    found = [f for f in report["findings"] if f["kind"] == kind and f["subject"] == subject]
    assert found and found[0]["mendable"], report["findings"]
    assert code == (0 if kind == "uncommitted_tail" else 1)
    # the dry run plans it and changes nothing
    before = snapshot(config)
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert code == 0, plan
    planned = [a for a in plan["actions"] if a["subject"] == subject and a["kind"] == kind]
    assert len(planned) == 1 and planned[0]["action"], plan
    assert not plan["manual"]
    assert snapshot(config) == before
    # --apply mends it
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 0, result
    step = next(s for s in result["steps"] if s["subject"] == subject and s["kind"] == kind)
    assert step["done"] and not step["error"], step
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert code == 0 and not [f for f in report["findings"] if f["severity"] != "info"], report["findings"]
    assert_every_message_in_the_tier(config, put)
    # the quarantine holds what was moved, with its manifest
    with config.open_driver() as driver:
        runs = list_quarantine(driver, tier_prefix(config.cluster, config.broker))
    entries = [e for r in runs for e in r.entries]
    if MENDABLE[fault]:
        (entry,) = [e for e in entries if e.original == subject]
        assert entry.repair_id == result["repair_id"] and entry.state == "done" and entry.kind == kind
        assert (entry.size, entry.crc32) == (len(original), zlib.crc32(original))
        assert read_object(config, entry.copy) == original
        if fault == "bad_tail":
            assert entry.then == f"rewritten with its first {entry.keep} committed bytes"
            assert read_object(config, subject) == original[:entry.keep]
        elif fault == "index_unreadable":
            # its keys went into a new index file, uploaded at the next base: the same one
            # when the damaged file was the last
            assert entry.then == "removed" and read_object(config, subject) != original
        else:
            assert entry.then == "removed" and read_object(config, subject) is None
    else:
        assert entries == []
    if fault in ("index_deleted", "index_unreadable"):
        assert result["keys_indexed"] > 0
    assert_every_key_found(config, put)


# -- faults repair cannot mend --------------------------------------------------------------------


@pytest.mark.parametrize("fault", NOT_MENDABLE)
def test_repair_names_what_it_cannot_mend_and_leaves_it(drill, capsys, fault):
    config, conf, put = drill
    p = planted_fault(config, fault)
    kind, subject = p.expected_kind.value, p.subject
    before = read_object(config, subject)
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert code == 1
    manual = [m for m in plan["manual"] if m["kind"] == kind and m["subject"] == subject]
    assert manual and manual[0]["manual"], plan
    assert not [a for a in plan["actions"] if a["subject"] == subject]
    assert main(["repair", "--config", conf]) == 1
    text = capsys.readouterr().out
    assert "CANNOT MEND" in text and subject in text and "manual step:" in text
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 1
    assert read_object(config, subject) == before
    with config.open_driver() as driver:
        assert list_quarantine(driver, tier_prefix(config.cluster, config.broker)) == []
    # damage stays local: every message outside what the fault destroyed reads back
    lost = p.queue_offsets
    survivors = {k: body for k, (body, _key) in put.items()
                 if not (lost and k[:2] == (p.topic, p.queue_id) and lost[0] <= k[2] < lost[1])}
    got = tier_messages_around_damage(config)
    assert {k: got.get(k) for k in survivors} == survivors, p
    assert len(survivors) < len(put) or lost is None


# -- refusals -------------------------------------------------------------------------------------------


def test_repair_refuses_while_the_store_is_open(drill, capsys):
    config, conf, _put = drill
    planted(config, "bad_times")  # (the store opens over it: an extra object would stop its open)
    with TieredMessageStore.open(config):
        before = snapshot(config)
        code, err = run_json(capsys, "repair", "--config", conf, "--apply")
        assert code == ExitCode.BACKEND and err["error"]["code"] == "STATE_CONFLICT", err
        assert "is open in another process" in err["error"]["message"], err
        assert snapshot(config) == before


def test_repair_refuses_a_prefix_another_store_owns(drill, capsys):
    config, conf, _put = drill
    planted(config, "stale_owner")
    planted(config, "extra_object")
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert code == 1 and [m["kind"] for m in plan["manual"]] == ["owner_other"]
    before = snapshot(config)
    code, err = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == ExitCode.BACKEND and err["error"]["code"] == "PREFIX_OWNED", err
    assert snapshot(config) == before


# -- the quarantine from the command line ----------------------------------------------------------------


def test_purge_quarantine_removes_only_old_listed_copies(drill, capsys):
    config, conf, _put = drill
    _kind, subject = planted(config, "extra_object")
    assert main(["repair", "--config", conf, "--apply"]) == 0
    capsys.readouterr()
    code, listing = run_json(capsys, "repair", "--config", conf, "--list-quarantine")
    (run,) = listing["runs"]
    (entry,) = run["entries"]
    assert entry["original"] == subject and entry["state"] == "done"
    # a copy no manifest names stays, whatever its age
    stray = Path(config.driver_options["root"]) / run["manifest"].rsplit("/", 1)[0] / "stray"
    stray.write_bytes(b"s")
    code, report = run_json(capsys, "repair", "--config", conf, "--purge-quarantine", "--older-than", "7d")
    assert code == 0 and report["purged"] == [] and len(report["kept"]) == 2
    assert read_object(config, entry["copy"]) is not None
    code, report = run_json(capsys, "repair", "--config", conf, "--purge-quarantine", "--older-than", "0s")
    assert code == 0 and [e["copy"] for e in report["purged"]] == [entry["copy"]]
    assert read_object(config, entry["copy"]) is None and stray.exists()
    assert report["manifests_removed"] == []  # the stray keeps its directory's manifest


@pytest.mark.parametrize("argv", [["--purge-quarantine", "--older-than", "7x"], ["--purge-quarantine"],
                                  ["--older-than", "7d"], ["--purge-quarantine", "--older-than", "-1d"]])
def test_bad_purge_input_is_exit_2(drill, capsys, argv):
    _config, conf, _put = drill
    code = main(["repair", "--config", conf, *argv, "--json"])
    assert code == ExitCode.BAD_INPUT
    err = json.loads(capsys.readouterr().out)["error"]
    assert "older-than" in err["message"] or "older_than" in err["message"], err


def test_help_names_the_exit_codes(capsys):
    assert main(["repair", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--apply" in text and "exit status: 0 nothing is left that repair cannot mend" in text
    assert "--purge-quarantine" in text and "7d" in text


def test_a_clean_store_plans_nothing(drill, capsys):
    config, conf, put = drill
    before = snapshot(config)
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert code == 0 and plan["actions"] == [] and plan["manual"] == []
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 0 and result["moved"] == []
    assert snapshot(config)["files"] == before["files"]
    assert os.path.isdir(config.store_path)
    assert_every_message_in_the_tier(config, put)


def test_a_run_cut_short_after_the_copy_is_finished_by_the_next(drill, capsys, monkeypatch):
    """A crash between the quarantine copy and the rewrite (injected: the step after the
    manifest's "copied" line fails) leaves the object as it was and a manifest that says
    what to finish; the next `repair --apply` finishes it and copies nothing again."""
    from tiered_core.errors import DriverError
    from tiered_core.ops.quarantine import Quarantine

    config, conf, put = drill
    _kind, subject = planted(config, "bad_tail")
    original = read_object(config, subject)
    real_finish = Quarantine.finish

    def crash(self, entry):
        raise DriverError("injected: the process died here", retryable=False, path=entry.original)

    monkeypatch.setattr(Quarantine, "finish", crash)
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 1
    (step,) = [s for s in result["steps"] if s["subject"] == subject]
    assert "injected" in step["error"]
    assert read_object(config, subject) == original
    with config.open_driver() as driver:
        (run,) = list_quarantine(driver, tier_prefix(config.cluster, config.broker))
    assert [e.state for e in run.entries] == ["copied"]
    monkeypatch.setattr(Quarantine, "finish", real_finish)
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 0, result
    (finished,) = result["finished_from_earlier_runs"]
    assert finished["original"] == subject and finished["repair_id"] == run.repair_id
    assert result["moved"] == []  # nothing copied twice
    (step,) = [s for s in result["steps"] if s["subject"] == subject]
    assert step["skipped"] and not step["manual"] and not step["done"]
    assert read_object(config, subject) == original[:finished["keep"]]
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert code == 0, report["findings"]
    assert_every_message_in_the_tier(config, put)


def test_a_run_of_unlisted_segments_is_adopted_in_order_and_the_queue_end_raised(drill, capsys):
    """The records of a queue's last two consume-queue segments are lost (and its recorded
    end with them): the dry run plans both adoptions (the second continues the first), the
    apply adopts both and raises the queue's max offset, so no offset the tier holds is
    handed out again."""
    config, conf, put = drill
    metadata = config.open_metadata()
    try:
        cq = sorted((m for m in metadata.iterate_file_segments(int(FileSegmentType.CONSUME_QUEUE))
                     if m.path.endswith("/payments/0")), key=lambda m: m.base_offset)
        assert len(cq) >= 3
        lost = cq[-2:]
        for m in lost:
            metadata.delete_file_segment(int(m.type), m.path, m.base_offset)
        queue = metadata.get_queue("payments", 0)
        end = queue.max_offset
        queue.max_offset = lost[0].base_offset // CQ_UNIT_SIZE
        metadata.update_queue(queue)
        metadata.flush()
    finally:
        metadata.close()
    paths = [backend_path(config.cluster, m) for m in lost]
    before = snapshot(config)
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert code == 0, plan
    assert [(a["subject"], a["action"]) for a in plan["actions"]] == [(p, "adopt") for p in paths]
    assert snapshot(config) == before
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 0 and [s["done"] is not None for s in result["steps"]] == [True, True], result
    metadata = config.open_metadata()
    try:
        assert metadata.get_queue("payments", 0).max_offset == end
        sizes = {m.base_offset: m.size for m in metadata.iterate_file_segments(int(FileSegmentType.CONSUME_QUEUE))
                 if m.path.endswith("/payments/0")}
        assert [sizes.get(m.base_offset) for m in lost] == [m.size for m in lost]
    finally:
        metadata.close()
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert code == 0, report["findings"]
    assert_every_message_in_the_tier(config, put)
    with TieredMessageStore.open(config) as store:  # the next put continues after the tier
        assert store.get_max_offset_in_queue("payments", 0) == end
        assert store.put_message(Message(topic="payments", body=b"after"), 0).queue_offset == end


# -- the listing-based faults on every backend ----------------------------------------------------------


@pytest.mark.parametrize("backend", ["posix", "gcs", "azure", "s3"])
def test_listing_faults_are_mended_on_every_backend(request, tmp_path, capsys, backend):
    """The faults verify finds from the listing alone, planted together in one store on
    each backend (the object stores on their emulators): verify finds each, `repair
    --apply` mends them all, a second `verify --deep` exits 0, every message reads back
    from the tier and the quarantine holds the moved objects."""
    from store_workload import backend_options  # tests/ is on sys.path under pytest

    config = StoreConfig(store_path=str(tmp_path / "store"), driver=backend,
                         driver_options=backend_options(request, backend, tmp_path), metadata="sqlite",
                         local_commit_log_file_size=1 << 20, commit_log_max_size=3000,
                         consume_queue_max_size=12 * CQ_UNIT_SIZE)
    conf = tmp_path / "tiered.toml"
    conf.write_text(config.to_toml())
    config = StoreConfig.load(str(conf), environ={})
    put = {}
    with TieredMessageStore.open(config) as store:
        for i in range(30):
            for topic, qid in QUEUES:
                key = f"{topic}-{qid}-k{i}"
                body = f"{topic}/{qid}/{i} ".encode() * 10
                put[(topic, qid, store.put_message(Message(topic=topic, body=body, keys=[key]), qid).queue_offset)] \
                    = (body, key)
        store.dispatch()
    faults = [plant(config, "bad_tail", topic="orders", queue_id=0),
              plant(config, "wrong_sealed_flag", topic="orders", queue_id=1, seed=2),
              plant(config, "unlisted_segment", topic="payments", queue_id=0),
              plant(config, "extra_object")]
    code, report = run_json(capsys, "verify", "--config", str(conf))
    assert code == 1
    found = {(f["kind"], f["subject"]) for f in report["findings"]}
    assert {(p.expected_kind.value, p.subject) for p in faults} <= found, report["findings"]
    moved = {p.subject: read_object_from(config, p.subject) for p in faults
             if p.fault in ("bad_tail", "extra_object")}
    code, plan = run_json(capsys, "repair", "--config", str(conf))
    assert code == 0 and len(plan["actions"]) == len(faults), plan
    code, result = run_json(capsys, "repair", "--config", str(conf), "--apply")
    assert code == 0 and all(s["done"] for s in result["steps"]), result
    code, report = run_json(capsys, "verify", "--config", str(conf), "--deep")
    assert code == 0, report["findings"]
    assert_every_message_in_the_tier(config, put)
    with config.open_driver() as driver:
        (run,) = list_quarantine(driver, tier_prefix(config.cluster, config.broker))
        assert {e.original: driver.read(e.copy, 0, e.size) for e in run.entries} == moved
    # Owner records deleted: repair claims the prefix again for this store, whose metadata
    # now lists everything the prefix holds (with objects it does not list, whose they are
    # cannot be told: a take-over is asked for instead, tests/test_lost_owner_record.py).
    plant(config, "owner_deleted")
    code, result = run_json(capsys, "repair", "--config", str(conf), "--apply")
    assert code == 0 and all(s["done"] for s in result["steps"]), result
    code, report = run_json(capsys, "verify", "--config", str(conf))
    assert code == 0, report["findings"]


def read_object_from(config: StoreConfig, path: str) -> bytes:
    with config.open_driver() as driver:
        return driver.read(path, 0, driver.size(path))


def test_a_segment_of_a_queue_the_metadata_does_not_know_is_left_with_the_rebuild_step(drill, capsys):
    """An unlisted segment of this store whose flat file has no record at all and does not
    start at 0 (lost metadata, not an orphan): repair does not guess, it names `tiered
    metadata rebuild` and leaves the object where it is."""
    from tiered_core.codec.naming import segment_path

    config, conf, _put = drill
    path = segment_path(config.cluster, config.broker, "ghost", 0, FileSegmentType.CONSUME_QUEUE, 200)
    with config.open_driver() as driver:
        driver.create(path)
        driver.write(path, 0, bytes(CQ_UNIT_SIZE))
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert code == 1 and plan["actions"] == []
    (manual,) = plan["manual"]
    assert manual["subject"] == path and "tiered metadata rebuild" in manual["manual"], manual
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 1 and result["steps"] == [] and result["moved"] == []
    assert read_object(config, path) == bytes(CQ_UNIT_SIZE)


def test_a_crash_tail_in_both_files_is_adopted_commit_log_first(drill, capsys):
    """A crash between the backend writes and the metadata update: the queue's last message
    and its unit lie past the recorded ends (two uncommitted tails). The unit reads back only
    once the commit-log tail is adopted, so repair adopts the commit log's first; the queue
    end comes back and every message is served again."""
    from tiered_core.codec.consume_queue import decode_cq_units

    config, conf, put = drill
    metadata = config.open_metadata()
    try:
        def last(kind):
            return max((m for m in metadata.iterate_file_segments(int(kind)) if m.path.endswith("/orders/0")),
                       key=lambda m: m.base_offset)
        cl, cq = last(FileSegmentType.COMMIT_LOG), last(FileSegmentType.CONSUME_QUEUE)
        unit_bytes = read_object(config, backend_path(config.cluster, cq))[cq.size - CQ_UNIT_SIZE:cq.size]
        (unit,) = decode_cq_units(unit_bytes, base_offset=cq.base_offset + cq.size - CQ_UNIT_SIZE)
        assert unit.commitlog_offset + unit.size == cl.base_offset + cl.size  # the queue's last message
        cl.size -= unit.size
        cq.size -= CQ_UNIT_SIZE
        metadata.update_file_segment(cl)
        metadata.update_file_segment(cq)
        queue = metadata.get_queue("orders", 0)
        end = queue.max_offset
        queue.max_offset = end - 1
        metadata.update_queue(queue)
        metadata.flush()
    finally:
        metadata.close()
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert code == 0, plan
    paths = [backend_path(config.cluster, cl), backend_path(config.cluster, cq)]
    assert [(a["subject"], a["kind"], a["action"]) for a in plan["actions"]] == \
        [(p, "uncommitted_tail", "adopt_tail") for p in paths], plan
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 0 and all(s["done"] for s in result["steps"]), result
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert code == 0 and not [f for f in report["findings"] if f["kind"] == "uncommitted_tail"], report
    metadata = config.open_metadata()
    try:
        assert metadata.get_queue("orders", 0).max_offset == end
    finally:
        metadata.close()
    assert_every_message_in_the_tier(config, put)


def test_an_unlisted_commit_log_segment_is_adopted_before_the_units_that_point_into_it(drill, capsys):
    """The record of a queue's last commit-log segment is lost and the units pointing into
    it lie past the consume queue's recorded end: those units read back only once the
    segment is adopted, so repair adopts the commit log first, then the units -- never
    cuts them as a bad tail."""
    from tiered_core.codec.consume_queue import decode_cq_units

    config, conf, put = drill
    metadata = config.open_metadata()
    try:
        for topic, qid in QUEUES:
            segs = [m for m in metadata.iterate_file_segments() if m.path.endswith(f"/{topic}/{qid}")]
            cl = max((m for m in segs if m.type == FileSegmentType.COMMIT_LOG), key=lambda m: m.base_offset)
            cq = max((m for m in segs if m.type == FileSegmentType.CONSUME_QUEUE), key=lambda m: m.base_offset)
            data = read_object(config, backend_path(config.cluster, cq))[:cq.size]
            units = decode_cq_units(data, base_offset=cq.base_offset)
            into = [u for u in units if u.commitlog_offset >= cl.base_offset]
            if 0 < len(into) < len(units):
                break  # units before them in the same segment: the tail is only the units into it
        else:
            raise AssertionError("the sample store has no queue whose last consume-queue segment starts before "
                                 "its last commit-log segment")
        metadata.delete_file_segment(int(cl.type), cl.path, cl.base_offset)
        cq.size -= len(into) * CQ_UNIT_SIZE
        metadata.update_file_segment(cq)
        queue = metadata.get_queue(topic, qid)
        end = queue.max_offset
        queue.max_offset = end - len(into)
        metadata.update_queue(queue)
        metadata.flush()
    finally:
        metadata.close()
    paths = [backend_path(config.cluster, cl), backend_path(config.cluster, cq)]
    code, report = run_json(capsys, "verify", "--config", conf)
    assert {(f["kind"], f["subject"]) for f in report["findings"] if f["subject"] in paths} == \
        {("unlisted_object", paths[0]), ("uncommitted_tail", paths[1])}, report["findings"]
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert code == 0, plan
    assert [(a["subject"], a["action"]) for a in plan["actions"]] == [(paths[0], "adopt"), (paths[1], "adopt_tail")]
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 0 and all(s["done"] for s in result["steps"]) and result["moved"] == [], result
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert code == 0 and not [f for f in report["findings"] if f["subject"] in paths], report
    metadata = config.open_metadata()
    try:
        assert metadata.get_queue(topic, qid).max_offset == end
    finally:
        metadata.close()
    assert_every_message_in_the_tier(config, put)


def test_an_unlisted_key_index_file_that_continues_the_index_is_adopted(drill, capsys):
    """The record of the last uploaded key-index file is lost: the file continues the
    index, is sealed and reads whole, so repair records it again (its times from its
    header) and every key is found through it, without indexing anything again."""
    config, conf, put = drill
    metadata = config.open_metadata()
    try:
        metas = sorted((m for m in metadata.iterate_file_segments(int(FileSegmentType.INDEX)) if m.size),
                       key=lambda m: m.base_offset)
        assert len(metas) >= 2
        lost = metas[-1]
        metadata.delete_file_segment(int(lost.type), lost.path, lost.base_offset)
        metadata.flush()
    finally:
        metadata.close()
    path = backend_path(config.cluster, lost)
    code, plan = run_json(capsys, "repair", "--config", conf)
    assert code == 0 and [(a["subject"], a["kind"], a["action"]) for a in plan["actions"]] == \
        [(path, "unlisted_object", "adopt_index")], plan
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 0 and result["keys_indexed"] == 0 and result["moved"] == [], result
    metadata = config.open_metadata()
    try:
        again = metadata.get_file_segment(int(FileSegmentType.INDEX), lost.path, lost.base_offset)
        assert (again.size, again.status, again.begin_timestamp, again.end_timestamp) == \
            (lost.size, lost.status, lost.begin_timestamp, lost.end_timestamp)
    finally:
        metadata.close()
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert code == 0, report["findings"]
    assert_every_key_found(config, put)


# -- segment times ---------------------------------------------------------------------------------


def _a_sealed_commit_log_segment(config: StoreConfig):
    """The metadata record of a sealed commit-log segment that is not its queue's last (verify
    compares the times of those)."""
    metadata = config.open_metadata()
    try:
        records = [m for m in metadata.iterate_file_segments(int(FileSegmentType.COMMIT_LOG)) if m.size]
    finally:
        metadata.close()
    last = {}
    for m in records:
        if m.path not in last or m.base_offset > last[m.path].base_offset:
            last[m.path] = m
    return next(m for m in sorted(records, key=lambda m: (m.path, m.base_offset))
                if m.status == SegmentStatus.SEALED and m is not last[m.path])


def test_repair_records_segment_times_the_metadata_does_not_know(drill, capsys):
    config, conf, put = drill
    meta = _a_sealed_commit_log_segment(config)
    recorded = (meta.begin_timestamp, meta.end_timestamp)
    metadata = config.open_metadata()
    try:
        meta.begin_timestamp = meta.end_timestamp = NO_TIMESTAMP
        metadata.update_file_segment(meta)
        metadata.flush()
    finally:
        metadata.close()
    subject = backend_path(config.cluster, meta)
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert [f["mendable"] for f in report["findings"] if f["subject"] == subject] == [True], report["findings"]
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 0 and [bool(s["done"] and not s["error"]) for s in result["steps"] if s["subject"] == subject] \
        == [True], result
    again = config.open_metadata()
    try:
        got = again.get_file_segment(int(FileSegmentType.COMMIT_LOG), meta.path, meta.base_offset)
    finally:
        again.close()
    assert (got.begin_timestamp, got.end_timestamp) == recorded  # its first and last message's times
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert code == 0, report["findings"]


def test_a_sealed_segment_holding_messages_of_other_times_is_not_recorded_as_whole(drill, capsys):
    """Repair drill r7: a sealed segment replaced by another store's object of the same name
    and size. Verify --deep saw its messages stored outside the segment's recorded times, and
    repair recorded the other store's times: verify was clean while those offsets served the
    other store's messages. Now repair leaves it as a manual step and verify keeps saying so."""
    config, conf, put = drill
    meta = _a_sealed_commit_log_segment(config)
    subject = backend_path(config.cluster, meta)
    full = Path(config.driver_options["root"]) / subject
    data = bytearray(full.read_bytes())
    pos = 0
    while pos < len(data):  # the same messages, stored a day later (as another store's would be)
        size = int.from_bytes(data[pos:pos + 4], "big")
        ts_pos = pos + store_timestamp_position(int.from_bytes(data[pos + SYS_FLAG_POS:pos + SYS_FLAG_POS + 4], "big"))
        ts = int.from_bytes(data[ts_pos:ts_pos + 8], "big") + 86_400_000
        data[ts_pos:ts_pos + 8] = ts.to_bytes(8, "big")
        pos += size
    os.chmod(full, 0o644)
    full.write_bytes(bytes(data))
    os.chmod(full, 0o444)
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    (found,) = [f for f in report["findings"] if f["subject"] == subject]
    assert found["kind"] == "time_bounds_mismatch" and not found["mendable"], found
    assert "none of them was stored within them" in found["detail"] and "copy of the bucket" in found["fix"]
    before = snapshot(config)
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 1, result
    (step,) = [m for m in result["manual"] if m["subject"] == subject]
    assert "may not be the one this store wrote" in step["manual"], step
    assert snapshot(config) == before  # nothing recorded over the store's own times
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert [f["kind"] for f in report["findings"] if f["subject"] == subject] == ["time_bounds_mismatch"]
    # its checksum says for certain that its bytes are not the ones written
    code, report = run_json(capsys, "verify", "--config", conf, "--deep", "--checksums")
    assert sorted(f["kind"] for f in report["findings"] if f["subject"] == subject) == \
        ["checksum_mismatch", "time_bounds_mismatch"] and code == 4
