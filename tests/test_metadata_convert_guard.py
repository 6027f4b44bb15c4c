"""`tiered metadata convert --force` over a store's metadata (CLI drill).

`convert --from A/tiered-metadata.db --to B/tiered-metadata.db --force` replaced B's metadata
with A's -- even while B was open -- and B then refused to open. Now a target in a store's
directory is written only under that store's lock, and a database recording one store's id
is never replaced by one recording another's; converting a store's own metadata still works.
"""

from __future__ import annotations

import hashlib

from tiered_core import Message, StoreConfig, TieredMessageStore
from tiered_core.cli import main


def _store(tmp_path, name: str) -> StoreConfig:
    conf = tmp_path / f"{name}.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / name}"\ngroup_commit_interval_ms = 0\n')
    config = StoreConfig.load(str(conf), environ={})
    with TieredMessageStore.open(config) as store:
        store.put_message(Message(topic=name, body=name.encode()), 0)
        assert store.dispatch(force=True).errors == []
    return config


def _digest(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def test_convert_never_replaces_another_stores_metadata(tmp_path, capsys):
    a, b = _store(tmp_path, "a"), _store(tmp_path, "b")
    source, target = a.effective_metadata_path(), b.effective_metadata_path()
    before = _digest(target)
    with TieredMessageStore.open(b):  # B is running
        assert main(["metadata", "convert", "--from", source, "--to", target, "--force"]) == 5
        assert "is open in another process" in capsys.readouterr().err
    assert main(["metadata", "convert", "--from", source, "--to", target, "--force"]) == 2
    assert "IDENTITY_MISMATCH" in capsys.readouterr().err
    assert _digest(target) == before
    with TieredMessageStore.open(b, read_only=True) as store:
        assert [m.body for m in store.get_message("g", "b", 0, 0, 5).messages] == [b"b"]


def test_a_store_converts_its_own_metadata(tmp_path, capsys):
    b = _store(tmp_path, "b")
    copy = str(tmp_path / "b" / "metadata.json")
    assert main(["metadata", "convert", "--from", b.effective_metadata_path(), "--to", copy]) == 0
    assert main(["metadata", "convert", "--from", copy, "--to", b.effective_metadata_path(), "--force"]) == 0
    capsys.readouterr()
    with TieredMessageStore.open(b) as store:
        assert [m.body for m in store.get_message("g", "b", 0, 0, 5).messages] == [b"b"]
