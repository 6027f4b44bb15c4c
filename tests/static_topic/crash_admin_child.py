"""Child process of test_crash_admin.py: run one static-topic admin command and SIGKILL itself
at a chosen point: after the K-th durable metadata write (``after``) or in the middle of the
K-th one, its temp file written and fsynced but not yet renamed (``during``). Durable writes
are those of ``topicQueueMapping.json``, ``topics.json`` and ``consumerOffset.json`` (the one
atomic-write helper they share).

Usage: ``python crash_admin_child.py ROOT create|remap after|during K [DRIVER OPTIONS_JSON]``
(posix at ROOT/tier by default). Exits 3 when the command finishes before the kill point
(the parent counts that as "no crash at K").
"""

from __future__ import annotations

import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from static_topic_helpers import broker_configs  # noqa: E402

from tiered_core.static_topic import Cluster  # noqa: E402
from tiered_core.static_topic import consumer_offsets, mapping_file, topic_config  # noqa: E402

TOPIC = "orders"


def main(root: str, command: str, where: str, k: int, driver: str = "posix", options: str | None = None) -> int:
    writes = {"n": 0, "kill_at_rename": False}
    real_write = mapping_file.write_json_atomically
    real_replace = os.replace

    def write_json_atomically(path, doc):
        writes["n"] += 1
        writes["kill_at_rename"] = where == "during" and writes["n"] == k
        real_write(path, doc)
        if where == "after" and writes["n"] == k:
            os.kill(os.getpid(), signal.SIGKILL)

    def replace(src, dst):
        if writes["kill_at_rename"]:
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst)

    for module in (mapping_file, topic_config, consumer_offsets):
        module.write_json_atomically = write_json_atomically  # type: ignore[attr-defined]
    mapping_file.os.replace = replace  # type: ignore[attr-defined]
    from pathlib import Path

    cluster = Cluster.open(broker_configs(Path(root), driver=driver,
                                          options=json.loads(options) if options else None))
    if command == "create":
        cluster.create_static_topic(TOPIC, 4, ["a", "b"])
    else:
        cluster.remap_static_topic(TOPIC, ["b", "c"])
    cluster.close()
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), *sys.argv[5:]))
