"""Three brokers (a, b, c) of one cluster on one tiered backend, in temporary directories."""

from __future__ import annotations

import pytest

from static_topic_helpers import broker_configs
from tiered_core import StoreConfig


@pytest.fixture
def configs(tmp_path) -> list[StoreConfig]:
    return broker_configs(tmp_path)
