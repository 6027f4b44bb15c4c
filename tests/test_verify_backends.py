"""`tiered verify` and `tiered repair` on the object-store emulators: every fault the backend
listing shows (``tiered_conformance.drills.LISTING``), planted in a store on fake-gcs-server,
Azurite and moto's S3 server, is found with its kind and exit code; ``repair --apply`` mends
the mendable ones (a second ``verify --deep`` exits 0) and moves what must go into the
quarantine; no acknowledged message is lost (each read back from the tier, compared with
what was put). The posix runs of every fault, deep ones included, are in test_repair.py
and test_verify.py.
"""

from __future__ import annotations

import json
import zlib

import pytest

from store_workload import backend_options, tier_messages, tier_messages_around_damage
from tiered_conformance.drills import LISTING, plant
from tiered_core import Message, StoreConfig
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.flat.ownership import tier_prefix
from tiered_core.ops.findings import FindingKind, Severity
from tiered_core.ops.quarantine import list_quarantine

BACKENDS = ("gcs", "azure", "s3")
QUEUES = (("orders", 0), ("orders", 1))
PER_QUEUE = 24
#: Listing faults whose object repair moves into the quarantine (the others are adopted or
#: agreed in place; the corrupt ones cannot be mended).
QUARANTINED = {"extra_object", "bad_tail"}


#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")


@pytest.fixture
def store(request, tmp_path):
    """A closed store on the backend of the test's ``backend`` parameter whose queues rolled
    several segments and whose key index is uploaded, its config file, and what was put: ``{(topic, queue, offset): body}``."""
    driver = request.node.callspec.params["backend"]
    options = backend_options(request, driver, tmp_path)
    config = StoreConfig(store_path=str(tmp_path / "store"), driver=driver, driver_options=options,
                         metadata="sqlite", local_commit_log_file_size=1 << 20, commit_log_max_size=3000,
                         consume_queue_max_size=8 * CQ_UNIT_SIZE, rolling_min_size=0)
    conf = tmp_path / "tiered.toml"
    conf.write_text(config.to_toml())
    config = StoreConfig.load(str(conf), environ={})
    put = {}
    with TieredMessageStore.open(config) as store:
        for n in range(PER_QUEUE):
            for topic, qid in QUEUES:
                body = f"{topic}/{qid}/{n} ".encode() * 12
                result = store.put_message(Message(topic=topic, body=body, keys=[f"{topic}-{qid}-{n}"]), qid)
                assert result.ok, result
                put[(topic, qid, result.queue_offset)] = body
            if n % 8 == 7:
                store.dispatch(force=True)
        store.dispatch(force=True)
        store.index.roll_file()  # the key index uploaded too: index faults are listing faults
        assert store.index.compact_and_upload() >= 1
    return config, str(conf), put


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("fault", sorted(LISTING))
@pytest.mark.parametrize("backend", BACKENDS)
def test_listing_fault_is_found_and_mended(store, capsys, backend, fault):
    config, conf, put = store
    assert tier_messages(config) == put  # the store is whole before the drill
    code, report = run_json(capsys, "verify", "--config", conf)
    assert code == 0, report["findings"]

    planted = plant(config, fault, seed=3)
    kind = planted.expected_kind
    code, report = run_json(capsys, "verify", "--config", conf)
    found = [f for f in report["findings"] if f["kind"] == kind.value and f["subject"] == planted.subject]
    assert found, (planted, report["findings"])
    assert code == (4 if kind.severity is Severity.CORRUPT else 1), report["summary"]
    others = [f for f in report["findings"] if f["severity"] != "info" and f not in found]
    assert not others, others

    with config.open_driver() as driver:
        original = driver.read(planted.subject, 0, driver.size(planted.subject)) \
            if fault in QUARANTINED else None
    code, result = run_json(capsys, "repair", "--config", conf, "--apply")
    code_after, after = run_json(capsys, "verify", "--config", conf, "--deep")
    if not kind.mendable:
        # named with its manual step (or, for a prefix another store owns, refused: exit 5
        # PREFIX_OWNED), left as it was: verify still finds it
        assert code == (5 if kind is FindingKind.OWNER_OTHER else 1), result
        assert [f for f in after["findings"] if f["kind"] == kind.value and f["subject"] == planted.subject]
        lost = planted.queue_offsets
        survivors = {k: v for k, v in put.items()
                     if not (lost and k[:2] == (planted.topic, planted.queue_id) and lost[0] <= k[2] < lost[1])}
        got = tier_messages_around_damage(config)
        # every message outside the damage reads back, each the message put at its offset
        assert {k: got.get(k) for k in survivors} == survivors, planted
        return
    assert code == 0, result
    assert code_after == 0, after["findings"]
    assert not [f for f in after["findings"] if f["severity"] != "info"]
    assert tier_messages(config) == put  # no acknowledged message lost, every offset the same message
    with config.open_driver() as driver:
        runs = list_quarantine(driver, tier_prefix(config.cluster, config.broker))
        entries = [e for r in runs for e in r.entries]
        if fault in QUARANTINED:
            (entry,) = [e for e in entries if e.original == planted.subject]
            assert entry.state == "done" and (entry.size, entry.crc32) == (len(original), zlib.crc32(original))
            assert driver.read(entry.copy, 0, entry.size) == original
        else:
            assert entries == []
    # the store opens and serves every message after the repair
    with TieredMessageStore.open(config) as reopened:
        for (topic, qid, offset), body in sorted(put.items())[:: max(1, len(put) // 8)]:
            got = reopened.get_message("verify-test", topic, qid, offset, 1)
            assert got.messages and got.messages[0].body == body, (topic, qid, offset, got.status)


def test_kinds_of_listing_drills_cover_the_listing_area():
    """Every listing-area kind verify reports without reading messages is planted here."""
    from tiered_conformance.drills import EXPECTED

    planted = {EXPECTED[f] for f in LISTING}
    listing = {k for k in FindingKind if k.info.area in ("listing", "ownership") and k.severity is not Severity.INFO
               and k not in (FindingKind.OWNER_UNREADABLE, FindingKind.IDENTITY_MISMATCH,  # (test_verify_operator)
                             FindingKind.STRAY_OBJECT,  # (an object-store layout's: test_stray_objects_...)
                             FindingKind.LEFTOVER_PARTS,  # (test_leftover_pieces_...)
                             FindingKind.CHECKSUM_MISMATCH)}  # (deep: test_a_replaced_message_...)
    assert listing <= planted, listing - planted


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_replaced_message_is_found_by_its_segment_checksum(store, capsys, backend):
    """A message replaced by another that passes every read check (drill s13 F1) is found by
    its segment's checksum on each object store's layout (verify --checksums); repair
    leaves the object as it is."""
    config, conf, put = store
    planted = plant(config, "replaced_message", seed=3)
    code, report = run_json(capsys, "verify", "--config", conf, "--deep")
    assert code == 0, report["findings"]  # every read check passes
    code, report = run_json(capsys, "verify", "--config", conf, "--deep", "--checksums")
    serious = [(f["kind"], f["subject"]) for f in report["findings"] if f["severity"] != "info"]
    assert serious == [("checksum_mismatch", planted.subject)] and code == 4, report["findings"]
    assert report["summary"]["checksums"] is True
    with config.open_driver() as driver:
        before = driver.read(planted.subject, 0, driver.size(planted.subject))
    run_json(capsys, "repair", "--config", conf, "--apply")
    with config.open_driver() as driver:  # repair has nothing to mend there, and moves nothing
        assert driver.read(planted.subject, 0, driver.size(planted.subject)) == before


@pytest.mark.parametrize("backend", ["gcs"])
def test_stray_objects_the_listing_hides_are_reported_and_kept(store, capsys, backend):
    """An operator drill (S3): objects named like parts of a segment but not its parts (another
    segment id, past a gap, without a base) were invisible to verify: the driver's listing
    hides them. Verify names each (STRAY_OBJECT, exit 1); repair leaves them, and every
    message still reads back."""
    from tiered_core.spi.layer import backend_of
    from tiered_core.spi.objectstore.layout import part_key

    config, conf, put = store
    with config.open_driver() as layered_driver:
        raw = backend_of(layered_driver)
        seg = next(p for p, _ in raw.list(tier_prefix(config.cluster, config.broker)) if "/orders/" in p)
        key = raw._key(seg)
        names = [part_key(key, "0ld", 4), key + "#tiered-part/junk", part_key(key.rsplit("/", 1)[0] + "/gone", "x", 0)]
        for name in names:
            assert raw._create_object(name, b"not ours", None, what="test upload") is not None
    rel = sorted(name[len(raw.root) + 1:] for name in names)
    code, report = run_json(capsys, "verify", "--config", conf)
    strays = [f for f in report["findings"] if f["kind"] == "stray_object"]
    assert code == 1 and sorted(f["subject"] for f in strays) == rel, report["findings"]
    assert all(f["severity"] == "warning" for f in strays)
    assert not [f for f in report["findings"] if f["severity"] != "info" and f not in strays]
    code, _ = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 1  # nothing to mend: each is named with its manual step
    with config.open_driver() as layered_driver:
        assert [n for n, _ in backend_of(layered_driver).foreign_objects(tier_prefix(config.cluster,
                                                                                     config.broker))] == rel
    assert tier_messages(config) == put


@pytest.mark.parametrize("backend", ["gcs"])
def test_leftover_pieces_of_a_sealed_segment_are_reported_and_repair_removes_them(store, capsys, backend):
    """Drill s13 F8: pieces of a sealed segment that an interrupted clean-up left (their bytes
    already in the segment) stayed until the segment expired, and verify said nothing about
    them. Verify names the segment (LEFTOVER_PARTS, exit 1); repair --apply seals it again,
    whose clean-up removes them; every message still reads back."""
    from tiered_core.spi.layer import backend_of
    from tiered_core.spi.objectstore.layout import part_key

    config, conf, put = store
    prefix = tier_prefix(config.cluster, config.broker)
    with config.open_driver() as layered_driver:
        raw = backend_of(layered_driver)
        seg = next(p for p, _ in raw.list(prefix) if "/orders/" in p and raw.is_sealed(p))
        key = raw._key(seg)
        view = raw._view(key, seg)
        assert view.sealed and view.segment_id
        piece = part_key(key, view.segment_id, 0)
        assert raw._create_object(piece, b"copied into the base already", None, what="test upload") is not None
    code, report = run_json(capsys, "verify", "--config", conf)
    found = [f for f in report["findings"] if f["severity"] != "info"]
    assert code == 1 and [(f["kind"], f["subject"]) for f in found] == [("leftover_parts", seg)], found
    assert found[0]["mendable"] and found[0]["facts"]["parts"] == [piece[len(raw.root) + 1:]]
    code, _ = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 0
    with config.open_driver() as layered_driver:
        assert list(backend_of(layered_driver).leftover_objects(prefix)) == []
    code, _ = run_json(capsys, "verify", "--config", conf, "--deep")
    assert code == 0
    assert tier_messages(config) == put


@pytest.mark.parametrize("backend", ["gcs"])
def test_another_stores_tier_nested_in_the_prefix_is_never_moved(store, capsys, backend, tmp_path):
    """Drill s14b F1: store Y, its prefix set by mistake inside store X's tier prefix, wrote
    there; X's verify called Y's objects "not a segment path" and its `repair --apply`
    moved all of them (Y's owner record too) into X's quarantine: Y then read nothing.
    Now they are another store's tier: manual, and repair leaves every one of them."""
    config, conf, put = store
    prefix = tier_prefix(config.cluster, config.broker)
    nested = dict(config.driver_options, prefix=f"{config.driver_options['prefix']}/{prefix}zz")
    y_config = StoreConfig(store_path=str(tmp_path / "y"), driver=backend, driver_options=nested,
                           metadata="sqlite")
    with TieredMessageStore.open(y_config) as y:
        for n in range(5):
            assert y.put_message(Message(topic="y", body=b"y-%d" % n), 0).ok
        assert y.dispatch(force=True).errors == []
    with y_config.open_driver() as driver:
        y_objects = sorted(driver.list(""))
    assert any(".tiered-owner/" in p for p, _ in y_objects)

    code, report = run_json(capsys, "verify", "--config", conf)
    found = [f for f in report["findings"] if f["severity"] != "info"]
    assert code == 1 and found and all(f["facts"].get("looks_like") == "another store's tier" and not f["mendable"]
                                       for f in found), found
    assert len(found) == len(y_objects)
    code, _ = run_json(capsys, "repair", "--config", conf, "--apply")
    assert code == 1  # nothing mended: each named with its manual step
    with y_config.open_driver() as driver:
        assert sorted(driver.list("")) == y_objects
    with TieredMessageStore.open(y_config, read_only=True) as y:
        assert [m.body for m in y.get_message("g", "y", 0, 0, 10).messages] == [b"y-%d" % n for n in range(5)]
