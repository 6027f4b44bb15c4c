"""A cluster of brokers in one process, and static topics over them (seed 002, RIP-21).

:class:`Cluster` opens one :class:`~tiered_core.access.tiered_store.TieredMessageStore` per broker
(each its own ``broker`` name and ``store_path``, all on the same tiered backend and
``cluster``) and one :class:`~tiered_core.static_topic.mapping_file.TopicQueueMappingStore`
per broker. This module is its lifecycle (open, close a broker, close, retention hooks);
the rest of its API is split by responsibility, each part a base class of :class:`Cluster`
sharing its state and its lock:

* :mod:`~tiered_core.static_topic.admin`: :meth:`Cluster.create_static_topic`,
  :meth:`Cluster.remap_static_topic` (its high-availability order is documented there),
  :meth:`Cluster.trim_static_mappings`, :meth:`Cluster.static_topic_status`,
  :meth:`Cluster.restore_broker`;
* :mod:`~tiered_core.static_topic.mapping_check`: :meth:`Cluster.verify`;
* :mod:`~tiered_core.static_topic.data_path`: :meth:`Cluster.put_message` (logic queue ->
  the leader's physical queue; the result's ``queue_offset`` is the logic offset),
  :meth:`Cluster.get_message` (logic offsets mapped across generations),
  :meth:`Cluster.get_min_offset_in_queue`, :meth:`Cluster.get_max_offset_in_queue`, time
  and key lookups;
* :mod:`~tiered_core.static_topic.consumer_offsets`: committed consumer offsets;
* :mod:`~tiered_core.static_topic.generation_bounds`: each generation's bounds;
  :mod:`~tiered_core.static_topic.topic_view`: the merged mapping views.

Reads of a generation whose broker is open go to that broker's store; otherwise they go
straight to the shared tiered backend through a read-only view of that broker's flat files
(:class:`~tiered_core.static_topic.tiered_broker_reader.TieredBrokerReader`), which never
writes under the other broker's prefix.

In-process puts and admin steps are serialised by one cluster lock (held per logic queue
move, so puts interleave with a remap of many queues).
"""

from __future__ import annotations

import os
import threading
from typing import Collection, Sequence

from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.config import StoreConfig
from tiered_core.access.opening import prefix_owner
from tiered_core.errors import ConfigError, IllegalParam, PrefixOwned, TieredStoreError, UnknownObjects
from tiered_core.flat.ownership import read_store_id, tier_prefix
from tiered_core.static_topic.admin import StaticTopicAdmin
from tiered_core.static_topic.bulk import gc_paused
from tiered_core.static_topic.cluster_config import cluster_configs_from_text, load_cluster_configs
from tiered_core.static_topic.consumer_offsets import ConsumerOffsets, ConsumerOffsetStore
from tiered_core.static_topic.data_path import LogicDataPath, _ReadState
from tiered_core.static_topic.guard import DirectPutGuard
from tiered_core.static_topic.mapping_check import MappingCheck, Violation
from tiered_core.static_topic.mapping_file import TopicQueueMappingStore
from tiered_core.static_topic.tiered_broker_reader import TieredBrokerReader
from tiered_core.static_topic.topic_config import TopicConfigStore
from tiered_core.static_topic.topic_view import TopicView, read_static_topic_items


class Cluster(StaticTopicAdmin, MappingCheck, LogicDataPath, ConsumerOffsets):
    """Brokers of one cluster on one shared tiered backend, opened in this process.

    Contract: every config has its own ``broker`` and ``store_path``, and all share
    ``cluster``, ``driver`` and driver options (else :class:`ConfigError`). Errors name
    what was wrong: an unknown broker or a logic queue id out of range is
    :class:`IllegalParam`; a put through a broker that no longer leads the logic queue is
    :class:`Fenced`; an inconsistent or undecided mapping is :class:`MappingError`.
    """

    @gc_paused()  # bulk work over every logic queue (see static_topic.bulk)
    def __init__(self, configs: Sequence[StoreConfig], *, background: bool = False,
                 take_over: Collection[str] = (), source: str | None = None, read_only: bool = False) -> None:
        if not configs:
            raise ConfigError("a cluster needs at least one broker config", key="broker")
        names = [c.broker for c in configs]
        if isinstance(take_over, str) or not set(take_over) <= set(names):
            raise IllegalParam(f"take_over names {sorted(set(take_over) - set(names)) or take_over!r}, not brokers "
                               f"of the cluster (brokers: {sorted(names)})", field="broker")
        self.source = source  # the cluster file, named in errors' fixes
        for what, values in (("broker", names), ("store_path", [os.path.abspath(c.store_path) for c in configs])):
            dup = sorted({v for v in values if values.count(v) > 1})
            if dup:
                raise ConfigError(f"every broker needs its own {what}; {dup} is used twice", key=what)
        first = configs[0]
        for c in configs[1:]:
            for key in ("cluster", "driver"):
                if getattr(c, key) != getattr(first, key):
                    raise ConfigError(f"broker {c.broker!r} has {key} {getattr(c, key)!r}, broker {first.broker!r} "
                                      f"has {getattr(first, key)!r}: a cluster shares one tiered backend", key=key)
            if dict(c.driver_options) != dict(first.driver_options):
                raise ConfigError(f"broker {c.broker!r} has other driver options than broker {first.broker!r}: "
                                  "a cluster shares one tiered backend", key="options")
        self.configs: dict[str, StoreConfig] = {c.broker: c for c in configs}
        self.stores: dict[str, TieredMessageStore] = {}
        self.mappings: dict[str, TopicQueueMappingStore] = {}
        self.offsets: dict[str, ConsumerOffsetStore] = {}
        self.topic_configs: dict[str, TopicConfigStore] = {}
        self._readers: dict[str, TieredBrokerReader] = {}
        self._guards: dict[str, DirectPutGuard] = {}
        self._views: dict[str, tuple[tuple, TopicView]] = {}
        self._min_cache: dict[tuple[str, int, int], tuple[int, float]] = {}
        self._max_cache: dict[tuple[str, int, int], tuple[int, float]] = {}
        self._read_states: dict[tuple[str, int], _ReadState] = {}
        self._valid_topics: set[str] = set()
        self.skipped_reads = 0  # reads answered with a skip past a partly tiered generation
        self._closing = False
        self._lock = threading.RLock()
        try:
            for c in configs:
                # the store first: its identity check names a renamed broker (IDENTITY_MISMATCH)
                # before its mapping file, which records the old name, calls the file a copy
                try:
                    store = TieredMessageStore.open(c, background=background, take_over=c.broker in take_over,
                                                    read_only=read_only)
                except PrefixOwned as exc:
                    raise self._lost_broker(c, exc) from exc
                except UnknownObjects as exc:
                    # read-only opens do not ask the owner: a broker without its store id lost its disk
                    if read_store_id(c.store_path) is None:
                        raise self._lost_broker(c, exc) from exc
                    raise
                self.stores[c.broker] = store
                self.mappings[c.broker] = TopicQueueMappingStore(c.store_path, c.broker)
                self.offsets[c.broker] = ConsumerOffsetStore(c.store_path)
                self.topic_configs[c.broker] = TopicConfigStore(c.store_path, c.broker)
                # its static topics' physical queues take the cluster's puts only (static_topic.guard)
                store.put_guard = self._guards[c.broker] = DirectPutGuard(self.mappings[c.broker], c.broker)
                # every local retention run that deleted files, the store's own timer included
                store.add_local_expiry_listener(self._on_local_expiry)
        except BaseException:
            self.close()
            raise

    def _lost_broker(self, config: StoreConfig, exc: PrefixOwned | UnknownObjects) -> PrefixOwned:
        """``exc`` (another store owns the broker's tier prefix) said at cluster level: which
        broker, and the fix that works from the cluster file."""
        fix = (f"tiered static-topic takeover --cluster {self.source or 'CLUSTER_FILE'} --broker {config.broker}")
        context = {"prefix": tier_prefix(config.cluster, config.broker), **exc.context, "broker": config.broker,
                   "fix": fix}
        if "owner" not in context:  # a read-only open does not ask the owner: ask it here
            try:
                record = prefix_owner(config)
                context["owner"] = record.describe() if record is not None else "no owner record"
            except TieredStoreError as read_error:
                context["owner"] = f"its owner record cannot be read: {read_error}"
        return PrefixOwned(
            f"broker {config.broker!r} cannot open: another store owns its tier prefix {context['prefix']!r} "
            f"({context['owner']}); this is a new store at {config.store_path!r}. If broker "
            f"{config.broker!r} lost its disk or moved to this store_path, stop the old broker {config.broker!r} "
            f"and run `{fix}` (it takes the prefix over, rebuilds the broker's metadata from the tier and its "
            "static-topic mappings from the other brokers); if two brokers share the name "
            f"{config.broker!r} on one backend, give this one its own name", **context)

    @classmethod
    def open(cls, configs: Sequence[StoreConfig], *, background: bool = False,
             take_over: Collection[str] = (), read_only: bool = False) -> "Cluster":
        """Open every broker of ``configs`` (see the class contract). ``take_over``: brokers
        whose store takes its tier prefix over from the store that owned it (a broker that
        lost its disk, see :meth:`restore_broker`); the others refuse a prefix another store
        owns with :class:`PrefixOwned` naming the broker and that fix. ``read_only`` opens each
        broker's store read-only (``TieredMessageStore.open(..., read_only=True)``): for status
        and verify, which write nothing."""
        return cls(configs, background=background, take_over=take_over, read_only=read_only)

    @classmethod
    def load(cls, path: str | os.PathLike, *, background: bool = False,
             take_over: Collection[str] = (), read_only: bool = False) -> "Cluster":
        """Open the cluster a TOML file describes: ``[tiered]`` (and ``[tiered.options]``)
        holds what every broker shares; each ``[[broker]]`` table holds one broker's own keys
        (at least ``broker`` and ``store_path``) and overrides the shared ones. Relative paths
        resolve against the file's directory. See ``examples/cluster.toml``. ``take_over`` and
        ``read_only``: as :meth:`open`."""
        return cls(load_cluster_configs(path), background=background, take_over=take_over,
                   source=os.fspath(path), read_only=read_only)

    def close_broker(self, name: str, *, drain: bool = True) -> None:
        """Close one broker (its store and mapping); reads of its generations then go to the tier.

        ``drain`` (default) first tiers everything the broker holds: a forced dispatch, then
        its open key-index file is sealed and uploaded, so its messages stay findable by key
        once its ``store_path`` is gone."""
        self._check_broker(name)
        with self._lock:
            store = self.stores.get(name)
            if store is not None and drain:
                store.dispatch(force=True)
                store.index.roll_file()
                store.index.compact_and_upload()
            self.stores.pop(name, None)
            self.mappings.pop(name, None)
            self.offsets.pop(name, None)
            self.topic_configs.pop(name, None)
            self._guards.pop(name, None)
            reader = self._readers.pop(name, None)
        if reader is not None:
            reader.close()
        if store is not None:
            store.close()

    def dispatch(self, force: bool = True) -> None:
        """One synchronous dispatch round on every open broker; refreshes read-only views."""
        for store in list(self.stores.values()):
            store.dispatch(force=force)

    def close(self) -> None:
        self._closing = True  # a retention run finishing meanwhile trims nothing
        for reader in list(self._readers.values()):
            reader.close()
        self._readers.clear()
        for name in list(self.stores):
            self.stores.pop(name).close()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- local retention ---------------------------------------------------------------------

    def _on_local_expiry(self, deleted_files: int) -> None:
        """A broker's local retention deleted files (called by its store, on the thread that ran
        it: the background timer of a store opened with ``background=True``): trim."""
        if not self._closing:
            self.trim_static_mappings()

    def delete_expired_local(self, now_ms: int | None = None) -> int:
        """Local retention on every open broker now (never a message not yet tiered); each run
        that deletes files trims the mappings (:meth:`trim_static_mappings`), as the brokers'
        own background retention does. Returns how many commit-log files were deleted."""
        return sum(store.delete_expired_local(now_ms) for store in list(self.stores.values()))


__all__ = ["Cluster", "Violation", "cluster_configs_from_text", "load_cluster_configs", "read_static_topic_items"]
