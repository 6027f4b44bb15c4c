"""The s3 driver against a real moto server: request counts, seal, crashes, races, errors, secrets.

Fixtures construct the driver directly (no layers), so each request is sent once and a
failure surfaces as it is; where retries matter the driver is put in the standard layers,
as open_driver opens it. Faults are injected through the driver's request hook point
(``driver.transport.hook``), inside an operation, on the real requests.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from tiered_core.config import StoreConfig
from tiered_core.errors import DriverError, InvalidOption, PositionMismatch, SegmentSealed
from tiered_core.plugins import open_driver
from tiered_core.segment import FileSegment
from tiered_core.spi.layer import RetryPolicy, layered
from tiered_core.spi.objectstore import ObjectInfo
from tiered_core.spi.objectstore.layout import META_SEALED, PART_MARK, part_key
from tiered_core.spi.transport import LOST_ANSWER
from tiered_driver_s3 import EMULATOR_GAP, S3Driver
from tiered_driver_s3.driver import MIN_PART, _Conflict
from tiered_driver_s3.testing import S3_BUCKET

QUICK = RetryPolicy(retries=3, base_delay=0.001, max_delay=0.01)
KEY, SECRET, TOKEN = "AKIATESTKEYNEVERSHOWN", "s3cr3t/NEVER+shown", "session-token-NEVER-shown"


@pytest.fixture
def driver(moto_s3):
    drv = S3Driver(**moto_s3.driver_options(S3_BUCKET, f"t-{uuid.uuid4().hex[:10]}"), retries=0)
    yield drv
    drv.close()


def raw_objects(drv: S3Driver, path: str) -> list[ObjectInfo]:
    """What the bucket really holds for ``path`` (base and parts)."""
    return drv._list_objects(drv._key(path), what="test listing")


def recording(drv: S3Driver) -> list[str]:
    """Record the requests ``drv`` sends (``"PutObject bucket/key"``...)."""
    seen: list[str] = []
    drv.transport.hook = lambda method, what: seen.append(what)
    return seen


def fail_on(operation: str, status: int = 503, times: int = 1):
    """A hook failing the first ``times`` requests of ``operation`` with ``status``."""
    left = {"n": times}

    def hook(method, what):
        if what.startswith(operation + " ") and left["n"] > 0:
            left["n"] -= 1
            return status
        return None

    return hook


def test_registered_and_opened_by_name(moto_s3):
    with open_driver("s3", **moto_s3.driver_options(S3_BUCKET, "by-name")) as drv:
        assert isinstance(drv.innermost, S3Driver)
        drv.write("x", 0, b"abc")
        assert drv.size("x") == 3


def test_moto_enforces_every_precondition_so_no_gap_is_declared(driver):
    assert EMULATOR_GAP is None and driver.emulated
    assert driver.capabilities == S3Driver.capabilities and not driver.capabilities.overridden
    # What the guarantees rest on, checked against this moto: a second exclusive create
    # is refused, and so is a stale If-Match.
    assert driver._create_object(driver._key("c"), b"1", None, what="probe") is not None
    assert driver._create_object(driver._key("c"), b"2", None, what="probe") is None
    assert driver._delete_object(driver._key("c"), version='"stale"', what="probe") is False
    with pytest.raises(_Conflict):  # the one-GET sealed read relies on it
        driver._get(driver._key("c"), 0, 1, what="probe", if_match='"stale"')
    assert driver.read("c", 0, 1) == b"1"


def test_a_group_commit_is_one_put_and_a_sealed_read_one_get(driver):
    seg = FileSegment(driver, "commitlog/0")
    seg.append(b"a" * 1000)
    assert seg.commit()  # the first commit creates the base (and looks first)
    seg.append(b"b" * 1000)
    assert seg.commit()
    seen = recording(driver)
    for i in range(5):
        seg.append(bytes([65 + i]) * 4096)
        assert seg.commit()
    assert [w.split(" ")[0] for w in seen] == ["PutObject"] * 5, seen
    seg.seal()
    driver.read("commitlog/0", 0, 10)  # the first read after the seal looks at the segment
    del seen[:]
    assert driver.read("commitlog/0", 2000, 4096) == b"A" * 4096
    assert driver.read("commitlog/0", 100, 10) == b"a" * 10
    assert [w.split(" ")[0] for w in seen] == ["GetObject", "GetObject"], seen


def test_position_mismatch_carries_the_real_size_and_stores_nothing(driver):
    driver.write("seg", 0, b"abc")
    driver.write("seg", 3, b"def")
    for wrong in (2, 5, 7):
        with pytest.raises(PositionMismatch) as info:
            driver.write("seg", wrong, b"zz")
        assert info.value.actual_size == 6
    assert driver.size("seg") == 6 and driver.read("seg", 0, 6) == b"abcdef"


def test_seal_leaves_one_object_and_rejects_writes(driver):
    for i in range(10):
        driver.write("seg", i * 3, b"%03d" % i)
    assert len(raw_objects(driver, "seg")) == 10  # the base and nine parts
    driver.seal("seg")
    objects = raw_objects(driver, "seg")
    assert [o.name for o in objects] == [driver._key("seg")]
    assert driver._stat_object(driver._key("seg"), what="t").metadata[META_SEALED] == "true"
    assert driver.read("seg", 0, 30) == b"".join(b"%03d" % i for i in range(10))
    with pytest.raises(SegmentSealed):
        driver.write("seg", 30, b"x")
    fresh = driver.reopen()
    try:
        assert fresh.is_sealed("seg") and fresh.size("seg") == 30
        with pytest.raises(SegmentSealed):
            fresh.write("seg", 30, b"x")
    finally:
        fresh.close()
    driver.seal("seg")  # idempotent


def test_large_pieces_are_copied_server_side_small_ones_concatenated(driver):
    big1, small, big2 = os.urandom(MIN_PART + 1000), os.urandom(3000), os.urandom(MIN_PART + 7)
    driver.write("seg", 0, big1)
    driver.write("seg", len(big1), small)
    driver.write("seg", len(big1) + len(small), big2)
    seen = recording(driver)
    driver.seal("seg")
    ops = [w.split(" ")[0] for w in seen]
    assert "UploadPartCopy" in ops and "CompleteMultipartUpload" in ops, ops
    # big1 is copied, not read back; small and big2 are read (a part may not be under 5 MiB)
    assert ops.count("UploadPartCopy") == 1
    total = len(big1) + len(small) + len(big2)
    assert [o.name for o in raw_objects(driver, "seg")] == [driver._key("seg")]
    assert driver.size("seg") == total
    assert driver.read("seg", 0, total) == big1 + small + big2


@pytest.mark.parametrize("step", ["CompleteMultipartUpload", "UploadPartCopy", "UploadPart"])
def test_crash_between_parts_and_consolidation_loses_nothing(driver, step):
    pieces = [os.urandom(MIN_PART + 5), os.urandom(10), os.urandom(MIN_PART)]
    pos = 0
    for p in pieces:
        driver.write("seg", pos, p)
        pos += len(p)
    expected = b"".join(pieces)
    driver.transport.hook = fail_on(step)
    with pytest.raises(DriverError) as info:
        driver.seal("seg")
    assert info.value.retryable
    driver.transport.hook = None
    fresh = driver.reopen()
    try:
        # Not sealed, nothing lost or doubled: the old base and its chain still count.
        assert not fresh.is_sealed("seg") and fresh.size("seg") == len(expected)
        assert fresh.read("seg", 0, len(expected)) == expected
        fresh.seal("seg")
        assert fresh.read("seg", 0, len(expected)) == expected
        assert [o.name for o in raw_objects(fresh, "seg")] == [fresh._key("seg")]
    finally:
        fresh.close()


def test_crash_after_consolidation_before_cleanup_counts_no_part_twice(driver):
    for i in range(5):
        driver.write("seg", i * 4, b"p%03d" % i)
    driver.transport.hook = fail_on("DeleteObjects", status=500, times=10)
    driver.seal("seg")  # the parts' removal is best effort: they are garbage now
    driver.transport.hook = None
    assert len(raw_objects(driver, "seg")) > 1  # leftovers, inside the base
    fresh = driver.reopen()
    try:
        assert fresh.is_sealed("seg") and fresh.size("seg") == 20
        assert fresh.read("seg", 0, 20) == b"".join(b"p%03d" % i for i in range(5))
        assert list(fresh.list()) == [("seg", 20)]
        fresh.delete("seg")
        assert raw_objects(fresh, "seg") == [] and fresh.size("seg") == 0
    finally:
        fresh.close()


def test_racing_writers_one_wins_and_the_other_learns_the_size(driver):
    other = driver.reopen()
    try:
        for rnd in range(8):
            path = f"race-{rnd}"
            driver.write(path, 0, b"base")
            driver.write(path, 4, b"..")
            other.size(path)  # both instances know the end (6): both take the one-PUT path
            barrier = threading.Barrier(2)
            outcome: list = [None, None]

            def attempt(i: int, drv: S3Driver) -> None:
                data = bytes([65 + i]) * (5 + i)
                barrier.wait()
                try:
                    drv.write(path, 6, data)
                    outcome[i] = data
                except PositionMismatch as exc:
                    outcome[i] = exc

            threads = [threading.Thread(target=attempt, args=(i, d)) for i, d in enumerate((driver, other))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            winners = [o for o in outcome if isinstance(o, bytes)]
            losers = [o for o in outcome if isinstance(o, PositionMismatch)]
            assert len(winners) == 1 and len(losers) == 1, outcome
            assert losers[0].actual_size == 6 + len(winners[0])
            assert driver.read(path, 0, driver.size(path)) == b"base.." + winners[0]
    finally:
        other.close()


def test_a_stale_writer_is_refused_with_the_real_size(driver):
    other = driver.reopen()
    try:
        driver.write("seg", 0, b"one")
        other.size("seg")  # other's view: size 3
        driver.write("seg", 3, b"two")  # other is now behind
        with pytest.raises(PositionMismatch) as info:
            other.write("seg", 3, b"late")  # its one-PUT path finds the part at 3 taken
        assert info.value.actual_size == 6
        other.write("seg", 6, b"!")
        assert driver.read("seg", 0, 7) == b"onetwo!"
    finally:
        other.close()


def listed_keys(drv: S3Driver) -> list[int]:
    """Record how many objects each listing of ``drv`` returns (an observer: the listing runs as is)."""
    counts: list[int] = []
    real = drv._list_objects

    def observed(prefix, **kwargs):
        items = real(prefix, **kwargs)
        counts.append(len(items))
        return items

    drv._list_objects = observed
    return counts


def same_as_a_full_look(drv: S3Driver, path: str) -> int:
    """``drv``'s view of ``path`` equals a fresh instance's (which lists everything); the size."""
    fresh = drv.reopen()
    try:
        size, full = drv.size(path), fresh.size(path)
        assert size == full, (size, full)
        assert drv.exists(path) == fresh.exists(path) and drv.is_sealed(path) == fresh.is_sealed(path)
        if size:
            assert drv.read(path, 0, size) == fresh.read(path, 0, size)
        return size
    finally:
        fresh.close()


def test_a_view_of_an_open_segment_lists_only_the_parts_it_has_not_seen(driver):
    size = 0
    for i in range(40):
        driver.write("seg", size, b"%04d" % i)
        size += 4
    counts = listed_keys(driver)
    seen = recording(driver)
    assert driver.size("seg") == size == 160
    assert counts == [0] and [w.split(" ")[0] for w in seen] == ["ListObjectsV2", "HeadObject"], (counts, seen)
    other = driver.reopen()
    try:
        other.write("seg", size, b"more")  # another instance appends: the next view finds the part
        other.write("seg", size + 4, b"+end")
        del counts[:]
        assert driver.size("seg") == size + 8 and counts == [2]
        assert driver.read("seg", 0, size + 8).endswith(b"0039more+end")
    finally:
        other.close()
    assert same_as_a_full_look(driver, "seg") == size + 8


def test_a_view_kept_across_another_instances_seal_delete_and_recreate_stays_exact(driver):
    other = driver.reopen()
    try:
        for i in range(5):
            driver.write("seg", i * 3, b"%03d" % i)
        assert driver.size("seg") == 15  # this instance keeps the open view
        other.write("seg", 15, b"xyz")
        other.seal("seg")  # consolidated, parts removed: the kept chain's parts are gone
        assert same_as_a_full_look(driver, "seg") == 18 and driver.is_sealed("seg")
        with pytest.raises(SegmentSealed):
            driver.write("seg", 18, b"!")

        for i in range(5):
            driver.write("two", i * 3, b"%03d" % i)
        assert driver.size("two") == 15
        other.delete("two")
        assert same_as_a_full_look(driver, "two") == 0 and not driver.exists("two")
        other.write("two", 0, b"new")  # recreated: a new segment id, shorter than the kept view
        other.write("two", 3, b"er")
        assert same_as_a_full_look(driver, "two") == 5 and driver.read("two", 0, 5) == b"newer"
        driver.write("two", 5, b"!")
        assert same_as_a_full_look(driver, "two") == 6
    finally:
        other.close()


def test_a_changed_base_or_a_filled_gap_is_seen(driver):
    driver.write("seg", 0, b"base")
    driver.write("seg", 4, b"-one")
    assert driver.size("seg") == 8
    key = driver._key("seg")
    segment_id = driver._stat_object(key, what="t").metadata["tiered-segment-id"]
    # A part after a gap (as a stale writer could leave): not counted, and listed again
    # each time, so it joins the chain once the gap is filled.
    assert driver._create_object(part_key(key, segment_id, 12), b"-three", None, what="t") is not None
    assert same_as_a_full_look(driver, "seg") == 8
    driver.write("seg", 8, b"-two")
    assert same_as_a_full_look(driver, "seg") == 18
    assert driver.read("seg", 0, 18) == b"base-one-two-three"
    # The base replaced in place with the same id (not something this store does): the
    # HEAD differs from the kept view, so the view is a full look.
    driver._call("put_object", what="t", Key=key, Body=b"BASE!", Metadata={"tiered-segment-id": segment_id})
    assert same_as_a_full_look(driver, "seg") == 5


def test_the_kept_chains_are_bounded(driver, monkeypatch):
    import tiered_driver_s3.driver as module

    monkeypatch.setattr(module, "CACHED_PARTS", 12)
    for seg in range(4):
        size = 0
        for i in range(5):
            driver.write(f"seg-{seg}", size, b"ab")
            size += 2
            assert driver.size(f"seg-{seg}") == size
        assert driver._seen_parts <= 12
    kept = sum(len(s.open_chain.chain) for s in driver._seen.values() if s.open_chain is not None)
    assert kept == driver._seen_parts <= 12
    size = 0
    for i in range(20):  # a chain longer than the budget is not kept: looked at in full
        driver.write("long", size, b"cd")
        size += 2
    assert same_as_a_full_look(driver, "long") == 40 and driver._last_seen(driver._key("long")).open_chain is None
    for seg in range(4):
        assert same_as_a_full_look(driver, f"seg-{seg}") == 10


def test_a_lost_answer_of_a_part_put_is_not_written_twice(driver):
    seg = FileSegment(layered(driver, QUICK), "seg")
    seg.append(b"base")
    assert seg.commit()
    seg.append(b"-one")
    assert seg.commit()
    state = {"done": False}

    def hook(method, what):
        if not state["done"] and what.startswith("PutObject "):
            state["done"] = True
            return LOST_ANSWER
        return None

    driver.transport.hook = hook
    seg.append(b"-two")
    assert seg.commit()  # the PUT landed, its answer was lost: size() settles it, no resend
    driver.transport.hook = None
    assert state["done"]
    assert driver.read("seg", 0, driver.size("seg")) == b"base-one-two"
    assert len([o for o in raw_objects(driver, "seg") if PART_MARK in o.name]) == 2


def test_transient_failures_are_retryable_and_the_layer_retries(driver):
    driver.write("seg", 0, b"abc")
    driver.transport.hook = fail_on("ListObjectsV2", status=503, times=2)
    assert layered(driver, QUICK).size("seg") == 3
    driver.transport.hook = lambda method, what: 500
    with pytest.raises(DriverError) as info:
        layered(driver, QUICK).size("seg")
    assert info.value.retryable is True and S3_BUCKET in str(info.value)


def test_connection_failures_are_retryable(driver):
    def hook(method, what):
        raise ConnectionResetError("injected reset")

    driver.transport.hook = hook
    with pytest.raises(DriverError) as info:
        driver.size("seg")
    assert info.value.retryable is True


@pytest.mark.parametrize("status", [403])
def test_access_denied_is_permanent_and_names_the_bucket(driver, status):
    calls = {"n": 0}

    def hook(method, what):
        calls["n"] += 1
        return status

    driver.transport.hook = hook
    with pytest.raises(DriverError) as info:
        layered(driver, QUICK).size("seg")
    assert info.value.retryable is False and calls["n"] == 1  # never retried
    assert S3_BUCKET in str(info.value) and "access denied" in str(info.value)


def test_missing_bucket_is_a_clear_permanent_error(moto_s3):
    drv = S3Driver(**moto_s3.driver_options("no-such-bucket-xyz"))
    try:
        for call in (lambda: drv.size("x"), lambda: drv.write("x", 0, b"a")):
            with pytest.raises(DriverError) as info:
                call()
            assert info.value.retryable is False
            assert "no-such-bucket-xyz" in str(info.value) and "does not exist" in str(info.value)
    finally:
        drv.close()


@pytest.mark.parametrize("options, option", [
    ({"bucket": "ab"}, "bucket"),
    ({"bucket": "a/b"}, "bucket"),
    ({"endpoint_url": "localhost:9000"}, "endpoint_url"),
    ({"storage_options": {"key": "x"}}, "storage_options"),
    ({"storage_options": "not json"}, "storage_options"),
    ({"storage_options": {"config_kwargs": 3}}, "storage_options"),
    ({"key": KEY}, "secret"),
    ({"secret": SECRET}, "key"),
    ({"retries": -1}, "retries"),
    ({"timeout": 0}, "timeout"),
    ({"region": ""}, "region"),
])
def test_bad_options_are_named(options, option):
    with pytest.raises(InvalidOption) as info:
        S3Driver(**{"bucket": "tiered-x", **options})
    assert info.value.context.get("option") == option, info.value
    assert option in str(info.value)
    assert SECRET not in str(info.value) and KEY not in str(info.value)


def test_an_unknown_storage_option_is_named_with_the_option_it_resembles():
    """An operator drill: a typo inside ``storage_options`` (``profle``) failed as "cannot set
    up a client (TypeError)" without naming the key."""
    with pytest.raises(InvalidOption) as info:
        S3Driver(bucket="tiered-x", storage_options={"profle": "prod", "max_concurrency": 2})
    assert info.value.code == "INVALID_OPTION" and info.value.context.get("key") == "profle"
    assert "'profle'" in str(info.value) and "did you mean 'profile'?" in str(info.value)


def test_unknown_option_and_bad_types_from_text_are_named():
    with pytest.raises(InvalidOption) as info:
        S3Driver.coerce_options({"bucket": "tiered-x", "acces_key": "x"})
    assert "acces_key" in str(info.value) and "endpoint_url" in str(info.value)
    with pytest.raises(InvalidOption) as info:
        S3Driver.coerce_options({"bucket": "tiered-x", "retries": "many"})
    assert info.value.context.get("option") == "retries"


def test_storage_options_reach_s3fs(moto_s3):
    for form in ({"max_concurrency": 3}, '{"max_concurrency": 3}'):
        drv = S3Driver(**moto_s3.driver_options(S3_BUCKET, f"so-{uuid.uuid4().hex[:8]}"), storage_options=form)
        try:
            assert drv.fs.max_concurrency == 3
            drv.write("x", 0, b"1")
            assert drv.size("x") == 1
        finally:
            drv.close()


def test_secrets_are_redacted_in_repr_describe_errors_and_logs(moto_s3, caplog):
    caplog.set_level(logging.DEBUG)
    opts = {**moto_s3.driver_options(S3_BUCKET, "secrets"), "key": KEY, "secret": SECRET, "token": TOKEN}
    drv = S3Driver(**opts)
    try:
        shown = repr(drv) + json.dumps(drv.describe())
        for value in (KEY, SECRET, TOKEN):
            assert value not in shown
        assert drv.describe()["options"]["secret"] == "***" and drv.describe()["options"]["key"] == "***"
        drv.write("x", 0, b"ok")  # moto takes any credentials
        drv.transport.hook = lambda method, what: 403
        with pytest.raises(DriverError) as info:
            drv.size("x")
        text = str(info.value) + repr(info.value) + json.dumps(info.value.context, default=str)
        for value in (KEY, SECRET, TOKEN):
            assert value not in text
    finally:
        drv.close()
    for value in (KEY, SECRET, TOKEN):
        assert value not in caplog.text


def test_tiered_drivers_json_lists_s3_with_capabilities_and_no_secret(tmp_path):
    tiered = Path(sys.executable).parent / "tiered"
    env = {**os.environ, "TIERED_DRIVER": "s3", "TIERED_OPTION_SECRET": SECRET}
    out = subprocess.run([str(tiered), "drivers", "--json"], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    listed = {d["name"]: d for d in json.loads(out.stdout)}
    s3 = listed["s3"]
    assert s3["distribution"] == "tiered-driver-s3" and s3["version"] == "0.1.0"
    assert s3["capabilities"]["conditional_append"] is True and s3["capabilities"]["create_if_absent"] is True
    assert {"bucket", "prefix", "region", "endpoint_url", "key", "secret", "token", "storage_options"} <= \
        set(s3["options"])
    assert SECRET not in out.stdout and SECRET not in out.stderr


def test_broker_conf_object_store_keys_set_the_s3_options(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\ntieredBackendServiceProvider=s3\nobjectStoreEndpoint=http://127.0.0.1:9000\n"
                    f"objectStoreBucket=tiered-bucket\nobjectStoreAccessKey={KEY}\nobjectStoreSecretKey={SECRET}\n"
                    "tiered.options.prefix=rmq\n")
    cfg = StoreConfig.load(conf, environ={})
    assert cfg.driver == "s3"
    assert cfg.driver_options == {"prefix": "rmq", "endpoint_url": "http://127.0.0.1:9000", "bucket": "tiered-bucket",
                                  "key": KEY, "secret": SECRET}
    # A driver without those options ignores them (posix has no bucket).
    conf.write_text("brokerName=b\nobjectStoreBucket=tiered-bucket\n")
    assert "bucket" not in StoreConfig.load(conf, environ={}).driver_options


def test_a_read_only_command_on_a_missing_store_path_says_why_the_tier_could_not_be_read(moto_s3, tmp_path, capsys):
    """An operator drill: ``tiered verify`` on a lost disk whose tier could not be read (bad
    credentials) said only "no tiered store ... `tiered put` creates a store", which invites
    creating a second store on the prefix. It now names the driver's error as well."""
    from tiered_core.cli import main

    options = {**moto_s3.driver_options("tiered-no-such-bucket-x", "p"), "retries": 0, "key": KEY, "secret": SECRET}
    table = "".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items())
    conf = tmp_path / "c.toml"
    conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "lost"}"\ndriver = "s3"\n[tiered.options]\n{table}')
    for command in (["verify"], ["stat"]):
        assert main([*command, "--config", str(conf)]) == 3
        err = capsys.readouterr().err
        assert "no tiered store" in err and "could not be read" in err and "does not exist" in err, err
        assert SECRET not in err and KEY not in err
    assert not (tmp_path / "lost").exists()


def test_a_store_pointed_at_another_s3_service_is_refused_and_writes_nothing_there(moto_s3, tmp_path):
    """The identity names bucket and prefix, not the service: a store opened on another
    endpoint with a bucket of the same name claimed the empty prefix there and called every
    segment lost. Refused (IDENTITY_MISMATCH), nothing written to the other service."""
    import uuid

    from tiered_conformance.emulator import running
    from tiered_core import Message
    from tiered_core.access.tiered_store import TieredMessageStore
    from tiered_core.errors import IdentityMismatch
    from tiered_driver_s3.emulator import MotoServer

    bucket = f"same-name-{uuid.uuid4().hex[:8]}"
    moto_s3.create_bucket(bucket)
    config = StoreConfig.from_mapping({"store_path": str(tmp_path / "store"), "driver": "s3",
                                       "options": moto_s3.driver_options(bucket, "t")})
    with TieredMessageStore.open(config) as store:
        store.put_message(Message(topic="orders", body=b"x"), 0)
        store.dispatch(force=True)
    with running(MotoServer(tmp_path / "other"), lambda s: s.create_bucket(bucket)) as other:
        moved = config.replace(driver_options=other.driver_options(bucket, "t"))
        for read_only in (False, True):
            with pytest.raises(IdentityMismatch) as err:
                TieredMessageStore.open(moved, read_only=read_only)
            assert err.value.context["field"] == "tier" and "backend the store tiered to" in str(err.value)
        with S3Driver(**other.driver_options(bucket, "")) as drv:
            assert list(drv.list("")) == []
    with TieredMessageStore.open(config) as store:  # the right service still opens it
        assert store.get_message("g", "orders", 0, 0, 1).messages[0].body == b"x"


def test_credentials_nested_in_storage_options_are_never_shown(tmp_path, capsys):
    """An SSE-C key and a proxy's password inside storage_options were printed by `tiered
    drivers --config` and repr(StoreConfig): only key, secret and token were redacted."""
    from tiered_core.cli import main

    conf = tmp_path / "c.toml"
    conf.write_text('[tiered]\ndriver = "s3"\n[tiered.options]\nbucket = "b"\nemulated = true\n'
                    'endpoint_url = "http://127.0.0.1:9"\nstorage_options = { s3_additional_kwargs = '
                    '{ SSECustomerKey = "SSEKEY789" }, config_kwargs = { proxies = '
                    '{ http = "http://user:PROXYPASS@127.0.0.1:1" } } }\n')
    config = StoreConfig.load(conf, environ={})
    shown = repr(config) + json.dumps(config.describe())
    shown += repr(S3Driver.redact_options(config.driver_options))
    for argv in (["drivers", "--config", str(conf), "--json"], ["drivers", "--config", str(conf)]):
        main(argv)
        captured = capsys.readouterr()
        shown += captured.out + captured.err
    assert "SSEKEY789" not in shown and "PROXYPASS" not in shown
    assert "http://***:***@127.0.0.1:1" in repr(S3Driver.redact_options(config.driver_options))
    as_text = S3Driver.redact_options({"storage_options": '{"client_kwargs": {"aws_secret_access_key": "S3CR3T"}}'})
    assert "S3CR3T" not in repr(as_text)


@pytest.mark.parametrize("options,option,shown", [
    ({"storage_options": {"client_kwargs": {"regoin_name": "x"}}}, "storage_options", "regoin_name"),
    ({"region": "us-east-1 "}, "region", "'us-east-1 '"),
])
def test_a_client_option_the_library_refuses_is_named(moto_s3, options, option, shown):
    """They were DRIVER_ERROR (exit 5, "TypeError"/"InvalidRegionError"), naming nothing."""
    from tiered_core.errors import InvalidOption

    with pytest.raises(InvalidOption) as err:
        S3Driver(**{**moto_s3.driver_options(S3_BUCKET, "p"), **options})
    assert err.value.context["option"] == option and shown in str(err.value)


def test_a_missing_bucket_behind_an_endpoint_with_a_path_names_the_path(moto_s3):
    """endpoint_url = http://host:port/x sends every request to /x/BUCKET: the bucket then
    reads as missing, and the error named only option 'bucket'."""
    options = moto_s3.driver_options(S3_BUCKET, "p")
    with S3Driver(**{**options, "endpoint_url": options["endpoint_url"] + "/x", "retries": 0}) as drv:
        with pytest.raises(DriverError) as err:
            list(drv.list(""))
    assert "does not exist" in str(err.value) and "'endpoint_url' has a path ('/x')" in str(err.value)


def test_a_misspelt_key_of_the_s3_client_configuration_is_named(moto_s3):
    """config_kwargs.s3 = {adressing_style = "path"} was accepted and dropped by botocore."""
    from tiered_core.errors import InvalidOption

    options = moto_s3.driver_options(S3_BUCKET, "p")
    with pytest.raises(InvalidOption) as err:
        S3Driver(**options, storage_options={"config_kwargs": {"s3": {"adressing_style": "path"}}})
    assert err.value.context["key"] == "config_kwargs.s3.adressing_style" and "'addressing_style'" in str(err.value)
    with S3Driver(**options, storage_options={"config_kwargs": {"s3": {"addressing_style": "path"}}}) as drv:
        assert drv.size("nothing") == 0
