"""The re-index job against a read of every message of the same store, in the same run.

    python bench/spark_reindex.py [--json] [--topics 2] [--queues 2] [--messages 50000] [--body-size 256]
                                  [--rounds 3] [--master local[2]]

A posix store (fsync off, SQLite metadata) is written through the container layer, without
a key index, before anything is timed (``--topics`` x ``--queues`` queues of ``--messages``
messages, two keys each). One Spark session runs both paths once to warm up, then
``--rounds`` rounds of each in turn; figures are medians, in messages per second of wall
time.

- ``reindex_msgs_per_s``: :func:`tiered_core.spark.jobs.reindex` of the whole store (read,
  keys to the driver, index puts, seal, upload). Each round indexes everything again (a
  re-run's duplicates are harmless), so every round does the same work.
- ``read_msgs_per_s``: ``spark.read.format("tiered")`` of the same store into the ``noop``
  sink -- the validated read any job over every message needs.
- ``reindex_vs_read``: reindex / read, for information (no target: what the job adds to the
  read is the driver's index puts, one thread).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from spark_export import add_round_arguments, add_store_arguments, bench_workdir, print_report, write_store  # noqa: E402  (bench/ is on sys.path)
from spark_stream import timed  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_store_arguments(parser, queues=2, messages=50_000)
    add_round_arguments(parser)
    args = parser.parse_args(argv)

    from tiered_core.spark import get_session
    from tiered_core.spark.jobs import reindex

    with bench_workdir(args, "tiered-spark-reindex-bench-") as workdir:
        config_path, _spec, messages = write_store(workdir, args)  # before anything is timed
        spark = get_session(args.master, app_name="bench-spark-reindex")
        results = []

        def run_reindex() -> None:
            result = reindex(spark, config_path, progress=None)
            if result.indexed != messages:
                raise SystemExit(f"reindex indexed {result.indexed} of {messages} messages")
            results.append(result)

        def read_all() -> None:
            spark.read.format("tiered").option("config", config_path).load().write.format("noop") \
                .mode("overwrite").save()

        seconds = timed({"reindex": run_reindex, "read": read_all}, args.rounds)
        spark.stop()
        report = {
            "messages": messages,
            "body_size": args.body_size,
            "queues": args.topics * args.queues,
            "partitions": results[-1].partitions,
            "master": args.master,
            "rounds": args.rounds,
            "reindex_msgs_per_s": round(messages / seconds["reindex"]),
            "read_msgs_per_s": round(messages / seconds["read"]),
            "reindex_vs_read": round(seconds["read"] / seconds["reindex"], 3),
        }
    print_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
