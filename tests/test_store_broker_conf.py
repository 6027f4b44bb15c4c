"""A RocketMQ broker.conf naming PosixFileSegment with tieredStorageLevel=FORCE starts a
store on the POSIX driver that serves reads from the tiered store (issue 5 acceptance).

The shipped ``examples/broker.conf`` is used as written (copied next to a temporary
data directory, since its relative paths resolve against the file's directory).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from store_workload import Workload, assert_exactly_once
from tiered_core import StoreConfig
from tiered_core.access.results import StoreTier
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.codec.naming import cluster_dir

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "broker.conf"


@pytest.mark.parametrize("level", ["FORCE", "3"])
def test_example_broker_conf_serves_reads_from_the_tiered_posix_store(tmp_path, level):
    text = EXAMPLE.read_text()
    assert "tieredBackendServiceProvider=org.apache.rocketmq.tieredstore.provider.PosixFileSegment" in text
    assert re.search(r"^tieredStorageLevel=FORCE$", text, re.M)
    text = re.sub(r"^tieredStorageLevel=.*$", f"tieredStorageLevel={level}", text, flags=re.M)
    conf = tmp_path / "broker.conf"
    conf.write_text(text)

    config = StoreConfig.load(conf, environ={})
    assert config.driver == "posix" and config.storage_level == "FORCE"
    tiered_root = tmp_path / "demo-data" / "tieredstore"
    assert config.effective_driver_options()["root"] == str(tiered_root)

    workload = Workload(topics=("TopicTest",), queues=4)
    with TieredMessageStore.open(config) as store:
        assert store.driver.name == "posix"
        workload.put(store, 400)
        assert store.dispatch(force=True).messages == 400
        # the local copy is whole, yet FORCE reads every message from the tiered store
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)
    with TieredMessageStore.open(StoreConfig.load(conf, environ={})) as store:  # after a restart too
        assert_exactly_once(store, workload, tier=StoreTier.TIERED)

    # RocketMQ's layout under tieredStoreFilePath: {hash}_{cluster}/{broker}/{topic}/{queue}/{kind}
    queue_dir = tiered_root / cluster_dir("DefaultCluster") / "broker-a" / "TopicTest"
    assert sorted(os.listdir(queue_dir)) == ["0", "1", "2", "3"]
    assert sorted(os.listdir(queue_dir / "0")) == ["COMMIT_LOG", "CONSUME_QUEUE"]
