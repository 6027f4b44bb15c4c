"""Shared parts of the message-store tests: backends, a recorded workload, exactly-once checks.

* :func:`backend_options` - driver options for a throw-away location of each driver
  (gcs, azure and s3 against the session emulators ``fake_gcs``, ``azurite`` and
  ``moto_s3``, fixtures of the drivers' test kits that ``tests/conftest.py`` imports);
* :class:`Workload` - puts messages with keys and tags on several queues and records
  what each put returned (offsets, store time), so checks derive every expectation
  from what was written;
* :func:`assert_exactly_once` - reads every queue back through a store and checks each
  message once, in queue order, bodies intact, plus the tiered layout (one consume-queue
  unit per message, commit-log ranges in order and, without faults, back to back);
* :func:`tier_messages` / :func:`tier_messages_around_damage` - every message a closed
  store's tier serves, read through the read-only tier view (the second reads around
  planted damage).
"""

from __future__ import annotations

import bisect
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from tiered_core import Message, StoreConfig
from tiered_core.access.results import GetMessageStatus, StoreTier
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.access.view import TierReadView
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, ConsumeQueueUnit, decode_cq_unit
from tiered_core.common import BoundaryType
from tiered_driver_azure.testing import AZURE_CONTAINER
from tiered_driver_s3.testing import S3_BUCKET

DRIVERS = ("memory", "posix", "sqlite", "gcs", "azure", "s3")
#: drivers whose bytes outlive the process (a killed child's writes stay visible)
PERSISTENT_DRIVERS = ("posix", "sqlite", "gcs", "azure", "s3")


def memory_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Options of the memory driver for a namespace of its own, dropped after the test."""
    from tiered_driver_memory import MemoryDriver

    namespace = f"store-test-{uuid.uuid4().hex[:12]}"
    request.addfinalizer(lambda: MemoryDriver.drop_namespace(namespace))
    return {"namespace": namespace}


def backend_options(request: pytest.FixtureRequest, driver: str, tmp_path: Path) -> dict[str, Any]:
    """Options of ``driver`` for a fresh location of its own."""
    tag = uuid.uuid4().hex[:12]
    if driver == "memory":
        return memory_options(request)
    if driver == "posix":
        return {"root": str(tmp_path / "tiered")}
    if driver == "sqlite":
        return {"database": str(tmp_path / "tiered-segments.db")}
    if driver == "fsspec":  # the generic driver on local files (link-based atomic create)
        return {"url": f"file://{tmp_path}/tiered-fsspec"}
    if driver == "gcs":
        # A bucket of its own: fake-gcs-server walks the whole bucket on each listing, so
        # other tests' objects would slow this one's (drivers/gcs/tests/test_gcs_conformance.py).
        server = request.getfixturevalue("fake_gcs")
        server.create_bucket(f"store-{tag}")
        return {**server.driver_options(f"store-{tag}", "store"), "retries": 3}
    if driver == "azure":
        server = request.getfixturevalue("azurite")
        return {**server.driver_options(AZURE_CONTAINER, f"store-{tag}"), "retries": 3}
    if driver == "s3":
        server = request.getfixturevalue("moto_s3")
        return {**server.driver_options(S3_BUCKET, f"store-{tag}"), "retries": 3}
    raise ValueError(f"no test backend for driver {driver!r}")


def small_config(tmp_path: Path, driver: str, options: dict[str, Any], **overrides: Any) -> StoreConfig:
    """A store with small files everywhere, so that a few MiB roll local and tiered files."""
    values: dict[str, Any] = dict(
        store_path=str(tmp_path / "store"),
        driver=driver,
        driver_options=options,
        metadata="sqlite",
        local_commit_log_file_size=1 << 20,
        local_retention_hours=0,
        commit_log_max_size=256 << 10,
        consume_queue_max_size=CQ_UNIT_SIZE * 300,
        rolling_min_size=0,
        read_ahead_cache_bytes=16 << 20,
    )
    values.update(overrides)
    return StoreConfig(**values)


def body_of(topic: str, queue_id: int, seq: int, size: int) -> bytes:
    stamp = f"{topic}/{queue_id}/{seq}|".encode()
    return (stamp * (size // len(stamp) + 1))[:size]


@dataclass
class Sent:
    """One message as written, and where the put said it went."""

    body: bytes
    key: str
    tags: str
    queue_offset: int
    commitlog_offset: int
    store_timestamp: int


@dataclass
class Workload:
    """Messages spread round-robin over ``topics`` x ``queues``, sizes drawn from a seeded RNG."""

    topics: tuple[str, ...] = ("orders", "audit")
    queues: int = 3
    min_size: int = 40
    max_size: int = 700
    seed: int = 1
    sent: dict[tuple[str, int], list[Sent]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._round_robin = [(t, q) for t in self.topics for q in range(self.queues)]
        self._next = 0

    @property
    def queue_keys(self) -> list[tuple[str, int]]:
        return list(self._round_robin)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.sent.values())

    def put(self, store: TieredMessageStore, n: int, size: int | None = None) -> None:
        for _ in range(n):
            topic, qid = self._round_robin[self._next % len(self._round_robin)]
            self._next += 1
            sent = self.sent.setdefault((topic, qid), [])
            seq = len(sent)
            body = body_of(topic, qid, seq, size or self._rng.randint(self.min_size, self.max_size))
            key, tags = f"{topic}-{qid}-{seq}", f"tag{seq % 4}"
            res = store.put_message(Message(topic=topic, body=body, keys=[key], tags=tags), qid)
            assert res.ok and res.queue_offset == seq, (topic, qid, res)
            sent.append(Sent(body, key, tags, res.queue_offset, res.commitlog_offset, res.store_timestamp))

    def expected_offset_by_time(self, topic: str, queue_id: int, timestamp: int, boundary: BoundaryType) -> int:
        """What a time lookup must answer, from the recorded store times (non-decreasing)."""
        times = [s.store_timestamp for s in self.sent[(topic, queue_id)]]
        first = bisect.bisect_left(times, timestamp)
        if boundary is BoundaryType.UPPER and first < len(times) and times[first] == timestamp:
            return bisect.bisect_right(times, timestamp) - 1
        return first


def dispatch_until_tiered(store: TieredMessageStore, workload: Workload, max_rounds: int = 500) -> int:
    """Run forced dispatch rounds until every queue's tiered commit offset reaches its count.

    Returns the rounds used; fails the test (naming the laggards) when ``max_rounds`` is reached.
    """
    for rounds in range(1, max_rounds + 1):
        store.dispatch(force=True)
        behind = {k: (tiered_commit(store, *k), len(v)) for k, v in workload.sent.items()
                  if tiered_commit(store, *k) < len(v)}
        if not behind:
            return rounds
    pytest.fail(f"not everything tiered after {max_rounds} dispatch rounds: {behind}")


def tiered_commit(store: TieredMessageStore, topic: str, queue_id: int) -> int:
    flat = store.flat_files.get(topic, queue_id)
    return flat.consume_queue_commit_offset() if flat is not None and flat.initialized else 0


def read_queue(store: TieredMessageStore, topic: str, queue_id: int, end: int, batch: int = 32,
               group: str = "verify") -> list[tuple[Any, int, StoreTier | None]]:
    """Every message of ``[0, end)`` through ``get_message``, following ``next_begin_offset``,
    as ``(message, offset the request started at, tier that served it)``; fails on any
    status but FOUND."""
    out: list[tuple[Any, int, StoreTier | None]] = []
    offset = 0
    while offset < end:
        got = store.get_message(group, topic, queue_id, offset, batch)
        assert got.status is GetMessageStatus.FOUND, (topic, queue_id, offset, got.status, got.tier)
        assert got.messages and got.next_begin_offset == offset + len(got.messages), \
            (topic, queue_id, offset, got.next_begin_offset, len(got.messages))
        out.extend((m, offset, got.tier) for m in got.messages)
        offset = got.next_begin_offset
    return out


def assert_message_matches(m: Any, topic: str, queue_id: int, offset: int, sent: Sent) -> None:
    """Same message as put (the physical offset differs by tier: the tiered copy names its
    tiered offset, so it is checked against the tiered consume queue elsewhere)."""
    assert (m.topic, m.queue_id, m.queue_offset) == (topic, queue_id, offset)
    assert m.body == sent.body, f"{topic}/{queue_id}@{offset}: body differs"
    assert m.keys == [sent.key] and m.tags == sent.tags, (topic, queue_id, offset, m.keys, m.tags)
    assert m.store_timestamp == sent.store_timestamp


def assert_exactly_once(store: TieredMessageStore, workload: Workload, *,
                        tier: StoreTier | Callable[[str, int, int], StoreTier] = StoreTier.TIERED,
                        contiguous: bool = True) -> None:
    """Every message readable once, in queue order, intact; each read served by ``tier``
    (or by ``tier(topic, queue_id, start_offset)``); reading past the end overflows; the
    tiered consume queue has one unit per message (see :func:`assert_tiered_layout`)."""
    for (topic, qid), sent in workload.sent.items():
        got = read_queue(store, topic, qid, len(sent))
        assert len(got) == len(sent)
        units = assert_tiered_layout(store, topic, qid, sent, contiguous=contiguous)
        for offset, ((m, start, served), s) in enumerate(zip(got, sent)):
            assert_message_matches(m, topic, qid, offset, s)
            expected = tier(topic, qid, start) if callable(tier) else tier
            assert served is expected, (topic, qid, start, served, expected)
            where = units[offset].commitlog_offset if served is StoreTier.TIERED else s.commitlog_offset
            assert m.commitlog_offset == where, (topic, qid, offset, served, m.commitlog_offset, where)
        past = store.get_message("verify", topic, qid, len(sent), 8)
        assert past.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and not past.messages


def assert_tiered_layout(store: TieredMessageStore, topic: str, queue_id: int, sent: list[Sent], *,
                         contiguous: bool = True) -> list[ConsumeQueueUnit]:
    """The tiered consume queue has one unit per message, in commit-log order, the ranges
    never overlapping. ``contiguous``: the ranges are also back to back from the commit
    log's start to its end (nothing written twice, nothing unreferenced) -- without
    faults that must hold; after failed writes a range copied again may leave an
    unreferenced one behind, which costs space but is never read."""
    flat = store.flat_files.get(topic, queue_id)
    assert flat is not None
    assert flat.consume_queue_min_offset() == 0 and flat.consume_queue_commit_offset() == len(sent)
    units = []
    for start in range(0, len(sent), 256):
        raw = flat.get_consume_queue(start, min(256, len(sent) - start))
        units += [decode_cq_unit(raw, i * CQ_UNIT_SIZE) for i in range(len(raw) // CQ_UNIT_SIZE)]
    assert len(units) == len(sent)
    position = flat.commit_log.min_offset
    for offset, unit in enumerate(units):
        if contiguous:
            assert unit.commitlog_offset == position, (topic, queue_id, offset, unit.commitlog_offset, position)
        else:
            assert unit.commitlog_offset >= position, (topic, queue_id, offset, unit.commitlog_offset, position)
        position = unit.commitlog_offset + unit.size
    if contiguous:
        assert flat.commit_log.commit_offset == position
    else:
        assert flat.commit_log.commit_offset >= position
    return units


def tier_messages(config: StoreConfig) -> dict[tuple[str, int, int], bytes]:
    """Every message the tier serves, ``{(topic, queue, offset): body}``, read batch by
    batch through the read-only tier view; a failed or empty read fails the test."""
    return _read_tier(config, around_damage=False)


def tier_messages_around_damage(config: StoreConfig) -> dict[tuple[str, int, int], bytes]:
    """The messages the tier still serves around damage a drill planted: each queue read
    one offset at a time, an offset whose read fails (CorruptData, a damaged segment) left
    out and the read going on after it."""
    return _read_tier(config, around_damage=True)


def _read_tier(config: StoreConfig, *, around_damage: bool) -> dict[tuple[str, int, int], bytes]:
    from tiered_core.errors import CorruptData, IllegalOffset

    out = {}
    with TierReadView.open_read_only(config) as view:
        for topic, qid in view.queues():
            flat = view.flat_file(topic, qid)
            offset, end = flat.consume_queue_min_offset(), flat.consume_queue_commit_offset()
            while offset < end:
                if not around_damage:
                    batch = flat.read_batch(offset, end - offset, 1 << 20)
                    assert batch.error is None and batch.units, (topic, qid, offset, batch.error)
                else:
                    try:
                        batch = flat.read_batch(offset, 1, 1 << 20)
                    except (CorruptData, IllegalOffset):
                        batch = None
                    if batch is None or batch.error is not None or not batch.units:
                        offset += 1  # step over the damaged offset
                        continue
                for i, msg in enumerate(batch.messages()):
                    out[(topic, qid, batch.queue_offset + i)] = msg.body
                offset = batch.end_offset
    return out
