"""A class-data archive for the Spark driver JVM, so each Spark start loads fewer classes from jars.

Every ``tiered spark ...`` command and every test session starts a JVM that loads and
verifies several thousand of Spark's classes from its jars before the first query runs.
Java's class-data sharing (CDS) can map those classes from an archive instead. On this
project's 2-core machine a local session took 12.2-13.1 s to start and 4.2-4.8 s for its
first query without an archive, and 6.7-7.5 s and 2.1-2.6 s with one.

:func:`build` writes a dynamic archive (Java 13+: ``-XX:ArchiveClassesAtExit``). A child
process starts a local session, runs a small query, writes and reads back a Parquet
file, reads a store of ten messages through the ``tiered`` format and mirrors it with a
streaming query, and exits; its JVM writes the classes it loaded into the archive. With
the streaming classes in it too, a new session's first micro-batch of the mirror job (500
messages, local[2]) took 6.2-7.0 s instead of 7.3-7.6 s (two runs each; most of the rest is
Spark starting a Python process for each of its Python runners). The child writes a
temporary file, and only a complete archive gets the final name, together with a sidecar
that records its size. The JVM does not check an archive's contents, and a truncated one
crashes it, so :func:`java_options` uses an archive only when its size matches the sidecar.

An archive holds the class path it was made with, and the JVM build that made it. A JVM
whose class path or build differs does not use it and starts as it would without it, in
silence (the ``cds`` log tags are turned off, so stdout stays the command's own). The
archive's name also carries the pyspark version and a digest of ``java -version``, so
reinstalling either leads to a new archive rather than a refused one.

``python -m tiered_core.spark.jvm_archive`` (run by ``make test``) builds the archive for
the installed pyspark and the ``java`` on the path, and does nothing when it exists.
:func:`tiered_core.spark.session.get_session` uses it when it is there. The archive lives
in ``<sys.prefix>/share/tiered-core/`` (the venv), or in ``$TIERED_SPARK_JVM_ARCHIVE_DIR``.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

#: Turns off the JVM's ``cds`` log lines, which go to stdout by default (a refused archive, classes
#: it cannot hold): a ``--json`` command's stdout must stay its own.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

#: What the child runs: a local session, a query, a Parquet round trip, then Spark's Python data
#: source paths over a store of ten messages (a batch read, and a streaming read into the
#: streaming sink: the mirror job), so that the classes of a job's usual first steps are in the
#: archive. Bump WARM_UP_VERSION when this changes: it is part of the archive's name.
_WARM_UP = """
import os, sys
from tiered_core import Message, StoreConfig, TieredMessageStore
from tiered_core.spark.jobs.mirror import mirror_query
from tiered_core.spark.session import get_session
work = sys.argv[2]
spark = get_session("local[2]", app_name="tiered-jvm-archive",
                    conf={"spark.driver.extraJavaOptions": sys.argv[1]}, class_archive=False)
assert spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().count() == 7
out = os.path.join(work, "warm-up.parquet")
spark.range(100).selectExpr("id", "cast(id AS string) AS s").write.parquet(out)
assert spark.read.parquet(out).count() == 100

def config(name):
    path = os.path.join(work, name + ".toml")
    store = StoreConfig(store_path=os.path.join(work, name), driver="posix",
                        driver_options={"root": os.path.join(work, name + "-tier"), "fsync": False})
    with open(path, "w") as f:
        f.write(store.to_toml())
    return path

source, target = config("a"), config("b")
with TieredMessageStore.open(StoreConfig.load(source)) as store:
    for i in range(10):
        store.put_message(Message(topic="warm-up", body=b"%d" % i, keys=["k%d" % i]), 0)
    store.dispatch(force=True)
assert spark.read.format("tiered").option("config", source).load().count() == 10
mirror_query(spark, source, target, os.path.join(work, "checkpoint"), available_now=True).awaitTermination()
assert spark.read.format("tiered").option("config", target).load().count() == 10
spark.stop()
"""
WARM_UP_VERSION = 2


def archive_dir() -> str:
    """Where archives are kept: ``$TIERED_SPARK_JVM_ARCHIVE_DIR``, else ``<sys.prefix>/share/tiered-core``."""
    return os.environ.get("TIERED_SPARK_JVM_ARCHIVE_DIR") or os.path.join(sys.prefix, "share", "tiered-core")


def archive_path(java_version: str) -> str:
    """The archive for the installed pyspark and the JVM whose ``java -version`` first line is ``java_version``."""
    import pyspark

    digest = hashlib.sha256(f"{java_version}\0{os.path.dirname(pyspark.__file__)}\0{WARM_UP_VERSION}"
                            .encode()).hexdigest()[:12]
    return os.path.join(archive_dir(), f"spark-{pyspark.__version__}-{digest}.jsa")


def _sidecar(path: str) -> str:
    return path + ".json"


def usable(path: str) -> bool:
    """Whether ``path`` is a complete archive: it exists with the size :func:`build` recorded."""
    try:
        with open(_sidecar(path)) as f:
            recorded = json.load(f)["size"]
        return os.path.getsize(path) == recorded
    except (OSError, ValueError, KeyError, TypeError):
        return False


def java_options(java_version: str) -> str:
    """The JVM options that map the archive for this JVM, or ``""`` when there is no complete one."""
    try:
        path = archive_path(java_version)
    except ImportError:  # no pyspark: no Spark either
        return ""
    if not usable(path):
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto {_QUIET}"


def build(java_version: str, *, timeout: float = 600) -> tuple[str, bool]:
    """Write the archive for this JVM and pyspark unless a complete one exists; ``(path, built)``.

    Raises :class:`RuntimeError` naming the child's exit status and the end of its output when
    the child fails (no archive is left then); :class:`OSError` when the folder is not writable.
    """
    path = archive_path(java_version)
    if usable(path):
        return path, False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tiered-jvm-archive-") as work:
        partial = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.partial")
        options = f"-XX:ArchiveClassesAtExit={partial} {_QUIET}"
        try:
            done = subprocess.run([sys.executable, "-c", _WARM_UP, options, work], capture_output=True,
                                  text=True, timeout=timeout, cwd=work)
            if done.returncode != 0 or not os.path.exists(partial):
                tail = (done.stderr or done.stdout).strip()[-2000:]
                raise RuntimeError(f"the JVM archive was not written: the warm-up exited {done.returncode}: {tail}")
            size = os.path.getsize(partial)
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    sidecar = _sidecar(path)
    with open(sidecar + ".tmp", "w") as f:
        json.dump({"size": size, "java": java_version}, f)
    os.replace(sidecar + ".tmp", sidecar)
    return path, True


def main(argv: list[str] | None = None) -> int:
    from tiered_core.errors import ConfigError
    from tiered_core.spark.java_runtime import check_java

    # `make test` runs this in the background of its recipe's shell, which starts it with Ctrl-C
    # ignored, and the warm-up (its Spark JVM too) would inherit that: a Ctrl-C of `make test`
    # must stop the build as well (the partial archive is removed on the way out).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        java_version = check_java()
        start = time.perf_counter()
        path, built = build(java_version)
    except KeyboardInterrupt:
        print("spark JVM archive: interrupted, not built", file=sys.stderr)
        return 130
    except (ConfigError, ImportError, RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        # Spark works without the archive, only slower to start: say so, do not fail the set-up.
        print(f"spark JVM archive: not built ({exc})", file=sys.stderr)
        return 0
    if built:
        print(f"spark JVM archive: wrote {path} ({os.path.getsize(path) >> 20} MiB) in "
              f"{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
