"""A job that claims a store's prefix (repair --apply, Spark writers) and the store's id file
(repair drill, round 2).

`tiered repair --apply` on a directory that had lost only its `tiered-store-id` wrote a new
random id, then was refused (PREFIX_OWNED: the owner record names the old id): the directory
had become another store for good, and every later put failed. Now the claim is checked
before an id is written, and a directory that lost only its id file gets its old id back,
as a store's open gives it.
"""

from __future__ import annotations

import os
import shutil

from tiered_conformance.drills import copy_store
from tiered_core import Message, StoreConfig, TieredMessageStore
from tiered_core.cli import main
from tiered_core.flat.ownership import STORE_ID_FILE, read_store_id


def _store(tmp_path) -> tuple[StoreConfig, str]:
    conf = tmp_path / "c.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ngroup_commit_interval_ms = 0\n'
                    f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    config = StoreConfig.load(str(conf), environ={})
    with TieredMessageStore.open(config) as store:
        for i in range(5):
            store.put_message(Message(topic="t", body=b"m%d" % i), 0)
        assert store.dispatch(force=True).errors == []
    return config, str(conf)


def test_repair_of_a_directory_that_lost_its_id_file_keeps_the_old_id(tmp_path, capsys):
    config, conf = _store(tmp_path)
    old = read_store_id(config.store_path)
    os.remove(os.path.join(config.store_path, STORE_ID_FILE))
    assert main(["repair", "--config", conf, "--apply"]) == 0
    assert read_store_id(config.store_path) == old
    with TieredMessageStore.open(config) as store:
        assert store.put_message(Message(topic="t", body=b"m5"), 0).queue_offset == 5
    capsys.readouterr()


def test_a_refused_repair_writes_no_new_id(tmp_path, capsys):
    config, _ = _store(tmp_path)
    copy = copy_store(config, str(tmp_path / "copy"))  # a copy at another path: another store
    os.remove(os.path.join(copy.store_path, STORE_ID_FILE))
    copy_conf = tmp_path / "copy.toml"
    copy_conf.write_text(copy.to_toml())
    assert main(["repair", "--config", str(copy_conf), "--apply"]) == 5
    assert "PREFIX_OWNED" in capsys.readouterr().err
    assert read_store_id(copy.store_path) is None


def test_a_copy_without_its_id_file_is_told_what_it_is(tmp_path, capsys):
    """Its refusal said "store_path holds no store" and named `takeover --create` (re-drill N6)."""
    config, _ = _store(tmp_path)
    copy = copy_store(config, str(tmp_path / "copy"))
    os.remove(os.path.join(copy.store_path, STORE_ID_FILE))
    copy_conf = tmp_path / "copy.toml"
    copy_conf.write_text(copy.to_toml())
    assert main(["put", "--config", str(copy_conf), "--topic", "t", "--body", "x"]) == 5
    err = capsys.readouterr().err
    assert "holds a store without its id file" in err and "holds no store" not in err and "--create" not in err


def test_a_directory_moved_without_its_id_file_is_told_to_write_the_id_back(tmp_path, capsys):
    """The take-over its refusal named set its untiered messages aside; writing the id its
    identity record names back keeps them all (re-drill 2, F6)."""
    config, _ = _store(tmp_path)
    with TieredMessageStore.open(config) as store:
        store.put_message(Message(topic="t", body=b"local-only"), 0)
    old = read_store_id(config.store_path)
    moved = copy_store(config, str(tmp_path / "moved"))
    shutil.rmtree(config.store_path)  # a move: the original is gone
    os.remove(os.path.join(moved.store_path, STORE_ID_FILE))
    conf = tmp_path / "moved.toml"
    conf.write_text(moved.to_toml())
    assert main(["put", "--config", str(conf), "--topic", "t", "--body", "x"]) == 5
    err = capsys.readouterr().err
    assert f"put {old} into" in err
    with open(os.path.join(moved.store_path, STORE_ID_FILE), "w") as fh:  # as the message says
        fh.write(old)
    with TieredMessageStore.open(moved) as store:
        assert [m.body for m in store.get_message("g", "t", 0, 5, 5).messages] == [b"local-only"]
        assert store.put_message(Message(topic="t", body=b"next"), 0).queue_offset == 6
