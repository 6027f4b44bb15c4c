"""`tiered verify` and an older metadata database whose last segments only grew (metadata
drill, r18): `stat` and the store's open count the adoptable tail, verify said "the tier
ends at 30" and called 45 tiered messages not tiered. Now verify counts it too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tiered_core import Message, StoreConfig, TieredMessageStore
from tiered_core.cli import main


def _put(config: StoreConfig, start: int, n: int) -> None:
    with TieredMessageStore.open(config) as store:
        for i in range(start, start + n):
            store.put_message(Message(topic="t", body=b"m%d" % i), 0)
        assert store.dispatch(force=True).errors == []


def test_verify_counts_an_adoptable_tail_as_tiered(tmp_path, capsys):
    conf = tmp_path / "c.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "s"}"\ngroup_commit_interval_ms = 0\n'
                    f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    config = StoreConfig.load(str(conf), environ={})
    _put(config, 0, 30)
    shutil.copyfile(config.effective_metadata_path(), tmp_path / "old.db")
    _put(config, 30, 45)
    for suffix in ("-wal", "-shm"):
        Path(config.effective_metadata_path() + suffix).unlink(missing_ok=True)
    shutil.copyfile(tmp_path / "old.db", config.effective_metadata_path())
    main(["verify", "--config", str(conf), "--json"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [f for f in findings if f["kind"] == "local_pending"] == []
    assert any(f["kind"] == "uncommitted_tail" for f in findings)
