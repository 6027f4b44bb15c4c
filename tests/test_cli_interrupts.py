"""Ctrl-C at any moment of a `tiered` command (an operator drill): exit 130 with one line
``interrupted`` and, with ``--json``, exactly one JSON document on stdout; a put interrupted
after it stored its message says so (``stored``, its offsets), as a LOCAL_IO failure does."""

from __future__ import annotations

import json
import platform
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

import tiered_core.cli as cli
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.cli.exit_codes import ExitCode
from tiered_core.codec.message import Message
from tiered_core.config import StoreConfig

TIERED = Path(sys.executable).with_name("tiered")
#: The number of the write(2) system call, as /proc/PID/syscall shows it.
WRITE_SYSCALL = {"x86_64": "1", "aarch64": "64"}.get(platform.machine())


def write_config(tmp_path) -> str:
    path = tmp_path / "tiered.toml"
    path.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ndriver = "posix"\n'
                    f'local_commit_log_file_size = "1MiB"\n'
                    f'[tiered.options]\nroot = "{tmp_path / "tiered"}"\n')
    return str(path)


def run_main(argv: list[str]) -> int:
    """``main(argv)``; a Ctrl-C escaping it fails the test (rather than stopping pytest)."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main: a traceback and death by SIGINT")


def local_max(cfg: str, topic: str) -> int:
    with TieredMessageStore.open(StoreConfig.load(cfg)) as store:
        return store.local.get_max_offset_in_queue(topic, 0)


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


# -- a put interrupted after it stored its message ----------------------------------------------------

def test_ctrl_c_during_dispatch_says_the_message_was_stored(tmp_path, capsys, monkeypatch):
    """The drill: `put --dispatch` interrupted after the put exited 130 "interrupted" with no
    word that the message was stored, and a retry stored it twice."""
    cfg = write_config(tmp_path)
    monkeypatch.setattr(TieredMessageStore, "dispatch", interrupt)
    assert run_main(["put", "--config", cfg, "--topic", "orders", "--body", "x", "--dispatch",
                     "--json"]) == ExitCode.INTERRUPTED
    captured = capsys.readouterr()
    error = json.loads(captured.out)["error"]
    assert (error["code"], error["exit_code"], error["stored"]) == ("INTERRUPTED", 130, True)
    assert (error["put"]["status"], error["put"]["queue_offset"]) == ("PUT_OK", 0)
    assert "do not put it again" in error["message"]
    assert captured.err.strip() == ("tiered put: interrupted; the message WAS stored (orders/0@0): "
                                    "do not put it again")
    # text: the put's line on stdout, as the LOCAL_IO case prints it
    assert run_main(["put", "--config", cfg, "--topic", "orders", "--body", "y",
                     "--dispatch"]) == ExitCode.INTERRUPTED
    captured = capsys.readouterr()
    assert captured.out.startswith("PUT_OK topic=orders queue=0 queue_offset=1 ")
    assert "the message WAS stored (orders/0@1)" in captured.err
    monkeypatch.undo()
    assert local_max(cfg, "orders") == 2  # both stored, once each


def test_ctrl_c_before_the_put_returned_claims_nothing(tmp_path, capsys, monkeypatch):
    cfg = write_config(tmp_path)
    monkeypatch.setattr(TieredMessageStore, "put_message", interrupt)
    assert run_main(["put", "--config", cfg, "--topic", "orders", "--body", "x", "--json"]) == 130
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"] == {"code": "INTERRUPTED", "exit_code": 130,
                                                 "type": "KeyboardInterrupt", "message": "interrupted"}
    assert captured.err.strip() == "tiered put: interrupted"


# -- Ctrl-C while the parser is built (the subcommands' imports) -------------------------------------

@pytest.mark.parametrize("as_json", [True, False])
def test_ctrl_c_while_the_parser_is_built(capsys, monkeypatch, as_json):
    """The drill: SIGINT in the first ~0.5 s (importing the subcommands) gave a traceback."""
    monkeypatch.setattr(cli, "importlib", types.SimpleNamespace(import_module=interrupt))
    argv = ["get", "--config", "x.toml", "--topic", "t"] + (["--json"] if as_json else [])
    assert run_main(argv) == ExitCode.INTERRUPTED
    captured = capsys.readouterr()
    assert captured.err.strip() == "tiered: interrupted"  # one line, no traceback
    if as_json:
        error = json.loads(captured.out)["error"]
        assert (error["code"], error["exit_code"], error["message"]) == ("INTERRUPTED", 130, "interrupted")
    else:
        assert captured.out == ""


def test_ctrl_c_while_an_error_is_reported_is_still_130(capsys, monkeypatch):
    """A second Ctrl-C while the first one's error document is built."""
    monkeypatch.setattr(cli, "importlib", types.SimpleNamespace(import_module=interrupt))
    monkeypatch.setattr(cli, "error_payload", interrupt)
    assert run_main(["stat", "--config", "x.toml", "--json"]) == ExitCode.INTERRUPTED


# -- Ctrl-C while the --json result is printed -------------------------------------------------------

def test_ctrl_c_before_the_result_is_written_prints_only_the_error(tmp_path, capsys, monkeypatch):
    cfg = write_config(tmp_path)
    assert run_main(["put", "--config", cfg, "--topic", "orders", "--body", "x"]) == 0
    capsys.readouterr()
    dumps = json.dumps
    calls = []

    def interrupt_once(*args, **kwargs):  # while the result is built; not the error document after it
        calls.append(args)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return dumps(*args, **kwargs)

    monkeypatch.setattr("tiered_core.cli.shared.json.dumps", interrupt_once)
    assert run_main(["stat", "--config", cfg, "--json"]) == ExitCode.INTERRUPTED
    monkeypatch.undo()
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"]["code"] == "INTERRUPTED"  # that one document only
    assert captured.err.strip() == "tiered stat: interrupted"


def _writing_stdout(pid: int) -> bool:
    """Whether process ``pid`` is blocked in write(1, ...)."""
    try:
        return Path(f"/proc/{pid}/syscall").read_text().split()[:2] == [WRITE_SYSCALL, "0x1"]
    except OSError:
        return False


@pytest.mark.skipif(WRITE_SYSCALL is None or not Path("/proc/self/syscall").exists(),
                    reason="needs /proc/PID/syscall (Linux, x86_64 or aarch64)")
def test_ctrl_c_while_the_result_is_written_leaves_it_whole(tmp_path):
    """The drill: Ctrl-C while `get --json` printed left a cut document and then the error
    document on stdout. The pipe is not read until the command is blocked writing to it."""
    cfg = write_config(tmp_path)
    bodies = [bytes([i]) * 2000 for i in range(100)]  # ~270 KB of JSON: more than a pipe holds
    with TieredMessageStore.open(StoreConfig.load(cfg)) as store:
        for body in bodies:
            assert store.put_message(Message(topic="orders", body=body), 0).ok
    proc = subprocess.Popen([str(TIERED), "get", "--config", cfg, "--topic", "orders", "--count", "100", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _writing_stdout(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "tiered get never blocked writing"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        time.sleep(0.2)  # (let the handler run while the write is still blocked)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, err
    result = json.loads(out)  # one document: the whole result, no error document after it
    assert len(result["messages"]) == 100 and result["next_begin_offset"] == 100
    assert err.decode().strip() == "tiered get: interrupted"


# -- a Ctrl-C before main runs: the command's own imports -------------------------------------------

#: The `tiered` console script up to its call of main, with a Ctrl-C arriving while the store's
#: modules are still being imported (what a Ctrl-C in the first 0.2 s of any command meets).
EARLY = """
import os, signal, sys
sys.argv = [os.path.join(os.path.dirname(sys.executable), "tiered"), *sys.argv[1:]]
from tiered_core.cli import main
os.kill(os.getpid(), signal.SIGINT)
import tiered_core.access.tiered_store  # a heavy import, interrupted
sys.exit(main())
"""


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_while_the_command_imports_its_modules(as_json):
    """The drill: a Ctrl-C in the first 0.1-0.2 s of a command printed an import traceback and
    died by SIGINT. Now: one line ``interrupted``, exit 130, and with --json one document."""
    argv = ["drivers", *(["--json"] if as_json else [])]
    proc = subprocess.run([sys.executable, "-c", EARLY, *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "tiered: interrupted"
    if as_json:
        assert json.loads(proc.stdout)["error"]["code"] == "INTERRUPTED"
    else:
        assert proc.stdout == ""


def test_a_program_importing_the_cli_keeps_its_own_ctrl_c():
    """Only the `tiered` command gets that handler: a program (or a test run) that imports
    the CLI still gets its KeyboardInterrupt."""
    # The program sets up its own Ctrl-C first: a run started as a background job of a shell
    # (`make test &`, CI wrappers) has SIGINT ignored, which Python keeps and children inherit,
    # unless some earlier test on the same worker installed a handler (a SparkSession does).
    code = ("import os, signal\nsignal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\nfrom tiered_core.cli import main\n"
            "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\ntry:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n    import time; time.sleep(5)\nexcept KeyboardInterrupt:\n"
            "    print('caught')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "caught", proc.stderr


#: A Ctrl-C arriving while ``logging``'s at-fork hook runs in this process (Python calls it
#: around every fork: a subprocess started, Spark's JVM launched). The profile hook hands the
#: handler the real frame of ``logging._releaseLock`` during a real fork, as a signal landing
#: there would.
_CTRL_C_IN_A_FORK_HOOK = r"""
import logging, signal, subprocess, sys, time
from tiered_core.cli.shared import interrupt

def python_default(signum, frame):
    raise KeyboardInterrupt

handler = interrupt if sys.argv[1] == "ours" else python_default
fired = []

def profile(frame, event, arg):
    if event == "call" and frame.f_code is logging._releaseLock.__code__ and not fired:
        fired.append(1)
        handler(signal.SIGINT, frame)

signal.signal(signal.SIGINT, signal.default_int_handler)
sys.setprofile(profile)
subprocess.run(["true"], preexec_fn=lambda: None)  # as pyspark starts its JVM: the hooks run then
sys.setprofile(None)
assert fired, "the fork ran no logging hook"
try:
    time.sleep(5)
except KeyboardInterrupt:
    print("interrupted")
else:
    print("the Ctrl-C was lost")
"""


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or sys.platform == "win32", reason="POSIX fork hooks")
def test_a_ctrl_c_during_a_fork_hook_is_raised_after_it_not_printed_and_lost():
    """CI of stop 39: a Ctrl-C while `tiered spark export` launched Spark's JVM printed
    "Exception ignored in: <function _releaseLock>" and a traceback, and the export went on.
    The command's handler sends such a Ctrl-C again once the hook is done."""
    def run(which: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _CTRL_C_IN_A_FORK_HOOK, which], capture_output=True,
                              text=True, timeout=60)

    plain = run("python's")  # what Python's own handler does there
    assert "Exception ignored in" in plain.stderr and plain.stdout.strip() == "the Ctrl-C was lost", plain
    ours = run("ours")
    assert ours.returncode == 0 and ours.stdout.strip() == "interrupted", ours
    assert ours.stderr == ""
