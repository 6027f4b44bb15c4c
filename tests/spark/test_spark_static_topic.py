"""The ``tiered`` data source reads a static topic by logic queue, across generations, one of them
on a broker whose store_path is gone (issue 12)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "static_topic"))

from static_topic_helpers import broker_configs  # noqa: E402

from tiered_core import Message  # noqa: E402
from tiered_core.errors import InvalidOption  # noqa: E402
from tiered_core.spark import register  # noqa: E402
from tiered_core.spark.source.options import parse_static_options  # noqa: E402
from tiered_core.spark.source.static_batch import plan_static_partitions  # noqa: E402
from tiered_core.static_topic import Cluster  # noqa: E402

TOPIC = "orders"


def write_cluster_toml(root: Path) -> Path:
    text = f"""
[tiered]
driver = "posix"
cluster = "static-it"
read_ahead_cache_bytes = 0

[tiered.options]
root = "{root / 'tier'}"
""" + "".join(f"""
[[broker]]
broker = "{b}"
store_path = "{root / b}"
""" for b in ("a", "b", "c"))
    path = root / "cluster.toml"
    path.write_text(text)
    return path


def test_static_topic_rows_by_logic_queue(spark, tmp_path):
    cluster_file = write_cluster_toml(tmp_path)
    acked = {q: [] for q in range(4)}
    with Cluster.open(broker_configs(tmp_path)) as cluster:
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])
        for i in range(400):
            r = cluster.put_message(Message(topic=TOPIC, body=b"m-%d" % i, keys=[f"k-{i}"]), i % 4)
            acked[i % 4].append((r.queue_offset, b"m-%d" % i))
        cluster.dispatch(force=True)
        cluster.remap_static_topic(TOPIC, ["b", "c"])
        for i in range(400, 800):
            r = cluster.put_message(Message(topic=TOPIC, body=b"m-%d" % i, keys=[f"k-{i}"]), i % 4)
            acked[i % 4].append((r.queue_offset, b"m-%d" % i))
        cluster.close_broker("a")  # drains: everything of a is in the tier
        cluster.dispatch(force=True)
    shutil.rmtree(tmp_path / "a")

    source, topic, queues = parse_static_options({"cluster": str(cluster_file), "static_topic": TOPIC})
    parts = plan_static_partitions(source, topic, queues)
    assert sorted({(p.logic_queue, p.gen) for p in parts}) == sorted(
        {(q, g) for q in range(4) for g in ((0,) if q % 2 else (0, 1))})  # queues 0, 2 moved a -> ...

    register(spark)
    df = (spark.read.format("tiered").option("cluster", str(cluster_file)).option("static_topic", TOPIC).load())
    rows = df.select("queue_id", "queue_offset", "body").collect()
    got = {q: sorted((r.queue_offset, bytes(r.body)) for r in rows if r.queue_id == q) for q in range(4)}
    assert got == acked
    assert len(rows) == 800

    with pytest.raises(InvalidOption):
        parse_static_options({"cluster": str(cluster_file), "static_topic": TOPIC, "bogus": "1"})
