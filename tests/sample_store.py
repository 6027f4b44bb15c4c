"""Sample data written through the container layer (FlatFileStore), for the tests and
``bench/spark_*.py`` (which put ``tests/`` on ``sys.path``)."""

from __future__ import annotations

from dataclasses import dataclass

from tiered_core.codec.message import Message
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.spark.appender import QueueAppender


@dataclass(frozen=True)
class SampleSpec:
    """``messages`` per queue of each topic; store times ``start_ms + i * step_ms`` (i = queue offset)."""

    topics: tuple[str, ...] = ("orders", "payments")
    queues: int = 2
    messages: int = 100
    body_size: int = 64
    start_ms: int = 1_700_000_000_000
    step_ms: int = 1000


def sample_message(topic: str, queue_id: int, i: int, spec: SampleSpec) -> Message:
    body = (f"{topic}/{queue_id}/{i}:".encode() * (spec.body_size // 8 + 1))[:spec.body_size]
    return Message(topic=topic, body=body, keys=[f"k{queue_id}-{i}", f"id{i}"], tags=f"tag{i % 3}",
                   properties={"n": str(i), "src": "sample"}, born_timestamp=spec.start_ms + i * spec.step_ms - 5)


def write_sample(config, spec: SampleSpec = SampleSpec()) -> int:
    """Append ``spec``'s messages to the store of ``config`` (a StoreConfig); returns how many."""
    driver = config.open_driver()
    metadata = config.open_metadata()
    try:
        store = FlatFileStore(driver, metadata, config.flat_config())
        store.load()
        total = 0
        for topic in spec.topics:
            for queue_id in range(spec.queues):
                flat = store.compute_if_absent(topic, queue_id)
                appender = QueueAppender(flat)
                start = appender.next_offset or 0
                for i in range(start, start + spec.messages):
                    appender.append(i, sample_message(topic, queue_id, i, spec), spec.start_ms + i * spec.step_ms)
                total += appender.finish().appended
        store.shutdown()
        return total
    finally:
        metadata.close()
        driver.close()
