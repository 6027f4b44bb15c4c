"""Shared by the static-topic tests: three brokers (a, b, c) of one cluster, reading a logic queue whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from tiered_core import StoreConfig


def broker_configs(root: Path, names=("a", "b", "c"), *, driver: str = "posix",
                   options: dict[str, Any] | None = None, **overrides: Any) -> list[StoreConfig]:
    """One StoreConfig per broker: its own store_path under ``root``; one shared tiered
    backend (``driver`` with ``options``; posix at ``root/tier`` by default) and cluster."""
    options = {"root": str(root / "tier")} if options is None else options
    return [StoreConfig.from_mapping({"store_path": str(root / name), "driver": driver, "cluster": "static-it",
                                      "broker": name, "options": dict(options), "read_ahead_cache_bytes": 0,
                                      **overrides})
            for name in names]


class LogicRead(NamedTuple):
    """What :func:`read_logic_queue` saw: the messages, the status of each call, the last result."""

    messages: list
    statuses: list
    last: Any


def cluster_toml(cluster: str, brokers=("a", "b", "c"), *, shared: str = "") -> str:
    """A cluster file: POSIX tier at ./tier, one ``[[broker]]`` with store_path ./NAME per broker;
    ``shared`` adds lines to ``[tiered]``."""
    head = f'[tiered]\ndriver = "posix"\ncluster = "{cluster}"\n{shared}[tiered.options]\nroot = "./tier"\n'
    return head + "".join(f'[[broker]]\nbroker = "{b}"\nstore_path = "./{b}"\n' for b in brokers)


def read_logic_queue(cluster, topic: str, queue: int, max_count: int = 64, *, skips: bool = False) -> LogicRead:
    """Every message of logic queue ``queue`` from logic offset 0, ``max_count`` per
    ``get_message``, until an overflow. Each call must move ``next_begin_offset`` on; each but the
    last must be FOUND unless ``skips`` allows the counted NO_MATCHED skip at a generation boundary."""
    from tiered_core.access.results import GetMessageStatus

    out, offset, statuses = [], 0, []
    for _ in range(10_000):
        res = cluster.get_message("g", topic, queue, offset, max_count)
        statuses.append(res.status)
        if res.status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
            return LogicRead(out, statuses, res)
        assert skips or res.status is GetMessageStatus.FOUND, (queue, offset, res.status)
        assert res.next_begin_offset > offset, (queue, offset, res.status)  # never stalls
        out.extend(res.messages)
        offset = res.next_begin_offset
    raise AssertionError(f"the read of {topic}/{queue} did not end")
