"""The import and migrate jobs (and the CLI), on stores written through the flat API."""

from __future__ import annotations

import hashlib
import json

import pytest
from sample_store import SampleSpec, write_sample
from spark_helpers import api_rows, parquet_rows, write_config

from tiered_core.cli import main
from tiered_core.config import StoreConfig
from tiered_core.errors import DriverError, IllegalOffset, StateConflict
from tiered_core.spark.jobs import export, import_parquet, migrate
from tiered_core.spark.jobs.migrate import copy_segment, plan_copies
from tiered_conformance.emulator import EmulatorError
from tiered_conformance.faults import Fault, FaultLayer
from tiered_conformance.testing import ci_mode
from tiered_driver_gcs.emulator import FakeGcsServer

SPEC = SampleSpec(topics=("orders", "audit"), queues=2, messages=180, body_size=64)


def by_position(rows):
    return sorted(rows, key=lambda t: (t[0], t[1], t[2]))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("jobs-source")
    config_path = write_config(root / "tiered.toml", root / "data", cl_max=8 << 10, cq_max=1000)
    write_sample(StoreConfig.load(config_path), SPEC)
    return config_path


def test_import_then_export_round_trips(spark, source, tmp_path, capsys):
    first = export(spark, source, tmp_path / "first")
    target = write_config(tmp_path / "target.toml", tmp_path / "target", cl_max=8 << 10, cq_max=1000)

    loaded = import_parquet(spark, target, first.path)

    assert (loaded.appended, loaded.skipped) == (first.rows, 0)
    assert loaded.queues == len(SPEC.topics) * SPEC.queues
    assert by_position(api_rows(target)) == by_position(api_rows(source))
    assert main(["spark", "export", "--config", target, "--to", str(tmp_path / "second")]) == 0
    assert f"exported {first.rows} messages" in capsys.readouterr().out
    assert parquet_rows(str(tmp_path / "second")) == parquet_rows(first.path)

    # Loading the same rows again (here through the CLI) stores nothing twice.
    assert main(["spark", "import", "--config", target, "--from", first.path, "--json"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (again["appended"], again["skipped"]) == (0, first.rows)
    assert len(api_rows(target)) == first.rows


def test_import_refuses_a_gap_in_a_queue(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tiered_core.spark.source.schema import arrow_schema

    schema = arrow_schema()
    rows = {name: [] for name in schema.names}
    for offset in (0, 1, 3):  # 2 is missing
        for name, value in (("topic", "gappy"), ("queue_id", 0), ("queue_offset", offset),
                            ("commitlog_offset", 0), ("store_timestamp", 1_700_000_000_000_000 + offset),
                            ("born_timestamp", 1_700_000_000_000_000), ("keys", ["k"]), ("tags", None),
                            ("properties", [("a", "b")]), ("body", b"x")):
            rows[name].append(value)
    (tmp_path / "in").mkdir()
    pq.write_table(pa.Table.from_pydict(rows, schema=schema), tmp_path / "in" / "part.parquet")
    target = write_config(tmp_path / "target.toml", tmp_path / "target")
    with pytest.raises(IllegalOffset, match="queue offset 3 but the queue continues at 2"):
        import_parquet(spark, target, tmp_path / "in")
    # Nothing was committed to the metadata.
    assert api_rows(target) == []


@pytest.fixture
def gcs_server(tmp_path):
    server = FakeGcsServer(tmp_path / "gcs")
    try:
        server.start()
    except EmulatorError as exc:  # pragma: no cover - depends on the machine
        server.close()
        if ci_mode():
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))
    server.create_bucket("tiered")
    yield server
    server.close()


def _digest(driver, path: str) -> tuple[int, str]:
    size = driver.size(path)
    return size, hashlib.sha256(driver.read(path, 0, size) if size else b"").hexdigest()


def test_migrate_posix_to_gcs_resumes_after_a_failed_task(spark, source, tmp_path, capsys, gcs_server):
    source_config = StoreConfig.load(source)
    metadata = source_config.open_metadata()
    tasks = plan_copies(source_config, metadata)
    metadata.close()
    assert any(t.sealed for t in tasks) and any(not t.sealed for t in tasks)
    failing = max(tasks, key=lambda t: t.metadata_size)
    assert failing.metadata_size > 2 * 1024

    server = gcs_server
    target = write_config(tmp_path / "gcs.toml", tmp_path / "gcs-store", driver="gcs",
                          options=server.driver_options("tiered", "migrated"),
                          metadata_path=tmp_path / "gcs-metadata.db")
    target_config = StoreConfig.load(target)

    gcs = target_config.open_driver()
    try:
        # A first run claimed the target's prefix (as every run does before it writes)...
        from tiered_core.access.writer_session import WriterSession

        with WriterSession(target_config, writer="tiered spark migrate", appends=True):
            pass
        # ...and the target holds bytes at one planned path that are not the source's: its
        # Spark task fails (typed, through the task error), the others copy, no metadata.
        gcs.create(failing.path)
        gcs.write(failing.path, 0, b"\xff" * 100)
        with pytest.raises(StateConflict, match="not the source's: it is another store's data, which a migration "
                                                 "never overwrites") as refused:
            migrate(spark, source, target, chunk=1024)
        # Not "running it again resumes": a re-run will not help, as the task's refusal says (drill s14).
        assert refused.value.message.startswith("migration refused") and "resumes" not in str(refused.value)
        meta = target_config.open_metadata()
        assert list(meta.iterate_file_segments()) == []  # written only at the very end
        meta.close()
        assert gcs.size(failing.path) == 100  # never overwritten
        gcs.delete(failing.path)  # the operator, who knows it is a stale copy, removes it

        # A copy of that segment dies half-way (a torn write at the backend: half of it landed).
        posix = source_config.open_driver()
        try:
            with pytest.raises(DriverError, match="injected"):
                copy_segment(posix, FaultLayer(gcs, [Fault.partial(failing.metadata_size // 2)]), failing,
                             chunk=failing.metadata_size)
        finally:
            posix.close()
        assert 0 < gcs.size(failing.path) < failing.metadata_size  # half of it landed

        done = migrate(spark, source, target, chunk=1024)
        assert done.segments == len(tasks)
        assert done.resumed >= 1
        posix = source_config.open_driver()
        try:
            for task in tasks:
                assert _digest(gcs, task.path) == _digest(posix, task.path), task.path
                assert gcs.is_sealed(task.path) == task.sealed, task.path
        finally:
            posix.close()
    finally:
        gcs.close()
    # A store on the gcs driver serves the same messages.
    assert by_position(api_rows(target)) == by_position(api_rows(source))

    # Running it once more (through the CLI) copies nothing.
    assert main(["spark", "migrate", "--config", source, "--to-config", target, "--chunk-size", "1024",
                 "--json"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (again["segments"], again["copied"], again["resumed"]) == (len(tasks), 0, len(tasks))
