"""Fuzzing (issue 9): regression tests, one per bug the fuzzer found, each with the
minimal failing input. Every decoder, config loader and the metadata JSON reader must
answer hostile input with a TieredStoreError subclass, never another exception."""

from __future__ import annotations

import pytest

from tiered_core.errors import ConfigError, CorruptData, IllegalParam, MetadataError, StateConflict, TieredStoreError


# -- regressions: each minimal input the fuzzer found, and what it must raise now ------------------


def test_regression_segment_path_with_a_lone_surrogate_is_not_a_segment_path() -> None:
    # A listing of file names that are not UTF-8 (os.listdir's surrogateescape) gave
    # UnicodeEncodeError from md5_prefix; queue_path even built a path no backend can store.
    from tiered_core.codec import naming

    with pytest.raises(IllegalParam) as err:
        naming.parse_segment_path("212d6b50_DefaultC\ud800uster/broker-a/rmq_sys_INDEX/0/INDEX/f7efa")
    assert "not a segment path" in str(err.value)
    with pytest.raises(IllegalParam, match="lone surrogate"):
        naming.queue_path("b\udc80", "TopicTest", 0)
    with pytest.raises(IllegalParam, match="lone surrogate"):
        naming.cluster_dir("\ud800")
    assert naming.md5_prefix("cl\u00e9") == naming.cluster_dir("cl\u00e9")[:8]  # real non-ASCII names still work


def test_regression_index_file_names_with_non_ascii_digits(tmp_path) -> None:
    # "²".isdigit() is True but int("²") raises ValueError: both index readers took a
    # file named with such a digit for an index file and crashed on it.
    from tiered_core.index.store_file import IndexStoreFile
    from tiered_core.local.index_file import IndexService, parse_index_file_name

    assert parse_index_file_name("2024010100000000\u00b2") is None
    assert parse_index_file_name("20240101000000000") == 1704067200000
    path = tmp_path / "\u00b2"
    path.write_bytes(bytes(64))
    with pytest.raises(IllegalParam, match="not an index file name"):
        IndexStoreFile.open(str(path), default_slot_count=2)
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "2024010100000000\u00b2").write_bytes(b"stray")
    IndexService(str(tmp_path / "index"), 4, 8).close()  # the stray file is skipped, not fatal


@pytest.mark.parametrize("text", [
    '{"topicMetadataTable":' + "[" * 5000 + "1" + "]" * 5000 + "}",  # RecursionError from json.loads
    '{"topicMetadataTable":' + "{0:" * 1000 + "1" + "}" * 1000 + "}",  # the same after quoting bare keys
    '{"topicSerialNumber":' + "9" * 5000 + "}",  # ValueError: int of more than 4300 digits
    '{0:{"a":' + "1" * 4301 + "}}",
])
def test_regression_metadata_json_too_deep_or_too_long_is_a_metadata_error(tmp_path, text) -> None:
    from tiered_core.metadata.json_store import JsonMetadataStore

    path = tmp_path / "tieredStoreMetadata.json"
    path.write_text(text)
    with pytest.raises(MetadataError) as err:
        JsonMetadataStore(str(path), fsync=False)
    assert err.value.path == str(path) and "not valid metadata JSON" in str(err.value)


def test_regression_sizes_and_durations_are_exact() -> None:
    # Durations (and sizes with a fraction) went through float: 2**53 + 1 ms came back as
    # 2**53, and "1.00000000000000001k" was accepted as 1024 although it is no whole byte count.
    from tiered_core.config import parse_duration_ms, parse_size

    assert parse_duration_ms("9007199254740993") == 9007199254740993
    assert parse_duration_ms("9007199254740993ms") == 9007199254740993
    assert parse_duration_ms("9007199254740993s") == 9007199254740993000
    assert parse_size("9007199254740993.5k") == 9223372036854777344
    assert parse_size("1.5" + "0" * 400 + "p") == 3 << 49
    with pytest.raises(ValueError):
        parse_size("1.00000000000000001k")
    with pytest.raises(ValueError):
        parse_duration_ms("0.1000000000000000001s")


@pytest.mark.parametrize("parse,value", [
    ("parse_size", "-1"), ("parse_size", ()), ("parse_size", float("inf")), ("parse_size", "9" * 5000),
    ("parse_duration_ms", "1.5"), ("parse_duration_ms", 1.5), ("parse_duration_ms", True),
    ("parse_bool", "maybe"), ("parse_bool", [1]),
])
def test_regression_value_parsers_raise_config_error(parse, value) -> None:
    # They raised a bare ValueError(value), which names nothing and is no TieredStoreError.
    from tiered_core import config

    with pytest.raises(ConfigError) as err:
        getattr(config, parse)(value, key="some_key")
    assert isinstance(err.value, ValueError)  # still a ValueError, for callers that catch that
    assert err.value.key == "some_key" and "some_key" in str(err.value) and "accepted" in str(err.value)
    assert len(str(err.value)) < 300  # a 5000-digit value is cut short in the message


def test_regression_properties_surrogate_pair_escapes_are_one_character() -> None:
    # Java reads \uXXXX as UTF-16 code units: "\uD83D\uDE00" is one character, U+1F600.
    # parse_properties returned two lone surrogates, which no file system or UTF-8 encoder takes.
    from tiered_core.config import parse_properties

    props = parse_properties("brokerName=b\\uD83D\\uDE00\nk\\u00e9y=\\u00e9\nlone=\\uD800x\n")
    assert props == {"brokerName": "b\U0001f600", "k\u00e9y": "\u00e9", "lone": "\ud800x"}
    props["brokerName"].encode("utf-8")
    # A str that holds the pair as two raw code units (text decoded with surrogatepass) too.
    assert parse_properties("brokerName=b\ud83d\ude00\n") == {"brokerName": "b\U0001f600"}


@pytest.mark.parametrize("text,key", [
    ("[tiered]\nstore_path = \"a\\u0000b\"\n", "store_path"),  # os.makedirs: ValueError embedded null byte
    ("[tiered]\nread_ahead_disk_cache_path = \"c\\u0000\"\n", "read_ahead_disk_cache_path"),
    ("[tiered.options]\nroot = \"r\\u0000\"\n", "options.root"),
])
def test_regression_config_refuses_nul_in_paths(tmp_path, text, key) -> None:
    # Accepted at load, then TieredMessageStore.open failed with a bare ValueError.
    from tiered_core import StoreConfig

    conf = tmp_path / "t.toml"
    conf.write_text(text)
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    assert err.value.key == key and str(conf) in str(err.value)


@pytest.mark.parametrize("line,key", [
    ("brokerClusterName=c\\uD800", "cluster"),  # md5 of the cluster name: UnicodeEncodeError at open
    ("brokerName=\\uDC80", "broker"),
    ("storePathRootDir=s\\uD800", "store_path"),
    ("tieredStoreFilePath=\\uDFFF", "options.root"),
    ("tieredBackendServiceProvider=posix\\uD800", "driver"),
])
def test_regression_config_refuses_lone_surrogates(tmp_path, line, key) -> None:
    from tiered_core import StoreConfig

    conf = tmp_path / "broker.conf"
    conf.write_text(line + "\n")
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    assert err.value.key == key and str(conf) in str(err.value)
    conf.write_text(line.replace("\\uD800", "\\uD83D\\uDE00").replace("\\uDC80", "\\u00e9")
                    .replace("\\uDFFF", "\\u00e9") + "\n")
    if key != "driver":
        StoreConfig.load(conf, environ={})  # the same key with a real character loads


@pytest.mark.parametrize("value", [
    "[" * 2000 + "]" * 2000,  # tomllib: RecursionError
    "{a=" * 2000 + "1" + "}" * 2000,
    "9" * 4400,  # tomllib: ValueError (int of more than 4300 digits), not a TOMLDecodeError
], ids=["array", "table", "int"])
def test_regression_toml_too_deep_or_too_long_is_a_config_error(tmp_path, value) -> None:
    from tiered_core import StoreConfig

    conf = tmp_path / "t.toml"
    conf.write_text(f"[tiered]\nmetadata = {value}\n")
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    assert err.value.key == "config" and str(conf) in str(err.value) and "not valid TOML" in str(err.value)


@pytest.mark.parametrize("value", [10 ** 5000, "9" * 5000 + "x", "deep"], ids=["int", "str", "deep"])
def test_regression_huge_or_deep_values_in_errors(value) -> None:
    # Building the error message called repr(): RecursionError for a value nested
    # thousands deep, ValueError for an int past the 4300-digit str() limit.
    from tiered_core import StoreConfig
    from tiered_core.config import parse_size

    if value == "deep":
        value = 1
        for _ in range(5000):
            value = [value]
    with pytest.raises(ConfigError) as err:
        StoreConfig.from_mapping({"storage_level": value}, source="/fuzz/mapping")
    assert err.value.key == "storage_level" and len(str(err.value)) < 400
    if not isinstance(value, int):
        with pytest.raises(ConfigError) as err:
            parse_size(value)
        assert len(str(err.value)) < 400


@pytest.mark.parametrize("field,offset,value", [
    ("hashSlotCount", 32, (0x7FFFFFFF).to_bytes(4, "big")),  # the next put packed 2**31: struct.error
    ("beginTimestamp", 0, 1 << 63),  # -2**63: truncate_from computed an end time below a long
    ("endPhyOffset", 24, (1 << 64) - 1),  # -1: no commit-log offset is negative
])
def test_regression_local_index_header_that_cannot_be_written_back(tmp_path, field, offset, value) -> None:
    from tiered_core.local.index_file import IndexFile

    path = tmp_path / "20240101000000000"
    data = bytearray(40 + 4 * 4 + 8 * 20)
    raw = value if isinstance(value, bytes) else value.to_bytes(8, "big")
    data[offset:offset + len(raw)] = raw
    data[36:40] = (1).to_bytes(4, "big")  # indexCount 1: an empty file
    path.write_bytes(bytes(data))
    with pytest.raises(StateConflict) as err:
        IndexFile(str(path), 4, 8)
    assert err.value.field == field and str(path) in str(err.value)


def test_regression_compaction_of_a_time_diff_no_int_holds(tmp_path) -> None:
    # Item 0's time-diff word records the oldest diff written; compaction shifts every diff
    # by it. Set to -2**31 (as a corrupt file had it), the next item's diff of +5 s became
    # 2**31 + 5 and compact_into failed with struct.error. Such an item is left out now.
    import struct

    from tiered_core.index.store_file import IndexStoreFile, UploadedIndexFile

    begin = 1_700_000_000_003
    f = IndexStoreFile.create(str(tmp_path), begin, slot_count=3, max_items=8)
    f.close()
    path = str(tmp_path / str(begin))
    with open(path, "r+b") as fh:
        fh.seek(28 + 3 * 8 + 24)
        fh.write(struct.pack(">i", -(1 << 31)))
    f = IndexStoreFile.open(path, default_slot_count=3)
    f.put_key("T", 1, 0, ["k0"], 4096, 100, begin + 5000)  # diff +5 s
    f.put_key("T", 1, 0, ["k1"], 8192, 100, begin - 2000)  # diff -2 s: shifted to 2**31 - 2, fits
    f.seal()
    data = f.compacted_bytes()
    f.close()

    class Segment:
        path, min_timestamp, max_timestamp = "s", None, None

    up = UploadedIndexFile(Segment(), read=lambda p, n: data[p:p + n], size=len(data))
    assert up.header().item_count == 1
    assert up.query("T", "k0", 8, -(1 << 62), 1 << 62) == []
    assert [e.offset for e in up.query("T", "k1", 8, -(1 << 62), 1 << 62)] == [8192]


@pytest.mark.parametrize("line", ["tiered.options", "tiered.options=x", "tiered.driver_options=x"])
def test_regression_broker_conf_tiered_options_without_a_name(line) -> None:
    # "tiered.options" passed the unknown-key check (options is a TOML table name) and then
    # hit KeyError('options') in the field checks.
    from tiered_core import StoreConfig

    with pytest.raises(ConfigError) as err:
        StoreConfig.from_text(line + "\n", "properties", source="/fuzz/broker.conf")
    assert err.value.key == line.partition("=")[0] and "/fuzz/broker.conf" in str(err.value)
    assert "tiered.options.NAME" in str(err.value)


@pytest.mark.parametrize("driver", [":x", ".rel:Driver", "a..b:C", "mod:", "mod:Cl ass"])
def test_regression_driver_module_class_spec_that_importlib_refuses(driver) -> None:
    # importlib.import_module raises ValueError ("Empty module name") or TypeError (a relative
    # name), not ImportError, so plugins' module:Class lookup let them escape the loader.
    from tiered_core import StoreConfig

    with pytest.raises(ConfigError) as err:
        StoreConfig.from_text(f"tieredBackendServiceProvider={driver}\n", "properties", source="/fuzz/b.conf")
    assert err.value.key == "driver" and "/fuzz/b.conf" in str(err.value)
    assert StoreConfig.from_mapping({"driver": "tiered_driver_memory:MemoryDriver"}).driver == \
        "tiered_driver_memory:MemoryDriver"  # a well-formed spec still loads
