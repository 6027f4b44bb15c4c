"""``tiered takeover --config FILE``: make this store the owner of its tier prefix (failover).

The store named by the config claims ``{cluster}/{broker}/`` with the next epoch, seals the
previous owner's last segments (its next write fails with FENCED) and rebuilds its own
metadata from the backend where it does not list everything. Stop the old broker first
when you can: fencing stops its tiered writes, not its local ones.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "takeover", help="take the tier prefix over from another store (deliberate failover)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    p.add_argument("--config", required=True, metavar="FILE",
                   help="tiered.toml or broker.conf of the store that becomes the owner")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tiered_core.access.store import TieredMessageStore
    from tiered_core.config import StoreConfig

    config = StoreConfig.load(args.config)
    with TieredMessageStore.open(config, take_over=True) as store:
        previous = store.ownership.took_over_from
        record = store.ownership.record
        assert record is not None
        queues = len(store.flat_files.files())
    if previous is None:
        print(f"store {record.store_id} already owns {store.ownership.prefix!r} (epoch {record.epoch}); "
              "nothing to take over")
    else:
        print(f"took {store.ownership.prefix!r} over from {previous.describe()}: now store "
              f"{record.store_id} at epoch {record.epoch}; {queues} tiered queue(s) recovered")
    return 0
