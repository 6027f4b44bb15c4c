"""The option table of the ``tiered`` data source (``spark.source.options.OPTIONS``): each option
declared once, every reader's accepted names, defaults and checks derived from it. No Spark
session: the parsers only (pyspark need not even be running)."""

from __future__ import annotations

import pytest
from spark_helpers import write_config

from tiered_core.errors import InvalidOption
from tiered_core.spark.source.options import (
    BATCH, EARLIEST, OPTIONS, STATIC_BATCH, STATIC_STREAM, STREAM, STREAM_ONLY, ReadOptions, StreamOptions,
    option_names, parse_read_options, parse_static_options, parse_static_stream_options, parse_stream_options,
)

#: A value each typed option refuses.
BAD = {
    "config_format": "yaml", "topics": "bad/topic", "queues": "1,x", "start_time": "yesterday",
    "end_time": "yesterday", "max_units_per_partition": "0", "subscribePattern": "ord(ers",
    "startingOffsets": "{not json", "startingTimestamp": "-5", "maxMessagesPerTrigger": "12.5",
    "maxBytesPerTrigger": "0", "failOnDataLoss": "maybe", "static_topic": "bad/topic",
}


@pytest.fixture()
def store(tmp_path):
    return write_config(tmp_path / "tiered.toml", tmp_path / "data")


@pytest.fixture()
def cluster(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text("")  # readable; its content is only checked by the readers
    return str(path)


def parse(reader: str, options: dict, store: str, cluster: str):
    if reader == BATCH:
        return parse_read_options(options)
    if reader == STREAM:
        return parse_stream_options({"config": store, **options})
    if reader == STATIC_BATCH:
        return parse_static_options({"cluster": cluster, "static_topic": "orders", **options})
    return parse_static_stream_options({"cluster": cluster, "static_topic": "orders", **options})


def test_each_option_is_declared_once_with_a_doc_and_a_reader():
    names = [o.name.lower() for o in OPTIONS]
    assert len(names) == len(set(names))
    assert all(o.doc and o.type and o.readers for o in OPTIONS)
    # the accepted names as each reader has always listed them (error messages quote these)
    assert option_names(BATCH) == ("config", "path", "config_text", "config_format", "config_base_dir", "topics",
                                   "queues", "start_time", "end_time", "max_units_per_partition")
    assert option_names(STREAM) == ("config", "path", "config_text", "config_format", "config_base_dir", "topics",
                                    "subscribePattern", "startingOffsets", "startingTimestamp",
                                    "maxMessagesPerTrigger", "maxBytesPerTrigger", "failOnDataLoss")
    assert option_names(STATIC_BATCH) == ("cluster", "static_topic", "queues")
    assert option_names(STATIC_STREAM) == ("cluster", "static_topic", "startingOffsets", "maxMessagesPerTrigger",
                                           "failOnDataLoss")
    assert STREAM_ONLY == {"subscribePattern", "startingOffsets", "startingTimestamp", "maxMessagesPerTrigger",
                           "maxBytesPerTrigger", "failOnDataLoss"}


def test_defaults_are_the_declared_ones(store, cluster):
    default = {o.name: o.default for o in OPTIONS}
    assert parse_read_options({}) == ReadOptions(max_units_per_partition=default["max_units_per_partition"])
    _, settings = parse_stream_options({"config": store})
    assert settings == StreamOptions()
    assert (settings.starting, settings.fail_on_data_loss) == (default["startingOffsets"], default["failOnDataLoss"])
    assert default["startingOffsets"] == EARLIEST
    _, topic, settings = parse_static_stream_options({"cluster": cluster, "static_topic": "orders"})
    assert (topic, settings) == ("orders", StreamOptions())


@pytest.mark.parametrize("option", [o for o in OPTIONS if o.name in BAD], ids=lambda o: o.name)
def test_every_reader_refuses_a_bad_value_naming_the_option(option, store, cluster):
    for reader in sorted(option.readers):
        with pytest.raises(InvalidOption) as info:
            parse(reader, {option.name: BAD[option.name]}, store, cluster)
        assert info.value.context["option"] == option.name, reader
        assert repr(option.name) in str(info.value)


@pytest.mark.parametrize("reader", [BATCH, STREAM, STATIC_BATCH, STATIC_STREAM])
def test_options_of_other_readers_and_unknown_ones_are_refused_listing_the_accepted(reader, store, cluster):
    others = [o.name for o in OPTIONS if reader not in o.readers and o.name not in ("cluster", "static_topic")]
    for name in [*others, "colour"]:
        with pytest.raises(InvalidOption) as info:
            parse(reader, {name: "1"}, store, cluster)
        assert info.value.context["option"] == name and repr(name) in str(info.value)
        assert "accepted: " + ", ".join(option_names(reader)) in str(info.value)


def test_names_match_in_any_case(store):
    assert parse_read_options({"MAX_UNITS_PER_PARTITION": "7"}).max_units_per_partition == 7
    _, settings = parse_stream_options({"config": store, "maxmessagespertrigger": "9", "FAILONDATALOSS": "false"})
    assert (settings.max_messages, settings.fail_on_data_loss) == (9, False)


@pytest.mark.parametrize("options", [{}, {"startingOffsets": "earliest"}], ids=["defaults", "a stream option"])
def test_a_missing_config_file_is_refused_where_the_read_is_defined(tmp_path, options):
    """A Spark drill: readStream with a config file that does not exist passed load(); the
    query started, wrote its checkpoint, and only then failed."""
    from tiered_core.errors import ConfigError
    from tiered_core.spark.tiered_format import check_source_options

    with pytest.raises(ConfigError, match="nope.toml"):
        check_source_options({"config": str(tmp_path / "nope.toml"), **options})


def test_a_jvm_failure_is_told_by_its_cause_not_by_the_py4j_call():
    """A Spark drill (disk full during `spark import`): the error said "An error occurred
    while calling o257.javaToPython." and "fix the input"; the cause was in stderr only."""
    from tiered_core.spark.failures import task_error

    class Py4JLike(Exception):
        pass

    text = ("An error occurred while calling o257.javaToPython.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed\n"
            "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2856)\n"
            "Caused by: java.io.IOException: No space left on device\n"
            "\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)\n")
    err = task_error(Py4JLike(text), "import failed")
    assert "o257.javaToPython" in err.message and "cause: java.io.IOException: No space left on device" in err.message
