"""The static-topic part of ``tiered demo`` (seed 002): logic queues over three brokers.

On the embedded default it writes ``demo-data/cluster/cluster.toml`` (three brokers on one
shared POSIX tier), creates the static topic ``demo-static`` with 4 logic queues on
brokers a and b, puts messages, remaps the topic to b and c, puts more, dispatches,
closes broker a and deletes its ``store_path``, then reads every logic queue back from
logic offset 0 and checks each message once, in put order, across both generations.
The cluster stays on disk for ``tiered static-topic status --cluster ... --json``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from tiered_core.access.results import GetMessageStatus
from tiered_core.codec.message import Message
from tiered_core.ops.output_paths import create_output_dir, remove_output_dir
from tiered_core.static_topic import Cluster

TOPIC = "demo-static"
LOGIC_QUEUES = 4
#: The file that marks a directory as the demo's own (so its next run may recreate it).
BROKERS = ("broker-a", "broker-b", "broker-c")


@dataclass(frozen=True)
class StaticDemoResult:
    """What the static-topic demo put, read back and where its cluster file is."""

    cluster_file: str
    put: int
    verified: int
    wrong: int
    generations: int
    leaders: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.verified == self.put and self.wrong == 0 and self.generations >= 2


def write_cluster_file(root: str, brokers: tuple[str, ...] = BROKERS, note: str = "") -> str:
    """``root/cluster.toml``: ``brokers`` under ``root``, one shared tier at ``root/tiered``."""
    lines = ["# written by `tiered demo`: brokers on one shared tiered backend", *([f"# {note}"] if note else []),
             "[tiered]", 'driver = "posix"', 'cluster = "DemoCluster"', 'metadata = "sqlite"', "",
             "[tiered.options]", 'root = "./tiered"', ""]
    for name in brokers:
        lines += ["[[broker]]", f'broker = "{name}"', f'store_path = "./{name}"', ""]
    path = os.path.join(root, "cluster.toml")
    with open(path, "w") as fh:
        fh.write("\n".join(lines))
    return path


def body_of(queue_id: int, seq: int) -> bytes:
    return f"{TOPIC}/{queue_id}/{seq}".encode()


def _fresh_root(root: str) -> None:
    """Make ``root`` an empty directory. It may exist only as an earlier run of this demo
    left it (holding the output marker, :data:`~tiered_core.ops.output_paths.MARKER`):
    anything else there is not the demo's to delete (:class:`InvalidPath`)."""
    if os.path.lexists(root):
        remove_output_dir(root, option="store_path")
    create_output_dir(root, "tiered demo (static topic)", option="store_path")


def run_static_demo(root: str, messages: int) -> StaticDemoResult:
    """Run the scenario under ``root`` (made afresh: see :func:`_fresh_root`) with ``messages``
    puts in all. Raises InvalidPath when ``root`` holds something the demo did not make."""
    _fresh_root(root)
    cluster_file = write_cluster_file(root)
    first_half = messages // 2
    sent: dict[int, int] = {q: 0 for q in range(LOGIC_QUEUES)}

    def put(cluster: Cluster, count: int) -> None:
        for i in range(count):
            queue = i % LOGIC_QUEUES
            seq = sent[queue]
            result = cluster.put_message(Message(topic=TOPIC, body=body_of(queue, seq), keys=[f"k-{queue}-{seq}"]),
                                         queue)
            if result.queue_offset != seq:
                raise AssertionError(f"{TOPIC}/{queue}: put {seq} got logic offset {result.queue_offset}")
            sent[queue] = seq + 1

    with Cluster.load(cluster_file) as cluster:
        cluster.create_static_topic(TOPIC, LOGIC_QUEUES, list(BROKERS[:2]))
        put(cluster, first_half)
        cluster.remap_static_topic(TOPIC, list(BROKERS[1:]))
        put(cluster, messages - first_half)
        cluster.dispatch(force=True)
        cluster.close_broker(BROKERS[0])
    # Broker a is decommissioned: its store_path goes, and so does its entry in the cluster
    # file; its generation stays readable from the shared tier.
    shutil.rmtree(os.path.join(root, BROKERS[0]))
    write_cluster_file(root, BROKERS[1:], f"{BROKERS[0]} was decommissioned; its generation is read from the tier")

    verified = wrong = 0
    with Cluster.load(cluster_file) as cluster:
        status = cluster.static_topic_status(TOPIC)
        for queue in range(LOGIC_QUEUES):
            offset = 0
            while offset < sent[queue]:
                got = cluster.get_message("demo", TOPIC, queue, offset, 32)
                if got.status is not GetMessageStatus.FOUND:
                    wrong += sent[queue] - offset
                    break
                for m in got.messages:
                    ok = m.queue_offset == offset and m.body == body_of(queue, offset)
                    verified += ok
                    wrong += not ok
                    offset += 1
    generations = max(len(q["items"]) for q in status["queues"])
    leaders = tuple(q["leader"]["bname"] for q in status["queues"])
    return StaticDemoResult(cluster_file, messages, verified, wrong, generations, leaders)
