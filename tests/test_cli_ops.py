"""`tiered put/get/stat` on a store made from a TOML config."""

from __future__ import annotations

import json

from tiered_core.cli import main


def write_config(tmp_path) -> str:
    path = tmp_path / "tiered.toml"
    path.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ndriver = "posix"\n'
                    f'local_commit_log_file_size = "1MiB"\n[tiered.options]\nroot = "{tmp_path / "tiered"}"\n')
    return str(path)


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


def test_bad_topic_is_a_clear_error(tmp_path, capsys):
    cfg = write_config(tmp_path)
    assert main(["put", "--config", cfg, "--topic", "../etc", "--body", "x"]) == 2
    assert "../etc" in capsys.readouterr().err
