"""``tiered takeover --config FILE``: make this store the owner of its tier prefix (failover).

The store named by the config claims ``{cluster}/{broker}/`` with the next epoch, seals the
previous owner's last segments (its next write fails with FENCED) and rebuilds its own
metadata from the backend where it does not list everything. Stop the old broker first
when you can: fencing stops its tiered writes, not its local ones.

The store must exist (its store_path or metadata): a config naming none is refused (exit
3) unless --create says to make a new store there -- a failover to a new store_path, or
after the local disk was lost.
"""

from __future__ import annotations

import argparse
import dataclasses

from tiered_core.cli.shared import (
    StoreNotFound, add_json_option, check_store_path, load_config, print_json, store_exists,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "takeover", help="take the tier prefix over from another store (deliberate failover)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    p.add_argument("--config", required=True, metavar="FILE",
                   help="tiered.toml or broker.conf of the store that becomes the owner")
    p.add_argument("--create", action="store_true",
                   help="create the store when the config names none (a failover to a new store_path, or "
                        "after a lost local disk); without it such a config is refused with exit 3")
    add_json_option(p, "the new owner record, the previous one and the recovered queue count")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``tiered takeover``: open the store with ``take_over=True`` and report the epochs."""
    from tiered_core.access.tiered_store import TieredMessageStore

    config = load_config(args.config)
    check_store_path(config)
    if not args.create and not store_exists(config):
        raise StoreNotFound(config, hint="to create a new store there and take the tier prefix over (a failover "
                                         "to a new store_path, or a lost local disk), run "
                                         f"`tiered takeover --config {args.config} --create`")
    with TieredMessageStore.open(config, take_over=True) as store:
        previous = store.ownership.took_over_from
        record = store.ownership.record
        assert record is not None
        queues = len(store.flat_files.files())
    if getattr(args, "json", False):
        print_json({"prefix": store.ownership.prefix, "owner": dataclasses.asdict(record),
                    "took_over_from": dataclasses.asdict(previous) if previous is not None else None,
                    "queues": queues})
        return 0
    if previous is None:
        print(f"store {record.store_id} already owns {store.ownership.prefix!r} (epoch {record.epoch}); "
              "nothing to take over")
    else:
        print(f"took {store.ownership.prefix!r} over from {previous.describe()}: now store "
              f"{record.store_id} at epoch {record.epoch}; {queues} tiered queue(s) recovered")
    return 0
