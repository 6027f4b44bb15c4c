"""Exit codes of ``tiered``: the mapping from error codes, and each code from a real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiered_core.cli import main
from tiered_core.cli.shared import DispatchFailed, error_payload, redact_context
from tiered_core.cli.exit_codes import ExitCode, exit_code_for, exit_code_for_error_code
from tiered_core.errors import (
    ConfigError,
    CorruptData,
    DriverError,
    ErrorCode,
    Fenced,
    IllegalParam,
    InvalidOption,
    InvalidPath,
    MetadataError,
    NotFound,
    PluginLoadError,
    PrefixOwned,
    StateConflict,
    TieredStoreError,
    UnknownDriver,
    UnknownObjects,
)

TIERED = Path(sys.executable).with_name("tiered")


def test_codes_are_distinct_and_zero_is_only_success():
    values = [int(c) for c in ExitCode]
    assert len(values) == len(set(values))
    assert ExitCode.OK == 0 and all(v != 0 for c, v in zip(ExitCode, values) if c is not ExitCode.OK)
    assert len({ExitCode.NOT_FOUND, ExitCode.CORRUPT, ExitCode.BACKEND, ExitCode.BAD_INPUT, ExitCode.FAILURE}) == 5


@pytest.mark.parametrize("exc, expected", [
    (NotFound("a/b"), ExitCode.NOT_FOUND),
    (CorruptData("bad crc", offset=3), ExitCode.CORRUPT),
    (DriverError("boom", retryable=True), ExitCode.BACKEND),
    (StateConflict("shrank"), ExitCode.BACKEND),
    (MetadataError("locked"), ExitCode.BACKEND),
    (ConfigError("bad", key="x"), ExitCode.BAD_INPUT),
    (InvalidOption("bad", option="o"), ExitCode.BAD_INPUT),
    (IllegalParam("bad"), ExitCode.BAD_INPUT),
    (InvalidPath("../x"), ExitCode.BAD_INPUT),
    (UnknownDriver("nope"), ExitCode.BAD_INPUT),
    (PluginLoadError("broken"), ExitCode.BAD_INPUT),
    (UnknownObjects("3 objects", count=3), ExitCode.BACKEND),
    (PrefixOwned("owned by store x"), ExitCode.BACKEND),
    (Fenced("epoch 2 > 1"), ExitCode.BACKEND),
    (TieredStoreError("what"), ExitCode.FAILURE),
    (RuntimeError("bug"), ExitCode.FAILURE),
    (KeyboardInterrupt(), ExitCode.INTERRUPTED),
])
def test_exit_code_of_each_error(exc, expected):
    assert exit_code_for(exc) is expected


def test_every_current_error_code_has_an_exit_code():
    for code in ErrorCode:
        assert isinstance(exit_code_for_error_code(code), ExitCode)
        assert exit_code_for_error_code(code) is not ExitCode.OK


def test_codes_added_later_do_not_break_the_mapping():
    """The core adds codes (ownership, fencing, unknown objects): they default to BACKEND, and a
    subclass of a known error keeps its base's category."""

    class OwnerConflict(StateConflict):
        code = "OWNER_CONFLICT"  # type: ignore[assignment] - not (yet) an ErrorCode

    class Evicted(TieredStoreError):
        code = "EVICTED"  # type: ignore[assignment]

    class BadWhatever(ConfigError):
        code = "BAD_WHATEVER"  # type: ignore[assignment]

    assert exit_code_for(OwnerConflict("store b owns the prefix")) is ExitCode.BACKEND
    assert exit_code_for(Evicted("epoch 3 > 2")) is ExitCode.BACKEND
    assert exit_code_for(BadWhatever("x")) is ExitCode.BAD_INPUT
    assert exit_code_for_error_code("SOMETHING_NEW") is ExitCode.BACKEND
    assert error_payload(Evicted("epoch 3 > 2"))["error"]["code"] == "EVICTED"


def test_dispatch_failed_takes_the_code_of_its_errors():
    assert DispatchFailed("x", errors=["q/0: [CORRUPT_DATA] bad"]).code is ErrorCode.CORRUPT_DATA
    assert exit_code_for(DispatchFailed("x", errors=["q/0: [CORRUPT_DATA] bad"])) is ExitCode.CORRUPT
    assert DispatchFailed("x", errors=[], failed_commits=1).code is ErrorCode.DRIVER_ERROR


def test_error_payload_redacts_secrets():
    exc = InvalidOption("bad option", option="endpoint",
                        options={"account_key": "s3cr3t", "connection_string": "AccountKey=s3cr3t", "root": "/x"},
                        token="s3cr3t")
    payload = error_payload(exc)
    assert "s3cr3t" not in json.dumps(payload)
    err = payload["error"]
    assert err["options"]["root"] == "/x" and err["option"] == "endpoint"
    assert (err["code"], err["exit_code"], err["type"]) == ("INVALID_OPTION", 2, "InvalidOption")
    assert redact_context({"inner_options": {"x": 1}}, secrets={"inner_options"}) == {"inner_options": "***"}


# -- each code from a real run of the console script ---------------------------------------------

def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(TIERED), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def config(tmp_path: Path, body: str = "") -> Path:
    path = tmp_path / "tiered.toml"
    path.write_text(f'[tiered]\nstore_path = "store"\ndriver = "posix"\nlocal_commit_log_file_size = "1MiB"\n{body}')
    return path


def test_usage_errors_are_bad_input_also_as_json(tmp_path):
    proc = run("put", "--config", "x.toml", cwd=tmp_path)  # --topic missing
    assert proc.returncode == ExitCode.BAD_INPUT
    assert "the following arguments are required: --topic" in proc.stderr
    proc = run("get", "--config", "x.toml", "--topic", "t", "--queue", "first", "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == "USAGE" and "--queue" in err["message"]
    assert run("no-such-command", cwd=tmp_path).returncode == ExitCode.BAD_INPUT


@pytest.mark.parametrize("body, code, needle", [
    ('storage_level = "SOMETIMES"\n', "CONFIG", "storage_level"),
    ('[tiered.options]\ncolour = "blue"\n', "CONFIG", "colour"),
])
def test_bad_config_is_bad_input(tmp_path, body, code, needle):
    cfg = config(tmp_path, body)
    proc = run("stat", "--config", str(cfg), "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert err["code"] == code and needle in err["message"]
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_unknown_driver_is_bad_input(tmp_path):
    cfg = tmp_path / "tiered.toml"
    cfg.write_text('[tiered]\nstore_path = "store"\ndriver = "floppy"\n')
    proc = run("stat", "--config", str(cfg), cwd=tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT and "floppy" in proc.stderr


def test_missing_config_file_is_bad_input(tmp_path):
    proc = run("stat", "--config", "nowhere.toml", "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT
    assert json.loads(proc.stdout)["error"]["code"] == "CONFIG"


def test_forged_local_header_is_corrupt(tmp_path):
    """A queue offset flipped in the local commit log (the body CRC does not cover it)."""
    cfg = config(tmp_path)
    assert run("put", "--config", str(cfg), "--topic", "orders", "--body", "x", cwd=tmp_path).returncode == 0
    log = tmp_path / "store" / "commitlog" / f"{0:020d}"
    data = bytearray(log.read_bytes())
    data[20 + 7] ^= 0x05  # queueOffset@20, 8 bytes big-endian
    log.write_bytes(bytes(data))
    proc = run("get", "--config", str(cfg), "--topic", "orders", "--json", cwd=tmp_path)
    assert proc.returncode == ExitCode.CORRUPT, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["error"]["code"] == "CORRUPT_DATA"


def test_unexpected_error_is_failure_with_a_traceback(capsys, monkeypatch):
    from tiered_core.cli import drivers

    def explode(args):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(drivers, "run", explode)
    assert main(["drivers", "--json"]) == ExitCode.FAILURE
    out, err = capsys.readouterr()
    assert json.loads(out)["error"]["code"] == "INTERNAL"
    assert "Traceback" in err and "ZeroDivisionError" in err


def test_readme_documents_every_exit_code():
    import re

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme[readme.index("## Command line"):readme.index("## Spark")]
    rows = {int(code): name for code, name in re.findall(r"^\| (\d+) \| `(\w+)` \|", section, re.M)}
    assert rows == {int(c): c.name for c in ExitCode}


def test_ownership_errors_and_takeover_from_the_command_line(tmp_path):
    """Two stores on one tier prefix: the second is refused (PREFIX_OWNED, exit 5); `takeover
    --json` makes it the owner; the old one, reopened, is refused in turn."""
    configs = {}
    for name in ("a", "b"):
        configs[name] = tmp_path / f"{name}.toml"
        configs[name].write_text(f'[tiered]\nstore_path = "{tmp_path / name}"\ndriver = "posix"\n'
                                 f'[tiered.options]\nroot = "{tmp_path / "shared-tier"}"\n')
    put = ("put", "--topic", "orders", "--body", "x", "--dispatch", "--json")

    def run_put(name: str) -> subprocess.CompletedProcess:
        return run(put[0], "--config", str(configs[name]), *put[1:], cwd=tmp_path)

    assert run_put("a").returncode == ExitCode.OK
    refused = run_put("b")
    assert refused.returncode == ExitCode.BACKEND, refused.stdout + refused.stderr
    assert json.loads(refused.stdout)["error"]["code"] == "PREFIX_OWNED"

    took = run("takeover", "--config", str(configs["b"]), "--create", "--json", cwd=tmp_path)  # b never opened
    assert took.returncode == ExitCode.OK, took.stdout + took.stderr
    report = json.loads(took.stdout)
    assert report["took_over_from"]["store_id"] != report["owner"]["store_id"]
    assert report["owner"]["epoch"] > report["took_over_from"]["epoch"]
    assert run_put("b").returncode == ExitCode.OK

    old = run_put("a")  # reopened after the take-over: refused at open, nothing written
    assert old.returncode == ExitCode.BACKEND, old.stdout + old.stderr
    assert json.loads(old.stdout)["error"]["code"] == "PREFIX_OWNED"
