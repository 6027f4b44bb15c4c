"""``tiered verify --deep`` against a raw read of the same bytes, and ``tiered spark verify``
against the single process, in the same run.

    python bench/verify.py [--json] [--mib 256] [--body-size 4096] [--rounds 3] [--master local[2]]
                           [--workdir DIR]

A posix store (fsync off, SQLite metadata, 64 MiB commit-log segments) of about ``--mib``
MiB of messages is written through the container layer (``tests/sample_store.py``: 2
topics x 2 queues, ``--body-size`` byte bodies) before anything is timed; it is kept under
``--workdir`` (default ``$TMPDIR/tiered-verify-bench-{mib}m-{body}b``) and reused by the
next run with the same size. One Spark session; each path runs once to warm up, then
``--rounds`` rounds of every path in turn (so a noisy neighbour hurts both sides of a
ratio alike); figures are medians.

- ``raw_mb_per_s``: ``driver.read`` of every segment the walk reads (commit-log and
  consume-queue segments, committed bytes) in the walk's chunk sizes (commit log:
  ``WALK_READ_BYTES``, consume queue: ``UNITS_PER_READ`` units) -- the bytes alone, no check.
- ``verify_mb_per_s`` / ``verify_msgs_per_s``: ``verify_store(deep=True)`` in this process
  (ownership, listing, the per-queue walk reading and checking every message, key index,
  local store), over the same bytes.
- ``verify_vs_raw``: raw seconds / verify seconds (target >= 0.5).
- ``spark_vs_single``: verify seconds / ``tiered spark verify`` seconds on ``--master``
  (target >= 1.5; the issue's acceptance run uses a store of >= 1024 MiB), in the session
  that command starts (``jobs.verify.session_conf``: a local master's JVM at C1). Both reports
  must be the same and clean, or the bench stops.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from spark_export import print_report  # noqa: E402  (bench/ is on sys.path)
from spark_stream import timed  # noqa: E402

TOPICS, QUEUES = 2, 2
SEGMENT = 64 << 20
TARGETS = {"verify_vs_raw": 0.5, "spark_vs_single": 1.5}


def build_store(workdir: str, mib: int, body_size: int) -> tuple[str, int, float]:
    """The store's config path, its messages, and the seconds its build took (0 when a
    store built with the same parameters was reused)."""
    from sample_store import SampleSpec, write_sample

    from sample_store import sample_message

    from tiered_core.codec.message import encode_message

    config_path = os.path.join(workdir, "tiered.toml")
    marker = os.path.join(workdir, "built.json")
    # messages per queue from the size of one encoded sample message
    spec = SampleSpec(topics=tuple(f"bench{i}" for i in range(TOPICS)), queues=QUEUES, body_size=body_size)
    probe = len(encode_message(sample_message("bench0", 0, 0, spec), queue_id=0, queue_offset=0, store_timestamp=0))
    per_queue = max(1, (mib << 20) // (probe * TOPICS * QUEUES))
    wanted = {"mib": mib, "body_size": body_size, "messages_per_queue": per_queue, "segment": SEGMENT}
    if os.path.exists(marker):
        with open(marker) as fh:
            if json.load(fh) == wanted:
                return config_path, per_queue * TOPICS * QUEUES, 0.0
        raise SystemExit(f"{workdir} holds a store built with other parameters ({marker}); give another --workdir")
    os.makedirs(workdir, exist_ok=True)
    with open(config_path, "w") as fh:
        fh.write(f'[tiered]\nstore_path = "./store"\ncommit_log_max_size = {SEGMENT}\n'
                 "[tiered.options]\nfsync = false\n")
    from tiered_core.config import StoreConfig

    started = time.perf_counter()
    spec = SampleSpec(topics=spec.topics, queues=QUEUES, messages=per_queue, body_size=body_size)
    messages = write_sample(StoreConfig.load(config_path), spec)
    seconds = time.perf_counter() - started
    with open(marker, "w") as fh:
        json.dump(wanted, fh)
    return config_path, messages, seconds


def raw_read(config) -> int:
    """Every segment the walk reads, through the driver, in the walk's chunk sizes; the bytes read."""
    from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
    from tiered_core.flat.segment_reader import UNITS_PER_READ
    from tiered_core.ops.verify_range import WALK_READ_BYTES
    from tiered_core.ops.verify_queue import queue_works

    driver, metadata = config.open_driver(), config.open_metadata()
    try:
        total = 0
        for work in queue_works(metadata, config.cluster, config.broker):
            for refs, chunk in ((work.commit_log, WALK_READ_BYTES), (work.consume_queue, UNITS_PER_READ * CQ_UNIT_SIZE)):
                for ref in refs:
                    for pos in range(0, ref.size, chunk):
                        total += len(driver.read(ref.path, pos, min(chunk, ref.size - pos)))
        return total
    finally:
        metadata.close()
        driver.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="store size in MiB (acceptance: >= 1024)")
    parser.add_argument("--body-size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--workdir", default=None, help="where the store is built and kept (reused when it exists)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    from tiered_core.config import StoreConfig
    from tiered_core.ops.verify import verify_store
    from tiered_core.spark import get_session
    from tiered_core.spark.jobs import verify
    from tiered_core.spark.jobs.verify import session_conf

    workdir = args.workdir or os.path.join(tempfile.gettempdir(), f"tiered-verify-bench-{args.mib}m-{args.body_size}b")
    config_path, messages, build_s = build_store(workdir, args.mib, args.body_size)
    config = StoreConfig.load(config_path)
    # the session `tiered spark verify` starts (jobs.verify.session_conf)
    spark = get_session(args.master, app_name="bench-verify",
                        conf={"spark.ui.showConsoleProgress": "false", **session_conf(args.master)})
    reports: dict[str, dict] = {}
    sizes: list[int] = []

    def checked(name: str, report) -> None:
        data = report.as_dict()
        data["summary"].pop("elapsed_s")
        serious = [f for f in report.findings if f.kind.value != "owner_missing"]  # (a store of the flat API)
        if report.stats.messages_read != messages or serious:
            raise SystemExit(f"{name}: read {report.stats.messages_read} of {messages} messages; findings "
                             f"{[f.describe() for f in serious][:3]}")
        if reports.setdefault(name, data) != data or (len(reports) == 2 and reports["single"] != reports["spark"]):
            raise SystemExit("the single-process and the Spark reports differ")

    paths = {
        "raw": lambda: sizes.append(raw_read(config)),
        "single": lambda: checked("single", verify_store(config, deep=True)),
        "spark": lambda: checked("spark", verify(spark, config_path)),
    }
    seconds = timed(paths, args.rounds)
    spark.stop()
    nbytes = sizes[-1]
    report = {
        "mib": round(nbytes / (1 << 20)),
        "messages": messages,
        "body_size": args.body_size,
        "queues": TOPICS * QUEUES,
        "build_s": round(build_s, 1),
        "master": args.master,
        "rounds": args.rounds,
        "raw_mb_per_s": round(nbytes / seconds["raw"] / 1e6),
        "verify_mb_per_s": round(nbytes / seconds["single"] / 1e6),
        "verify_msgs_per_s": round(messages / seconds["single"]),
        "spark_mb_per_s": round(nbytes / seconds["spark"] / 1e6),
        "verify_vs_raw": round(seconds["raw"] / seconds["single"], 3),
        "spark_vs_single": round(seconds["single"] / seconds["spark"], 3),
    }
    print_report(report, args.json, TARGETS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
