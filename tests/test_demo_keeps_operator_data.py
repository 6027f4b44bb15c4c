"""``tiered demo`` (``make demo``) never deletes an operator's messages in ./demo-data.

An operator drill: after messages were put (acknowledged, tiered) into ./demo-data through
the config the demo wrote there (demo-data/tiered.toml, which the README points to), a
rerun of the demo deleted the directory. A rerun now recreates ./demo-data only when its
store holds nothing but what the demo recorded putting (.tiered-demo.json beside the
marker); a directory of an older demo, without that record, only when it holds demo-N
topics alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tiered_core.cli import main
DEMO_RECORD = ".tiered-demo.json"  # tiered_core.cli.demo.DEMO_RECORD
DEMO = ["demo", "--messages", "2000", "--lookups", "5", "--static-messages", "0"]


def snapshot(root: Path) -> dict[str, int]:
    return {os.path.relpath(os.path.join(d, n), root): os.path.getsize(os.path.join(d, n))
            for d, _, files in os.walk(root) for n in files}


@pytest.fixture
def demo_dir(tmp_path, monkeypatch, capsys) -> Path:
    """./demo-data of one demo run in ``tmp_path`` (the working directory)."""
    monkeypatch.chdir(tmp_path)
    assert main(DEMO) == 0
    capsys.readouterr()
    return tmp_path / "demo-data"


def put(demo_dir: Path, topic: str, body: str, queue: int = 0) -> None:
    assert main(["put", "--config", str(demo_dir / "tiered.toml"), "--topic", topic, "--queue", str(queue),
                 "--body", body, "--dispatch"]) == 0


def refused(capsys) -> dict:
    """The error of a demo rerun that must be refused, after checking its exit status."""
    capsys.readouterr()
    assert main([*DEMO, "--json"]) == 2
    return json.loads(capsys.readouterr().out)["error"]


def test_a_plain_rerun_recreates_the_directory(demo_dir, capsys):
    (demo_dir / "stale").write_text("from the first run")
    record = json.loads((demo_dir / DEMO_RECORD).read_text())
    assert sum(map(sum, record["messages"].values())) == 2000
    assert main(DEMO) == 0
    assert not (demo_dir / "stale").exists() and (demo_dir / DEMO_RECORD).is_file()


def test_a_rerun_keeps_an_operators_topic(demo_dir, capsys):
    put(demo_dir, "orders", "precious-order")
    before = snapshot(demo_dir)
    error = refused(capsys)
    assert error["code"] == "INVALID_PATH" and error["path"] == str(demo_dir) and error["queues"] == ["orders/0"]
    assert str(demo_dir) in error["message"] and "orders/0: 1 message(s)" in error["message"]
    assert "--config" in error["message"] and "Move the directory away" in error["message"]
    assert snapshot(demo_dir) == before
    assert main(["get", "--config", str(demo_dir / "tiered.toml"), "--topic", "orders"]) == 0
    assert "precious-order" in capsys.readouterr().out


def test_a_rerun_keeps_more_messages_in_a_demo_queue(demo_dir, capsys):
    put(demo_dir, "demo-1", "operator's", queue=2)
    error = refused(capsys)
    assert error["queues"] == ["demo-1/2"] and "126 message(s)" in error["message"]
    assert (demo_dir / "tiered.toml").is_file()


def test_a_directory_of_an_older_demo_without_the_record(demo_dir, capsys):
    (demo_dir / DEMO_RECORD).unlink()
    assert main(DEMO) == 0  # demo topics only: recreated
    (demo_dir / DEMO_RECORD).unlink()
    put(demo_dir, "orders", "precious-order")
    error = refused(capsys)
    assert error["queues"] == ["orders/0"] and "demo-N" in error["message"]
    assert (demo_dir / "tiered-store-id").is_file()


def test_a_store_that_cannot_be_checked_is_kept(demo_dir, capsys):
    (demo_dir / DEMO_RECORD).write_text("{not json")
    error = refused(capsys)
    assert error["code"] == "INVALID_PATH" and "cannot check" in error["message"]
    assert (demo_dir / "tiered-metadata.db").is_file()


@pytest.mark.parametrize("topics, queues, messages", [(4, 4, 2000), (3, 5, 7), (1, 1, 1), (2, 3, 100_001)])
def test_the_record_counts_what_the_demo_puts(topics, queues, messages):
    from tiered_core.cli.demo import DEMO_RECORD as recorded_in, planned_counts

    assert recorded_in == DEMO_RECORD
    names = [f"demo-{t}" for t in range(topics)]
    counts = planned_counts(names, queues, messages)
    slots = [(t, q) for t in names for q in range(queues)]
    expected = {key: 0 for key in slots}
    for seq in range(messages):
        expected[slots[seq % len(slots)]] += 1
    assert {(t, q): counts[t][q] for t, q in slots} == expected
