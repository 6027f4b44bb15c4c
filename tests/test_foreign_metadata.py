"""Another store's metadata database put in a store's place (metadata drill).

Stores A and B share cluster and broker names on different tier roots. B's database copied
over A's was taken for "the tier moved" (A's tier holds A's owner record and segments of the
same names), the open wrote a floor at B's offsets into A's local store, and A's queue was
wedged for good behind a hole while `verify` said clean. Now the database records the id of
its store and another one is refused (IDENTITY_MISMATCH, nothing written); a database from
before the id was recorded is no proof of a move when the tier holds its segments shorter
than it records. The documented fix, `metadata rebuild --force`, records this store's
identity again.
"""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from tiered_core import Message, TieredMessageStore
from tiered_core.cli import main
from tiered_core.config import StoreConfig
from tiered_core.errors import IdentityMismatch
from tiered_core.ops.identity import IDENTITY_PROPERTY

#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")


def _store(tmp_path, name: str, messages: int) -> tuple[StoreConfig, str]:
    conf = tmp_path / f"{name}.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / name / "store"}"\ngroup_commit_interval_ms = 0\n'
                    f'[tiered.options]\nroot = "{tmp_path / name / "tier"}"\n')
    config = StoreConfig.load(str(conf), environ={})
    with TieredMessageStore.open(config) as store:
        for i in range(messages):
            store.put_message(Message(topic="t", body=b"%s-%d" % (name.encode(), i)), 0)
        assert store.dispatch(force=True).errors == []
    return config, str(conf)


def _local_files(config: StoreConfig) -> dict[str, bytes]:
    from pathlib import Path

    root = Path(config.store_path)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "tiered-metadata.db" not in p.name and p.name != "lock"}


def _without_store_id(path: str) -> None:
    """The database as written before it recorded its store's id."""
    with sqlite3.connect(path) as conn:
        (value,), = conn.execute("select value from store_properties where key = ?", (IDENTITY_PROPERTY,))
        raw = json.loads(value)
        raw.pop("store_id", None)
        conn.execute("update store_properties set value = ? where key = ?", (json.dumps(raw), IDENTITY_PROPERTY))


@pytest.mark.parametrize("recorded_id", [True, False], ids=["store-id-recorded", "older-database"])
def test_another_stores_metadata_is_refused_and_a_rebuild_mends_it(tmp_path, capsys, recorded_id):
    a, a_conf = _store(tmp_path, "a", 30)
    b, _ = _store(tmp_path, "b", 50)
    shutil.copyfile(b.effective_metadata_path(), a.effective_metadata_path())
    if not recorded_id:
        _without_store_id(a.effective_metadata_path())
    before = _local_files(a)
    for read_only in (True, False):
        with pytest.raises(IdentityMismatch) as info:
            TieredMessageStore.open(a, read_only=read_only)
        assert info.value.context["field"] == ("store_id" if recorded_id else "tier")
    assert _local_files(a) == before  # nothing written: no floor at B's offsets
    assert main(["verify", "--config", a_conf]) != 0
    capsys.readouterr()

    assert main(["metadata", "rebuild", "--config", a_conf, "--force"]) == 0
    capsys.readouterr()
    with TieredMessageStore.open(a) as store:
        assert [m.body for m in store.get_message("g", "t", 0, 0, 40).messages] == [b"a-%d" % i for i in range(30)]
        assert store.put_message(Message(topic="t", body=b"a-30"), 0).queue_offset == 30
        assert store.dispatch(force=True).errors == []
    assert main(["verify", "--config", a_conf]) == 0
    capsys.readouterr()
