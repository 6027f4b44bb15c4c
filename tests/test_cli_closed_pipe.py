"""A `tiered` command whose reader goes away (``| head``, ``| true``) still exits with its own
status (drill s14: `tiered verify | true` on a damaged store exited 0, under pipefail too)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli.exit_codes import ExitCode
from tiered_core.codec.message import Message
from tiered_core.config import StoreConfig

TIERED = Path(sys.executable).with_name("tiered")


def damaged_store(tmp_path) -> str:
    cfg = tmp_path / "tiered.toml"
    cfg.write_text('[tiered]\nstore_path = "store"\n[tiered.options]\nroot = "tier"\n')
    with TieredMessageStore.open(StoreConfig.load(str(cfg))) as store:
        store.put_message(Message(topic="o", body=b"hello"), 0)
        assert store.dispatch(force=True).errors == []
    [segment] = [p for p in (tmp_path / "tier").rglob("*") if p.is_file() and "COMMIT_LOG" in str(p)]
    segment.unlink()  # a tiered segment lost: verify reports it as corrupt
    return str(cfg)


def run_with_stdout_closed(*args: str, stream: str = "stdout") -> subprocess.CompletedProcess:
    """Run ``tiered args`` with its ``stream`` a pipe whose reader is gone before it prints."""
    read, write = os.pipe()
    os.close(read)
    other = "stderr" if stream == "stdout" else "stdout"
    try:
        return subprocess.run([str(TIERED), *args], timeout=120, **{stream: write, other: subprocess.PIPE})
    finally:
        os.close(write)


def test_verify_reports_damage_in_its_status_when_its_reader_is_gone(tmp_path):
    cfg = damaged_store(tmp_path)
    for extra in ([], ["--json"]):
        done = run_with_stdout_closed("verify", "--config", cfg, *extra)
        assert done.returncode == ExitCode.CORRUPT, done.stderr.decode()
        assert b"Traceback" not in done.stderr and b"BrokenPipe" not in done.stderr


def test_a_closed_stderr_does_not_change_the_status_either(tmp_path):
    """Drill s14b F6: `tiered verify 2>&1 | head -1` exited 0 (its progress lines on stderr
    met the closed pipe first)."""
    cfg = damaged_store(tmp_path)
    done = run_with_stdout_closed("verify", "--config", cfg, stream="stderr")
    assert done.returncode == ExitCode.CORRUPT


def test_a_full_stdout_is_a_local_io_failure_not_a_traceback(tmp_path):
    """Drill s14b F7: `> /dev/full` ended with exit 120 and "Exception ignored ... OSError"."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    cfg = damaged_store(tmp_path)
    with open("/dev/full", "w") as full:
        done = subprocess.run([str(TIERED), "verify", "--config", cfg], stdout=full, stderr=subprocess.PIPE,
                              timeout=120)
        assert done.returncode == ExitCode.CORRUPT, done.stderr.decode()  # what verify found still says
        ok = subprocess.run([str(TIERED), "drivers"], stdout=full, stderr=subprocess.PIPE, timeout=120)
    assert ok.returncode == ExitCode.BACKEND and b"[LOCAL_IO]" in ok.stderr, ok.stderr.decode()
    for done in (done, ok):
        assert b"Traceback" not in done.stderr and b"Exception ignored" not in done.stderr


def test_a_successful_command_still_exits_0(tmp_path):
    done = run_with_stdout_closed("drivers")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""
