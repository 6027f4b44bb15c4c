"""A store whose newest message time is ahead of the clock (metadata drill, r13).

Store times never go backwards, so after one session with a clock five years fast every
later message was stamped five years ahead, silently. An open now warns, naming how far."""

from __future__ import annotations

import logging
import time

from tiered_core.codec.message import Message
from tiered_core.local.local_store import LocalMessageStore, LocalStoreConfig

YEAR_MS = 365 * 24 * 3_600_000


def test_an_open_warns_when_the_newest_store_time_is_ahead_of_the_clock(tmp_path, caplog):
    cfg = LocalStoreConfig(background_services=False)
    fast = int(time.time() * 1000) + 5 * YEAR_MS
    with LocalMessageStore(str(tmp_path), cfg, clock=lambda: fast) as store:
        store.put_message("t", 0, Message(topic="t", body=b"x"))
    with caplog.at_level(logging.WARNING):
        with LocalMessageStore(str(tmp_path), cfg) as store:
            store.put_message("t", 0, Message(topic="t", body=b"y"))
            store.reput()
            assert store.get_messages("t", 0, 1, 1)[0].store_timestamp == fast  # never backwards
    assert any("ahead of this machine's clock" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        with LocalMessageStore(str(tmp_path / "other"), cfg) as store:
            store.put_message("t", 0, Message(topic="t", body=b"z"))
        with LocalMessageStore(str(tmp_path / "other"), cfg):
            pass
    assert not any("ahead of this machine's clock" in r.getMessage() for r in caplog.records)
