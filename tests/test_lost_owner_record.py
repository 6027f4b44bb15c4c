"""A tier prefix whose owner records were deleted (metadata drill, round 12).

The owner records of a live store N were deleted (by hand, a lifecycle rule). A second store
B with the same prefix and an empty store_path rebuilt its metadata from N's tier and claimed
epoch 1 again, the epoch N held: N's fence (it looked only for epoch 2) never fired, both
handed out offsets 10..14, and the tier came to serve B's messages at offsets N had
acknowledged. Now a prefix holding data without an owner record is claimed only by a
take-over, at an epoch above any lost one, and a store whose own record is gone is fenced.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tiered_core import Message, TieredMessageStore
from tiered_core.cli import main
from tiered_core.config import StoreConfig
from tiered_core.errors import Fenced, PrefixOwned
from tiered_core.flat.ownership import OWNER_DIR

#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")


def _config(tmp_path, name: str) -> tuple[StoreConfig, str]:
    conf = tmp_path / f"{name}.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / name}"\ngroup_commit_interval_ms = 0\n'
                    f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    return StoreConfig.load(str(conf), environ={}), str(conf)


def _owner_dir(tmp_path) -> str:
    found = list((tmp_path / "tier").rglob(OWNER_DIR))
    assert len(found) == 1, found
    return str(found[0])


def test_a_second_store_cannot_claim_a_prefix_whose_owner_records_were_deleted(tmp_path, capsys):
    n_config, _ = _config(tmp_path, "n")
    b_config, b_conf = _config(tmp_path, "b")
    with TieredMessageStore.open(n_config) as n:
        for i in range(10):
            n.put_message(Message(topic="t", body=b"n-%d" % i), 0)
        assert n.dispatch(force=True).errors == []
        shutil.rmtree(_owner_dir(tmp_path))

        # B (copy-pasted config, empty store_path) is refused, also after rebuilding its metadata.
        with pytest.raises(PrefixOwned, match="holds data but no owner record"):
            TieredMessageStore.open(b_config)
        assert main(["metadata", "rebuild", "--config", b_conf, "--force"]) == 5
        assert "no owner record" in capsys.readouterr().err
        with pytest.raises(PrefixOwned, match="tiered takeover"):
            TieredMessageStore.open(b_config)

        # N, its record gone, stops writing to the tier: its next dispatch is fenced.
        assert n.put_message(Message(topic="t", body=b"n-10"), 0).queue_offset == 10
        with pytest.raises(Fenced, match="lost this store's owner record"):
            n.dispatch(force=True)

        # The deliberate take-over claims an epoch above any the lost records held.
        assert main(["takeover", "--config", b_conf, "--create"]) == 0
        with TieredMessageStore.open(b_config) as b:
            assert b.ownership.record.epoch > 1
            assert [m.body for m in b.get_message("g", "t", 0, 0, 20).messages] == [b"n-%d" % i for i in range(10)]
            assert b.put_message(Message(topic="t", body=b"b-10"), 0).queue_offset == 10
            assert b.dispatch(force=True).errors == []
        with pytest.raises(Fenced):
            n.dispatch(force=True)
    capsys.readouterr()
    with TieredMessageStore.open(b_config, read_only=True) as b:
        assert [m.body for m in b.get_message("g", "t", 0, 0, 20).messages] == \
            [b"n-%d" % i for i in range(10)] + [b"b-10"]


def test_the_store_that_lost_its_owner_record_claims_its_epoch_again_at_its_next_open(tmp_path):
    config, _ = _config(tmp_path, "n")
    with TieredMessageStore.open(config) as store:
        store.put_message(Message(topic="t", body=b"a"), 0)
        assert store.dispatch(force=True).errors == []
        store.put_message(Message(topic="t", body=b"b"), 0)  # local only: must not be given up
    shutil.rmtree(_owner_dir(tmp_path))
    with TieredMessageStore.open(config) as store:
        assert store.ownership.record.epoch == 1 and store.given_up_history is None
        assert [m.body for m in store.get_message("g", "t", 0, 0, 5).messages] == [b"a", b"b"]
        assert store.put_message(Message(topic="t", body=b"c"), 0).queue_offset == 2
        assert store.dispatch(force=True).errors == []


def _taken_over_then_records_deleted(tmp_path, capsys, b_tiered: int, b_local: int):
    """N tiers n-0..n-2; B takes the prefix over (epoch 2), tiers ``b_tiered`` messages and
    keeps ``b_local`` more local only; then the owner records are deleted. N is refused --
    its open, its rebuild, its repair -- and B claims epoch 2 again. Returns B's config."""
    n_config, n_conf = _config(tmp_path, "n")
    b_config, b_conf = _config(tmp_path, "b")
    with TieredMessageStore.open(n_config) as n:
        for i in range(3):
            n.put_message(Message(topic="t", body=b"n-%d" % i), 0)
        assert n.dispatch(force=True).errors == []
    assert main(["takeover", "--config", b_conf, "--create"]) == 0
    with TieredMessageStore.open(b_config) as b:
        for i in range(3, 3 + b_tiered):
            assert b.put_message(Message(topic="t", body=b"b-%d" % i), 0).queue_offset == i
        assert b.dispatch(force=True).errors == []
        for i in range(3 + b_tiered, 3 + b_tiered + b_local):  # acknowledged, local only
            assert b.put_message(Message(topic="t", body=b"b-%d" % i), 0).queue_offset == i
    shutil.rmtree(_owner_dir(tmp_path))
    capsys.readouterr()
    with pytest.raises(PrefixOwned, match="no owner record"):
        TieredMessageStore.open(n_config)
    assert main(["metadata", "rebuild", "--config", n_conf, "--force"]) == 5
    assert main(["repair", "--config", n_conf, "--apply"]) != 0
    capsys.readouterr()
    return b_config


def test_a_store_taken_over_before_the_records_were_deleted_does_not_claim_its_old_epoch(tmp_path, capsys):
    """N was taken over by B (epoch 2), then the records were deleted: N's local history still
    names epoch 1, but the prefix holds B's segments, which N's metadata does not list, so N
    is refused (a take-over is its way back, at an epoch that fences B); its metadata is not
    rebuilt from B's data either (repair drill round 2, N1)."""
    b_config = _taken_over_then_records_deleted(tmp_path, capsys, b_tiered=3, b_local=1)
    with TieredMessageStore.open(b_config) as b:  # B, whose metadata lists it all, claims epoch 2 again
        assert b.ownership.record.epoch == 2
        assert [m.body for m in b.get_message("g", "t", 0, 0, 6).messages] == \
            [b"n-0", b"n-1", b"n-2", b"b-3", b"b-4", b"b-5"]
        assert [m.body for m in b.get_message("g", "t", 0, 6, 5).messages] == [b"b-6"]
        assert b.put_message(Message(topic="t", body=b"b-7"), 0).queue_offset == 7


def test_the_take_over_seal_keeps_the_old_owner_out_when_the_new_one_wrote_nothing(tmp_path, capsys):
    """As above, but B tiered nothing before the records were deleted: N's metadata still
    lists every object, yet B's take-over sealed N's last segments, which N's metadata records
    open: N is refused, and B claims its epoch again (re-drill 2, F1)."""
    b_config = _taken_over_then_records_deleted(tmp_path, capsys, b_tiered=0, b_local=1)
    with TieredMessageStore.open(b_config) as b:
        assert b.ownership.record.epoch == 2
        assert [m.body for m in b.get_message("g", "t", 0, 3, 5).messages] == [b"b-3"]


def test_an_unreadable_owner_record_is_named_as_such_and_moving_it_away_keeps_every_message(tmp_path, capsys):
    """Drill s14b F2: a 7-byte object under .tiered-owner/ (a higher epoch) made `get` say the
    store "was taken over", verify advise `tiered takeover`, and the take-over set the store's
    untiered messages aside and handed their offsets out again. The refusal now names the
    unreadable record, says that moving it away keeps every message (what happens), and what
    a take-over would cost."""
    import json

    config, conf = _config(tmp_path, "n")
    with TieredMessageStore.open(config) as store:
        for i in range(3):
            store.put_message(Message(topic="t", body=b"m-%d" % i), 0)
        assert store.dispatch(force=True).errors == []
        store.put_message(Message(topic="t", body=b"m-3"), 0)  # acknowledged, local only
    owner_dir = _owner_dir(tmp_path)
    garbage = os.path.join(owner_dir, "00000000000000000007")
    with open(garbage, "wb") as f:
        f.write(b"garbage")
    capsys.readouterr()
    for argv in (["get", "--topic", "t", "--offset", "3"], ["put", "--topic", "t", "--body", "x"]):
        assert main([*argv, "--config", conf]) == 5, argv
        err = capsys.readouterr().err
        assert "cannot be read" in err and "was taken over" not in err and "given-up-history" in err, err
    assert main(["verify", "--config", conf, "--json"]) != 0
    [finding] = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["kind"] == "owner_unreadable"]
    assert "move that object out of .tiered-owner/" in finding["fix"]
    os.replace(garbage, tmp_path / "kept-copy")  # what the message advises
    with TieredMessageStore.open(config) as store:
        assert [m.body for m in store.get_message("g", "t", 0, 0, 10).messages] == [b"m-%d" % i for i in range(4)]
        assert store.put_message(Message(topic="t", body=b"m-4"), 0).queue_offset == 4
