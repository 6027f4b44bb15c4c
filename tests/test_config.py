"""StoreConfig: TOML, RocketMQ broker.conf, TIERED_* overrides, and the errors for bad values."""

from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest

from tiered_core import Message, StoreConfig
from tiered_core.config import (
    _ROCKETMQ_ROOT_KEYS,
    _ROCKETMQ_SWITCHES,
    NEVER_EXPIRE_HOURS,
    ROCKETMQ_IGNORED_TIERED_KEYS,
    ROCKETMQ_KEYS,
    parse_size,
)
from tiered_core.codec.java_properties import parse_java_properties as parse_properties
from tiered_core.errors import ConfigError
from tiered_core.flat import FlatFileConfig

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def write(tmp_path: pathlib.Path, name: str, text: str) -> pathlib.Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _diskcache_spec(installed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (real("os") if installed else None) if name == "diskcache" else real(name, *a))


@pytest.fixture
def with_diskcache(monkeypatch):
    """The loader sees the diskcache package as installed (read_ahead_disk_cache_path needs it)."""
    _diskcache_spec(True, monkeypatch)


# -- the example files ----------------------------------------------------------------


def test_example_toml_is_posix_and_sqlite_under_demo_data():
    cfg = StoreConfig.load(EXAMPLES / "tiered.toml", environ={})
    demo = str(EXAMPLES / "demo-data")
    assert (cfg.driver, cfg.metadata, cfg.store_path) == ("posix", "sqlite", demo)
    assert cfg.effective_driver_options() == {"fsync": True, "root": os.path.join(demo, "tiered")}
    assert cfg.effective_metadata_path() == os.path.join(demo, "tiered-metadata.db")
    assert cfg.commit_log_max_size == 1 << 30 and cfg.group_commit_interval_ms == 30_000
    assert cfg.rolling_interval_ms == 24 * 3600 * 1000 and cfg.read_ahead_cache_expire_ms == 10_000
    # Apart from where it came from, the example is exactly the documented defaults.
    defaults = StoreConfig.from_mapping({"options": {"fsync": True}}, base_dir=str(EXAMPLES))
    assert cfg == defaults


def test_example_broker_conf_maps_rocketmq_keys():
    cfg = StoreConfig.load(EXAMPLES / "broker.conf", environ={})
    demo = str(EXAMPLES / "demo-data")
    assert cfg.driver == "posix"  # org.apache.rocketmq.tieredstore.provider.PosixFileSegment
    assert cfg.storage_level == "FORCE"
    assert cfg.metadata == "json"  # DefaultMetadataStore
    assert cfg.effective_metadata_path() == os.path.join(demo, "config", "tieredStoreMetadata.json")
    assert cfg.driver_options == {"root": os.path.join(demo, "tieredstore")}  # tieredStoreFilePath
    assert cfg.max_pending_limit == 2500  # tieredStoreMaxPendingLimit 10000 / 4, as RocketMQ divides it
    assert cfg.read_ahead_cache_expire_ms == 15_000
    assert cfg.local_retention_hours == 48 and cfg.local_flush == "async"


def test_broker_conf_opens_the_posix_driver_and_json_metadata(tmp_path):
    conf = write(tmp_path, "broker.conf", "storePathRootDir=store\n"
                 "tieredBackendServiceProvider=org.apache.rocketmq.tieredstore.provider.PosixFileSegment\n"
                 "tieredStoreFilePath=tiered\ntieredStorageLevel=FORCE\n"
                 "tieredMetadataServiceProvider=org.apache.rocketmq.tieredstore.metadata.DefaultMetadataStore\n")
    cfg = StoreConfig.load(conf, environ={})
    with cfg.open_driver() as driver:
        assert driver.name == "posix"
        driver.write("a/b", 0, b"xyz")
    assert (tmp_path / "tiered" / "a" / "b").read_bytes() == b"xyz"
    meta = cfg.open_metadata()
    try:
        meta.add_topic("TopicTest")
    finally:
        meta.close()
    assert (tmp_path / "store" / "config" / "tieredStoreMetadata.json").is_file()


def test_seed_broker_conf_snippet():
    # The seed's broker.conf lines verbatim: Java properties escapes ("\\\\" is one backslash).
    text = ("# tiered\n"
            "messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore\n"
            "tieredBackendServiceProvider=org.apache.rocketmq.tieredstore.provider.PosixFileSegment\n"
            "tieredStoreFilePath=e:\\\\data\\\\rocketmq\\\\node\\\\tieredstore\n"
            "tieredStorageLevel=FORCE\n")
    assert parse_properties(text)["tieredStoreFilePath"] == r"e:\data\rocketmq\node\tieredstore"
    cfg = StoreConfig.from_text(text, "properties", base_dir="/srv/broker")
    assert (cfg.driver, cfg.storage_level) == ("posix", "FORCE")
    assert cfg.driver_options["root"] == "/srv/broker/" + r"e:\data\rocketmq\node\tieredstore"


def test_properties_syntax():
    text = ("! bang comment\n  # indented comment\nkey1 = spaced value  \nkey2:colon\nkey3 space\n"
            "multi=one,\\\n    two\nuni=\\u00e9t\\u00e9\nempty=\ndup=1\ndup=2\n")
    assert parse_properties(text) == {"key1": "spaced value  ", "key2": "colon", "key3": "space",
                                      "multi": "one,two", "uni": "été", "empty": "", "dup": "2"}


def test_memory_provider_ignores_the_posix_root_and_other_broker_keys_are_ignored():
    cfg = StoreConfig.from_text(
        "tieredBackendServiceProvider=org.apache.rocketmq.tieredstore.provider.MemoryFileSegment\n"
        "tieredStoreFilePath=/data/tiered\nlistenPort=10911\nautoCreateTopicEnable=true\n"
        "tieredStoreIndexFileMaxIndexNum=20000000\n"
        "readAheadCacheEnable=false\ntieredStoreGroupCommit=false\ntieredStoreGroupCommitCount=100\n"
        "tiered.options.namespace=ns1\ntiered.commit_log_max_size=8MiB\n", "properties")
    assert cfg.driver == "memory" and dict(cfg.driver_options) == {"namespace": "ns1"}
    assert cfg.read_ahead_cache_bytes == 0  # readAheadCacheEnable=false
    # tieredStoreGroupCommit=false: every round dispatches what waits, in groups of the configured count
    assert cfg.group_commit_interval_ms == 0 and cfg.group_commit_count == 100
    assert cfg.commit_log_max_size == 8 << 20


# -- TOML -----------------------------------------------------------------------------


def test_toml_round_trip_and_relative_paths(tmp_path, with_diskcache):
    conf = write(tmp_path, "t.toml", '[tiered]\nstore_path = "data"\nstorage_level = "not_in_mem"\n'
                 'commit_log_max_size = "4MiB"\nconsume_queue_max_size = 2000\n'
                 'group_commit_interval_ms = "1.5s"\nfile_reserved_hours = "3d"\n'
                 'read_ahead_disk_cache_path = "cache"\nmetadata_path = "/abs/meta.db"\n'
                 'cluster = "c1"\nbroker = "b1"\nlocal_flush = "SYNC"\n'
                 '[tiered.options]\nfsync = "false"\nroot = "objects"\n'
                 '[other_tool]\nanything = 1\n')
    cfg = StoreConfig.load(conf, environ={})
    assert cfg.store_path == str(tmp_path / "data")
    assert cfg.read_ahead_disk_cache_path == str(tmp_path / "cache")
    assert cfg.storage_level == "NOT_IN_MEM" and cfg.local_flush == "sync"
    assert (cfg.commit_log_max_size, cfg.consume_queue_max_size) == (4 << 20, 2000)
    assert (cfg.group_commit_interval_ms, cfg.file_reserved_hours) == (1500, 72)
    assert dict(cfg.driver_options) == {"fsync": False, "root": str(tmp_path / "objects")}
    again = StoreConfig.from_text(cfg.to_toml(), "toml", base_dir="/elsewhere")
    assert again == cfg
    assert cfg.flat_config() == FlatFileConfig(cluster="c1", broker="b1", commit_log_max_size=4 << 20,
                                               consume_queue_max_size=2000)


def test_to_toml_keeps_secrets_describe_and_repr_redact_them():
    cfg = StoreConfig.from_mapping({"driver": "azure", "options": {"container": "c", "account_key": "s3cr3t"}})
    assert "s3cr3t" in cfg.to_toml()
    assert StoreConfig.from_text(cfg.to_toml(), "toml") == cfg
    assert cfg.describe()["driver_options"] == {"container": "c", "account_key": "***"}
    assert "s3cr3t" not in repr(cfg) and "s3cr3t" not in str(cfg.describe())
    # A structured secret (a GCS service-account token) round-trips as an inline table.
    gcs = StoreConfig.from_mapping({"driver": "gcs", "options": {"bucket": "b", "token": {"type": "sa", "key": 'k"1'}}})
    assert StoreConfig.from_text(gcs.to_toml(), "toml") == gcs
    assert gcs.describe()["driver_options"] == {"bucket": "b", "token": "***"}


@pytest.mark.parametrize("text,key", [
    ('[tiered]\nstorage_levle = "FORCE"\n', "storage_levle"),
    ('[tiered]\noptions = 3\n', "tiered.options"),
    ('driver = "posix"\n', "tiered"),
    ('[tiered\n', "config"),
])
def test_toml_structure_errors(tmp_path, text, key):
    conf = write(tmp_path, "bad.toml", text)
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    assert key in err.value.key and str(conf) in str(err.value)


def test_a_static_topic_cluster_file_is_not_a_store_config(tmp_path, capsys):
    """Read as one store, a cluster file named a default broker and store_path, and the
    take-over a command then advised fenced the cluster's live broker of that name."""
    from tiered_core.cli import main

    conf = write(tmp_path, "cluster.toml",
                 '[tiered]\ndriver = "posix"\n[tiered.options]\nroot = "tier"\n'
                 '[[broker]]\nbroker = "broker-a"\nstore_path = "a"\n')
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    assert err.value.key == "broker" and "static-topic" in str(err.value) and str(conf) in str(err.value)
    for command in (["stat"], ["takeover", "--create"], ["metadata", "rebuild"]):
        assert main([*command, "--config", str(conf)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.toml"]  # nothing created
    assert "CONFIG" in capsys.readouterr().err


def test_keys_above_the_first_table_header_are_refused_not_ignored(tmp_path, capsys):
    """Keys written before ``[tiered.options]`` with no ``[tiered]`` header are top-level keys:
    they were ignored, and the defaults (store_path ./demo-data) used in their place."""
    from tiered_core.cli import main

    conf = write(tmp_path, "tiered.toml", 'store_path = "data"\ncommit_log_max_size = "2KiB"\n'
                                          '[tiered.options]\nroot = "tier"\n')
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    text = str(err.value)
    assert err.value.key == "store_path" and "'store_path', 'commit_log_max_size' are outside the [tiered]" in text
    assert "move them under [tiered]" in text and str(conf) in text
    assert main(["put", "--config", str(conf), "--topic", "t", "--body", "x"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiered.toml"]  # nothing created
    assert "outside the [tiered] table" in capsys.readouterr().err
    # the same in a static topics' cluster file
    from tiered_core.static_topic.cluster_config import cluster_configs_from_text

    with pytest.raises(ConfigError) as err:
        cluster_configs_from_text('driver = "gcs"\n[tiered.options]\nroot = "t"\n[[broker]]\nbroker = "a"\n'
                                  'store_path = "a"\n', str(tmp_path))
    assert err.value.key == "driver" and "'driver' is outside the [tiered] table" in str(err.value)
    # ...and so are near misses of our names, which would leave the store at its default path too
    typo = write(tmp_path, "typo.toml", 'stor_path = "data"\ncommit_log_max_size = "2KiB"\n[tiered]\n'
                                        'driver = "posix"\n[tiered.options]\nroot = "tier"\n')
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(typo, environ={})
    assert err.value.key == "stor_path" and err.value.context["keys"] == ["stor_path", "commit_log_max_size"]
    assert ("'stor_path' (did you mean 'store_path'?), 'commit_log_max_size' are outside the [tiered] table"
            in str(err.value)), str(err.value)
    # other tools' keys and tables may share the file
    ok = write(tmp_path, "shared.toml", 'title = "x"\n[tool]\nstore_path = 1\n[tiered]\nstore_path = "d"\n')
    assert StoreConfig.load(ok, environ={}).store_path.endswith("d")


def test_unknown_tiered_key_lists_accepted_keys(tmp_path):
    conf = write(tmp_path, "bad.toml", '[tiered]\ncommit_log_size = 5\n')
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    text = str(err.value)
    assert "'tiered.commit_log_size'" in text and "commit_log_max_size" in text and "storage_level" in text


# -- bad values ---------------------------------------------------------------------------


@pytest.mark.parametrize("key,value,accepted", [
    ("storage_level", "ALWAYS", "DISABLE | NOT_IN_DISK | NOT_IN_MEM | FORCE"),
    ("storage_level", 7, "DISABLE"),
    ("commit_log_max_size", -1, "size >= 128"),
    ("commit_log_max_size", 0, "size >= 128"),
    ("commit_log_max_size", 127, "one whole message"),  # the local store's smallest message limit
    ("consume_queue_max_size", 19, "one 20-byte consume-queue unit"),  # else nothing is ever tiered
    ("local_commit_log_file_size", "4095", "size >= 4096"),
    ("commit_log_max_size", "4 parsecs", "4MiB"),
    ("commit_log_max_size", True, "size"),
    ("consume_queue_max_size", "1.3k", "size"),
    ("rolling_min_size", "-5", "size >= 0"),
    ("group_commit_count", 0, "int >= 1"),
    ("max_pending_limit", "many", "int >= 1"),
    ("group_commit_interval_ms", -10, "duration"),
    ("rolling_interval_ms", "soon", "duration"),
    ("file_reserved_hours", -1, "int >= 1"),
    ("file_reserved_hours", 0, "int >= 1"),  # the index service refuses 0 at open
    ("cluster", "c" * 247, "at most 246 UTF-8 bytes"),  # {md5[:8]}_{cluster} is one file name
    ("broker", "\u00e9" * 128, "at most 255 UTF-8 bytes"),
    ("file_reserved_hours", "90m", "hours"),
    ("local_flush", "never", "async | sync"),
    ("cluster", "a/b", "without '/'"),
    ("broker", "", "non-empty"),
    ("store_path", "", "non-empty path"),
])
def test_bad_values_name_key_file_and_accepted_values(tmp_path, key, value, accepted):
    literal = f'"{value}"' if isinstance(value, str) else str(value).lower()
    conf = write(tmp_path, "cfg.toml", f"[tiered]\n{key} = {literal}\n")
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    text = str(err.value)
    assert err.value.key == key and f"tiered.{key}" in text
    assert str(conf) in text and accepted in text


@pytest.mark.parametrize("line,key,accepted", [
    ("tieredStorageLevel=SOMETIMES", "tieredStorageLevel", "FORCE"),
    ("tieredStoreCommitLogMaxSize=-1073741824", "tieredStoreCommitLogMaxSize", "size >= 128"),
    ("commitLogRollingInterval=-2", "commitLogRollingInterval", "hours"),
    ("readAheadCacheEnable=perhaps", "readAheadCacheEnable", "true | false"),
    ("tieredStorageLevl=FORCE", "tieredStorageLevl", "tieredStorageLevel"),  # a typo is not ignored
    ("tiered.nonsense=1", "tiered.nonsense", "storage_level"),
])
def test_bad_broker_conf_values(tmp_path, line, key, accepted):
    conf = write(tmp_path, "broker.conf", f"brokerName=b\n{line}\n")
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    text = str(err.value)
    assert key in text and str(conf) in text and accepted in text


def test_unknown_driver_metadata_and_driver_option(tmp_path):
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(write(tmp_path, "a.toml", '[tiered]\ndriver = "floppy"\n'), environ={})
    assert err.value.key == "driver" and "floppy" in str(err.value) and "posix" in str(err.value)
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(write(tmp_path, "b.toml", '[tiered]\nmetadata = "redis"\n'), environ={})
    assert err.value.key == "metadata" and "sqlite" in str(err.value) and "json" in str(err.value)
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(write(tmp_path, "c.toml", '[tiered.options]\nfsynk = true\n'), environ={})
    assert err.value.key == "options.fsynk" and "fsync" in str(err.value) and "root" in str(err.value)
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(write(tmp_path, "d.toml", '[tiered.options]\nfsync = "maybe"\n'), environ={})
    assert err.value.key == "options.fsync" and "bool" in str(err.value)


def test_missing_file_and_bad_format(tmp_path):
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(tmp_path / "nope.toml")
    assert "nope.toml" in str(err.value)
    with pytest.raises(ConfigError) as err:
        StoreConfig.from_text("", "yaml")
    assert "toml, properties" in str(err.value)


def test_sizes():
    assert parse_size("4MiB") == 4 << 20
    assert parse_size("1GiB") == 1 << 30
    assert parse_size("512k") == 512 << 10
    assert parse_size("1.5GiB") == 3 << 29
    assert parse_size("16M") == 16 << 20
    assert parse_size(" 100 ") == 100
    for bad in ("-1", "1.3k", "k", "4 MiBs", -3, True, None):
        with pytest.raises(ValueError):
            parse_size(bad)


# -- environment overrides -----------------------------------------------------------------


def test_environment_overrides(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    conf = write(tmp_path, "t.toml", '[tiered]\nstorage_level = "DISABLE"\n[tiered.options]\nfsync = false\n')
    env = {"TIERED_STORAGE_LEVEL": "force", "TIERED_COMMIT_LOG_MAX_SIZE": "2MiB",
           "TIERED_OPTION_FSYNC": "true", "TIERED_STORE_PATH": "elsewhere",
           "TIERED_STRICT_PLUGINS": "1", "TIERED_CRASH_RUNS": "9", "PATH": "/bin"}
    cfg = StoreConfig.load(conf, environ=env)
    assert cfg.storage_level == "FORCE" and cfg.commit_log_max_size == 2 << 20
    assert dict(cfg.driver_options) == {"fsync": True}
    assert cfg.store_path == str(tmp_path / "elsewhere")
    # load() applies os.environ by default.
    monkeypatch.setenv("TIERED_BROKER", "broker-b")
    assert StoreConfig.load(conf).broker == "broker-b"


def test_environment_switching_driver_drops_the_files_driver_options(tmp_path):
    conf = write(tmp_path, "t.toml", '[tiered.options]\nfsync = false\n')
    cfg = StoreConfig.load(conf, environ={"TIERED_DRIVER": "memory", "TIERED_OPTION_NAMESPACE": "n2"})
    assert cfg.driver == "memory" and dict(cfg.driver_options) == {"namespace": "n2"}
    same = StoreConfig.load(conf, environ={"TIERED_DRIVER": "org.apache.rocketmq.tieredstore.provider.PosixFileSegment"})
    assert same.driver == "posix" and dict(same.driver_options) == {"fsync": False}


@pytest.mark.parametrize("name,value,key", [
    ("TIERED_STORAGE_LEVEL", "LOUD", "storage_level"),
    ("TIERED_GROUP_COMMIT_SIZE", "-4MiB", "group_commit_size"),
    ("TIERED_DRIVER", "nosuch", "driver"),
    ("TIERED_OPTION_BOGUS", "1", "options.bogus"),
    ("TIERED_METADATA", "csv", "metadata"),
])
def test_bad_environment_value_names_the_variable(tmp_path, name, value, key):
    conf = write(tmp_path, "t.toml", "[tiered]\n")
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={name: value})
    assert err.value.key == key
    assert f"environment variable {name}" in str(err.value)


# -- replace and derived values --------------------------------------------------------------


def test_replace_checks_values(tmp_path):
    cfg = StoreConfig.load(write(tmp_path, "t.toml", "[tiered]\n"), environ={})
    smaller = cfg.replace(commit_log_max_size="64KiB", storage_level=3)
    assert smaller.commit_log_max_size == 64 << 10 and smaller.storage_level == "FORCE"
    assert smaller.store_path == cfg.store_path
    with pytest.raises(ConfigError):
        cfg.replace(consume_queue_max_size=-20)
    with pytest.raises(ConfigError) as err:
        cfg.replace(colour="blue")
    assert "colour" in str(err.value)
    assert cfg.replace(driver="PosixFileSegment").driver_options == cfg.driver_options  # same driver
    moved = cfg.replace(driver="memory")
    assert moved.driver == "memory" and dict(moved.driver_options) == {}
    assert moved.effective_driver_options() == {}


# -- the acceptance line of issue 5 ----------------------------------------------------------


def test_broker_conf_posix_provider_and_force_serve_reads_from_the_tiered_store(tmp_path):
    from tiered_core import Message, TieredMessageStore
    from tiered_core.access.results import GetMessageStatus, StoreTier
    from tiered_core.codec.naming import cluster_dir

    conf = write(tmp_path, "broker.conf",
                 "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nstorePathRootDir=store\n"
                 "messageStorePlugIn=org.apache.rocketmq.tieredstore.TieredMessageStore\n"
                 "tieredBackendServiceProvider=org.apache.rocketmq.tieredstore.provider.PosixFileSegment\n"
                 "tieredStoreFilePath=tieredstore\ntieredStorageLevel=FORCE\n")
    store = TieredMessageStore.open(StoreConfig.load(conf, environ={}))
    try:
        assert store.driver.name == "posix"
        for i in range(10):
            store.put_message(Message(topic="TopicTest", body=b"m%d" % i, keys=[f"k{i}"]), queue_id=0)
        store.dispatch(force=True)
        got = store.get_message("group", "TopicTest", 0, offset=0, max_count=32)
        assert got.status is GetMessageStatus.FOUND and got.tier is StoreTier.TIERED
        assert [m.body for m in got.messages] == [b"m%d" % i for i in range(10)]
    finally:
        store.close()
    segments = tmp_path / "tieredstore" / cluster_dir("DefaultCluster") / "broker-a" / "TopicTest" / "0"
    assert sorted(p.name for p in segments.iterdir()) == ["COMMIT_LOG", "CONSUME_QUEUE"]


# -- issue 9: every RocketMQ key the loader accepts maps to its field and works ----------------

#: broker.conf key -> (value, field, what the field holds); "<base>" is the file's directory.
BROKER_KEYS = {
    "brokerClusterName": ("c1", "cluster", "c1"),
    "brokerName": ("b1", "broker", "b1"),
    "storePathRootDir": ("store", "store_path", "<base>/store"),
    "tieredBackendServiceProvider": ("org.apache.rocketmq.tieredstore.provider.MemoryFileSegment", "driver",
                                     "memory"),
    "tieredMetadataServiceProvider": ("org.apache.rocketmq.tieredstore.metadata.DefaultMetadataStore",
                                      "metadata", "json"),
    "tieredStorageLevel": ("2", "storage_level", "NOT_IN_MEM"),
    "tieredStoreCommitLogMaxSize": ("2097152", "commit_log_max_size", 2 << 20),
    "tieredStoreConsumeQueueMaxSize": ("2000", "consume_queue_max_size", 2000),
    "tieredStoreMaxGroupCommitCount": ("77", "max_group_commit_count", 77),
    "tieredStoreGroupCommitCount": ("64", "group_commit_count", 64),
    "tieredStoreGroupCommitSize": ("65536", "group_commit_size", 65536),
    "tieredStoreGroupCommitTimeout": ("1500", "group_commit_interval_ms", 1500),
    "tieredStoreMaxPendingLimit": ("100", "max_pending_limit", 25),  # RocketMQ's permits: limit / 4
    "commitLogRollingMinimumSize": ("0", "rolling_min_size", 0),
    "commitLogRollingInterval": ("2", "rolling_interval_ms", 7_200_000),  # hours
    "tieredStoreFileReservedTime": ("5", "file_reserved_hours", 5),
    "readAheadCacheExpireDuration": ("2500", "read_ahead_cache_expire_ms", 2500),
    "mappedFileSizeCommitLog": ("65536", "local_commit_log_file_size", 65536),
    "flushDiskType": ("SYNC_FLUSH", "local_flush", "sync"),
    "fileReservedTime": ("12", "local_retention_hours", 12),
    "cleanResourceInterval": ("2500", "local_retention_interval_ms", 2500),
    "tieredStoreFilePath": ("tiered", "driver_options", {"root": "<base>/tiered"}),
    "tieredStoreFilepath": ("tiered", "driver_options", {"root": "<base>/tiered"}),  # an old spelling
    "readAheadCacheEnable": ("false", "read_ahead_cache_bytes", 0),
    "tieredStoreGroupCommit": ("false", "group_commit_interval_ms", 0),
    "tieredStoreDeleteFileEnable": ("false", "file_reserved_hours", NEVER_EXPIRE_HOURS),
    "enabledAppendPropCRC": ("true", "append_prop_crc", True),
    "forceVerifyPropCRC": ("true", "verify_prop_crc", True),
}

#: broker.conf key -> (bad value, what ConfigError.key says, text the message shows).
BAD_BROKER_VALUES = {
    "brokerClusterName": ("a/b", "cluster", "without '/'"),
    "brokerName": ("", "broker", "non-empty"),
    "storePathRootDir": ("", "store_path", "non-empty path"),
    "tieredBackendServiceProvider": ("floppy", "driver", "posix"),
    "tieredMetadataServiceProvider": ("redis", "metadata", "sqlite"),
    "tieredStorageLevel": ("SOMETIMES", "storage_level", "FORCE"),
    "tieredStoreCommitLogMaxSize": ("100", "commit_log_max_size", "size >= 128"),
    "tieredStoreConsumeQueueMaxSize": ("10", "consume_queue_max_size", "size >= 20"),
    "tieredStoreMaxGroupCommitCount": ("0", "max_group_commit_count", "int >= 1"),
    "tieredStoreGroupCommitCount": ("-1", "group_commit_count", "int >= 1"),
    "tieredStoreGroupCommitSize": ("0", "group_commit_size", "size > 0"),
    "tieredStoreGroupCommitTimeout": ("-5", "group_commit_interval_ms", "duration >= 0"),
    "tieredStoreMaxPendingLimit": ("many", "max_pending_limit", "int >= 1"),
    "commitLogRollingMinimumSize": ("-1", "rolling_min_size", "size >= 0"),
    "commitLogRollingInterval": ("-2", "rolling_interval_ms", "hours"),
    "tieredStoreFileReservedTime": ("0", "file_reserved_hours", "int >= 1"),
    "readAheadCacheExpireDuration": ("soon", "read_ahead_cache_expire_ms", "duration"),
    "mappedFileSizeCommitLog": ("1024", "local_commit_log_file_size", "size >= 4096"),
    "flushDiskType": ("NEVER_FLUSH", "local_flush", "async | sync"),
    "fileReservedTime": ("-1", "local_retention_hours", "int >= 0"),
    "cleanResourceInterval": ("-5", "local_retention_interval_ms", "duration >= 0"),
    "tieredStoreFilePath": ("a\\u0000b", "options.root", "NUL"),
    "tieredStoreFilepath": ("\\uD800", "options.root", "lone surrogate"),
    "readAheadCacheEnable": ("perhaps", "readAheadCacheEnable", "true | false"),
    "tieredStoreGroupCommit": ("2", "tieredStoreGroupCommit", "true | false"),
    "enabledAppendPropCRC": ("maybe", "append_prop_crc", "true | false"),
    "forceVerifyPropCRC": ("2", "verify_prop_crc", "true | false"),
    "tieredStoreDeleteFileEnable": ("nope", "tieredStoreDeleteFileEnable", "true | false"),
    "tieredStoreIndexFileMaxHashSlotNum": ("0", "tieredStoreIndexFileMaxHashSlotNum", "int >= 1"),
    "tieredStoreIndexFileMaxIndexNum": ("x", "tieredStoreIndexFileMaxIndexNum", "int >= 1"),
    "tieredStoreDeleteFileInterval": ("-1", "tieredStoreDeleteFileInterval", "duration >= 0"),
    "tieredStoreCrcCheckEnable": ("maybe", "tieredStoreCrcCheckEnable", "true | false"),
}


def _accepted_broker_keys() -> set[str]:
    return set(ROCKETMQ_KEYS) | set(_ROCKETMQ_ROOT_KEYS) | set(_ROCKETMQ_SWITCHES) | set(ROCKETMQ_IGNORED_TIERED_KEYS)


def test_the_key_tables_cover_every_accepted_broker_key():
    """A key added to the loader without a mapping test and a bad-value test fails here."""
    assert set(BROKER_KEYS) == _accepted_broker_keys() - set(ROCKETMQ_IGNORED_TIERED_KEYS)
    assert set(BAD_BROKER_VALUES) == _accepted_broker_keys()


@pytest.mark.parametrize("key", sorted(BROKER_KEYS))
def test_each_broker_key_maps_to_its_field(tmp_path, key):
    value, field_name, expected = BROKER_KEYS[key]
    conf = write(tmp_path, "broker.conf", f"brokerId=0\n{key}={value}\n")
    cfg = StoreConfig.load(conf, environ={})
    default = StoreConfig.from_text("", "properties", base_dir=str(tmp_path))
    if isinstance(expected, str):
        expected = expected.replace("<base>", str(tmp_path))
    if isinstance(expected, dict):
        expected = {k: v.replace("<base>", str(tmp_path)) for k, v in expected.items()}
        assert dict(cfg.driver_options) == expected
    else:
        assert getattr(cfg, field_name) == expected != getattr(default, field_name)
    changed = {f for f in BROKER_KEY_FIELDS if getattr(cfg, f) != getattr(default, f)}
    assert changed == {field_name}, changed  # the key sets its field and nothing else


BROKER_KEY_FIELDS = [f for f in StoreConfig.__dataclass_fields__ if f != "source"]


@pytest.mark.parametrize("key", ["readAheadCacheEnable", "tieredStoreGroupCommit", "tieredStoreDeleteFileEnable"])
def test_a_switch_left_on_changes_nothing(tmp_path, key):
    on = StoreConfig.from_text(f"{key}=true\n", "properties", base_dir=str(tmp_path))
    assert on == StoreConfig.from_text("", "properties", base_dir=str(tmp_path))


def test_a_switch_off_wins_over_the_fields_own_key(tmp_path):
    cfg = StoreConfig.from_text("tieredStoreGroupCommitTimeout=30000\ntieredStoreGroupCommit=false\n"
                                "tieredStoreFileReservedTime=24\ntieredStoreDeleteFileEnable=false\n"
                                "tiered.read_ahead_cache_bytes=8MiB\nreadAheadCacheEnable=false\n", "properties")
    assert (cfg.group_commit_interval_ms, cfg.file_reserved_hours, cfg.read_ahead_cache_bytes) == (
        0, NEVER_EXPIRE_HOURS, 0)


@pytest.mark.parametrize("key", sorted(ROCKETMQ_IGNORED_TIERED_KEYS))
def test_ignored_keys_are_checked_and_have_no_effect(tmp_path, key):
    good = {"tieredStoreIndexFileMaxHashSlotNum": "5000000", "tieredStoreIndexFileMaxIndexNum": "20000000",
            "tieredStoreDeleteFileInterval": "3600000", "tieredStoreCrcCheckEnable": "true"}[key]
    cfg = StoreConfig.from_text(f"{key}={good}\n", "properties", base_dir=str(tmp_path))
    assert cfg == StoreConfig.from_text("", "properties", base_dir=str(tmp_path))


@pytest.mark.parametrize("key", sorted(BAD_BROKER_VALUES))
def test_each_bad_broker_value_names_file_and_key(tmp_path, key):
    value, err_key, accepted = BAD_BROKER_VALUES[key]
    conf = write(tmp_path, "broker.conf", f"brokerId=0\n{key}={value}\n")
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    text = str(err.value)
    assert err.value.key == err_key and key in text and str(conf) in text, text
    assert accepted in text, text


# -- issue 9: what the switches do in a running store ---------------------------------------------


def memory_broker_conf(tmp_path: pathlib.Path, *lines: str) -> pathlib.Path:
    """A broker.conf for a store on the memory driver (its own namespace) with small files."""
    return write(tmp_path, "broker.conf", "\n".join([
        "storePathRootDir=store",
        "tieredBackendServiceProvider=org.apache.rocketmq.tieredstore.provider.MemoryFileSegment",
        f"tiered.options.namespace={tmp_path}",
        "mappedFileSizeCommitLog=1048576",
        *lines]) + "\n")


def put(store, n: int, queue_id: int = 0) -> None:
    for i in range(n):
        store.put_message(Message(topic="T", body=b"m%05d" % i, keys=[f"k{i}"]), queue_id=queue_id)


@pytest.mark.parametrize("switch,messages,groups", [
    ("", 0, 0),  # RocketMQ's default: 50 messages, younger than 30 s, wait for a group of 4096
    ("tieredStoreGroupCommit=false", 50, 1),  # dispatched at once, as one group, not one by one
])
def test_group_commit_switch(tmp_path, switch, messages, groups):
    from tiered_core.access.tiered_store import TieredMessageStore

    with TieredMessageStore.open(StoreConfig.load(memory_broker_conf(tmp_path, switch), environ={})) as store:
        put(store, 50)
        stats = store.dispatch(force=False)
        assert (stats.messages, stats.groups) == (messages, groups), stats


@pytest.mark.parametrize("switch,kept", [("", False), ("tieredStoreDeleteFileEnable=false", True)])
def test_delete_file_switch(tmp_path, switch, kept):
    from tiered_core.access.tiered_store import TieredMessageStore

    conf = memory_broker_conf(tmp_path, "tieredStoreCommitLogMaxSize=2048", "tieredStoreConsumeQueueMaxSize=200",
                              "tieredStoreFileReservedTime=1", switch)
    with TieredMessageStore.open(StoreConfig.load(conf, environ={})) as store:
        put(store, 100)
        assert store.dispatch(force=True).messages == 100
        store.delete_expired_tiered(1 << 50)  # far in the future: everything is past its reserve time
        tiered_min = store.flat_files.get("T", 0).consume_queue_min_offset()
        assert (tiered_min == 0) is kept, tiered_min


def test_read_ahead_cache_switch_off_reads_without_a_cache(tmp_path):
    from tiered_core.access.results import StoreTier
    from tiered_core.access.tiered_store import TieredMessageStore

    conf = memory_broker_conf(tmp_path, "readAheadCacheEnable=false", "tieredStorageLevel=FORCE")
    with TieredMessageStore.open(StoreConfig.load(conf, environ={})) as store:
        put(store, 20)
        store.dispatch(force=True)
        for _ in range(2):  # nothing is cached between the two reads
            got = store.get_message("g", "T", 0, offset=0, max_count=32)
            assert got.found and got.tier is StoreTier.TIERED and len(got.messages) == 20


#: The smallest (or edge) value the loader accepts for each bounded field.
EDGE_VALUES = [
    ("commit_log_max_size", 128), ("consume_queue_max_size", 20), ("local_commit_log_file_size", 4096),
    ("file_reserved_hours", 1), ("file_reserved_hours", NEVER_EXPIRE_HOURS), ("max_group_commit_count", 1),
    ("group_commit_count", 1), ("group_commit_size", 1), ("group_commit_interval_ms", 0),
    ("max_pending_limit", 1), ("rolling_min_size", 0), ("rolling_interval_ms", 0),
    ("read_ahead_cache_bytes", 1), ("read_ahead_cache_expire_ms", 0), ("local_retention_hours", 0),
    ("cluster", "c" * 246), ("broker", "\u00e9" * 127), ("storage_level", "FORCE"), ("local_flush", "sync"),
    ("read_ahead_cache_bytes", 0),
]


@pytest.mark.parametrize("field_name,value", EDGE_VALUES)
def test_every_accepted_edge_value_opens_a_working_store(tmp_path, field_name, value):
    """What the loader accepts, the store opens with: no bound is checked later than at load."""
    from tiered_core.access.results import GetMessageStatus
    from tiered_core.access.tiered_store import TieredMessageStore

    cfg = StoreConfig.from_mapping({"store_path": str(tmp_path / "s"), "driver": "memory",
                                    "options": {"namespace": str(tmp_path)}, "local_commit_log_file_size": "64KiB",
                                    field_name: value}, source="edge.toml")
    with TieredMessageStore.open(cfg) as store:
        put(store, 3)  # 100-byte messages: one fits a 128-byte segment
        assert store.dispatch(force=True).messages == 3
        got = store.get_message("g", "T", 0, offset=0, max_count=8)
        assert got.status is GetMessageStatus.FOUND and [m.body for m in got.messages] == [b"m00000", b"m00001",
                                                                                           b"m00002"]


def test_disk_cache_path_needs_diskcache_at_load(tmp_path, monkeypatch):
    conf = write(tmp_path, "t.toml", '[tiered]\nread_ahead_disk_cache_path = "cache"\n')
    _diskcache_spec(False, monkeypatch)
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    assert err.value.key == "read_ahead_disk_cache_path" and str(conf) in str(err.value)
    assert "diskcache" in str(err.value)
    _diskcache_spec(True, monkeypatch)
    assert StoreConfig.load(conf, environ={}).read_ahead_disk_cache_path == str(tmp_path / "cache")


class RootedDriver(__import__("tiered_driver_memory").MemoryDriver):
    """A third party's driver that requires an option named ``root`` (not the posix driver)."""

    name = "rooted-test"

    def __init__(self, *, root: str, namespace: str = "default") -> None:
        super().__init__(namespace=namespace)
        self.root = root


def test_only_the_posix_driver_gets_a_root_in_the_store_path(tmp_path):
    """A driver drill: a third-party driver's required ``root`` was filled in silently with
    ``{store_path}/tiered`` (documented for posix only), so a config that left it out
    worked, with the tier inside the store directory."""
    cfg = StoreConfig(store_path=str(tmp_path / "s"), driver="tests.test_config:RootedDriver")
    assert cfg.effective_driver_options() == {}
    posix_like = StoreConfig(store_path=str(tmp_path / "s"), driver="tests.broken_drivers:LosesTailDriver")
    assert posix_like.effective_driver_options()["root"] == os.path.join(str(tmp_path / "s"), "tiered")


def test_a_misspelt_key_variable_is_reported_and_tool_variables_are_not(tmp_path, caplog):
    """Drill s14: TIERED_STORAGE_LEVL=FORCE was ignored without a word (a misspelt
    TIERED_OPTION_* is refused by its driver)."""
    import logging

    import tiered_core.config as config_module

    path = tmp_path / "t.toml"
    path.write_text("[tiered]\n")
    config_module._REPORTED_LOOKALIKES.clear()
    with caplog.at_level(logging.WARNING, logger="tiered_core.config"):
        config = StoreConfig.load(str(path), environ={"TIERED_STORAGE_LEVL": "FORCE", "TIERED_STRICT_PLUGINS": "1",
                                                     "TIERED_SPARK_MASTER": "local[1]", "TIERED_AZURITE": "x",
                                                     "TIERED_OPTIONS_ROOT": "/x"})
    assert config.storage_level != "FORCE" and "/x" not in str(config.driver_options)
    assert sorted(r.getMessage() for r in caplog.records) == [
        "environment variable TIERED_OPTIONS_ROOT is not a config key and is ignored: did you mean "
        "TIERED_OPTION_ROOT?",  # (drill s14b F9)
        "environment variable TIERED_STORAGE_LEVL is not a config key and is ignored: did you mean "
        "TIERED_STORAGE_LEVEL?"]
