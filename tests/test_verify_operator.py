"""`tiered verify` and `tiered repair` after an operator's usual mistakes: a renamed broker
(the config no longer describes the store: that is the whole report, and repair refuses),
a tier moved to a new location (accepted as the store's open accepts it), and a restored
old copy of the store directory (the newer segments are found, repair adopts them, the
store then continues after the tier and every offset still names the same message)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tiered_conformance.drills import copy_sparse
from tiered_core import Message, StoreConfig
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.cli.exit_codes import ExitCode

#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")


def config_file(tmp_path: Path, name: str = "tiered.toml", *, broker: str = "broker-a",
                root: str = "tier") -> Path:
    conf = tmp_path / name
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ndriver = "posix"\nbroker = "{broker}"\n'
                    f'commit_log_max_size = 4000\nconsume_queue_max_size = 200\nrolling_min_size = 0\n'
                    f'[tiered.options]\nroot = "{tmp_path / root}"\nfsync = false\n')
    return conf


def put(conf: Path, bodies: list[bytes]) -> list[int]:
    with TieredMessageStore.open(StoreConfig.load(str(conf), environ={})) as store:
        offsets = [store.put_message(Message(topic="t", body=b), 0).queue_offset for b in bodies]
        store.dispatch(force=True)
    return offsets


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def read_all(conf: Path, end: int) -> list[bytes]:
    with TieredMessageStore.open(StoreConfig.load(str(conf), environ={})) as store:
        got = store.get_message("g", "t", 0, 0, end)
        return [m.body for m in got.messages]


def test_renamed_broker_is_the_whole_report_and_repair_refuses(tmp_path, capsys):
    conf = config_file(tmp_path)
    put(conf, [b"m%d" % i for i in range(20)])
    renamed = config_file(tmp_path, "renamed.toml", broker="broker-z")
    code, report = run_json(capsys, "verify", "--config", str(renamed), "--deep")
    assert code == 1
    assert [(f["kind"], f["facts"]["field"]) for f in report["findings"]] == [("identity_mismatch", "broker")]
    assert "broker = 'broker-a'" in report["findings"][0]["fix"]
    code, err = run_json(capsys, "repair", "--config", str(renamed), "--apply")
    assert code == ExitCode.BAD_INPUT and err["error"]["code"] == "IDENTITY_MISMATCH", err
    code, report = run_json(capsys, "verify", "--config", str(conf), "--deep")
    assert code == 0, report["findings"]


def test_a_moved_tier_holding_this_stores_owner_record_is_no_finding(tmp_path, capsys):
    conf = config_file(tmp_path)
    put(conf, [b"m%d" % i for i in range(20)])
    shutil.copytree(tmp_path / "tier", tmp_path / "tier2")
    moved = config_file(tmp_path, "moved.toml", root="tier2")
    code, report = run_json(capsys, "verify", "--config", str(moved), "--deep")
    assert code == 0 and report["summary"]["messages_read"] == 20, report["findings"]
    shutil.rmtree(tmp_path / "tier2" / next(p.name for p in (tmp_path / "tier2").iterdir()) / "broker-a" /
                  ".tiered-owner")
    code, report = run_json(capsys, "verify", "--config", str(moved))
    assert code == 1 and [f["kind"] for f in report["findings"]] == ["identity_mismatch"], report["findings"]


def test_restored_old_directory_is_found_repaired_and_no_offset_is_reused(tmp_path, capsys):
    conf = config_file(tmp_path)
    first = [b"first-%d" % i for i in range(30)]
    second = [b"second-%d" % i for i in range(30)]
    assert put(conf, first) == list(range(30))
    shutil.copytree(tmp_path / "store", tmp_path / "backup", symlinks=True, copy_function=copy_sparse)
    assert put(conf, second) == list(range(30, 60))
    shutil.rmtree(tmp_path / "store")
    shutil.copytree(tmp_path / "backup", tmp_path / "store", symlinks=True,  # the old directory is back
                    copy_function=copy_sparse)

    code, report = run_json(capsys, "verify", "--config", str(conf))
    kinds = {f["kind"] for f in report["findings"] if f["severity"] != "info"}
    assert code == 1 and "unlisted_object" in kinds, report["findings"]
    # each newer segment is named as one the repair can adopt (one continues its commit log
    # past the tail the old metadata did not record yet)
    unlisted = [f for f in report["findings"] if f["kind"] == "unlisted_object"]
    assert unlisted and all(f["facts"]["adoptable"] for f in unlisted), unlisted
    code, plan = run_json(capsys, "repair", "--config", str(conf))
    assert code == 0 and plan["manual"] == [] and plan["actions"], plan
    code, result = run_json(capsys, "repair", "--config", str(conf), "--apply")
    assert code == 0, result
    code, report = run_json(capsys, "verify", "--config", str(conf), "--deep")
    assert code == 0 and report["summary"]["messages_read"] == 60, report["findings"]
    # the store continues after the tier: offset 60, and 0..59 still name what they named
    assert put(conf, [b"third-0"]) == [60]
    assert read_all(conf, 61) == first + second + [b"third-0"]


def test_repair_apply_accepts_a_moved_tier_and_refuses_one_that_does_not_prove_it(tmp_path, capsys):
    """repair --apply (a writer session: store lock, prefix claim) accepts a tier moved to
    a location that holds this store's owner record and every listed segment, as the
    store's open does; a location without the owner record is an identity mismatch, and
    nothing is written there."""
    conf = config_file(tmp_path)
    bodies = [b"m%d" % i for i in range(20)]
    put(conf, bodies)
    shutil.copytree(tmp_path / "tier", tmp_path / "tier2")
    moved = config_file(tmp_path, "moved.toml", root="tier2")
    code, result = run_json(capsys, "repair", "--config", str(moved), "--apply")
    assert code == 0, result
    code, report = run_json(capsys, "verify", "--config", str(moved), "--deep")
    assert code == 0 and report["summary"]["messages_read"] == 20, report["findings"]
    assert read_all(moved, 20) == bodies

    shutil.copytree(tmp_path / "tier2", tmp_path / "tier3")
    shutil.rmtree(next((tmp_path / "tier3").iterdir()) / "broker-a" / ".tiered-owner")
    before = sorted(p.relative_to(tmp_path / "tier3") for p in (tmp_path / "tier3").rglob("*"))
    elsewhere = config_file(tmp_path, "elsewhere.toml", root="tier3")
    code, err = run_json(capsys, "repair", "--config", str(elsewhere), "--apply")
    assert code == ExitCode.BAD_INPUT and err["error"]["code"] == "IDENTITY_MISMATCH", err
    assert sorted(p.relative_to(tmp_path / "tier3") for p in (tmp_path / "tier3").rglob("*")) == before
