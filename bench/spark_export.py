"""Spark export throughput: local[1] vs local[2], and vs one process reading through the flat API.

    python bench/spark_export.py [--json] [--queues 4] [--topics 2] [--messages 25000] [--body-size 256]

A posix store (fsync off) is written through the container layer, then exported to
Parquet three ways, each measured as messages per second of wall time (session start-up
excluded; each Spark session first runs a small warm-up export):

* ``single_process_msgs_per_s``: one Python process reads every queue through
  ``FlatMessageFile`` (consume-queue units in batches of 4096, then the commit-log range they
  span), decodes the messages and writes Parquet partitioned by topic with pyarrow;
* ``local1_msgs_per_s`` / ``local2_msgs_per_s``: ``tiered_core.spark.jobs.export`` on
  ``local[1]`` and ``local[2]``.

Figures: ``scaling_ratio`` = local[2] / local[1] (ideal 2.0 on 2 free cores);
``ratio_vs_single_process`` = local[2] / single process. The machine's core count and load
are printed beside them: on a shared machine the ratios move with the neighbours.

Reading the figures: the single process hands whole Arrow tables to pyarrow's C++ Parquet
writer, while Spark moves each Python task's Arrow batches into the JVM, turns them into
rows (the map and array columns cost most) and encodes Parquet there. Per core Spark is
therefore slower; it wins by spreading queues over more cores and machines than one
process has, which ``scaling_ratio`` shows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from tiered_core.codec.consume_queue import iter_cq_units  # noqa: E402
from tiered_core.codec.message import decode_message  # noqa: E402
from tiered_core.config import StoreConfig  # noqa: E402
from tiered_core.flat import FlatFileStore  # noqa: E402
from sample_store import SampleSpec, write_sample  # noqa: E402  (tests/ is on sys.path)
from tiered_core.spark.source.arrow_rows import messages_to_arrow  # noqa: E402
from tiered_core.spark.source.schema import arrow_schema  # noqa: E402

BATCH = 4096


def single_process_export(config_path: str, out: str) -> int:
    """Read every message through the flat API and write Parquet by topic; returns the count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    config = StoreConfig.load(config_path)
    driver, metadata = config.open_driver(), config.open_metadata()
    schema = arrow_schema()
    total = 0
    try:
        store = FlatFileStore(driver, metadata, config.flat_config())
        store.load()
        for flat in sorted(store.files(), key=lambda f: (f.topic, f.queue_id)):
            batches = []
            offset, end = flat.consume_queue_min_offset(), flat.consume_queue_commit_offset()
            while offset < end:
                count = min(BATCH, end - offset)
                units = list(iter_cq_units(flat.get_consume_queue(offset, count)))
                first = units[0].commitlog_offset
                span = flat.get_commit_log(first, units[-1].commitlog_offset + units[-1].size - first)
                batches.append(messages_to_arrow([decode_message(span, u.commitlog_offset - first) for u in units],
                                                 schema))
                offset += count
            table = pa.Table.from_batches(batches, schema).drop_columns(["topic"])
            directory = os.path.join(out, f"topic={flat.topic}")
            os.makedirs(directory, exist_ok=True)
            pq.write_table(table, os.path.join(directory, f"queue-{flat.queue_id}.parquet"))
            total += table.num_rows
        store.shutdown()
    finally:
        metadata.close()
        driver.close()
    return total


def spark_export(master: str, config_path: str, workdir: str, warm_topic: str) -> tuple[float, int, int]:
    """(seconds, rows, partitions) of an export on a fresh session with ``master``."""
    from pyspark.sql import SparkSession

    from tiered_core.spark import get_session
    from tiered_core.spark.jobs import export

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    spark = get_session(master, app_name=f"bench-{master}")
    # Warm-up: Python workers started, code paths loaded (one queue is enough).
    export(spark, config_path, os.path.join(workdir, f"warm-{master}"), topics=warm_topic, queues="0")
    start = time.perf_counter()
    result = export(spark, config_path, os.path.join(workdir, f"out-{master}"))
    seconds = time.perf_counter() - start
    return seconds, result.rows, result.partitions


def add_store_arguments(parser: argparse.ArgumentParser, *, queues: int, messages: int) -> None:
    """The options of the sample store a Spark bench writes (and ``--workdir``, ``--json``)."""
    parser.add_argument("--topics", type=int, default=2)
    parser.add_argument("--queues", type=int, default=queues, help="queues per topic")
    parser.add_argument("--messages", type=int, default=messages, help="messages per queue")
    parser.add_argument("--body-size", type=int, default=256)
    parser.add_argument("--workdir", default=None, help="directory for the store and outputs (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def add_round_arguments(parser: argparse.ArgumentParser) -> None:
    """``--rounds`` and ``--master`` of the benches that time paths in rounds on one session."""
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")


@contextlib.contextmanager
def bench_workdir(args: argparse.Namespace, prefix: str) -> Iterator[str]:
    """``--workdir``, or a temporary directory removed afterwards."""
    workdir = args.workdir or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(workdir, exist_ok=True)
    try:
        yield workdir
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def write_store(workdir: str, args: argparse.Namespace) -> tuple[str, SampleSpec, int]:
    """A posix store (fsync off) in ``workdir`` holding the sample ``args`` ask for:
    (config path, spec, messages written)."""
    config_path = os.path.join(workdir, "tiered.toml")
    with open(config_path, "w") as fh:
        fh.write('[tiered]\nstore_path = "./store"\n[tiered.options]\nfsync = false\n')
    spec = SampleSpec(topics=tuple(f"bench{i}" for i in range(args.topics)), queues=args.queues,
                      messages=args.messages, body_size=args.body_size)
    return config_path, spec, write_sample(StoreConfig.load(config_path), spec)


def print_report(report: dict, as_json: bool, targets: dict[str, float] | None = None) -> None:
    """One JSON object, or one line per figure (the machine's core count and load added);
    each figure with a target also gets ``targets[name] = {"target", "pass"}`` and a PASS/FAIL line."""
    targets = targets or {}
    report.update(cpu_count=os.cpu_count(), load_average_1m=round(os.getloadavg()[0], 2))  # the neighbours
    if targets:
        report["targets"] = {name: {"target": limit, "pass": report[name] >= limit} for name, limit in targets.items()}
    if as_json:
        print(json.dumps(report))
        return
    for key, value in report.items():
        if key != "targets":
            print(f"{key:32s} {value}")
    for name, limit in targets.items():
        print(f"{name:32s} {report[name]} (target >= {limit}) {'PASS' if report['targets'][name]['pass'] else 'FAIL'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_store_arguments(parser, queues=4, messages=25_000)
    args = parser.parse_args(argv)

    with bench_workdir(args, "tiered-spark-bench-") as workdir:
        started = time.perf_counter()
        config_path, spec, messages = write_store(workdir, args)
        write_seconds = time.perf_counter() - started

        started = time.perf_counter()
        single_rows = single_process_export(config_path, os.path.join(workdir, "out-single"))
        single_seconds = time.perf_counter() - started

        runs = {}
        for master in ("local[1]", "local[2]"):
            seconds, rows, partitions = spark_export(master, config_path, workdir, spec.topics[0])
            if rows != messages:
                raise SystemExit(f"{master} exported {rows} of {messages} messages")
            runs[master] = (seconds, partitions)
        if single_rows != messages:
            raise SystemExit(f"the single-process export wrote {single_rows} of {messages} messages")

        single_rate = messages / single_seconds
        rate1 = messages / runs["local[1]"][0]
        rate2 = messages / runs["local[2]"][0]
        report = {
            "messages": messages,
            "body_size": args.body_size,
            "partitions": runs["local[2]"][1],
            "write_msgs_per_s": round(messages / write_seconds),
            "single_process_msgs_per_s": round(single_rate),
            "local1_msgs_per_s": round(rate1),
            "local2_msgs_per_s": round(rate2),
            "scaling_ratio": round(rate2 / rate1, 3),
            "ratio_vs_single_process": round(rate2 / single_rate, 3),
        }
    print_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
