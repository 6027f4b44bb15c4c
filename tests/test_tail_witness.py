"""Another writer's messages past a tiered commit log's committed end (repair drill, r1b).

They read back as whole messages of the queue at the right offsets, so the open adopted
them: the tier then named offsets 10..14 by the other writer's messages while this store's
local disk held the ones it had acknowledged there, and its dispatch went on after them.
Now the local disk witnesses the tail: a message it holds at that offset with another body
or store time keeps the tail from being adopted, and the queue refuses writes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tiered_core import Message, StoreConfig, TieredMessageStore

#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")


def _config(tmp_path, name: str) -> StoreConfig:
    conf = tmp_path / f"{name}.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / name}"\ngroup_commit_interval_ms = 0\n'
                    f'[tiered.options]\nroot = "{tmp_path / name / "tier"}"\n')
    return StoreConfig.load(str(conf), environ={})


def _commit_log(config: StoreConfig) -> Path:
    (path,) = Path(config.store_path, "tier").rglob("COMMIT_LOG/*")
    return path


def _stores(tmp_path) -> tuple[StoreConfig, StoreConfig]:
    a, b = _config(tmp_path, "a"), _config(tmp_path, "b")
    with TieredMessageStore.open(a) as store:
        for i in range(10):
            store.put_message(Message(topic="t", body=b"a-%04d" % i), 0)
        assert store.dispatch(force=True).errors == []
        for i in range(10, 15):  # acknowledged, not tiered yet
            store.put_message(Message(topic="t", body=b"a-%04d" % i), 0)
    with TieredMessageStore.open(b) as store:
        for i in range(15):
            store.put_message(Message(topic="t", body=b"b-%04d" % i), 0)
        assert store.dispatch(force=True).errors == []
    return a, b


def test_another_writers_tail_is_not_adopted(tmp_path):
    a, b = _stores(tmp_path)
    mine, theirs = _commit_log(a), _commit_log(b)
    with open(mine, "ab") as fh:  # what another writer appended past A's committed end
        fh.write(theirs.read_bytes()[mine.stat().st_size:])
    with TieredMessageStore.open(a) as store:
        assert "another writer" in store.unrecoverable[("t", 0)]
        assert [m.body for m in store.get_message("g", "t", 0, 0, 20).messages] == [b"a-%04d" % i for i in range(15)]


def test_this_stores_own_tail_is_adopted(tmp_path):
    """The metadata of before the last commit (a restored backup of it), the object with the
    bytes that commit landed: the local disk holds the same messages, so the tail is adopted."""
    a = _config(tmp_path, "a")
    with TieredMessageStore.open(a) as store:
        for i in range(10):
            store.put_message(Message(topic="t", body=b"a-%04d" % i), 0)
        assert store.dispatch(force=True).errors == []
    backup = tmp_path / "metadata-backup.db"
    shutil.copyfile(a.effective_metadata_path(), backup)
    with TieredMessageStore.open(a) as store:
        for i in range(10, 15):
            store.put_message(Message(topic="t", body=b"a-%04d" % i), 0)
        assert store.dispatch(force=True).errors == []
    for suffix in ("-wal", "-shm"):
        Path(a.effective_metadata_path() + suffix).unlink(missing_ok=True)
    shutil.copyfile(backup, a.effective_metadata_path())
    with TieredMessageStore.open(a) as store:
        assert store.unrecoverable == {}
        assert store.flat_files.get("t", 0).consume_queue.commit_offset // 20 == 15
        assert [m.body for m in store.get_message("g", "t", 0, 0, 20).messages] == [b"a-%04d" % i for i in range(15)]


def test_verify_and_repair_ask_the_local_disk_too(tmp_path, capsys):
    """`tiered verify` names such a tail bad (the store's open refuses it), and `tiered
    repair --apply` cuts it back, a copy in the quarantine: the store then tiers its own."""
    import json

    from tiered_core.cli import main

    a, b = _stores(tmp_path)
    mine, theirs = _commit_log(a), _commit_log(b)
    committed = mine.stat().st_size
    with open(mine, "ab") as fh:
        fh.write(theirs.read_bytes()[committed:])
    conf = str(tmp_path / "a.toml")
    assert main(["verify", "--config", conf, "--json"]) == 1
    kinds = {f["kind"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert "uncommitted_tail" not in kinds and "another writer" in kinds["bad_tail"]["detail"]
    assert main(["repair", "--config", conf, "--apply"]) == 0
    capsys.readouterr()
    assert mine.stat().st_size == committed
    with TieredMessageStore.open(a) as store:
        assert store.unrecoverable == {}
        assert store.dispatch(force=True).errors == []
    with TieredMessageStore.open(a.replace(storage_level="FORCE"), read_only=True) as store:
        assert [m.body for m in store.get_message("g", "t", 0, 0, 20).messages] == [b"a-%04d" % i for i in range(15)]
