"""The fault-planting kit (:mod:`tiered_conformance.drills`): its catalogue, its refusals,
its copies, and the listing-based faults planted and found on every driver (posix, and the
gcs, azure and s3 emulators) in one store each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from snapshots import changes, snapshot
from store_workload import Workload, backend_options, dispatch_until_tiered, small_config
from test_verify import build_store, serious, stat_tree, write_conf
from tiered_conformance.drills import CHECKSUMS, DEEP, EXPECTED, FAULTS, LISTING, copy_store, plant
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.errors import IllegalParam
from tiered_core.ops.findings import FindingKind

#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    return build_store(tmp_path_factory.mktemp("drills-original"))


def test_the_catalogue_names_each_fault_once_with_its_finding():
    assert len(FAULTS) == len(set(FAULTS)) == 15
    assert set(EXPECTED) == set(FAULTS) and all(isinstance(k, FindingKind) for k in EXPECTED.values())
    assert DEEP <= set(FAULTS) and LISTING <= set(FAULTS) and CHECKSUMS <= set(FAULTS)
    assert not DEEP & LISTING and not CHECKSUMS & (DEEP | LISTING)
    # every area of verify is drilled
    assert {k.info.area for k in EXPECTED.values()} == {"ownership", "listing", "queue", "index"}


def test_an_unknown_fault_is_refused_by_name(original):
    with pytest.raises(IllegalParam, match="unknown drill fault 'melted'.*flipped_byte"):
        plant(original, "melted")


def test_copy_store_refuses_another_driver_and_an_existing_destination(original, tmp_path):
    with pytest.raises(IllegalParam, match="posix stores only"):
        copy_store(original.replace(driver="memory", driver_options={"namespace": "x"}), tmp_path / "m")
    (tmp_path / "taken").mkdir()
    with pytest.raises(IllegalParam, match="exists"):
        copy_store(original, tmp_path / "taken")


def test_planting_in_a_copy_leaves_the_original_as_it_was(original, tmp_path, capsys):
    root = original.effective_driver_options()["root"]
    before = (snapshot(root, original.effective_metadata_path()), stat_tree(original.store_path))
    copy = copy_store(original, tmp_path / "copy")
    assert copy.store_path != original.store_path
    assert copy.effective_driver_options()["root"] != root
    for fault in ("deleted_object", "owner_deleted", "bad_times"):
        plant(copy, fault, seed=1)
    after = (snapshot(root, original.effective_metadata_path()), stat_tree(original.store_path))
    assert changes(before[0], after[0]) == {} and before[1] == after[1]
    assert main(["verify", "--config", write_conf(copy, tmp_path), "--json", "--deep"]) == 4
    capsys.readouterr()


def test_the_same_seed_plants_the_same_fault(original, tmp_path):
    first = plant(copy_store(original, tmp_path / "a"), "flipped_byte", seed=11)
    again = plant(copy_store(original, tmp_path / "b"), "flipped_byte", seed=11)
    assert first == again and first.queue_offsets is not None


def test_topic_and_queue_choose_where_it_is_planted(original, tmp_path):
    planted = plant(copy_store(original, tmp_path / "a"), "truncated_segment", topic="audit", queue_id=1)
    assert (planted.topic, planted.queue_id) == ("audit", 1) and "/audit/1/COMMIT_LOG/" in planted.subject
    with pytest.raises(IllegalParam, match="no queue of topic 'nosuch'"):
        plant(copy_store(original, tmp_path / "b"), "truncated_segment", topic="nosuch")


def test_index_faults_need_an_uploaded_index(tmp_path):
    config = small_config(tmp_path, "posix", {"root": str(tmp_path / "tier")})
    workload = Workload(topics=("orders",), queues=1)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 20)
        dispatch_until_tiered(store, workload)
    for fault in ("index_deleted", "index_unreadable", "index_entry_wrong"):
        with pytest.raises(IllegalParam, match="no uploaded key-index file"):
            plant(config, fault)


#: Listing-based faults planted side by side, each in a queue of its own (queue -> faults).
SIDE_BY_SIDE = [
    ("extra_object", None, None),
    ("index_deleted", None, None),
    ("truncated_segment", "orders", 0),
    ("deleted_object", "orders", 1),
    ("metadata_past_end", "orders", 2),
    ("unlisted_segment", "audit", 0),
    ("bad_tail", "audit", 0),
    ("wrong_sealed_flag", "audit", 1),
]


@pytest.mark.parametrize("driver", ["posix", "gcs", "azure", "s3"])
def test_listing_faults_side_by_side_on_every_driver(request, tmp_path, capsys, driver):
    """One store per driver, eight faults planted in it through the raw driver: verify finds
    each with its kind at its subject, and nothing else of warning or worse. Then another
    store's owner record: verify names it, and compares nothing else (another store's prefix)."""
    config = small_config(tmp_path, driver, backend_options(request, driver, tmp_path),
                          commit_log_max_size=16 << 10, consume_queue_max_size=20 * 25)
    workload = Workload(topics=("orders", "audit"), queues=3, max_size=400, seed=4)
    with TieredMessageStore.open(config) as store:
        workload.put(store, 360)
        dispatch_until_tiered(store, workload)
        store.index.roll_file()
        store.index.compact_and_upload()
    planted = [plant(config, fault, topic=topic, queue_id=queue_id, seed=2)
               for fault, topic, queue_id in SIDE_BY_SIDE]
    assert {p.fault for p in planted} <= LISTING
    code = main(["verify", "--config", write_conf(config, tmp_path), "--json"])
    report = json.loads(capsys.readouterr().out)
    got = sorted((f["kind"], f["subject"]) for f in serious(report))
    assert got == sorted((p.expected_kind.value, p.subject) for p in planted), json.dumps(report, indent=1)
    assert code == 4  # lost bytes and a missing object are corrupt data
    by_subject = {f["subject"]: f for f in serious(report)}
    truncated = next(p for p in planted if p.fault == "truncated_segment")
    assert tuple(by_subject[truncated.subject]["queue_offsets"]) == truncated.queue_offsets
    unlisted = next(p for p in planted if p.fault == "unlisted_segment")
    assert by_subject[unlisted.subject]["facts"]["adoptable"] is True
    assert Path(config.store_path).exists()
    plant(config, "stale_owner", seed=2)
    main(["verify", "--config", write_conf(config, tmp_path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert [(f["kind"], f["facts"].get("compared")) for f in serious(report)] == [("owner_other", False)]
