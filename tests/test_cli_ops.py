"""`tiered put/get/stat` on a store made from a TOML config: results, exit codes, ``--json``
errors, missing stores and unusable store paths."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.cli.exit_codes import ExitCode
from tiered_core.codec.naming import cluster_dir, md5_prefix
from tiered_core.config import StoreConfig
from tiered_core.flat.ownership import STORE_ID_FILE

from store_faults import FlakyDriver  # tests/ is on sys.path under pytest

TIERED = Path(sys.executable).with_name("tiered")


def write_config(tmp_path, store_path=None, name: str = "tiered.toml", extra: str = "") -> str:
    path = tmp_path / name
    store = tmp_path / "store" if store_path is None else store_path
    path.write_text(f'[tiered]\nstore_path = "{store}"\ndriver = "posix"\n'
                    f'local_commit_log_file_size = "1MiB"\n{extra}'
                    f'[tiered.options]\nroot = "{tmp_path / "tiered"}"\n')
    return str(path)


def tiered(*args: str, cwd=None, env=None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run the installed console script, as an operator does."""
    return subprocess.run([str(TIERED), *args], cwd=cwd, env=env, input=stdin, capture_output=True,
                          text=True, timeout=120)


def error_of(stdout: str) -> dict:
    return json.loads(stdout)["error"]


def test_put_get_stat_round_trip(tmp_path, capsys):
    cfg = write_config(tmp_path)
    for i in range(3):
        assert main(["put", "--config", cfg, "--topic", "orders", "--queue", "1", "--key", f"o-{i}",
                     "--tags", "paid", "--body", f"body-{i}", "--dispatch"]) == 0
    assert "queue_offset=2" in capsys.readouterr().out
    assert main(["get", "--config", cfg, "--topic", "orders", "--queue", "1", "--offset", "1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["status"] == "FOUND"
    assert [m["body"] for m in got["messages"]] == ["body-1", "body-2"]
    assert main(["get", "--config", cfg, "--topic", "orders", "--key", "o-0", "--json"]) == 0
    assert [m["queue_offset"] for m in json.loads(capsys.readouterr().out)["messages"]] == [0]
    assert main(["stat", "--config", cfg, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["topic"], row["queue_id"], row["local_max"], row["tiered_commit"]) == ("orders", 1, 3, 3)


def test_put_json_reports_the_put_and_the_dispatch(tmp_path, capsys):
    cfg = write_config(tmp_path)
    assert main(["put", "--config", cfg, "--topic", "orders", "--body", "x", "--dispatch", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["status"], out["queue_offset"], out["dispatch"]["messages"]) == ("PUT_OK", 0, 1)
    assert out["dispatch"]["errors"] == [] and out["dispatch"]["failed_commits"] == 0


def test_bad_topic_is_a_clear_error(tmp_path, capsys):
    cfg = write_config(tmp_path)
    assert main(["put", "--config", cfg, "--topic", "../etc", "--body", "x"]) == ExitCode.BAD_INPUT
    assert "../etc" in capsys.readouterr().err


# -- not found ----------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["stat"], ["get", "--topic", "orders"], ["get", "--topic", "orders",
                                                                               "--key", "k"]])
def test_read_only_commands_do_not_create_a_missing_store(tmp_path, command):
    store = tmp_path / "never-created"
    cfg = write_config(tmp_path, store)
    proc = tiered(command[0], "--config", cfg, *command[1:])
    assert proc.returncode == ExitCode.NOT_FOUND, proc.stderr
    assert "no tiered store" in proc.stderr and str(store) in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not store.exists() and not (tmp_path / "tiered").exists()
    proc = tiered(command[0], "--config", cfg, *command[1:], "--json")
    assert proc.returncode == ExitCode.NOT_FOUND
    err = error_of(proc.stdout)
    assert (err["code"], err["exit_code"], err["path"], err["key"]) == ("NOT_FOUND", 3, str(store), "store_path")
    assert not store.exists()


def test_an_empty_store_directory_is_not_a_store(tmp_path):
    store = tmp_path / "empty"
    store.mkdir()
    cfg = write_config(tmp_path, store)
    proc = tiered("stat", "--config", cfg)
    assert proc.returncode == ExitCode.NOT_FOUND
    assert "is empty" in proc.stderr
    assert os.listdir(store) == []


def test_a_directory_with_only_tiered_data_points_at_rebuild(tmp_path):
    store = tmp_path / "store"
    (store / "tiered").mkdir(parents=True)
    cfg = write_config(tmp_path, store)
    proc = tiered("get", "--config", cfg, "--topic", "orders")
    assert proc.returncode == ExitCode.NOT_FOUND
    assert "tiered metadata rebuild" in proc.stderr


def test_a_store_with_only_metadata_exists(tmp_path, capsys):
    """Local store files gone, metadata and identity kept: the store exists (its tier holds data)."""
    cfg = write_config(tmp_path)
    assert main(["put", "--config", cfg, "--topic", "orders", "--body", "x", "--dispatch"]) == 0
    store = tmp_path / "store"
    for entry in store.iterdir():
        if entry.name not in ("tiered-metadata.db", "tiered", STORE_ID_FILE):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    capsys.readouterr()
    assert main(["stat", "--config", cfg, "--json"]) == 0
    assert [r["tiered_commit"] for r in json.loads(capsys.readouterr().out)] == [1]


def test_get_found_nothing_exits_not_found(tmp_path, capsys):
    cfg = write_config(tmp_path)
    assert main(["put", "--config", cfg, "--topic", "orders", "--key", "k1", "--body", "x"]) == 0
    capsys.readouterr()
    assert main(["get", "--config", cfg, "--topic", "orders", "--offset", "0"]) == ExitCode.OK
    assert main(["get", "--config", cfg, "--topic", "orders", "--offset", "1"]) == ExitCode.NOT_FOUND
    assert "OFFSET_OVERFLOW_ONE" in capsys.readouterr().err
    assert main(["get", "--config", cfg, "--topic", "other", "--json"]) == ExitCode.NOT_FOUND
    err = error_of(capsys.readouterr().out)
    assert (err["code"], err["topic"], err["queue_id"], err["offset"]) == ("NOT_FOUND", "other", 0, 0)
    assert err["status"] != "FOUND"
    assert main(["get", "--config", cfg, "--topic", "orders", "--key", "nope", "--json"]) == ExitCode.NOT_FOUND
    assert error_of(capsys.readouterr().out)["key"] == "nope"
    assert main(["get", "--config", cfg, "--topic", "orders", "--key", "k1"]) == ExitCode.OK


def test_under_force_an_undispatched_offset_is_named_as_such(tmp_path, capsys):
    """Storage level FORCE reads only the tier: a message put but not dispatched yet answered
    "NO_MESSAGE_IN_QUEUE (queue offsets 0..0)", which reads as if it were lost (drill). Now the
    error says the local store holds it and how to get it into the tier."""
    cfg = write_config(tmp_path, extra='storage_level = "FORCE"\n')
    for i in range(3):
        assert main(["put", "--config", cfg, "--topic", "orders", "--body", f"m{i}"]) == 0
    capsys.readouterr()
    assert main(["get", "--config", cfg, "--topic", "orders", "--offset", "1", "--json"]) == ExitCode.NOT_FOUND
    err = error_of(capsys.readouterr().out)
    assert (err["local_min_offset"], err["local_max_offset"], err["offset"]) == (0, 3, 1)
    assert "the local store holds it (0..2 not dispatched to the tier yet)" in err["message"], err
    assert "the tier holds no offset" in err["message"] and "FORCE" in err["message"]
    # past the local end too: the local range is still named (drill s13 F7)
    assert main(["get", "--config", cfg, "--topic", "orders", "--offset", "5"]) == ExitCode.NOT_FOUND
    assert "the local store holds offsets 0..2 (0..2 not dispatched" in capsys.readouterr().err
    # a key lookup says it searched the tier only
    assert main(["put", "--config", cfg, "--topic", "orders", "--key", "k9", "--body", "x"]) == 0
    capsys.readouterr()
    assert main(["get", "--config", cfg, "--topic", "orders", "--key", "k9"]) == ExitCode.NOT_FOUND
    assert "in the tier (storage_level FORCE reads only the tier" in capsys.readouterr().err
    assert main(["put", "--config", cfg, "--topic", "orders", "--body", "m4", "--dispatch"]) == 0
    capsys.readouterr()
    assert main(["get", "--config", cfg, "--topic", "orders", "--offset", "1"]) == ExitCode.OK
    assert "body='m1'" in capsys.readouterr().out
    assert main(["get", "--config", cfg, "--topic", "orders", "--key", "k9"]) == ExitCode.OK


# -- put --dispatch tells the truth ---------------------------------------------------------------

def _blocked_config(tmp_path) -> str:
    """A posix tier where the queue's first commit-log segment cannot be written: an empty
    directory sits at its path (invisible to the listing, so the store opens; the dispatch
    then cannot create the segment)."""
    cfg = write_config(tmp_path)
    config = StoreConfig.load(cfg)
    segment = (tmp_path / "tiered" / cluster_dir(config.cluster) / config.broker / "orders" / "0" / "COMMIT_LOG"
               / f"{md5_prefix('0')}{0:020d}")
    segment.mkdir(parents=True)
    return cfg


def test_put_dispatch_fails_when_the_dispatch_failed(tmp_path):
    cfg = _blocked_config(tmp_path)
    proc = tiered("put", "--config", cfg, "--topic", "orders", "--queue", "0", "--body", "x", "--dispatch")
    assert proc.returncode == ExitCode.BACKEND, proc.stdout + proc.stderr
    # The put itself succeeded (said on stdout); the dispatch failure is on stderr, naming queue and error.
    assert "PUT_OK" in proc.stdout
    line = next(line for line in proc.stderr.splitlines() if line.startswith("tiered put:"))
    assert "dispatch to the tiered store failed for orders/0" in line and "COMMIT_LOG" in line
    assert re.search(r"\[(STATE_CONFLICT|DRIVER_ERROR)\]", line), line


def test_put_dispatch_failure_as_json(tmp_path):
    cfg = _blocked_config(tmp_path)
    proc = tiered("put", "--config", cfg, "--topic", "orders", "--body", "y", "--dispatch", "--json")
    assert proc.returncode == ExitCode.BACKEND, proc.stdout + proc.stderr
    err = error_of(proc.stdout)
    assert err["type"] == "DispatchFailed" and err["code"] in ("STATE_CONFLICT", "DRIVER_ERROR")
    assert err["queues"] == ["orders/0"]
    assert err["errors"] and all(e.startswith("orders/0:") for e in err["errors"])
    assert err["put"]["queue_offset"] == 0  # the message is stored locally, and says where


class CommitFailingDriver(FlakyDriver):
    """Every segment write fails (a backend that is down for data); the owner record, which
    goes through ``write_if_absent``, still lands, so the store opens."""

    def write_if_absent(self, path: str, data: bytes) -> bool:
        return self.faults.inner.write_if_absent(path, data)  # under the fault layer


def test_put_dispatch_fails_on_failed_commits(tmp_path, capsys, monkeypatch):
    """No error string, only failed commits: the queue is still named."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    cfg = tmp_path / "flaky.toml"
    cfg.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\n'
                   f'driver = "{__name__}:CommitFailingDriver"\n'
                   f'[tiered.options]\ninner = "posix"\nwrite_failure_rate = 0.999999\n'
                   f'inner_options = {{root = "{tmp_path / "tiered"}"}}\n')
    code = main(["put", "--config", str(cfg), "--topic", "orders", "--queue", "2", "--body", "x",
                 "--dispatch", "--json"])
    out = capsys.readouterr().out
    assert code == ExitCode.BACKEND, out
    err = error_of(out)
    assert err["type"] == "DispatchFailed" and err["code"] == "DRIVER_ERROR"
    assert err["failed_commits"] >= 1 and err["queues"] == ["orders/2"]
    assert "inner_options" not in json.dumps(err)  # the driver's options are never shown


# -- unusable store paths ---------------------------------------------------------------------------

COMMANDS = {
    "put": ["put", "--topic", "orders", "--body", "x"],
    "get": ["get", "--topic", "orders"],
    "stat": ["stat"],
    "demo": ["demo", "--messages", "10"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("shape", ["file", "under-a-file"])
def test_store_path_that_is_a_file_is_a_config_error(tmp_path, command, shape):
    afile = tmp_path / "afile"
    afile.write_text("not a store")
    store = afile if shape == "file" else afile / "sub"
    cfg = write_config(tmp_path, store)
    argv = [COMMANDS[command][0], "--config", cfg, *COMMANDS[command][1:]]
    proc = tiered(*argv)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "[CONFIG]" in proc.stderr and str(store) in proc.stderr
    proc = tiered(*argv, "--json")
    err = error_of(proc.stdout)
    assert (err["code"], err["key"], err["path"]) == ("CONFIG", "store_path", str(store))
    assert afile.read_text() == "not a store"


NOBODY = 65534


def _as_unprivileged() -> list[str] | None:
    """A command prefix that drops root (``setpriv`` to uid/gid 65534), or None when not needed."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.mark.parametrize("inside", [False, True], ids=["store_path-is-read-only", "parent-is-read-only"])
def test_read_only_store_path_is_a_config_error(inside):
    """chmod 0o555 does not stop root: as root the command runs as uid 65534 (setpriv), so the
    directory really is read-only for it; skipped only when that is impossible."""
    prefix = _as_unprivileged()
    if prefix is None:
        pytest.skip("running as root without setpriv: chmod 0o555 does not stop root's writes")
    base = Path(tempfile.mkdtemp(prefix="tiered-ro-"))  # not under pytest's 0700 tmp root
    try:
        base.chmod(0o755)
        ro = base / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        store = ro / "store" if inside else ro
        cfg = write_config(base, store)
        Path(cfg).chmod(0o644)
        probe = subprocess.run([*prefix, sys.executable, "-c", f"import os; print(os.access({str(ro)!r}, os.W_OK))"],
                               capture_output=True, text=True, timeout=60)
        if probe.stdout.strip() != "False":
            pytest.skip(f"{ro} stays writable for this user (capabilities?): {probe.stdout}{probe.stderr}")
        for command in ("put", "stat"):
            argv = [str(TIERED), COMMANDS[command][0], "--config", cfg, *COMMANDS[command][1:], "--json"]
            proc = subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=120)
            assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
            err = error_of(proc.stdout)
            assert err["code"] == "CONFIG" and err["path"] == str(store) and "not writable" in err["message"]
            assert "Traceback" not in proc.stderr
        assert os.listdir(ro) == []
    finally:
        (base / "ro").chmod(0o755)
        shutil.rmtree(base)


def test_store_open_in_another_process_is_a_backend_error(tmp_path):
    cfg = write_config(tmp_path)
    with TieredMessageStore.open(StoreConfig.load(cfg)):
        proc = tiered("stat", "--config", cfg, "--json")
    assert proc.returncode == ExitCode.BACKEND, proc.stderr
    assert error_of(proc.stdout)["code"] == "STATE_CONFLICT"


def test_body_from_stdin(tmp_path):
    cfg = write_config(tmp_path)
    assert tiered("put", "--config", cfg, "--topic", "orders", stdin="from stdin").returncode == 0
    proc = tiered("get", "--config", cfg, "--topic", "orders", "--json")
    assert json.loads(proc.stdout)["messages"][0]["body"] == "from stdin"


def test_a_backend_failure_never_prints_the_credentials(tmp_path):
    """An Azure connection string (a secret option) with an endpoint nothing listens on: the
    store fails to open or to dispatch (exit 5) and the key is shown nowhere."""
    secret = "c2VjcmV0LWtleS1uZXZlci1zaG93bg=="
    cfg = tmp_path / "azure.toml"
    cfg.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ndriver = "azure"\n[tiered.options]\n'
                   f'container = "c"\nconnection_string = "DefaultEndpointsProtocol=http;AccountName=acct;'
                   f'AccountKey={secret};BlobEndpoint=http://127.0.0.1:1/acct"\n'
                   'retries = 1\n')  # one retry goes through the retry layer's log; more only wait
    for extra in ([], ["--json"]):
        proc = tiered("put", "--config", str(cfg), "--topic", "orders", "--body", "x", "--dispatch", *extra)
        assert proc.returncode == ExitCode.BACKEND, proc.stdout + proc.stderr
        assert secret not in proc.stdout + proc.stderr


def test_a_library_logging_its_retries_prints_no_traceback(tmp_path):
    """The drill (s13 F5): against a GCS endpoint that is down, gcsfs logged each request it
    gave up on with a traceback (107 lines of stderr around one DRIVER_ERROR). The command
    prints such records on one line and reports the failure itself."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = tmp_path / "tiered.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ndriver = "gcs"\n[tiered.options]\n'
                    f'bucket = "b"\nendpoint = "http://127.0.0.1:{port}"\nemulated = true\nretries = 1\ntimeout = 2\n')
    proc = tiered("put", "--config", str(conf), "--topic", "t", "--body", "x", "--dispatch", "--json")
    assert proc.returncode == ExitCode.BACKEND, proc.stderr
    assert error_of(proc.stdout)["code"] == "DRIVER_ERROR"
    assert "Traceback" not in proc.stderr, proc.stderr
    library = [line for line in proc.stderr.splitlines() if line.startswith("gcsfs")]
    assert library and all("ClientConnectorError" in line for line in library), proc.stderr


class OneQueueDownDriver(FlakyDriver):
    """Every write of queue orders/0's segments fails; the other queues' land."""

    def write(self, path: str, position: int, data) -> None:
        if "/orders/0/" in path:
            from tiered_core.errors import DriverError

            raise DriverError(f"injected: {path!r} cannot be written", retryable=False, path=path)
        super().write(path, position, data)


def test_put_dispatch_whose_message_is_tiered_exits_0_while_another_queue_fails(tmp_path, capsys, monkeypatch,
                                                                                caplog):
    """Drill s14b F5: with orders/0's dispatch failing, `put --dispatch` to another queue
    exited 5 though its message was tiered ("exit 5 when the dispatch did not tier the
    message"): a script retrying on 5 stored it twice. Now 0, the other queue's failure said."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    cfg = tmp_path / "down.toml"
    cfg.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\n'
                   f'driver = "{__name__}:OneQueueDownDriver"\n'
                   f'[tiered.options]\ninner = "posix"\ninner_options = {{root = "{tmp_path / "tiered"}"}}\n')
    assert main(["put", "--config", str(cfg), "--topic", "orders", "--queue", "0", "--body", "a"]) == 0
    capsys.readouterr()
    assert main(["put", "--config", str(cfg), "--topic", "orders", "--queue", "1", "--body", "b", "--dispatch",
                 "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["queue_id"] == 1 and any(e.startswith("orders/0:") for e in doc["dispatch"]["errors"]), doc
    said = [r.getMessage() for r in caplog.records if r.name == "tiered_core.cli.ops"]
    assert len(said) == 1 and "the message is tiered (orders/1@0)" in said[0] and "orders/0" in said[0], said
    # its own queue down: still exit 5, as before
    assert main(["put", "--config", str(cfg), "--topic", "orders", "--queue", "0", "--body", "c", "--dispatch",
                 "--json"]) == ExitCode.BACKEND
