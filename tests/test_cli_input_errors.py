"""Issue 18, list 8 (the command line): Ctrl-C is "interrupted" (code INTERRUPTED, exit 130)
without a traceback; every integer option names itself, the value and what it accepts;
``get --key --json`` has no strings where numbers belong."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiered_core.cli import main
from tiered_core.cli.exit_codes import ExitCode

TIERED = Path(sys.executable).with_name("tiered")
#: The number of the read(2) system call, as /proc/PID/syscall shows it.
READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}.get(platform.machine())


def write_config(tmp_path) -> str:
    path = tmp_path / "tiered.toml"
    path.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\nlocal_commit_log_file_size = "1MiB"\n'
                    f'[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    return str(path)


def _reading_stdin(pid: int) -> bool:
    """Whether process ``pid`` is blocked in read(0, ...)."""
    try:
        if READ_SYSCALL is not None:
            fields = Path(f"/proc/{pid}/syscall").read_text().split()
            return fields[:2] == [READ_SYSCALL, "0x0"]
        return "pipe" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/syscall").exists(), reason="needs /proc/PID/syscall (Linux)")
@pytest.mark.parametrize("as_json", [True, False])
def test_ctrl_c_says_interrupted_and_exits_130(tmp_path, as_json):
    cfg = write_config(tmp_path)
    args = [str(TIERED), "put", "--config", cfg, "--topic", "orders"] + (["--json"] if as_json else [])
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while not _reading_stdin(proc.pid):  # waiting for the body, as an operator's terminal would
            assert proc.poll() is None and time.monotonic() < deadline, "tiered put never read stdin"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED == 130
    assert err.strip() == "tiered put: interrupted"  # no "unexpected error", no traceback
    if as_json:
        error = json.loads(out)["error"]
        assert (error["code"], error["exit_code"], error["message"]) == ("INTERRUPTED", 130, "interrupted")
    else:
        assert out == ""
    assert not (tmp_path / "store").exists()  # interrupted before it touched the store


@pytest.mark.parametrize("argv, option, accepted", [
    (["put", "--queue", "abc", "--topic", "t", "--body", "x"], "--queue", "a queue id: an integer from 0 to 2147483647"),
    (["put", "--queue", "-1", "--topic", "t", "--body", "x"], "--queue", "a queue id: an integer from 0"),
    (["put", "--queue", "2147483648", "--topic", "t", "--body", "x"], "--queue", "to 2147483647"),
    (["get", "--offset", "1.5", "--topic", "t"], "--offset", "a queue offset: an integer from 0"),
    (["get", "--count", "0", "--topic", "t"], "--count", "a message count: an integer from 1"),
    (["demo", "--messages", "many"], "--messages", "a number of messages: an integer >= 1"),
    (["demo", "--size", "0"], "--size", "a body size in bytes: an integer >= 1"),
    (["demo", "--static-messages", "-3"], "--static-messages", "an integer >= 0"),
    (["metadata", "rebuild", "--progress-every", "x"], "--progress-every", "an integer >= 0"),
    (["conformance", "posix", "--hypothesis-examples", "0"], "--hypothesis-examples", "an integer >= 1"),
])
def test_a_bad_integer_option_names_the_option_the_value_and_what_it_accepts(tmp_path, capsys, argv,
                                                                              option, accepted):
    value = argv[argv.index(option) + 1]
    needs_config = argv[0] in ("put", "get", "metadata")
    full = argv + (["--config", write_config(tmp_path)] if needs_config else []) + ["--json"]
    assert main(full) == ExitCode.BAD_INPUT
    captured = capsys.readouterr()
    error = json.loads(captured.out)["error"]
    assert error["code"] == "USAGE"
    message = error["message"]
    assert f"argument {option}:" in message and accepted in message, message
    assert repr(value) in message or value in message
    assert "invalid" not in message and "_non_negative" not in message


def test_get_by_key_json_has_null_where_there_is_no_number(tmp_path, capsys):
    cfg = write_config(tmp_path)
    assert main(["put", "--config", cfg, "--topic", "orders", "--key", "o-1", "--body", "x"]) == 0
    capsys.readouterr()
    assert main(["get", "--config", cfg, "--topic", "orders", "--key", "o-1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["tier"] is None and got["next_begin_offset"] is None
    assert [m["queue_offset"] for m in got["messages"]] == [0]
    assert main(["get", "--config", cfg, "--topic", "orders", "--json"]) == 0
    by_offset = json.loads(capsys.readouterr().out)
    assert by_offset["tier"] == "local" and by_offset["next_begin_offset"] == 1
    assert main(["get", "--config", cfg, "--topic", "orders", "--key", "o-1"]) == 0
    assert capsys.readouterr().out.startswith("status=FOUND tier=- next_begin_offset=-")  # text: unchanged


def test_get_with_an_empty_key_is_refused_not_read_by_offset(tmp_path, capsys):
    """An operator drill: `get --key ""` printed the queue's messages by offset and exited 0."""
    cfg = write_config(tmp_path)
    assert main(["put", "--config", cfg, "--topic", "orders", "--key", "k1", "--body", "with-key-k1"]) == 0
    capsys.readouterr()
    assert main(["get", "--config", cfg, "--topic", "orders", "--key", ""]) == ExitCode.BAD_INPUT
    captured = capsys.readouterr()
    assert "ILLEGAL_PARAM" in captured.err and "key ''" in captured.err and "with-key-k1" not in captured.out
