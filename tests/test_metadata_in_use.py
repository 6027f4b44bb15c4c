"""A metadata database in use by another process, or out of reach, is not damaged
(metadata drill): it was reported as damaged with `tiered metadata rebuild --force` as the
fix, and that command moved the live database aside while the other process still wrote to
it. Now such a failure names its cause, advises no rebuild, and nothing sets it aside."""

from __future__ import annotations

import os
import sqlite3

import pytest

from tiered_core import Message, TieredMessageStore
from tiered_core.cli import main
from tiered_core.config import StoreConfig
from tiered_core.errors import MetadataError
from tiered_core.metadata.sqlite import SqliteMetadataStore, failure_cause


@pytest.fixture
def store(tmp_path, monkeypatch):
    # waits for the lock a fraction of a second instead of 30 s
    monkeypatch.setitem(SqliteMetadataStore._OPTIONS, "busy_timeout", 0.2)
    conf = tmp_path / "c.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ngroup_commit_interval_ms = 0\n'
                    f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    config = StoreConfig.load(str(conf), environ={})
    with TieredMessageStore.open(config) as s:
        for i in range(3):
            s.put_message(Message(topic="t", body=b"m%d" % i), 0)
        assert s.dispatch(force=True).errors == []
    return config, str(conf)


def _held(config: StoreConfig) -> sqlite3.Connection:
    other = sqlite3.connect(config.effective_metadata_path(), isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    return other


def test_a_locked_database_is_in_use_not_damaged(store, capsys):
    config, conf = store
    other = _held(config)
    try:
        with pytest.raises(MetadataError) as info:
            TieredMessageStore.open(config)
        assert info.value.context["cause"] == "in_use"
        assert "Another process holds" in info.value.message and "rebuild --force" not in info.value.message
        # the fix a damaged database gets must not move a live one aside
        assert main(["metadata", "rebuild", "--config", conf, "--force"]) == 5
        assert "do not rebuild it" in capsys.readouterr().err
        assert not [n for n in os.listdir(config.store_path) if "damaged" in n]
    finally:
        other.execute("ROLLBACK")
        other.close()
    with TieredMessageStore.open(config) as s:
        assert [m.body for m in s.get_message("g", "t", 0, 0, 10).messages] == [b"m0", b"m1", b"m2"]


def test_failure_causes():
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorcode = 5
    cannot_open = sqlite3.OperationalError("unable to open database file")
    cannot_open.sqlite_errorcode = 14
    corrupt = sqlite3.DatabaseError("file is not a database")
    corrupt.sqlite_errorcode = 26
    assert [failure_cause(e) for e in (locked, cannot_open, corrupt, PermissionError(13, "denied"))] == \
        ["in_use", "access", "", "access"]
