"""``--json`` of the subcommands not covered elsewhere: demo, conformance, metadata, spark.

With ``--json`` stdout holds exactly one JSON document (the result, or ``{"error": ...}``)
whatever else the command prints; these tests parse all of stdout to prove it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tiered_core.cli import main
from tiered_core.cli.exit_codes import ExitCode

TIERED = Path(sys.executable).with_name("tiered")


def run(*args: str, cwd: Path, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(TIERED), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_demo_json(tmp_path):
    proc = run("demo", "--messages", "20000", "--size", "100", "--lookups", "20", "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.OK, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["result"] == "OK" and summary["verified"] == 20000 and summary["wrong"] == 0
    assert summary["local_files_deleted"] > 0
    assert summary["config"] == str(tmp_path / "demo-data" / "tiered.toml")
    # the static-topic step: two generations, the first broker's store gone, all read back
    static = summary["static_topic"]
    assert static == {"cluster": str(tmp_path / "demo-data" / "cluster" / "cluster.toml"), "put": 4000,
                      "verified": 4000, "wrong": 0, "generations": 2}
    assert not (tmp_path / "demo-data" / "cluster" / "broker-a").exists()
    proc = run("static-topic", "status", "--cluster", static["cluster"], "--topic", "demo-static", "--json",
               cwd=tmp_path)
    assert proc.returncode == ExitCode.OK, proc.stderr
    status = json.loads(proc.stdout)
    assert status["totalQueues"] == 4 and len(status["queues"]) == 4
    moved = [q for q in status["queues"] if len(q["items"]) == 2]
    assert moved and all(q["items"][0]["bname"] == "broker-a" and q["items"][1]["logicOffset"] > 0 for q in moved)
    assert sum(q["maxOffset"] for q in status["queues"]) == 4000
    assert {q["leader"]["bname"] for q in status["queues"]} == {"broker-b", "broker-c"}
    # the demo's store is whole: `tiered verify --deep` reads every message and finds nothing
    proc = run("verify", "--config", summary["config"], "--deep", "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.OK, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert [f for f in report["findings"] if f["severity"] != "info"] == []
    assert report["summary"]["messages_read"] >= 20000 and report["summary"]["deep"]


def test_demo_verification_failure_is_check_failed(tmp_path):
    """Too few messages for local retention to delete a file: the demo cannot prove its point."""
    proc = run("demo", "--messages", "50", "--size", "10", "--lookups", "5", "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.FAILURE
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "CHECK_FAILED" and err["summary"]["result"] == "FAILED"
    assert err["summary"]["local_files_deleted"] == 0


def test_demo_on_a_store_that_holds_messages_is_bad_input(tmp_path):
    cfg = tmp_path / "tiered.toml"
    cfg.write_text('[tiered]\nstore_path = "store"\ndriver = "posix"\n')
    assert run("put", "--config", str(cfg), "--topic", "demo-0", "--body", "x", cwd=tmp_path).returncode == 0
    proc = run("demo", "--config", str(cfg), "--messages", "10", "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert "already hold messages" in json.loads(proc.stdout)["error"]["message"]
    rows = json.loads(run("stat", "--config", str(cfg), "--json", cwd=tmp_path).stdout)
    assert [(r["topic"], r["local_max"]) for r in rows] == [("demo-0", 1)]  # nothing was written


def test_conformance_json_keeps_pytest_output_off_stdout(tmp_path, subprocess_env):
    proc = run("conformance", "memory", "-k", "test_write_after_seal_raises", "--json", cwd=tmp_path,
               env=subprocess_env)
    assert proc.returncode == ExitCode.OK, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["result"] == "PASS" and report["failed"] == []
    assert report["areas"]["raw driver contract"]["passed"] == 1
    assert "passed" in proc.stderr  # pytest's own summary went to stderr


def test_conformance_json_failure(tmp_path, subprocess_env):
    proc = run("conformance", "tests.broken_drivers:NoopSealDriver", "-k", "test_write_after_seal_raises",
               "--json", cwd=tmp_path, env=subprocess_env)
    assert proc.returncode == ExitCode.FAILURE, proc.stdout[-2000:] + proc.stderr[-2000:]
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "CHECK_FAILED"
    assert err["report"]["failed"] == ["test_driver_contract.py::TestDriverContract::test_write_after_seal_raises"]


def test_conformance_json_bad_input(tmp_path):
    proc = run("conformance", "no-such-driver", "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT
    assert json.loads(proc.stdout)["error"]["code"] == "UNKNOWN_DRIVER"


def _store_with_data(tmp_path: Path) -> Path:
    cfg = tmp_path / "tiered.toml"
    cfg.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ndriver = "posix"\n')
    for i in range(3):
        assert main(["put", "--config", str(cfg), "--topic", "orders", "--queue", str(i), "--body", "x",
                     "--dispatch"]) == 0
    return cfg


def test_metadata_convert_json(tmp_path, capsys):
    cfg = _store_with_data(tmp_path)
    capsys.readouterr()
    target = tmp_path / "copy.json"
    assert main(["metadata", "convert", "--from", str(tmp_path / "store" / "tiered-metadata.db"),
                 "--to", str(target), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["topics"], out["queues"]) == (1, 3) and out["segments"] == 6
    assert target.exists() and cfg.exists()


def test_metadata_rebuild_json(tmp_path, capsys):
    cfg = _store_with_data(tmp_path)
    (tmp_path / "store" / "tiered-metadata.db").unlink()
    capsys.readouterr()
    assert main(["metadata", "rebuild", "--config", str(cfg), "--json"]) == 0
    out, err = capsys.readouterr()
    stats = json.loads(out)
    assert (stats["topics"], stats["queues"], stats["segments"]) == (1, 3, 6)
    assert "rebuilding" in err  # the human lines went to stderr


def test_garbage_metadata_file_is_a_backend_error(tmp_path):
    (tmp_path / "a.json").write_text("{garbage")
    proc = run("metadata", "convert", "--from", "a.json", "--to", "b.db", "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.BACKEND, proc.stderr
    assert json.loads(proc.stdout)["error"]["code"] == "METADATA"
    assert not (tmp_path / "b.db").exists()


def test_spark_bad_config_json_fails_before_spark(tmp_path):
    proc = run("spark", "export", "--config", "missing.toml", "--to", "out", "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "CONFIG" and "missing.toml" in err["message"]


def test_drivers_strict_mode_json_error(tmp_path, monkeypatch):
    site = tmp_path / "site"
    info = site / "tiered_driver_broken_json-0.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiered-driver-broken-json\nVersion: 0.9\n")
    (info / "entry_points.txt").write_text("[tiered_core]\nbrokenjson = tiered_cli_broken_json\n")
    (site / "tiered_cli_broken_json.py").write_text("raise ImportError('needs libfoo')\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("TIERED_")}
    env.update(PYTHONPATH=str(site), TIERED_STRICT_PLUGINS="1")
    proc = run("drivers", "--json", cwd=tmp_path, env=env)
    assert proc.returncode == ExitCode.BAD_INPUT
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "PLUGIN_LOAD" and "tiered-driver-broken-json" in err["message"]


def test_demo_recreates_only_a_demo_data_directory_it_made(tmp_path):
    """Issue 18: the default demo deletes ./demo-data only when an earlier demo made it (its
    output marker); someone's own ./demo-data is refused, untouched."""
    own = tmp_path / "demo-data"
    own.mkdir()
    (own / "keep.txt").write_text("mine")
    proc = run("demo", "--messages", "8000", "--size", "200", "--lookups", "5", "--static-messages", "0", "--json",
               cwd=tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(proc.stdout)["error"]["code"] == "INVALID_PATH"
    assert (own / "keep.txt").read_text() == "mine"
    (own / "keep.txt").unlink()
    own.rmdir()
    for _ in range(2):  # made, then recreated
        proc = run("demo", "--messages", "8000", "--size", "200", "--lookups", "5", "--static-messages", "0",
                   "--json", cwd=tmp_path)
        assert proc.returncode == ExitCode.OK, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert json.loads(proc.stdout)["verified"] == 8000
