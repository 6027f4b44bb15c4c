"""A `tiered` command whose reader goes away (``| head``, ``| true``) still exits with its own
status (drill s14: `tiered verify | true` on a damaged store exited 0, under pipefail too)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def run_with_stdout_closed(*args: str) -> subprocess.CompletedProcess:
    """Run ``tiered args`` with its stdout a pipe whose reader is gone before it prints."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([str(TIERED), *args], stdout=write, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write)


def test_verify_reports_damage_in_its_status_when_its_reader_is_gone(tmp_path):
    cfg = damaged_store(tmp_path)
    for extra in ([], ["--json"]):
        done = run_with_stdout_closed("verify", "--config", cfg, *extra)
        assert done.returncode == ExitCode.CORRUPT, done.stderr.decode()
        assert b"Traceback" not in done.stderr and b"BrokenPipe" not in done.stderr


def test_a_successful_command_still_exits_0(tmp_path):
    done = run_with_stdout_closed("drivers")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""
