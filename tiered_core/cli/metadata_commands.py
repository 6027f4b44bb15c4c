"""``tiered metadata ACTION``: work on a metadata store.

- ``convert --from PATH --to PATH [--from-format NAME] [--to-format NAME] [--force]``:
  copy a store into a new one (JSON <-> SQLite, formats from the file extensions).
- ``rebuild --config FILE [--force] [--no-timestamps] [--progress-every N]``: reconstruct
  lost metadata from ``driver.list()`` of the configured backend
  (:mod:`tiered_core.ops.rebuild`).
- ``checksum --config FILE [--apply]``: record a checksum for each segment whose record has
  none, once a deep verify finds the store whole (:mod:`tiered_core.ops.record_checksums`).

Each action is a ``_register_<name>(actions)`` function adding its sub-parser and
setting ``func`` to a callable ``(args) -> exit code``. With ``--json`` an action's
human-readable lines go to stderr and stdout holds one JSON object: the stats the action
left in ``args.result`` (see :func:`_with_json`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from typing import Callable

from tiered_core.cli.shared import add_json_option, int_arg, load_config, print_json
from tiered_core.metadata.convert import FORMAT_BY_EXTENSION, convert

#: Actions in the order ``tiered metadata --help`` lists them.
ACTIONS: list[str] = ["convert", "rebuild", "checksum"]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("metadata", help=f"metadata store tools: {', '.join(ACTIONS)}",
                                   description="Work on a tiered-store metadata store.")
    actions = parser.add_subparsers(dest="metadata_action", metavar="ACTION")
    for name in ACTIONS:
        _REGISTER[name](actions)

    def usage(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=usage)


def _register_convert(actions: argparse._SubParsersAction) -> None:
    known = ", ".join(f"{ext} = {name}" for ext, name in FORMAT_BY_EXTENSION.items())
    p = actions.add_parser(
        "convert", help="copy a metadata store into a new one (JSON <-> SQLite)",
        description="Copy every topic, queue and file segment of one metadata store into a new "
                    f"store. Formats come from the file extensions ({known}) unless given. "
                    "The copy is verified before it is moved into place; the source is only read.")
    p.add_argument("--from", dest="source", required=True, metavar="PATH", help="the store to read")
    p.add_argument("--to", dest="target", required=True, metavar="PATH", help="the store to create")
    p.add_argument("--from-format", dest="source_format", metavar="NAME",
                   help="store name of the source (json, sqlite, or a plugin's)")
    p.add_argument("--to-format", dest="target_format", metavar="NAME", help="store name of the target")
    p.add_argument("--force", action="store_true", help="replace an existing target")
    add_json_option(p, "the copy's counts")
    p.set_defaults(func=_with_json(run_convert))


def run_convert(args: argparse.Namespace) -> int:
    from tiered_core.local.local_store import acquire_store_lock, release_store_lock

    store_dir = _store_directory_of(args.target)
    # A target in a store's directory is written only while that store is closed (its lock).
    lock = acquire_store_lock(store_dir) if store_dir is not None else None
    try:
        _refuse_another_stores_metadata(args)
        stats = convert(args.source, args.target, source_format=args.source_format,
                        target_format=args.target_format, force=args.force)
    finally:
        if lock is not None:
            release_store_lock(lock)
    args.result = stats
    print(f"converted {stats.topics} topic(s), {stats.queues} queue(s), {stats.segments} file segment(s) "
          f"from {args.source!r} to {args.target!r} (max topic id {stats.max_topic_id})")
    return 0


def _store_directory_of(path: str) -> str | None:
    """The store directory ``path`` lies directly in (it holds a store id file), or None."""
    from tiered_core.flat.ownership import STORE_ID_FILE

    directory = os.path.dirname(os.path.abspath(path))
    return directory if os.path.exists(os.path.join(directory, STORE_ID_FILE)) else None


def _refuse_another_stores_metadata(args: argparse.Namespace) -> None:
    """Refuse (IDENTITY_MISMATCH, nothing written) to replace a metadata database that records
    one store's id with one that records another's: the target store would describe another
    store's tier (a copy-pasted path, not a restore of its own backup)."""
    from tiered_core.errors import IdentityMismatch, TieredStoreError
    from tiered_core.metadata import open_metadata_read_only
    from tiered_core.metadata.convert import format_for_path
    from tiered_core.ops import identity as ids

    if not os.path.exists(args.target):
        return

    def store_id(path: str, explicit: str | None) -> str | None:
        try:
            metadata = open_metadata_read_only(format_for_path(path, explicit), path)
        except TieredStoreError:
            return None  # the conversion names what is wrong with it
        try:
            return ids.metadata_store_id(metadata)
        finally:
            metadata.close()

    target_id = store_id(args.target, args.target_format)
    source_id = store_id(args.source, args.source_format)
    if target_id is not None and source_id is not None and target_id != source_id:
        raise IdentityMismatch(
            f"{args.target!r} is the metadata of store {target_id}, and {args.source!r} that of store {source_id}: "
            "converting one over the other would make the first store describe the second one's tier. Nothing "
            "was written. To restore a store's metadata, convert a backup of its own; to rebuild it from its "
            "tier, run `tiered metadata rebuild --config FILE --force`", field="store_id", recorded=target_id,
            configured=source_id, record=args.target, path=args.target)


def _register_rebuild(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "rebuild", help="reconstruct lost metadata from the backend's listing",
        description="Rebuild the metadata store named by a config file (topics, queues, file segments) "
                    "from the segments its driver lists under the configured cluster and broker. "
                    "Refuses a metadata store that is not empty unless --force; with --force a "
                    "database that cannot be opened is moved aside (kept) and rebuilt. Refuses to run "
                    "while the store is open.")
    p.add_argument("--config", required=True, metavar="FILE",
                   help="tiered.toml or broker.conf naming the driver and the metadata store")
    p.add_argument("--force", action="store_true",
                   help="replace the contents of a metadata store that is not empty, or set aside one "
                        "that cannot be read")
    p.add_argument("--no-timestamps", dest="timestamps", action="store_false",
                   help="do not read message headers for segment times (use the rebuild time)")
    p.add_argument("--progress-every", type=int_arg(0, "a number of segments"), default=1000, metavar="N",
                   help="print progress every N segments (default 1000; 0 = never)")
    add_json_option(p, "the rebuild's counts (progress goes to stderr)")
    p.set_defaults(func=_with_json(run_rebuild))


def _refuse_a_prefix_of_another_store(config) -> None:
    """A rebuild writes this store's metadata from the tier prefix: refuse (PREFIX_OWNED,
    IDENTITY_MISMATCH) when the prefix's owner record names another store or another driver's
    layout, or when the config names another store than the directory records (IDENTITY_MISMATCH),
    before anything is created. (A lost disk is a take-over: it rebuilds too.)"""
    from tiered_core.errors import PrefixOwned
    from tiered_core.flat.ownership import PrefixOwnership, read_store_id

    from tiered_core.ops import identity as ids

    store_id = read_store_id(config.store_path) if os.path.isdir(config.store_path) else None
    with config.open_driver() as driver:
        ownership = PrefixOwnership(driver, config.cluster, config.broker, store_id or "", config.store_path)
        owner = ownership.current()
        ownership.check_driver(owner)
        orphaned = owner is None and ownership.holds_data()
    # A config that names another store than the directory records (a renamed broker or
    # cluster, another driver) would rebuild the directory's metadata from another prefix. A
    # moved tier location is one when the prefix there holds this store's owner record.
    local = ids.read_local(config.store_path) if os.path.isdir(config.store_path) else None
    for found in ids.mismatches(ids.StoreIdentity.of(config), [(repr(ids.identity_path(config.store_path)), local)]):
        if found.field != "tier" or owner is None or owner.store_id != store_id:
            raise found.error(config)
    if orphaned:
        # Rebuilt from the tier, the metadata would list what another store may have written
        # since the records were deleted: the proof a reclaim of the prefix needs would be lost.
        raise PrefixOwned(
            f"tier prefix {ownership.prefix!r} holds data but no owner record (.tiered-owner/ was deleted): "
            "whose data it is cannot be told, so its metadata is not rebuilt from it. Nothing was created. Take "
            f"the prefix over instead: `tiered takeover --config {config.source or 'FILE'}` (add --create for a "
            "store_path that holds no store); it rebuilds the metadata, at an epoch that fences any other store",
            prefix=ownership.prefix, store_path=config.store_path)
    if owner is None and not orphaned and not os.path.isdir(config.store_path):
        # Nothing in the tier and no directory: a typo in store_path (or in the tier's
        # location). A rebuild would create an empty store there.
        from tiered_core.cli.shared import StoreNotFound

        raise StoreNotFound(config, f"the tier prefix {ownership.prefix!r} holds no data either, so there is "
                                    "nothing to rebuild: check store_path and the tier's location (nothing was "
                                    "created)")
    if owner is not None and owner.store_id != store_id:
        raise PrefixOwned(
            f"tier prefix {ownership.prefix!r} is owned by {owner.describe()}, not by the store at "
            f"{config.store_path!r}: its metadata is rebuilt where that store lives. Nothing was created. For a "
            f"failover to this store_path (a lost disk), run `tiered takeover --config {config.source or 'FILE'} "
            "--create`: it rebuilds the metadata here", prefix=ownership.prefix, owner=owner.describe(),
            owner_id=owner.store_id, store_path=config.store_path)


def run_rebuild(args: argparse.Namespace) -> int:
    from tiered_core.errors import MetadataError
    from tiered_core.local.local_store import acquire_store_lock, release_store_lock
    from tiered_core.metadata import set_aside
    from tiered_core.ops.rebuild import rebuild_metadata
    from tiered_core.flat.ownership import read_store_id
    from tiered_core.ops import identity as ids
    from tiered_core.ops.reconcile import metadata_refusal

    config = load_config(args.config)
    target = config.effective_metadata_path()
    _refuse_a_prefix_of_another_store(config)  # before anything is created
    os.makedirs(config.store_path, exist_ok=True)
    lock = acquire_store_lock(config.store_path)  # never under a running store
    try:
        print(f"rebuilding {config.metadata} metadata {target!r} from driver {config.driver!r} "
              f"(cluster {config.cluster!r}, broker {config.broker!r})", flush=True)

        def progress(done: int, total: int) -> None:
            print(f"  {done}/{total} segments", flush=True)

        try:
            metadata = config.open_metadata()
        except MetadataError as exc:
            if exc.context.get("cause"):  # in use or out of reach: not damaged, never set aside
                raise metadata_refusal(exc, target, "") from exc
            if not args.force:
                raise MetadataError(f"{exc.message}; with --force it is moved aside (kept, never deleted) "
                                    "and rebuilt from the backend", path=target) from exc
            moved = set_aside(target)
            print(f"metadata store {target!r} cannot be opened ({exc.message}); kept as {', '.join(moved)}",
                  flush=True)
            metadata = config.open_metadata()
        with config.open_driver() as driver, metadata:
            # Records this very store wrote keep each segment's checksum: verify --checksums then still
            # finds an object put in a segment's place, which a rebuild from the listing would take.
            own_records = ids.metadata_store_id(metadata) not in (None, "") and \
                ids.metadata_store_id(metadata) == read_store_id(config.store_path)
            stats = rebuild_metadata(driver, metadata, cluster=config.cluster, broker=config.broker,
                                     force=args.force, timestamps=args.timestamps, progress=progress,
                                     progress_every=args.progress_every, keep_checksums=own_records)
            # The records now describe this store's tier: so does its identity (the config was
            # checked against the directory's above), whatever store's database this was.
            ids.write_metadata(metadata, ids.StoreIdentity.of(config), read_store_id(config.store_path))
    finally:
        release_store_lock(lock)
    args.result = stats
    print(f"rebuilt {stats.topics} topic(s), {stats.queues} queue(s), {stats.segments} file segment(s) "
          f"({stats.sealed} sealed, {stats.bytes} bytes; {stats.timestamps_read} timestamps read) "
          f"in {stats.elapsed_s:.2f} s")
    if stats.checksums_kept:
        print(f"kept the checksums of {stats.checksums_kept} segment(s) from the records replaced "
              "(`tiered verify --checksums` compares each object with the bytes written to it)")
    if stats.topic_ids_recovered or stats.topic_ids_new:
        print(f"topic ids: {stats.topic_ids_recovered} recovered from the key index, {stats.topic_ids_new} new")
    if stats.topic_ids_new:
        print(f"warning: {stats.topic_ids_new} topic(s) were not found in the tiered key index and got new ids; "
              "key lookups of their older messages need the key index rebuilt")
    for line in stats.heads_without_messages_text():
        print(f"note: {line}")
    if stats.strays:
        shown = ", ".join(repr(p) for p in stats.stray_examples)
        print(f"skipped {stats.strays} object(s) that are not segment paths, e.g. {shown}")
    if stats.not_adopted:
        print(f"did not adopt {len(stats.not_adopted)} segment-named object(s) that hold no messages of this "
              f"store, e.g. {stats.not_adopted[0]!r}")
    if stats.strays or stats.not_adopted:
        print(f"objects the metadata does not list keep a store from opening: `tiered repair --config {args.config} --apply` "
              "moves them to the quarantine (`tiered verify` lists them first)")
    return 0


def _register_checksum(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "checksum", help="record checksums for segments recorded without one (older versions, rebuilds, take-overs)",
        description="Record the CRC-32 of each commit-log and consume-queue segment whose record has none "
                    "(written by an older version, or recorded by a metadata rebuild or a take-over), so that "
                    "`tiered verify --checksums` finds any later change to its bytes. Runs `tiered verify --deep` "
                    "first and records nothing unless it finds the store whole. Without --apply it only counts "
                    "them and writes nothing (as verify, also beside a running store); with --apply it writes "
                    "the metadata only, and refuses to run while the store is open.")
    p.add_argument("--config", required=True, metavar="FILE", help="tiered.toml or broker.conf of the store")
    p.add_argument("--apply", action="store_true", help="record the checksums (default: a dry run that counts them)")
    add_json_option(p, "the counts (progress goes to stderr)")
    p.set_defaults(func=_with_json(run_checksum))


def run_checksum(args: argparse.Namespace) -> int:
    from tiered_core.access.writer_session import WriterSession
    from tiered_core.cli.progress import Progress
    from tiered_core.cli.shared import StoreNotFound
    from tiered_core.ops.record_checksums import record_checksums

    config = load_config(args.config)
    if not os.path.exists(config.effective_metadata_path()):  # (the session would create store_path)
        raise StoreNotFound(config, "there is no store to record checksums for (nothing was created)")

    def progress(done: int, total: int) -> None:
        if done == total or done % 100 == 0:
            print(f"  {done}/{total} segments hashed", flush=True)

    if args.apply:
        # The store's lock (it is not running) and its prefix's claim, held until the last record is written.
        with WriterSession(config, writer="tiered metadata checksum") as session:
            print(f"verifying the store at {config.store_path!r} (deep) before recording checksums", flush=True)
            stats = record_checksums(config, session.driver, session.metadata, apply=True, progress=progress,
                                     verify_progress=Progress)
    else:  # a dry run only reads, as verify does: no lock, no claim, no write
        from tiered_core.flat.ownership import ReadOnlyDriver
        from tiered_core.metadata import open_metadata_read_only

        print(f"verifying the store at {config.store_path!r} (deep); a dry run records nothing", flush=True)
        driver = ReadOnlyDriver(config.open_driver(), "a dry run of tiered metadata checksum only reads")
        try:
            metadata = open_metadata_read_only(config.metadata, config.effective_metadata_path())
            try:
                stats = record_checksums(config, driver, metadata, verify_progress=Progress)
            finally:
                metadata.close()
        finally:
            driver.close()
    args.result = stats
    print(f"verify --deep: clean ({stats.objects_verified} object(s) listed); {stats.without_checksum} of "
          f"{stats.segments} segment(s) have no checksum"
          + (f", e.g. {', '.join(map(repr, stats.examples))}" if stats.examples else ""))
    if not args.apply:
        if stats.without_checksum:
            print(f"dry run: nothing recorded; `tiered metadata checksum --config {args.config} --apply` records them")
        return 0
    print(f"recorded the checksums of {stats.recorded} segment(s) ({stats.bytes_hashed:,} bytes hashed)"
          + (f"; left {stats.skipped} whose record or object changed meanwhile" if stats.skipped else ""))
    return 0


def _with_json(action: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``action`` as is, or with ``--json``: its printed lines on stderr, then the dataclass it
    left in ``args.result`` as one JSON object on stdout."""
    def run(args: argparse.Namespace) -> int:
        if not getattr(args, "json", False):
            return action(args)
        with contextlib.redirect_stdout(sys.stderr):
            code = action(args)
        result = getattr(args, "result", None)
        print_json(dataclasses.asdict(result) if dataclasses.is_dataclass(result) else result)
        return code

    run.__doc__ = action.__doc__
    return run


#: Kept for callers of the earlier placeholder.
rebuild = run_rebuild


_REGISTER: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "convert": _register_convert,
    "rebuild": _register_rebuild,
    "checksum": _register_checksum,
}
