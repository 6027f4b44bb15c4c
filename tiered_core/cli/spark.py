"""``tiered spark export|migrate|import|reindex|stream|verify``: the Spark jobs over a tiered store."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from typing import Iterator

from tiered_core.cli.shared import add_json_option, int_arg


def register(subparsers) -> None:
    parser = subparsers.add_parser("spark", help="jobs on Apache Spark (export, migrate, import, reindex, stream, verify)",
                                   description="Bulk jobs over a tiered store, run on Apache Spark "
                                               "(local mode unless --master says otherwise).")
    jobs = parser.add_subparsers(dest="job", metavar="JOB")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", required=True, help="the store's tiered.toml or broker.conf")
        p.add_argument("--master", default=None, help="Spark master (default $TIERED_SPARK_MASTER or local[*])")
        add_json_option(p, "the summary")

    p = jobs.add_parser("export", help="write the tiered messages as Parquet, partitioned by topic")
    common(p)
    p.add_argument("--to", required=True, help="output directory")
    p.add_argument("--format", default="parquet", choices=["parquet"], help="output format (parquet)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    p.add_argument("--topics", help="comma list of topics")
    p.add_argument("--queues", help="comma list of queue ids")
    p.add_argument("--start-time", help="epoch ms or ISO 8601 (inclusive)")
    p.add_argument("--end-time", help="epoch ms or ISO 8601 (inclusive)")
    p.set_defaults(func=_jvm_quiet_after_interrupt(run_export))

    p = jobs.add_parser("migrate", help="copy every segment to another backend, verify, write its metadata once")
    common(p)
    p.add_argument("--to-config", required=True, help="config of the target store (driver, metadata)")
    p.add_argument("--chunk-size", type=int_arg(1, "a byte count"), default=8 << 20,
                   help="bytes per read/write (default 8 MiB)")
    p.set_defaults(func=_jvm_quiet_after_interrupt(run_migrate))

    p = jobs.add_parser("import", help="bulk-load Parquet messages (the tiered schema) into the store")
    common(p)
    p.add_argument("--from", dest="source", required=True, help="Parquet file or directory")
    p.add_argument("--partitions", type=int_arg(1, "a partition count"), default=None,
                   help="Spark partitions for the load")
    p.set_defaults(func=_jvm_quiet_after_interrupt(run_import))

    p = jobs.add_parser("reindex", help="rebuild the tiered key index from the messages the tier holds",
                        description="Index the keys (UNIQ_KEY, KEYS) of the store's tiered messages and upload "
                                    "the index to the tier, so key lookups find messages that reached the tier "
                                    "unindexed (e.g. by import). The store must not run meanwhile. Running it "
                                    "again indexes again (lookups still find each message once); narrow it with "
                                    "--start-time/--end-time.")
    common(p)
    p.add_argument("--topics", help="comma list of topics")
    p.add_argument("--queues", help="comma list of queue ids")
    p.add_argument("--start-time", help="epoch ms or ISO 8601 (inclusive)")
    p.add_argument("--end-time", help="epoch ms or ISO 8601 (inclusive)")
    p.set_defaults(func=_jvm_quiet_after_interrupt(run_reindex))

    p = jobs.add_parser("stream", help="mirror topics into another store continuously (exactly once; "
                                       "resumes from its checkpoint)",
                        description="A streaming query from the store of --config to the store of --to-config. "
                                    "The target must be written by this pipeline only (no broker on it). Stops "
                                    "cleanly on SIGTERM/SIGINT; a restart with the same --checkpoint resumes.")
    common(p)
    p.add_argument("--to-config", required=True, help="config of the target store (written only by this pipeline)")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory (keep it to resume)")
    p.add_argument("--topics", help="comma list of topics (default: all)")
    p.add_argument("--max-messages-per-trigger", type=int, default=None, help="messages per micro-batch at most")
    p.add_argument("--trigger-interval", type=float, default=1.0, help="seconds between micro-batches (default 1)")
    p.add_argument("--starting-offsets", default=None, help="earliest (default), latest or a JSON offsets map; "
                                                            "used only when the checkpoint is new")
    p.add_argument("--available-now", action="store_true",
                   help="copy what the source holds now, then exit (instead of running until SIGTERM)")
    p.set_defaults(func=_jvm_quiet_after_interrupt(run_stream))

    p = jobs.add_parser("verify", help="tiered verify --deep with the per-queue walk on Spark (read-only)",
                        description="The report of `tiered verify --deep` (same findings, same --json, same exit "
                                    "status: 0 clean, 1 findings, 4 corrupt data), with every queue's messages "
                                    "read and checked in Spark tasks, for stores one machine cannot read in time. "
                                    "Read-only: no store lock, no write anywhere; safe beside a running store.")
    common(p)
    p.add_argument("--topics", nargs="+", metavar="T", help="check only these topics' queues, key-index entries "
                                                            "and local queues (comma lists allowed)")
    p.add_argument("--checksums", action="store_true",
                   help="also hash every commit-log and consume-queue object in Spark tasks and compare it with the "
                        "checksum recorded as the store wrote it (as `tiered verify --deep --checksums`)")
    p.set_defaults(func=_jvm_quiet_after_interrupt(run_verify))

    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _jvm_quiet_after_interrupt(run):
    """``run`` whose Ctrl-C first ends Spark's jobs quietly (:func:`~tiered_core.spark.session.end_jobs_quietly`):
    the command reports the interruption on one line, and the JVM, which ends when this
    process does, would log the aborted job's Java stack traces after it."""

    @functools.wraps(run)
    def wrapped(args) -> int:
        try:
            return run(args)
        except KeyboardInterrupt:
            if "pyspark" in sys.modules:
                from tiered_core.spark.session import end_jobs_quietly

                end_jobs_quietly()
            raise
    return wrapped


def _check_configs(*paths: str) -> None:
    """Load each config file now, so a bad one fails before Spark starts (ConfigError names the key)."""
    from tiered_core.config import StoreConfig

    for path in paths:
        StoreConfig.load(path)


def _session(args, conf: dict[str, str] | None = None):
    from tiered_core.spark import get_session

    return get_session(args.master, app_name=f"tiered-{args.job}", conf=conf)


def _report(args, result) -> int:
    if args.json:
        import dataclasses

        print(json.dumps(dataclasses.asdict(result)))
    else:
        print(result.summary())
    sys.stdout.flush()
    return 0


def _require_source(config) -> None:
    """The store a job reads must exist (:class:`StoreNotFound`, exit 3, as for ``tiered get``);
    its metadata is opened read-only to check it, so nothing is created."""
    from tiered_core.cli.shared import StoreNotFound, store_exists
    from tiered_core.spark.config_source import open_metadata_readonly

    if not store_exists(config):
        raise StoreNotFound(config)
    open_metadata_readonly(config).close()


def run_export(args) -> int:
    from tiered_core.cli.shared import load_config
    from tiered_core.spark.jobs.export import check_export_target
    from tiered_core.spark.jobs import export

    options = _read_filters(args)
    config = load_config(args.config)
    check_export_target(config, args.to, "overwrite" if args.overwrite else "errorifexists")
    _require_source(config)
    spark = _session(args)
    result = export(spark, args.config, args.to, format=args.format,
                    mode="overwrite" if args.overwrite else "errorifexists", **options)
    return _report(args, result)


def run_migrate(args) -> int:
    from tiered_core.cli.shared import load_config
    from tiered_core.spark.jobs import migrate
    from tiered_core.spark.jobs.migrate import check_migration

    source, target = load_config(args.config), load_config(args.to_config)
    check_migration(source, target, args.to_config)
    _require_source(source)
    return _report(args, migrate(_session(args), args.config, args.to_config, chunk=args.chunk_size))


def run_import(args) -> int:
    from tiered_core.spark.jobs import import_parquet

    _check_configs(args.config)
    return _report(args, import_parquet(_session(args), args.config, args.source, partitions=args.partitions))


def _read_filters(args) -> dict[str, str]:
    """The data source's read options given on the command line (checked before Spark starts)."""
    from tiered_core.spark.source.options import parse_read_options

    options = {k: v for k, v in (("topics", args.topics), ("queues", args.queues),
                                 ("start_time", args.start_time), ("end_time", args.end_time)) if v}
    parse_read_options(options)
    return options


def run_reindex(args) -> int:
    from tiered_core.cli.shared import load_config
    from tiered_core.spark.jobs import reindex

    options = _read_filters(args)
    _check_configs(args.config)
    _require_source(load_config(args.config))
    return _report(args, reindex(_session(args), args.config, **options))


def run_verify(args) -> int:
    """``tiered spark verify``: the report of ``tiered verify --deep`` (``--checksums``: and of its
    hashing pass), its exit status."""
    from tiered_core.cli.progress import Progress
    from tiered_core.cli.shared import StoreNotFound, load_config, print_json, store_exists, topics_arg
    from tiered_core.cli.verify_commands import print_report
    from tiered_core.spark.config_source import require_shared_backend
    from tiered_core.spark.jobs.verify import session_conf, verify

    config = load_config(args.config)
    if not store_exists(config):
        raise StoreNotFound(config)
    require_shared_backend(config)  # before Spark starts
    topics = topics_arg(args.topics)
    report = verify(_session(args, session_conf(args.master)), args.config, topics=topics, checksums=args.checksums,
                    progress=Progress)
    if args.json:
        print_json(report.as_dict())
    else:
        print_report(report)
    sys.stdout.flush()
    return report.exit_code


def run_stream(args) -> int:
    import dataclasses
    import threading

    from tiered_core.spark.jobs.mirror import run_mirror, stop_on_signals

    stop = threading.Event()
    # Handlers first: a SIGTERM during Spark's start-up still ends the run cleanly (exit 0).
    with stop_on_signals(stop) as received:
        spark = _stream_session(args)
        result = run_mirror(spark, args.config, args.to_config, args.checkpoint, topics=args.topics,
                            max_messages=args.max_messages_per_trigger, trigger_seconds=args.trigger_interval,
                            available_now=args.available_now, starting_offsets=args.starting_offsets,
                            stop=stop, handle_signals=False)
    if received:
        result = dataclasses.replace(result, stopped="signal")
    print(f"tiered spark stream: {result.summary()}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(dataclasses.asdict(result)))
        sys.stdout.flush()
    return 0


#: The command-line option of each streaming-source option the command sets.
_STREAM_FLAGS = {"topics": "--topics", "startingOffsets": "--starting-offsets",
                 "maxMessagesPerTrigger": "--max-messages-per-trigger"}


def _stream_session(args):
    """Check the stream's configs, paths and options (typed errors naming the option and
    its value, before Spark starts), then start Spark."""
    from tiered_core.cli.shared import load_config, store_exists
    from tiered_core.errors import InvalidOption
    from tiered_core.spark import get_session
    from tiered_core.spark.jobs.mirror import check_mirror
    from tiered_core.spark.source.options import parse_stream_options
    from tiered_core.spark.sink import parse_sink_options
    from tiered_core.spark.source.stream import check_starting_offsets, source_queues

    _check_configs(args.config, args.to_config)
    check_mirror(args.config, args.to_config, args.checkpoint)
    if args.max_messages_per_trigger is not None and args.max_messages_per_trigger <= 0:
        raise InvalidOption(f"--max-messages-per-trigger must be > 0, got {args.max_messages_per_trigger}",
                            option="--max-messages-per-trigger", value=args.max_messages_per_trigger)
    if not args.trigger_interval > 0:
        raise InvalidOption(f"--trigger-interval must be > 0 seconds, got {args.trigger_interval}",
                            option="--trigger-interval", value=args.trigger_interval)
    source_options = {"config": args.config}
    if args.topics:
        source_options["topics"] = args.topics
    if args.starting_offsets:
        source_options["startingOffsets"] = args.starting_offsets
    config = load_config(args.config)
    for checked in (config, load_config(args.to_config)):
        checked.open_driver().close()  # its options, as a store opens them (creates nothing), before Spark
    with _cli_option_names(args):
        _, options = parse_stream_options(source_options)
        parse_sink_options({"config": args.to_config, "checkpointLocation": args.checkpoint})
        if args.available_now or store_exists(config):
            _require_source(config)
        else:
            print(f"tiered spark stream: the source store {config.store_path!r} does not exist yet; the stream "
                  "waits for it (nothing is created there)", file=sys.stderr, flush=True)
        check_starting_offsets(config, options)
        if options.topics:
            held = {topic for topic, _ in source_queues(config)}
            missing = sorted(options.topics - held)
            if missing and args.available_now:
                raise InvalidOption(f"option 'topics' names topic(s) {', '.join(map(repr, missing))}, which the "
                                    f"source store does not hold (its topics: {', '.join(sorted(held)) or 'none'}); "
                                    "with --available-now nothing would be copied from them",
                                    option="topics", value=args.topics)
            for topic in missing:
                print(f"tiered spark stream: topic {topic!r} is not in the source store yet; it is mirrored from "
                      "its first message once it appears", file=sys.stderr, flush=True)
    return get_session(args.master, app_name="tiered-stream", conf={"spark.ui.showConsoleProgress": "false"})


@contextlib.contextmanager
def _cli_option_names(args) -> Iterator[None]:
    """Inside it, an :class:`InvalidOption` naming a streaming-source option is re-raised
    naming the command-line option that set it, with its value."""
    from tiered_core.errors import InvalidOption

    try:
        yield
    except InvalidOption as exc:
        flag = _STREAM_FLAGS.get(str(exc.context.get("option")))
        if flag is None:
            raise
        value = getattr(args, flag[2:].replace("-", "_"), None)
        raise InvalidOption(f"{flag} {value!r}: {exc.message}", **dict(exc.context, option=flag, value=value)) \
            from None
