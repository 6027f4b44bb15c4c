"""Ctrl-C while a `tiered spark` command starts Spark (an operator drill, s13 F3): the
command ended with "interrupted" and exit 130, but Spark's JVM, launched by pyspark to ignore
SIGINT and interrupted before it handed its connection over, outlived it for good, holding
the command's stdout and stderr (a caller reading them to their end hung)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from sample_store import SampleSpec, write_sample
from spark_helpers import write_config

from tiered_core import StoreConfig

TIERED = os.path.join(os.path.dirname(sys.executable), "tiered")


def _group(pgid: int) -> list[int]:
    """The processes still alive in process group ``pgid``."""
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    alive.append(int(entry))
            except OSError:
                continue
    return alive


def _group_ended(pgid: int, within: float = 15) -> list[int]:
    """The processes of group ``pgid`` still alive after waiting up to ``within`` seconds."""
    deadline = time.monotonic() + within
    while _group(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _group(pgid)


def _end(proc: subprocess.Popen) -> None:
    """Kill what is left of ``proc``'s process group (a failed test leaves no JVM behind)."""
    for pid in _group(proc.pid):
        os.kill(pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_ctrl_c_while_spark_starts_leaves_no_jvm_behind(tmp_path):
    config = write_config(tmp_path / "a.toml", tmp_path / "a")
    write_sample(StoreConfig.load(config), SampleSpec(topics=("orders",), queues=1, messages=20))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               TIERED_SPARK_MASTER="local[1]")
    # (Spark's JVM takes about 1-3 s to connect here: these moments fall before, in and after that window)
    for delay in (0.7, 1.0, 1.4, 2.0):
        proc = subprocess.Popen([TIERED, "spark", "export", "--config", config, "--to", str(tmp_path / f"out{delay}")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
        try:
            time.sleep(delay)
            os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
            _out, err = proc.communicate(timeout=120)  # (with a JVM left holding stderr, this never returned)
            assert proc.returncode in (0, 130), err
            assert b"Traceback" not in err, err.decode(errors="replace")
            assert _group_ended(proc.pid) == [], f"processes left after a Ctrl-C at {delay} s"
        finally:
            _end(proc)


def test_ctrl_c_during_an_export_job_reports_one_line_and_leaves_no_output(tmp_path):
    """Drill s13 F4 / s14: Ctrl-C while the export's tasks wrote printed "interrupted", then
    the aborted tasks' Java stack traces (about 200 lines); sometimes the clean-up of the
    half-written directory raced the still-running tasks and the command ended with exit 1
    (FileNotFoundError), leaving a directory behind that no later export would replace."""
    config = write_config(tmp_path / "a.toml", tmp_path / "a")
    write_sample(StoreConfig.load(config), SampleSpec(queues=4, messages=150, body_size=512))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               TIERED_SPARK_MASTER="local[1]")
    out = tmp_path / "out"
    proc = subprocess.Popen([TIERED, "spark", "export", "--config", config, "--to", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(out.rglob("part-*"))) < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # until tasks are under way (a few wrote their files)
        assert proc.poll() is None, "the export ended before its tasks wrote"
        os.killpg(proc.pid, signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
        text = err.decode(errors="replace")
        assert proc.returncode == 130, text
        after = text.split("tiered spark export: interrupted", 1)[1]
        assert not [line for line in after.splitlines() if line.startswith("\tat ") or "Exception" in line], after
        _group_ended(proc.pid)
        assert not out.exists(), sorted(os.listdir(out))
    finally:
        _end(proc)
