"""Child process of test_crash_admin.py: run one static-topic admin command and SIGKILL itself
at a chosen point: after the K-th durable mapping write (``after``) or in the middle of the
K-th one, its temp file written and fsynced but not yet renamed (``during``).

Usage: ``python crash_admin_child.py ROOT create|remap after|during K``. Exits 3 when the
command finishes before the kill point (the parent counts that as "no crash at K").
"""

from __future__ import annotations

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from static_topic_helpers import broker_configs  # noqa: E402

from tiered_core.static_topic import Cluster  # noqa: E402
from tiered_core.static_topic import store as mapping_store  # noqa: E402
from tiered_core.static_topic.store import TopicQueueMappingStore  # noqa: E402

TOPIC = "orders"


def main(root: str, command: str, where: str, k: int) -> int:
    writes = {"n": 0}
    real_put = TopicQueueMappingStore.put
    real_replace = os.replace

    def put(self, detail):
        writes["n"] += 1
        real_put(self, detail)
        if where == "after" and writes["n"] == k:
            os.kill(os.getpid(), signal.SIGKILL)

    def replace(src, dst):
        if where == "during" and dst.endswith("topicQueueMapping.json") and writes["n"] == k:
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst)

    TopicQueueMappingStore.put = put
    mapping_store.os.replace = replace  # type: ignore[attr-defined]
    from pathlib import Path

    cluster = Cluster.open(broker_configs(Path(root)))
    if command == "create":
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])
    else:
        cluster.remap_static_topic(TOPIC, ["b", "c"])
    cluster.close()
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
