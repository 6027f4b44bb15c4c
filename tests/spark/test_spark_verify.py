"""``tiered spark verify``: the deep per-queue walk on Spark gives the report of
``tiered verify --deep`` -- the same findings, JSON and exit status -- on a store with
faults planted by the drills kit, however the queues are cut into ranges."""

from __future__ import annotations

import json

import pytest
from sample_store import SampleSpec, write_sample
from spark_helpers import write_config
from tiered_conformance.drills import plant

from tiered_core.cli import main
from tiered_core.config import StoreConfig
from tiered_core.errors import ConfigError
from tiered_core.ops.findings import FindingKind
from tiered_core.ops.verify import verify_store
from tiered_core.spark.jobs import verify

#: Every store here is closed: verify's settle pauses would wait for nothing (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_verify_settle")

SPEC = SampleSpec(topics=("orders", "audit"), queues=2, messages=240, body_size=96)


def comparable(report) -> dict:
    data = report.as_dict() if not isinstance(report, dict) else report
    data["summary"].pop("elapsed_s")
    return data


@pytest.fixture
def damaged(tmp_path):
    """A store (several segments per queue) with a flipped byte, a deleted commit-log
    segment and moved segment times planted in three queues."""
    config_path = write_config(tmp_path / "tiered.toml", tmp_path / "data", cl_max=8 << 10, cq_max=1000)
    write_sample(StoreConfig.load(config_path), SPEC)
    planted = [plant(StoreConfig.load(config_path), "flipped_byte", topic="orders", queue_id=0, seed=1),
               plant(StoreConfig.load(config_path), "deleted_object", topic="orders", queue_id=1, seed=2),
               plant(StoreConfig.load(config_path), "bad_times", topic="audit", queue_id=0, seed=3)]
    return config_path, planted


def test_spark_verify_gives_the_single_process_report(spark, damaged):
    config_path, planted = damaged
    single = verify_store(StoreConfig.load(config_path), deep=True)
    found = {(f.kind, f.subject) for f in single.findings}
    for fault in planted:
        assert (fault.expected_kind, fault.subject) in found, fault
    assert single.exit_code == 4 and single.stats.messages_read > 0
    lost = [f for f in single.findings if f.kind is FindingKind.MISSING_OBJECT]
    assert lost and lost[0].queue_offsets is not None  # the walk's lost offsets, merged into the listing's
    for units in (None, 7, 50):  # default ranges, and ranges that cut runs and segments
        on_spark = verify(spark, config_path, units_per_range=units)
        assert comparable(on_spark) == comparable(single), units
        assert on_spark.exit_code == 4


def test_spark_verify_of_some_topics(spark, damaged):
    config_path, _planted = damaged
    single = verify_store(StoreConfig.load(config_path), deep=True, topics=["audit"])
    on_spark = verify(spark, config_path, topics=["audit"], units_per_range=16)
    assert comparable(on_spark) == comparable(single)
    assert {f.topic for f in single.findings if f.kind.info.area == "queue"} == {"audit"}
    assert single.exit_code == 4  # (the listing is checked whole: the deleted object of orders/1)


def test_the_command_prints_the_verify_report_and_exits_like_it(spark, damaged, capsys):
    config_path, _planted = damaged
    assert main(["verify", "--config", config_path, "--deep", "--json"]) == 4
    single = json.loads(capsys.readouterr().out)
    assert main(["spark", "verify", "--config", config_path, "--json"]) == 4
    on_spark = json.loads(capsys.readouterr().out)
    assert comparable(on_spark) == comparable(single)
    assert main(["spark", "verify", "--config", config_path, "--topics", "audit"]) == 4
    out = capsys.readouterr().out
    assert "time_bounds_mismatch" in out and "CORRUPT DATA:" in out


def test_checksums_are_compared_in_spark_tasks_as_in_one_process(spark, tmp_path, capsys, monkeypatch):
    """``spark verify --checksums``: a message replaced by another that passes every read check
    is found by its segment's checksum, hashed in a Spark task, with the report (and exit
    status) ``tiered verify --deep --checksums`` gives; the driver process hashes nothing."""
    import tiered_core.ops.verify_checksum as verify_checksum

    config_path = write_config(tmp_path / "tiered.toml", tmp_path / "data", cl_max=8 << 10, cq_max=1000)
    write_sample(StoreConfig.load(config_path), SPEC)
    planted = plant(StoreConfig.load(config_path), "replaced_message", topic="audit", queue_id=1, seed=4)
    # (a sample store has no owner record: one warning, exit 1)
    assert main(["spark", "verify", "--config", config_path, "--json"]) == 1  # every read check passes
    assert [f["kind"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["owner_missing"]
    single = verify_store(StoreConfig.load(config_path), deep=True, checksums=True)
    assert [(f.kind, f.subject) for f in single.findings if f.kind is not FindingKind.OWNER_MISSING] == \
        [(FindingKind.CHECKSUM_MISMATCH, planted.subject)]

    def not_here(*args, **kwargs):
        raise AssertionError("the driver process hashed an object")

    monkeypatch.setattr(verify_checksum, "object_checksum", not_here)  # (Spark's workers import their own)
    assert main(["spark", "verify", "--config", config_path, "--checksums", "--json"]) == 4
    on_spark = json.loads(capsys.readouterr().out)
    assert on_spark["summary"]["checksums"] is True and on_spark["summary"]["bytes_read"] > 0
    assert comparable(on_spark) == comparable(single)


def test_a_local_verify_session_keeps_its_jvm_at_the_first_compiler_tier(spark, damaged, capsys, monkeypatch):
    """The walk runs in Python workers: a local session's JVM (beside them on the same cores)
    stops at C1; a cluster's is left as it is. The command asks for that session."""
    from tiered_core.spark import session as spark_session
    from tiered_core.spark.jobs.verify import LOCAL_JVM_OPTIONS, session_conf

    assert session_conf("local[2]") == {"spark.driver.extraJavaOptions": LOCAL_JVM_OPTIONS} == session_conf("local")
    assert session_conf("spark://10.0.0.1:7077") == {} and session_conf("yarn") == {}
    monkeypatch.setenv("TIERED_SPARK_MASTER", "spark://10.0.0.1:7077")
    assert session_conf(None) == {}
    monkeypatch.delenv("TIERED_SPARK_MASTER")
    asked = []
    real = spark_session.get_session

    def recording(master=None, app_name="tiered", conf=None):
        asked.append(dict(conf or {}))
        return real(master, app_name, conf)  # (the run's shared session: already started)

    monkeypatch.setattr(spark_session, "get_session", recording)
    monkeypatch.setattr("tiered_core.spark.get_session", recording)
    config_path, _planted = damaged
    assert main(["spark", "verify", "--config", config_path, "--master", "local[2]", "--json"]) == 4
    capsys.readouterr()
    assert asked == [{"spark.driver.extraJavaOptions": LOCAL_JVM_OPTIONS}]


def test_a_store_in_one_process_memory_is_refused_before_spark(tmp_path, capsys, monkeypatch):
    config_path = write_config(tmp_path / "tiered.toml", tmp_path / "data", driver="memory", options={})

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark must not start")

    monkeypatch.setattr("tiered_core.cli.spark._session", no_spark)
    (tmp_path / "data").mkdir()
    code = main(["spark", "verify", "--config", config_path])
    assert code != 0
    with pytest.raises(ConfigError):
        verify(None, config_path)
