"""A local tier root inside a directory the local store manages (CLI drill).

`root = "./A/consumequeue"` with `store_path = "./A"` was accepted; a later take-over moved the
local history aside -- and the whole tier with it, into `given-up-history/`. Now a root in
one of the local store's own directories is a ConfigError naming the option, before
anything is created; a root of its own inside store_path (the default `tiered`) is fine.
"""

from __future__ import annotations

import os

import pytest

from tiered_core import Message, TieredMessageStore
from tiered_core.access.paths import MANAGED_ENTRIES
from tiered_core.config import StoreConfig
from tiered_core.errors import ConfigError


def _config(tmp_path, root: str) -> StoreConfig:
    conf = tmp_path / "c.toml"
    conf.write_text(f'[tiered]\nstore_path = "./A"\n[tiered.options]\nroot = "{root}"\n')
    return StoreConfig.load(str(conf), environ={})


@pytest.mark.parametrize("entry", MANAGED_ENTRIES)
def test_a_root_in_a_directory_the_local_store_manages_is_refused(tmp_path, entry):
    config = _config(tmp_path, f"./A/{entry}/tier")
    with pytest.raises(ConfigError) as info:
        TieredMessageStore.open(config)
    assert info.value.context["key"] == "options.root" and entry in info.value.message
    assert not os.path.exists(tmp_path / "A")


@pytest.mark.parametrize("root", ["./A/tiered", "./A", "./tier", "./A/commitlogs"])
def test_a_root_of_its_own_is_accepted(tmp_path, root):
    with TieredMessageStore.open(_config(tmp_path, root)) as store:
        store.put_message(Message(topic="t", body=b"x"), 0)
        assert store.dispatch(force=True).errors == []
