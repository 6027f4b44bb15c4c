"""Another store's tier inside a store's own directories (re-drill N2, N3).

B's `root` was inside A's `consumequeue/`: A's take-over moved its local history aside --
B's whole tier with it. A `tiered demo` re-run deleted a tier another store kept inside
`./demo-data`. Now both refuse, nothing moved or deleted."""

from __future__ import annotations

import os
import shutil

import pytest

from tiered_core import Message, StoreConfig, TieredMessageStore
from tiered_core.cli import main
from tiered_core.errors import StateConflict
from tiered_core.flat.ownership import OWNER_DIR


def _config(tmp_path, name: str, store: str, root: str) -> tuple[StoreConfig, str]:
    conf = tmp_path / f"{name}.toml"
    conf.write_text(f'[tiered]\nstore_path = "{store}"\ngroup_commit_interval_ms = 0\n'
                    f'[tiered.options]\nroot = "{root}"\n')
    return StoreConfig.load(str(conf), environ={}), str(conf)


def _put(config: StoreConfig, body: bytes) -> None:
    with TieredMessageStore.open(config) as store:
        store.put_message(Message(topic="t", body=body), 0)
        assert store.dispatch(force=True).errors == []


@pytest.mark.parametrize("records", ["kept", "deleted"])
def test_a_take_over_never_moves_another_stores_tier_aside(tmp_path, capsys, records):
    a, a_conf = _config(tmp_path, "a", str(tmp_path / "A"), str(tmp_path / "tier-a"))
    _put(a, b"a0")
    b, _ = _config(tmp_path, "b", str(tmp_path / "B"), str(tmp_path / "A" / "consumequeue" / "tier-b"))
    _put(b, b"b0")
    if records == "deleted":  # (a lifecycle rule: the tier is still known by its segments)
        shutil.rmtree(next((tmp_path / "A" / "consumequeue" / "tier-b").rglob(OWNER_DIR)))
    a2, a2_conf = _config(tmp_path, "a2", str(tmp_path / "A2"), str(tmp_path / "tier-a"))
    assert main(["takeover", "--config", a2_conf, "--create"]) == 0
    with pytest.raises(StateConflict, match="another store's tier"):
        TieredMessageStore.open(a, take_over=True)  # A back: its history predates A2's epoch
    capsys.readouterr()
    with TieredMessageStore.open(a2) as store:  # refused before it claimed: A2 still owns the prefix
        assert store.ownership.record.epoch == 2
    assert os.path.isdir(tmp_path / "A" / "consumequeue" / "tier-b")
    if records == "kept":
        with TieredMessageStore.open(b, read_only=True) as store:
            assert [m.body for m in store.get_message("g", "t", 0, 0, 5).messages] == [b"b0"]


@pytest.mark.parametrize("records", ["kept", "deleted"])
def test_a_demo_rerun_never_deletes_another_stores_tier(tmp_path, monkeypatch, capsys, records):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--messages", "2000", "--lookups", "5", "--static-messages", "0"]) == 0
    x, _ = _config(tmp_path, "x", str(tmp_path / "X"), str(tmp_path / "demo-data" / "tier-x"))
    _put(x, b"x0")
    if records == "deleted":
        shutil.rmtree(next((tmp_path / "demo-data" / "tier-x").rglob(OWNER_DIR)))
    capsys.readouterr()
    assert main(["demo", "--messages", "2000", "--lookups", "5", "--static-messages", "0"]) == 2
    assert "tier-x" in capsys.readouterr().err
    assert (tmp_path / "demo-data" / "tier-x").is_dir()
    if records == "kept":
        with TieredMessageStore.open(x, read_only=True) as store:
            assert [m.body for m in store.get_message("g", "t", 0, 0, 5).messages] == [b"x0"]
