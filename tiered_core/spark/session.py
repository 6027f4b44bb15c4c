"""A SparkSession for tiered-store jobs: the venv's interpreter for workers, Java checked first."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Mapping

from tiered_core.errors import ConfigError
from tiered_core.spark.java_runtime import check_java

#: Settings every tiered session gets (times in UTC; Parquet timestamps readable everywhere).
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "1g",
}


def prepare_environment() -> None:
    """Make Spark's Python workers run this interpreter (so they find pyarrow and tiered_core)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def session_settings(java_version: str, conf: Mapping[str, str] | None = None, *,
                     class_archive: bool = True) -> dict[str, str]:
    """:data:`DEFAULT_CONF` updated with ``conf``; the JVM options of the class-data archive for
    ``java_version`` (when built) go first in ``spark.driver.extraJavaOptions``, so the caller's
    own options there come after them and win where they disagree."""
    settings = {**DEFAULT_CONF, **dict(conf or {})}
    if class_archive:
        from tiered_core.spark.jvm_archive import java_options  # imported here: it is also a `python -m` command

        archive = java_options(java_version)
        if archive:
            theirs = settings.get("spark.driver.extraJavaOptions", "")
            settings["spark.driver.extraJavaOptions"] = f"{archive} {theirs}".strip()
    return settings


def _end_jvm_being_launched() -> None:
    """After a Ctrl-C while pyspark launches Spark's JVM: end that JVM. pyspark starts it
    ignoring SIGINT, and one interrupted before it handed its connection over never learns
    that this process is gone: it outlives the command, holding the command's stdout and
    stderr (a caller reading them to their end hangs). It is this process's child whose
    command line runs Spark's SparkSubmit (Linux: ``/proc``; elsewhere nothing is done)."""
    me = os.getpid()
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            if parent != me:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
            continue
        if b"org.apache.spark.deploy.SparkSubmit" in command:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def get_session(master: str | None = None, app_name: str = "tiered", conf: Mapping[str, str] | None = None,
                *, class_archive: bool = True):
    """A SparkSession (the active one if there is one) with the ``tiered`` format registered.

    ``master`` defaults to ``$TIERED_SPARK_MASTER`` or ``local[*]``. A new driver JVM maps
    the class-data archive of :mod:`tiered_core.spark.jvm_archive` when one was built
    (``class_archive=False``: never), ahead of any ``spark.driver.extraJavaOptions`` in
    ``conf``. Raises :class:`ConfigError` when Java or pyspark is missing.
    """
    prepare_environment()
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ConfigError("Spark jobs need the spark extra: pip install 'tiered-core[spark]'", key="pyspark") from None
    settings = session_settings(check_java(), conf, class_archive=class_archive)
    builder = SparkSession.builder.appName(app_name).master(
        master or os.environ.get("TIERED_SPARK_MASTER") or "local[*]")
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except KeyboardInterrupt:
        _end_jvm_being_launched()
        raise
    spark.sparkContext.setLogLevel(os.environ.get("TIERED_SPARK_LOG_LEVEL", "WARN"))
    from tiered_core.spark.tiered_format import register  # the format above the session: imported when used

    register(spark)
    return spark


def end_jobs_quietly(spark=None) -> None:
    """After a Ctrl-C interrupted this program's wait on Spark: turn the JVM's log off, then
    cancel its jobs, so that their tasks stop writing, and the aborted tasks' Java stack traces
    (or the JVM's own when it ends with this process) do not follow the one line that reports
    the interruption. Best effort; ``spark`` defaults to the active context, if any."""
    context = spark.sparkContext if spark is not None else getattr(
        getattr(sys.modules.get("pyspark"), "SparkContext", None), "_active_spark_context", None)
    if context is None:
        return
    with contextlib.suppress(Exception):  # the gateway may be gone already
        context.setLogLevel("OFF")
        context.cancelAllJobs()
