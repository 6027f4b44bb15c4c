"""`tiered put` / `tiered get` and what a body is (an operator drill): a body that is not UTF-8
reads back exactly (``body_base64``; bytes in the text listing), an empty stdin is refused
(``--body ''`` puts an empty message), ``get --key`` refuses ``--offset``, and ``--count``
says that one read returns at most 4096 messages."""

from __future__ import annotations

import base64
import io
import json
import sys

import pytest

from tiered_core.access.fetcher import READ_AHEAD_COUNT
from tiered_core.cli import main
from tiered_core.cli.exit_codes import ExitCode


def write_config(tmp_path) -> str:
    path = tmp_path / "tiered.toml"
    path.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ndriver = "posix"\n'
                    f'local_commit_log_file_size = "1MiB"\n'
                    f'[tiered.options]\nroot = "{tmp_path / "tiered"}"\n')
    return str(path)


def put_from_stdin(monkeypatch, cfg: str, body: bytes, *extra: str) -> int:
    """``tiered put`` with ``body`` on stdin, as ``printf ... | tiered put`` gives it."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body)))
    return main(["put", "--config", cfg, "--topic", "bin", *extra])


def test_binary_bodies_read_back_exactly(tmp_path, capsys, monkeypatch):
    """The drill: b"\\xff\\xfe" and b"\\xfe\\xff" both printed as two replacement characters."""
    cfg = write_config(tmp_path)
    bodies = [b"\xff\xfe", b"\xfe\xff", "héllo".encode(), b"\x00" + b"\x80" * 70]
    for body in bodies:
        assert put_from_stdin(monkeypatch, cfg, body) == 0
    capsys.readouterr()
    assert main(["get", "--config", cfg, "--topic", "bin", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["messages"]
    assert [base64.b64decode(m["body_base64"], validate=True) for m in rows] == bodies
    assert rows[2]["body"] == "héllo"  # a UTF-8 body's text field is as it was
    assert main(["get", "--config", cfg, "--topic", "bin"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    shown = [line.split(" body=", 1)[1] for line in lines]
    assert shown[:3] == [r"b'\xff\xfe'", r"b'\xfe\xff'", "'héllo'"]
    assert shown[3] == repr(bodies[3][:60]) + "..."
    assert "\ufffd" not in "".join(shown)


def test_every_get_json_row_has_body_base64(tmp_path, capsys):
    cfg = write_config(tmp_path)
    assert main(["put", "--config", cfg, "--topic", "bin", "--key", "k", "--body", "text"]) == 0
    capsys.readouterr()
    for by in ([], ["--key", "k"]):
        assert main(["get", "--config", cfg, "--topic", "bin", *by, "--json"]) == 0
        (row,) = json.loads(capsys.readouterr().out)["messages"]
        assert (row["body"], row["body_base64"]) == ("text", base64.b64encode(b"text").decode())
    assert main(["get", "--help"]) == 0
    assert "body_base64" in capsys.readouterr().out  # the --json help says so


def test_an_empty_stdin_is_refused_and_body_empty_puts_an_empty_message(tmp_path, capsys, monkeypatch):
    """`tiered put ... </dev/null` stored an empty message with PUT_OK and no word."""
    cfg = write_config(tmp_path)
    assert put_from_stdin(monkeypatch, cfg, b"", "--json") == ExitCode.BAD_INPUT
    captured = capsys.readouterr()
    error = json.loads(captured.out)["error"]
    assert error["code"] == "ILLEGAL_PARAM" and "the body read from stdin is empty" in error["message"]
    assert "--body ''" in error["message"] and "[ILLEGAL_PARAM]" in captured.err
    assert not (tmp_path / "store").exists()  # refused before the store was opened
    assert main(["put", "--config", cfg, "--topic", "bin", "--body", ""]) == 0  # an explicit empty body
    capsys.readouterr()
    assert main(["get", "--config", cfg, "--topic", "bin", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["messages"]
    assert (row["body"], row["body_base64"]) == ("", "")


@pytest.mark.parametrize("offset", ["0", "3"])  # 0 too: the default must not hide an explicit --offset 0
def test_get_by_key_refuses_an_offset(tmp_path, capsys, offset):
    """`get --key K --offset N` ignored --offset and printed every message with the key."""
    cfg = write_config(tmp_path)
    assert main(["put", "--config", cfg, "--topic", "bin", "--key", "k", "--body", "x"]) == 0
    capsys.readouterr()
    assert main(["get", "--config", cfg, "--topic", "bin", "--key", "k", "--offset", offset,
                 "--json"]) == ExitCode.BAD_INPUT
    captured = capsys.readouterr()
    error = json.loads(captured.out)["error"]
    assert error["code"] == "USAGE" and "--key" in error["message"] and "--offset" in error["message"]
    assert main(["get", "--config", cfg, "--topic", "bin", "--offset", offset]) in (0, ExitCode.NOT_FOUND)


def test_count_help_says_one_read_returns_at_most_4096(capsys):
    """`get --count 2000000` returned 4096 messages; --help said "most messages to return"."""
    assert main(["get", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    count_help = out.split("--count COUNT", 2)[-1]
    assert f"at most {READ_AHEAD_COUNT} messages" in count_help and "next_begin_offset" in count_help
