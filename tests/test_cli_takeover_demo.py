"""``tiered takeover`` and ``tiered demo --config`` never make or fill a store by accident
(issue 18, finding 6): takeover refuses a config that names no store unless ``--create``;
the demo refuses a store holding messages unless ``--force``, and every failed verification
says why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from snapshots import changes, snapshot
from tiered_core.cli.exit_codes import ExitCode

TIERED = Path(sys.executable).with_name("tiered")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(TIERED), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def write_config(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "tiered.toml"
    path.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ndriver = "posix"\n'
                    f'local_commit_log_file_size = "64KiB"\n{extra}'
                    f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    return str(path)


def test_takeover_of_a_missing_store_is_refused_unless_create(tmp_path):
    conf = write_config(tmp_path)
    before = snapshot(tmp_path)
    proc = run("takeover", "--config", conf, "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.NOT_FOUND, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "NOT_FOUND" and error["path"] == str(tmp_path / "store")
    assert str(tmp_path / "store") in error["message"] and "--create" in error["message"]
    assert changes(before, snapshot(tmp_path)) == {}

    proc = run("takeover", "--config", conf, "--create", "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["owner"]["epoch"] == 1
    again = run("takeover", "--config", conf, "--json", cwd=tmp_path)  # it exists now
    assert again.returncode == ExitCode.OK, again.stdout + again.stderr


def test_a_lost_disk_is_told_the_take_over_not_to_create_a_store(tmp_path):
    """store_path gone, its tier still there: the read commands say whose data the tier
    prefix holds and how to take it over (not "tiered put creates a store", which would be
    refused), and write nothing."""
    import shutil

    conf = write_config(tmp_path)
    assert run("put", "--config", conf, "--topic", "orders", "--body", "m0", cwd=tmp_path).returncode == 0
    shutil.rmtree(tmp_path / "store")
    before = snapshot(tmp_path)
    for command in (("verify",), ("get", "--topic", "orders"), ("stat",)):
        proc = run(*command, "--config", conf, cwd=tmp_path)
        assert proc.returncode == ExitCode.NOT_FOUND, proc.stdout + proc.stderr
        assert f"`tiered takeover --config {conf} --create`" in proc.stderr, (command, proc.stderr)
        assert "holds the data of store" in proc.stderr and "creates a store" not in proc.stderr
    assert changes(before, snapshot(tmp_path)) == {}
    shutil.rmtree(tmp_path / "tier")  # nothing in the tier either: a new store is what put makes
    proc = run("verify", "--config", conf, cwd=tmp_path)
    assert proc.returncode == ExitCode.NOT_FOUND and "`tiered put` creates a store" in proc.stderr


def test_demo_refuses_a_store_that_holds_messages_unless_force(tmp_path):
    conf = write_config(tmp_path)
    assert run("put", "--config", conf, "--topic", "orders", "--body", "keep-me", "--dispatch",
               cwd=tmp_path).returncode == ExitCode.OK
    demo = ("demo", "--config", conf, "--messages", "300", "--size", "100", "--lookups", "5")
    watched = (tmp_path / "tier", tmp_path / "store" / "tiered-metadata.db")
    before = snapshot(*watched)
    proc = run(*demo, "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert "already holds messages" in error["message"] and "--force" in error["message"]
    assert error["queues"] == ["orders/0"]
    assert changes(before, snapshot(*watched)) == {}

    # --force: the demo runs beside the data; the config keeps local files 72 h, so local
    # retention deletes none and the verification fails -- saying why
    proc = run(*demo, "--force", cwd=tmp_path)
    assert proc.returncode == ExitCode.FAILURE, proc.stdout + proc.stderr
    assert "FAILED: local retention deleted no commit-log file" in proc.stdout
    assert "local_retention_hours = 72" in proc.stderr and "verification failed: " in proc.stderr
    proc = run(*demo[:2], conf, "--messages", "10", "--force", "--json", cwd=tmp_path)  # demo topics now used
    assert proc.returncode == ExitCode.BAD_INPUT and "already hold messages" in proc.stdout
    got = run("get", "--config", conf, "--topic", "orders", "--json", cwd=tmp_path)
    assert [m["body"] for m in json.loads(got.stdout)["messages"]] == ["keep-me"]


def test_every_demo_verification_failure_has_a_reason(tmp_path):
    proc = run("demo", "--messages", "50", "--size", "10", "--lookups", "5", "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.FAILURE, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "CHECK_FAILED"
    assert len(error["reasons"]) == 1 and "local retention deleted no commit-log file" in error["reasons"][0]
    assert error["summary"]["reasons"] == error["reasons"]
    assert error["reasons"][0] in error["message"]
