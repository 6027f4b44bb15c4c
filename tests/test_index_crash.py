"""A SIGKILL at any point of a dispatch never loses a committed message's keys from the
tiered index (found by bench/soak.py: the keys of the last group were lost for good when
the process died between the consume-queue commit and the index put)."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from tiered_core import Message, StoreConfig
from tiered_core.access.tiered_store import TieredMessageStore

FAR_FUTURE_MS = 1 << 50
MESSAGES = 400

CHILD = textwrap.dedent("""
    import os, signal, sys
    from tiered_core import StoreConfig
    from tiered_core.access.tiered_store import TieredMessageStore
    from tiered_core.flat.message_file import FlatMessageFile
    from tiered_core.index.service import IndexStoreService

    config = StoreConfig.load(sys.argv[1], environ={})
    where = sys.argv[2]
    if where == "after-consume-queue-commit":
        original = FlatMessageFile.commit
        def commit(self, sync=True):
            ok = original(self, sync)
            if ok and self.consume_queue_commit_offset() > 0:
                os.kill(os.getpid(), signal.SIGKILL)
            return ok
        FlatMessageFile.commit = commit
    elif where == "in-index-put":
        IndexStoreService.put_key = IndexStoreService.put_keys = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    elif where == "after-consume-queue-seal":
        from tiered_core.common import FileSegmentType
        from tiered_core.segment import FileSegment
        seal = FileSegment.seal
        def sealed_then_killed(self):
            seal(self)
            if self.file_type is FileSegmentType.CONSUME_QUEUE:
                os.kill(os.getpid(), signal.SIGKILL)
        FileSegment.seal = sealed_then_killed
    TieredMessageStore.open(config).dispatch(force=True)
    raise SystemExit("not killed")
""")


@pytest.mark.parametrize("where", ["after-consume-queue-commit", "in-index-put", "after-consume-queue-seal"])
def test_keys_of_a_group_survive_a_kill_during_its_commit(tmp_path, where, python_exe, subprocess_env):
    config = StoreConfig(store_path=str(tmp_path / "store"), driver="posix",
                         driver_options={"root": str(tmp_path / "tiered")}, metadata="sqlite",
                         local_commit_log_file_size=64 << 10, local_retention_hours=0,
                         consume_queue_max_size=20 * 150)  # segments end inside a dispatch group
    conf = tmp_path / "tiered.toml"
    conf.write_text(config.to_toml())
    with TieredMessageStore.open(config) as store:
        for i in range(MESSAGES):
            store.put_message(Message(topic="t", body=b"x" * 300, keys=[f"k{i}"]), 0)
    child = subprocess.run([python_exe, "-c", CHILD, str(conf), where], env=subprocess_env,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -9, child.stderr
    with TieredMessageStore.open(config) as store:
        store.dispatch(force=True)
        store.index.roll_file()
        store.index.compact_and_upload()
        assert store.delete_expired_local(FAR_FUTURE_MS) > 0
        assert store.local.get_min_offset_in_queue("t", 0) > 0
        missing = [i for i in range(MESSAGES) if len(store.query_message("t", f"k{i}", 4).messages) != 1]
        assert missing == [], f"{len(missing)} keys lost or doubled, e.g. {missing[:5]}"
