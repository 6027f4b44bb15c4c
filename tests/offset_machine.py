"""A hypothesis state machine over a store's life and its recovery paths (issue 18).

Steps: put, dispatch (all queues or one), local expiry, snapshot of the store directory, a
lost local disk (same ``store_path``, taken over), a failover to a new ``store_path``, a
restore of an old snapshot, lost metadata rebuilt from the backend, and a plain reopen.

The model knows, per (queue, offset), the body a put acknowledged and whether it was ever
tiered. A lost disk loses what was not tiered (the machine never checks those again, and
their offsets may be handed out again: nothing durable names them). After every step it
checks that each live (topic, queue, offset) reads back its own body and that key lookups
find live messages; every put checks that its offset names no live message and no message
the tier ever held.

The restore step follows the store's rule (``tiered_core.access.continuity``): a snapshot is
trusted when it was taken under the ownership epoch its store holds at restore time; then
its untiered messages come back with it. Otherwise its store takes the prefix over and its
local history is given up.

``tests/test_offset_state_machine.py`` runs it bounded in ``make test``;
``bench/offset_state_machine.py --steps N`` runs it long.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tiered_conformance.drills import copy_sparse
from tiered_core import Message, StoreConfig
from tiered_core.access.results import GetMessageStatus
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.flat.ownership import load_store_id

TOPIC = "sm"
QUEUES = 2
FAR_FUTURE_MS = 1 << 50

#: Steps run by every machine of this process (the long run reports it).
STEPS = [0]


class Violation(AssertionError):
    """An acknowledged message no longer reads back, or an offset was handed out twice."""


class OffsetMachine(RuleBasedStateMachine):
    """One store through puts, dispatches and recovery paths (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="offset-machine-"))
        self.paths = 0
        self.store_path = self._new_path()
        self.rebuild = False
        self.store = TieredMessageStore.open(self._config())
        self.owner_id = load_store_id(self.store_path)
        self.epoch = 1
        self.live: dict[tuple[int, int], bytes] = {}
        self.tiered: dict[tuple[int, int], bytes] = {}
        self.snapshots: list[tuple[Path, str, int, dict[tuple[int, int], bytes]]] = []
        self.seq = 0

    # -- set-up -------------------------------------------------------------------------

    def _new_path(self) -> str:
        self.paths += 1
        return str(self.tmp / f"store{self.paths}")

    def _config(self, **overrides) -> StoreConfig:
        return StoreConfig(store_path=self.store_path, driver="posix",
                           driver_options={"root": str(self.tmp / "tier"), "fsync": False},
                           local_commit_log_file_size=8 << 10, local_retention_hours=0,
                           commit_log_max_size=4 << 10, consume_queue_max_size=20 * 16,
                           rolling_min_size=0, read_ahead_cache_bytes=1 << 20,
                           metadata_recovery="rebuild" if self.rebuild else "refuse", **overrides)

    def _reopen(self, *, take_over: bool = False) -> None:
        self.store = TieredMessageStore.open(self._config(), take_over=take_over)
        self.owner_id = load_store_id(self.store_path)
        if take_over:
            self.epoch += 1

    def _step(self) -> None:
        STEPS[0] += 1

    def _mark_tiered(self) -> None:
        for (qid, off), data in self.live.items():
            if (qid, off) not in self.tiered and self.store.is_tiered(TOPIC, qid, off):
                self.tiered[(qid, off)] = data

    def _keep_only_tiered(self) -> None:
        self.live = {k: v for k, v in self.live.items() if k in self.tiered}

    # -- rules ----------------------------------------------------------------------------

    @rule(queue=st.integers(0, QUEUES - 1), n=st.integers(1, 8))
    def put(self, queue: int, n: int) -> None:
        self._step()
        for _ in range(n):
            self.seq += 1
            data = f"m{self.seq}|".encode() * 6
            r = self.store.put_message(Message(topic=TOPIC, body=data, keys=[self._key(data)]), queue)
            key = (queue, r.queue_offset)
            if key in self.live:
                raise Violation(f"offset {queue}@{r.queue_offset} handed out again; it names a live message")
            if key in self.tiered:
                raise Violation(f"offset {queue}@{r.queue_offset} handed out again; the tier holds it")
            self.live[key] = data

    @rule()
    def dispatch(self) -> None:
        self._step()
        self.store.dispatch(force=True)
        self._mark_tiered()

    @rule(queue=st.integers(0, QUEUES - 1))
    def dispatch_one_queue(self, queue: int) -> None:
        self._step()
        self.store.local.reput()
        self.store.local.flush()
        self.store.dispatcher.dispatch_queue(TOPIC, queue, force=True)
        self._mark_tiered()

    @rule()
    def expire_local(self) -> None:
        self._step()
        self.store.delete_expired_local(FAR_FUTURE_MS)

    @precondition(lambda self: len(self.snapshots) < 3)
    @rule()
    def snapshot(self) -> None:
        self._step()
        self.store.close()
        target = self.tmp / f"snapshot{len(self.snapshots)}"
        shutil.copytree(self.store_path, target, copy_function=copy_sparse)
        self.snapshots.append((target, self.owner_id, self.epoch, dict(self.live)))
        self._reopen()

    @rule()
    def lose_disk(self) -> None:
        self._step()
        self.store.close()
        shutil.rmtree(self.store_path)
        self._keep_only_tiered()
        self._reopen(take_over=True)

    @rule()
    def failover_to_new_path(self) -> None:
        self._step()
        self.store.close()
        self.store_path = self._new_path()
        self._keep_only_tiered()
        self._reopen(take_over=True)

    @precondition(lambda self: bool(self.snapshots))
    @rule(data=st.data())
    def restore_snapshot(self, data) -> None:
        self._step()
        target, snap_id, snap_epoch, snap_live = data.draw(st.sampled_from(self.snapshots))
        self.store.close()
        shutil.rmtree(self.store_path)
        shutil.copytree(target, self.store_path, copy_function=copy_sparse)
        take_over = snap_id != self.owner_id
        trusted = not take_over and snap_epoch == self.epoch
        self._keep_only_tiered()
        # The snapshot's metadata is older than the tier: the documented path rebuilds it
        # (`tiered metadata rebuild --force`, here metadata_recovery = "rebuild").
        self.rebuild = True
        try:
            self._reopen(take_over=take_over)
        finally:
            self.rebuild = False
        if trusted:
            ends = {q: self.store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES)}
            for (qid, off), body in snap_live.items():
                if (qid, off) not in self.tiered and off < ends[qid]:
                    self.live[(qid, off)] = body

    @rule()
    def lose_metadata_and_rebuild(self) -> None:
        self._step()
        self.store.close()
        Path(self._config().effective_metadata_path()).unlink(missing_ok=True)
        self.rebuild = True
        try:
            self._reopen()
        finally:
            self.rebuild = False

    @rule()
    def reopen(self) -> None:
        self._step()
        self.store.close()
        self._reopen()

    # -- checks ---------------------------------------------------------------------------

    @invariant()
    def every_live_message_reads_back(self) -> None:
        self.store.local.reput()
        for qid in range(QUEUES):
            offsets = sorted(o for q, o in self.live if q == qid)
            if not offsets:
                continue
            got: dict[int, bytes] = {}
            off, end = offsets[0], offsets[-1] + 1
            while off < end:
                res = self.store.get_message("machine", TOPIC, qid, off, 32)
                if res.status is not GetMessageStatus.FOUND and res.next_begin_offset <= off:
                    raise Violation(f"{TOPIC}/{qid}@{off} answers {res.status.name} (live: "
                                    f"{self.live[(qid, off)][:12]!r}...)" if (qid, off) in self.live
                                    else f"{TOPIC}/{qid}@{off} answers {res.status.name}")
                for m in res.messages:
                    got[m.queue_offset] = m.body
                off = max(res.next_begin_offset, off + 1) if not res.messages else res.next_begin_offset
            for o in offsets:
                if got.get(o) != self.live[(qid, o)]:
                    raise Violation(f"{TOPIC}/{qid}@{o} reads back {got.get(o, b'nothing')[:12]!r}, not "
                                    f"{self.live[(qid, o)][:12]!r}")

    @staticmethod
    def _key(data: bytes) -> str:
        return "k" + data.split(b"|", 1)[0][1:].decode()

    @invariant()
    def key_lookups_find_live_messages(self) -> None:
        """The first, middle and last live message of each queue are found by key, once."""
        for qid in range(QUEUES):
            offsets = sorted(o for q, o in self.live if q == qid)
            for off in {offsets[0], offsets[len(offsets) // 2], offsets[-1]} if offsets else ():
                data = self.live[(qid, off)]
                hits = [(m.queue_id, m.queue_offset, m.body) for m in
                        self.store.query_message(TOPIC, self._key(data), max_count=4).messages]
                if hits != [(qid, off, data)]:
                    raise Violation(f"key {self._key(data)} of {TOPIC}/{qid}@{off} finds {hits!r}")

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
