"""Issue 18 on Spark: outputs never reach a store, Spark reads never write one, corruption is
``CORRUPT`` (exit 4), and ``tiered spark stream`` checks its options before Spark starts and
says what it did."""

from __future__ import annotations

import json
import os

import pytest
from sample_store import SampleSpec, write_sample
from snapshots import content_digest
from spark_helpers import write_config
from stream_helpers import run_available_now_into

from tiered_core import Message, StoreConfig, TieredMessageStore
from tiered_core.cli import main
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, decode_cq_unit
from tiered_core.errors import CorruptData, NotFound
from tiered_core.flat import FlatFileStore
from tiered_core.ops.output_paths import MARKER
from tiered_core.spark import count_partitions, register
from tiered_core.spark.jobs import export

SPEC = SampleSpec(topics=("orders", "audit"), queues=2, messages=60, body_size=64)


def snapshot(*roots) -> dict:
    """Every file and directory under ``roots``: type, size, mtime (ns) and content hash."""
    out = {}
    for n, root in enumerate(map(str, roots)):
        for directory, dirs, files in os.walk(root):
            for name in [""] + dirs + files:
                path = os.path.join(directory, name) if name else directory
                st = os.lstat(path)
                rel = (n, os.path.relpath(path, root))
                if os.path.isdir(path) and not os.path.islink(path):
                    out[rel] = ("dir", st.st_mtime_ns)
                else:
                    out[rel] = ("file", st.st_size, st.st_mtime_ns, content_digest(path))
    return out


def run_cli(capsys, *argv: str) -> tuple[int, dict, str]:
    """``tiered ARGV --json`` in this process: exit status, the JSON document, stderr."""
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    out = captured.out.strip()
    return code, json.loads(out[out.index("{"):]) if "{" in out else {}, captured.err


@pytest.fixture
def no_spark(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("Spark must not start")

    monkeypatch.setattr("tiered_core.spark.get_session", refuse)


@pytest.fixture
def sample(tmp_path) -> str:
    config_path = write_config(tmp_path / "s.toml", tmp_path / "s", cl_max=8 << 10, cq_max=1000)
    write_sample(StoreConfig.load(config_path), SPEC)
    return config_path


# -- finding 1: outputs never reach a store ------------------------------------------------------


def test_export_refuses_every_store_location_before_spark_starts(sample, tmp_path, capsys, monkeypatch, no_spark):
    config = StoreConfig.load(sample)
    root = config.effective_driver_options()["root"]
    before = snapshot(tmp_path / "s")
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "precious").write_bytes(b"keep me")
    monkeypatch.chdir(tmp_path / "cwd")
    os.symlink(root, tmp_path / "cwd" / "link")
    cases = {root: "tier root (driver 'posix' option 'root')", config.store_path: "store_path",
             config.effective_metadata_path(): "metadata file", "link": "tier root (driver 'posix' option 'root')",
             os.path.join(root, "..", "x"): "store_path", str(tmp_path): "store_path"}
    for to, collides in cases.items():
        code, out, _ = run_cli(capsys, "spark", "export", "--config", sample, "--to", to, "--overwrite")
        error = out["error"]
        assert (code, error["code"], error["type"], error["option"]) == (2, "INVALID_PATH", "InvalidPath", "--to")
        assert error["collides_with"] == collides and error["source"] == sample, (to, error)
        assert "Choose another --to" in error["message"]
    # an empty path, and the current directory (which holds no export marker)
    code, out, _ = run_cli(capsys, "spark", "export", "--config", sample, "--to", "", "--overwrite")
    assert code == 2 and "empty" in out["error"]["message"]
    code, out, _ = run_cli(capsys, "spark", "export", "--config", sample, "--to", ".", "--overwrite")
    assert code == 2 and out["error"]["marker"] == MARKER
    assert (tmp_path / "cwd" / "precious").read_bytes() == b"keep me"
    assert snapshot(tmp_path / "s") == before


def test_overwrite_replaces_only_an_export_it_made(spark, sample, tmp_path, capsys):
    out = tmp_path / "out"
    code, first, _ = run_cli(capsys, "spark", "export", "--config", sample, "--to", str(out))
    total = len(SPEC.topics) * SPEC.queues * SPEC.messages
    assert (code, first["rows"]) == (0, total)
    assert (out / MARKER).is_file()
    code, again, _ = run_cli(capsys, "spark", "export", "--config", sample, "--to", str(out))
    assert code == 2 and again["error"]["code"] == "INVALID_PATH" and "--overwrite" in again["error"]["message"]
    code, replaced, _ = run_cli(capsys, "spark", "export", "--config", sample, "--to", str(out), "--overwrite",
                             "--topics", "orders")
    assert (code, replaced["rows"], replaced["topics"]) == (0, total // 2, 1)
    assert sorted(os.listdir(tmp_path)) == sorted(["s", "s.toml", "out"])  # no staging or old copy left
    assert (out / MARKER).is_file() and not (out / "topic=audit").exists()

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_bytes(b"not an export")
    code, refused, _ = run_cli(capsys, "spark", "export", "--config", sample, "--to", str(foreign), "--overwrite")
    assert code == 2 and refused["error"]["marker"] == MARKER and str(foreign) in refused["error"]["message"]
    assert os.listdir(foreign) == ["notes.txt"]


def test_export_of_a_store_that_does_not_exist_exits_3_and_creates_nothing(tmp_path, capsys, no_spark):
    config_path = write_config(tmp_path / "gone.toml", tmp_path / "gone")
    code, out, _ = run_cli(capsys, "spark", "export", "--config", config_path, "--to", str(tmp_path / "out"))
    assert (code, out["error"]["code"], out["error"]["type"]) == (3, "NOT_FOUND", "StoreNotFound")
    assert sorted(os.listdir(tmp_path)) == ["gone.toml"]
    # the data source itself, without the command line
    with pytest.raises(NotFound) as info:  # StoreNotReadable
        count_partitions(config_path)
    assert info.value.path == StoreConfig.load(config_path).effective_metadata_path()
    assert sorted(os.listdir(tmp_path)) == ["gone.toml"]


# -- finding 6 / read-only: Spark reads never write a store --------------------------------------


def test_spark_reads_never_write_the_store(spark, tmp_path, capsys):
    store_path, tier, meta = tmp_path / "store", tmp_path / "tier", tmp_path / "meta"
    config_path = tmp_path / "t.toml"
    config_path.write_text(f"""[tiered]
store_path = "{store_path}"
metadata_path = "{meta / 'tiered-metadata.db'}"
local_commit_log_file_size = "1MiB"
commit_log_max_size = "16KiB"
consume_queue_max_size = 2000
[tiered.options]
root = "{tier}"
fsync = false
""")
    store = TieredMessageStore.open(StoreConfig.load(str(config_path)))
    try:
        for i in range(300):
            store.put_message(Message(topic="orders" if i % 3 else "audit", body=b"m%d" % i, keys=[f"k{i}"]),
                              queue_id=i % 2)
        store.dispatch(force=True)
    finally:
        store.close()
    before = snapshot(store_path, tier, meta)
    assert any(k[0] == 1 for k in before) and any(k[0] == 2 for k in before)

    code, out, _ = run_cli(capsys, "spark", "export", "--config", str(config_path), "--to", str(tmp_path / "out"))
    assert (code, out["rows"]) == (0, 300)
    register(spark)
    assert spark.read.format("tiered").option("config", str(config_path)).load().count() == 300
    seen = []
    run_available_now_into(spark.readStream.format("tiered").option("config", str(config_path)).load(),
                           lambda df, batch_id: seen.append(df.count()), tmp_path / "checkpoint")
    assert sum(seen) == 300

    assert snapshot(store_path, tier, meta) == before


# -- finding 4: corruption is CorruptData / exit 4 -----------------------------------------------


def _locate(config_path: str, queue_id: int, offset: int):
    """(commit-log segment file, position of the message in it, consume-queue segment file, unit position)."""
    config = StoreConfig.load(config_path)
    root = config.effective_driver_options()["root"]
    driver, metadata = config.open_driver(), config.open_metadata()
    try:
        files = FlatFileStore(driver, metadata, config.flat_config())
        assert files.load()
        flat = files.get("orders", queue_id)
        unit = decode_cq_unit(flat.get_consume_queue(offset))
        cl = next(s for s in reversed(flat.commit_log.segments) if s.base_offset <= unit.commitlog_offset)
        cq = next(s for s in reversed(flat.consume_queue.segments) if s.base_offset <= offset * CQ_UNIT_SIZE)
        found = (os.path.join(root, cl.path), unit.commitlog_offset - cl.base_offset,
                 os.path.join(root, cq.path), offset * CQ_UNIT_SIZE - cq.base_offset)
        files.shutdown()
        return found
    finally:
        metadata.close()
        driver.close()


def _flip(path: str, position: int) -> bytes:
    os.chmod(path, 0o644)
    with open(path, "r+b") as fh:
        fh.seek(position)
        old = fh.read(1)
        fh.seek(position)
        fh.write(bytes([old[0] ^ 0xFF]))
    return old


def _restore(path: str, position: int, old: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(position)
        fh.write(old)


def test_corruption_in_a_spark_job_is_corrupt_data_exit_4(spark, sample, tmp_path, capsys):
    cl_path, message_at, cq_path, unit_at = _locate(sample, 0, 23)
    body_at = message_at + 88 + 5  # V1 header with IPv4 hosts: the body starts at byte 88
    old = _flip(cl_path, body_at)
    code, out, _ = run_cli(capsys, "spark", "export", "--config", sample, "--to", str(tmp_path / "out"),
                           "--topics", "orders")
    error = out["error"]
    assert (code, error["code"], error["type"], error["exit_code"]) == (4, "CORRUPT_DATA", "CorruptData", 4)
    assert (error["topic"], error["queue_id"], error["queue_offset"]) == ("orders", 0, 23)
    assert "crc" in error["message"].lower()
    assert not (tmp_path / "out").exists()  # the half-written export is removed, nothing else
    _restore(cl_path, body_at, old)

    old = _flip(cq_path, unit_at + 7)  # the low byte of the unit's commit-log offset
    with pytest.raises(CorruptData) as info:
        export(spark, sample, tmp_path / "out2", topics="orders", queues="0")
    assert (info.value.topic, info.value.queue_id, info.value.queue_offset) == ("orders", 0, 23)
    assert not (tmp_path / "out2").exists()
    _restore(cq_path, unit_at + 7, old)


# -- list 8: the stream says what it did, and checks its options before Spark starts -------------


def test_a_stream_that_skipped_every_row_says_so(spark, sample, tmp_path, capsys):
    target = write_config(tmp_path / "b.toml", tmp_path / "b", cl_max=8 << 10, cq_max=1000)
    total = len(SPEC.topics) * SPEC.queues * SPEC.messages
    code, first, _ = run_cli(capsys, "spark", "stream", "--config", sample, "--to-config", target, "--checkpoint",
                          str(tmp_path / "c1"), "--available-now")
    assert code == 0 and (first["rows"], first["mirrored"], first["skipped"]) == (total, total, 0)
    # a new checkpoint reads everything again; the target holds it all already
    code, again, err = run_cli(capsys, "spark", "stream", "--config", sample, "--to-config", target,
                               "--checkpoint", str(tmp_path / "c2"), "--available-now")
    assert code == 0 and (again["rows"], again["mirrored"], again["skipped"]) == (total, 0, total)
    assert f"read {total} messages from the source" in err
    assert f"mirrored 0, skipped {total} already in the target" in err


def test_stream_options_paths_and_stores_are_checked_before_spark(sample, tmp_path, capsys, no_spark):
    target = write_config(tmp_path / "b.toml", tmp_path / "b")
    source = StoreConfig.load(sample)

    def stream(*extra: str, checkpoint: str | None = str(tmp_path / "ck"), config: str = sample,
               to: str = target) -> dict:
        code, out, _ = run_cli(capsys, "spark", "stream", "--config", config, "--to-config", to,
                            *(() if checkpoint is None else ("--checkpoint", checkpoint)), *extra)
        assert code == out["error"]["exit_code"]
        return out["error"]

    nope = stream("--starting-offsets", '{"nope":{"0":1}}')
    assert (nope["exit_code"], nope["code"], nope["option"]) == (2, "INVALID_OPTION", "--starting-offsets")
    assert nope["value"] == '{"nope":{"0":1}}' and "'nope'" in nope["message"] and "audit, orders" in nope["message"]
    queue = stream("--starting-offsets", '{"orders":{"7":0}}')
    assert queue["option"] == "--starting-offsets" and "queue 7" in queue["message"]
    assert stream("--starting-offsets", "sideways")["option"] == "--starting-offsets"
    topics = stream("--topics", "orders,nope", "--available-now")
    assert (topics["code"], topics["option"], topics["value"]) == ("INVALID_OPTION", "--topics", "orders,nope")

    inside = stream(checkpoint=os.path.join(source.store_path, "ck"))
    assert (inside["code"], inside["option"], inside["collides_with"]) == ("INVALID_PATH", "--checkpoint",
                                                                         "store_path")
    assert stream(checkpoint="")["option"] == "--checkpoint"
    nested = write_config(tmp_path / "n.toml", os.path.join(source.effective_driver_options()["root"], "b"))
    assert (stream(to=nested)["code"], stream(to=nested)["option"]) == ("INVALID_PATH", "--to-config")

    # a target whose driver options its driver refuses (drill s14b F8: found inside the running
    # query, after the target's lock and the checkpoint were created)
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[tiered]\nstore_path = "{tmp_path / "bad"}"\ndriver = "fsspec"\n'
                   '[tiered.options]\nurl = "MEMORY://tiered"\n')
    refused = stream(to=str(bad))
    assert (refused["code"], refused["option"]) == ("INVALID_OPTION", "url")
    assert not (tmp_path / "bad").exists() and not (tmp_path / "ck").exists()

    # a source that does not exist: nothing to copy now (exit 3); a continuous stream waits for it
    missing = write_config(tmp_path / "m.toml", tmp_path / "m")
    gone = stream("--available-now", config=missing)
    assert (gone["exit_code"], gone["code"], gone["type"]) == (3, "NOT_FOUND", "StoreNotFound")
    code, out, err = run_cli(capsys, "spark", "stream", "--config", missing, "--to-config", target,
                             "--checkpoint", str(tmp_path / "ck"))
    assert "Spark must not start" in out["error"]["message"]  # it got as far as starting Spark
    assert "does not exist yet; the stream waits for it" in err
    assert not (tmp_path / "m").exists() and not (tmp_path / "ck").exists()

    # migrate checks its target and its source the same way
    code, out, _ = run_cli(capsys, "spark", "migrate", "--config", sample, "--to-config", nested)
    assert (code, out["error"]["code"]) == (2, "INVALID_PATH")
    other = write_config(tmp_path / "t.toml", tmp_path / "t", options={"root": str(tmp_path / "t-tier")})
    code, out, _ = run_cli(capsys, "spark", "migrate", "--config", missing, "--to-config", other)
    assert (code, out["error"]["code"]) == (3, "NOT_FOUND")
    assert not (tmp_path / "m").exists() and not (tmp_path / "t").exists()
