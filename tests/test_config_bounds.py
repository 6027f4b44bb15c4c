"""Issue 18, list 8 (config): every size, count and duration key has a documented upper bound
(``local_commit_log_file_size = 99999999999999999999999`` was accepted), and a blank or
whitespace-padded broker or cluster name is refused naming the key (``broker = " "`` was
accepted: another tier prefix than the operator meant)."""

from __future__ import annotations

import pytest

from tiered_core import StoreConfig
from tiered_core.common import INT_MAX
from tiered_core.configdef import IGNORED_ROCKETMQ_KEYS, KEYS
from tiered_core.errors import ConfigError

NUMERIC = ("size", "count", "ms", "hours")
BOUNDED = [k for k in KEYS if k.type.name in NUMERIC]


def load_toml(tmp_path, body: str, environ: dict | None = None) -> StoreConfig:
    path = tmp_path / "cfg.toml"
    path.write_text(f"[tiered]\n{body}\n")
    return StoreConfig.load(path, environ=environ or {})


def test_a_size_past_what_the_format_addresses_is_refused(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_toml(tmp_path, "local_commit_log_file_size = 99999999999999999999999")
    assert err.value.key == "local_commit_log_file_size"
    assert "at most 2147483647" in str(err.value) and "Java ints" in str(err.value)
    assert load_toml(tmp_path, f"local_commit_log_file_size = {INT_MAX}").local_commit_log_file_size == INT_MAX


def test_every_numeric_key_declares_a_maximum_and_why():
    assert len(BOUNDED) >= 15
    for key in BOUNDED:
        assert key.maximum is not None and key.why_max, key
        assert key.default <= key.maximum, key
    for key in IGNORED_ROCKETMQ_KEYS:
        if key.type.name in NUMERIC:
            assert key.maximum is not None and key.why_max, key


@pytest.mark.parametrize("key", BOUNDED, ids=lambda k: k.name)
def test_one_past_the_maximum_is_refused_naming_the_key_and_the_bound(tmp_path, key):
    top = key.maximum
    assert getattr(load_toml(tmp_path, f"{key.name} = {top}"), key.name) == top
    with pytest.raises(ConfigError) as err:
        load_toml(tmp_path, f"{key.name} = {top + 1}")
    assert err.value.key == key.name and "at most" in str(err.value) and key.why_max in str(err.value)
    with pytest.raises(ConfigError) as err:  # the environment is checked the same way
        load_toml(tmp_path, "", environ={key.env: str(top + 1)})
    assert err.value.key == key.name


def test_a_broker_conf_value_past_the_maximum_is_refused(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("tieredStoreMaxPendingLimit=400000000\n")  # / 4 = 100,000,000 upload threads
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    assert err.value.key == "max_pending_limit"
    conf.write_text("tieredStoreIndexFileMaxIndexNum=99999999999\n")  # accepted without effect, still checked
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    assert "tieredStoreIndexFileMaxIndexNum" in str(err.value) and "at most 2147483647" in str(err.value)


@pytest.mark.parametrize("name", ["broker", "cluster"])
@pytest.mark.parametrize("value", [" ", "   ", "", " broker-a", "broker-a ", "broker-a\t"])
def test_a_blank_or_padded_name_is_refused_naming_the_key(tmp_path, name, value):
    with pytest.raises(ConfigError) as err:
        load_toml(tmp_path, f'{name} = "{value}"')
    assert err.value.key == name and "whitespace" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_toml(tmp_path, "", environ={f"TIERED_{name.upper()}": value})
    assert err.value.key == name


def test_a_padded_broker_name_in_broker_conf_is_refused(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a \n")  # Java properties keep trailing blanks
    with pytest.raises(ConfigError) as err:
        StoreConfig.load(conf, environ={})
    assert err.value.key == "broker" and "'broker-a '" in str(err.value)
    conf.write_text("brokerName=broker a\nbrokerClusterName=my cluster\n")  # inner blanks are a name
    config = StoreConfig.load(conf, environ={})
    assert (config.broker, config.cluster) == ("broker a", "my cluster")
