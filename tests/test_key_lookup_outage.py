"""A key lookup while the tier cannot be read (load-and-faults drill s15 F1).

With the S3 tier down, ``query_message`` of a key whose message only the tier holds answered
an empty result after 30 s, no error: the same as "no message has this key". A caller (a
broker answering a consumer, an operator with ``tiered get --key``) could not tell an outage
from a missing key. Now the result carries the error (``QueryMessageResult.error``), and
``tiered get --key`` says so and exits 5; a damaged or foreign copy is still only skipped.
"""

from __future__ import annotations

from store_faults import SPEC, flaky_of
from store_workload import small_config
from tiered_core import Message
from tiered_core.access.results import QueryMessageResult
from tiered_core.access.tiered_store import TieredMessageStore
from tiered_core.cli import main
from tiered_core.errors import DriverError


def _tier_only_store(tmp_path):
    options = {"inner": "posix", "inner_options": {"root": str(tmp_path / "tier"), "fsync": False}}
    config = small_config(tmp_path, SPEC, options, local_commit_log_file_size=4096, local_retention_hours=0)
    with TieredMessageStore.open(config) as store:
        for i in range(200):
            store.put_message(Message(topic="kq", body=b"body-%d " % i * 20, keys=[f"key-{i}"]), 0)
        store.dispatch(force=True)
        assert store.delete_expired_local() > 0
        assert store.local.get_min_offset_in_queue("kq", 0) > 5  # key-5's message is in the tier only
    return config


def test_a_lookup_that_cannot_read_the_tier_says_so_instead_of_finding_nothing(tmp_path):
    config = _tier_only_store(tmp_path)
    with TieredMessageStore.open(config) as store:
        assert [m.queue_offset for m in store.query_message("kq", "key-5").messages] == [5]
    with TieredMessageStore.open(config) as store:  # cold: nothing of the tier cached
        flaky_of(store.driver).faults.unavailable.add("read")
        result = store.query_message("kq", "key-5")  # (the key index itself is on the local disk)
        assert result.messages == [] and isinstance(result.error, DriverError), result
        assert "refuses read" in result.error.message
        flaky_of(store.driver).faults.unavailable.discard("read")
        result = store.query_message("kq", "key-5")
        assert [m.queue_offset for m in result.messages] == [5] and result.error is None


def test_tiered_get_key_exits_5_when_the_lookup_could_not_read_the_tier(tmp_path, capsys, monkeypatch):
    conf = tmp_path / "tiered.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\n[tiered.options]\nroot = "{tmp_path / "tier"}"\n')
    assert main(["put", "--config", str(conf), "--topic", "kq", "--key", "key-1", "--body", "b1", "--dispatch"]) == 0
    capsys.readouterr()
    down = DriverError("s3: cannot read 'x': connection refused", retryable=True, path="x")
    found = TieredMessageStore.query_message

    def missed(self, *args, **kwargs):  # the fault: a tiered hit could not be read
        return QueryMessageResult([], down)

    monkeypatch.setattr(TieredMessageStore, "query_message", missed)
    assert main(["get", "--config", str(conf), "--topic", "kq", "--key", "key-1"]) == 5
    err = capsys.readouterr().err
    assert "could not read a tiered message" in err and "connection refused" in err and "key-1" in err

    def partly(self, *args, **kwargs):  # one hit read, another not: shown, and exit 5
        return QueryMessageResult(found(self, *args, **kwargs).messages, down)

    monkeypatch.setattr(TieredMessageStore, "query_message", partly)
    assert main(["get", "--config", str(conf), "--topic", "kq", "--key", "key-1"]) == 5
    out, err = capsys.readouterr()
    assert "body='b1'" in out and "may have missed it" in err


def test_a_read_during_an_outage_asks_the_backend_for_the_size_once_not_twenty_times(tmp_path):
    """Drill s15 F2: after a failed tiered read, the damage check looked the segment's size up
    with 20 attempts of its own, each through the driver's retries and timeouts: a read during
    an S3 freeze took 118.5 s with timeout=2, retries=1. One lookup now (the retry layer's)."""
    config = _tier_only_store(tmp_path)
    with TieredMessageStore.open(config) as store:  # cold: nothing of the tier cached
        flaky = flaky_of(store.driver)
        flaky.faults.unavailable.update({"read", "size"})
        before = flaky.calls["size"]
        result = store.get_message("g", "kq", 0, 5, 1)
        assert result.messages == [] and isinstance(result.error, DriverError), result
        retries = type(flaky).retry_policy.retries
        assert flaky.calls["size"] - before <= retries + 1, flaky.calls
