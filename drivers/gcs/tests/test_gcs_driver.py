"""The gcs driver against a real fake-gcs-server: layout, crash leftovers, failures, secrets.

Fixtures construct the driver directly (no layers), so each request is sent once and a
failure surfaces as it is; where retries matter the driver is put in the standard layers,
as open_driver opens it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from tiered_conformance.request_probe import RequestProbe
from tiered_core.errors import DriverError, IllegalParam, InvalidOption, InvalidPath, NotFound, PositionMismatch, SegmentSealed, StateConflict
from tiered_core.plugins import conformance_environment, open_driver
from tiered_core.segment import FileSegment
from tiered_core.spi.layer import CountingLayer, RetryPolicy, layered
from tiered_core.spi.transport import LOST_ANSWER
from tiered_driver_gcs import EMULATOR_GAP, GcsDriver
from tiered_driver_gcs.testing import GCS_BUCKET
from tiered_core.spi.objectstore import ObjectInfo
from tiered_core.spi.objectstore.layout import META_SEALED, PART_MARK, part_key

COMPACT_AT = GcsDriver.compact_at


@pytest.fixture
def driver(fake_gcs):
    # retries=0: gcsfs sends each request once, so an injected failure surfaces as it is
    # (the retry layer is added where a test wants it; gcsfs's own retries have their test).
    drv = GcsDriver(**fake_gcs.driver_options(GCS_BUCKET, f"t-{uuid.uuid4().hex[:10]}"), retries=0)
    yield drv
    drv.close()


def raw_objects(drv: GcsDriver, path: str) -> list[ObjectInfo]:
    """What the bucket really holds for ``path`` (base and parts)."""
    return drv._list_objects(drv._key(path), what="test listing")


def upload(drv: GcsDriver, name: str, data: bytes) -> None:
    """Put an object in the bucket as another program would (an exclusive create)."""
    assert drv._create_object(name, data, None, what="test upload") is not None


def test_registered_and_opened_by_name(fake_gcs):
    with open_driver("gcs", **fake_gcs.driver_options(GCS_BUCKET, "by-name")) as drv:
        assert isinstance(drv.innermost, GcsDriver)
        drv.write("x", 0, b"abc")
        assert drv.size("x") == 3


def test_emulator_gap_is_declared(driver):
    assert driver.capabilities.conditional_append is False
    assert driver.capabilities.overridden["conditional_append"] == EMULATOR_GAP
    assert GcsDriver.capabilities.conditional_append is True  # the real service enforces it


def test_appends_are_parts_and_reads_span_them(driver):
    driver.write("seg", 0, b"base-")
    driver.write("seg", 5, b"part1-")
    driver.write("seg", 11, b"part2")
    assert driver.size("seg") == 16
    assert driver.read("seg", 0, 16) == b"base-part1-part2"
    assert driver.read("seg", 3, 10) == b"e-part1-pa"
    names = sorted(o.name for o in raw_objects(driver, "seg"))
    assert len(names) == 3 and sum(PART_MARK in n for n in names) == 2
    with pytest.raises(IllegalParam):
        driver.read("seg", 10, 7)
    with pytest.raises(NotFound):
        driver.read("absent", 0, 1)


def test_position_mismatch_carries_the_real_size_and_stores_nothing(driver):
    driver.write("seg", 0, b"12345")
    driver.write("seg", 5, b"678")
    for bad in (0, 5, 9):
        with pytest.raises(PositionMismatch) as info:
            driver.write("seg", bad, b"zz")
        assert info.value.actual_size == 8
    assert driver.read("seg", 0, 8) == b"12345678"


def test_compaction_keeps_few_objects_and_the_bytes(driver):
    expected = bytearray()
    for i in range(COMPACT_AT + 6):
        chunk = f"<{i:03d}>".encode()
        driver.write("seg", len(expected), chunk)
        expected += chunk
    assert driver.size("seg") == len(expected)
    assert driver.read("seg", 0, len(expected)) == bytes(expected)
    objs = raw_objects(driver, "seg")
    parts = [o for o in objs if PART_MARK in o.name]
    base = [o for o in objs if PART_MARK not in o.name][0]
    assert len(parts) < COMPACT_AT  # composed into the base when the chain got long
    assert base.size > len(b"<000>")


def test_seal_leaves_one_object_and_rejects_writes(driver):
    expected = b"".join(f"[{i}]".encode() for i in range(12))
    pos = 0
    for i in range(12):
        chunk = f"[{i}]".encode()
        driver.write("seg", pos, chunk)
        pos += len(chunk)
    driver.seal("seg")
    objs = raw_objects(driver, "seg")
    assert [o.name for o in objs] == [driver._key("seg")]
    assert objs[0].metadata[META_SEALED] == "true"
    assert driver.is_sealed("seg") and driver.size("seg") == len(expected)
    assert driver.read("seg", 0, len(expected)) == expected
    with pytest.raises(SegmentSealed):
        driver.write("seg", len(expected), b"more")
    with pytest.raises(SegmentSealed):
        driver.reopen().write("seg", len(expected), b"more")
    driver.seal("seg")  # idempotent
    with pytest.raises(NotFound):
        driver.seal("never-written")


def test_crash_leftovers_are_never_counted(driver):
    """Each state a crash can leave behind reads back exactly."""
    driver.write("seg", 0, b"AAAA")
    driver.write("seg", 4, b"BBBB")
    view = driver._view(driver._key("seg"), "seg")
    # (1) crash after a compose but before its parts were deleted: parts inside the base.
    assert driver._consolidate(driver._key("seg"), [view.chain[0].info()], view.metadata, version=view.version,
                               what="test compose") is not None
    assert driver.size("seg") == 8
    assert driver.read("seg", 0, 8) == b"AAAABBBB"
    # (2) a part after a gap (no writer of the layout makes one: a write lands at the size it
    # checked, which a stale writer's view never passes).
    upload(driver, part_key(driver._key("seg"), view.segment_id, 100), b"zz")
    # (3) a part of a different segment id (left by a deleted predecessor).
    upload(driver, part_key(driver._key("seg"), "0ld", 8), b"yy")
    assert driver.size("seg") == 8
    assert dict(driver.list("")) == {"seg": 8}
    driver.write("seg", 8, b"CC")
    assert driver.read("seg", 0, 10) == b"AAAABBBBCC"
    driver.seal("seg")  # garbage of the segment's own id behind its end is removed with the seal
    # ... and a part of another id, or after a gap, is kept: nothing tells a deleted predecessor's
    # leftover from another writer's object (another driver's layout), and a store deletes only its own
    assert sorted(o.name for o in raw_objects(driver, "seg")) == sorted([
        driver._key("seg"), part_key(driver._key("seg"), "0ld", 8),
        part_key(driver._key("seg"), view.segment_id, 100)])
    assert driver.read("seg", 0, 10) == b"AAAABBBBCC" and driver.size("seg") == 10


def test_delete_interrupted_after_base_leaves_no_size(driver):
    driver.write("seg", 0, b"old-")
    driver.write("seg", 4, b"parts")
    assert driver._delete_object(driver._key("seg"), what="test delete")
    assert driver.size("seg") == 0 and not driver.exists("seg")
    old_parts = [o.name for o in raw_objects(driver, "seg")]
    driver.write("seg", 0, b"new-")  # a new segment must not adopt the old parts
    driver.write("seg", 4, b"!")
    assert driver.read("seg", 0, 5) == b"new-!"
    driver.delete("seg")
    # the new segment's objects are gone; the old id's parts stay (never counted, never ours to tell)
    assert [o.name for o in raw_objects(driver, "seg")] == old_parts and driver.size("seg") == 0


def test_list_sizes_and_prefixes(driver):
    driver.write("a/1", 0, b"x")
    driver.write("a/1", 1, b"yy")
    driver.create("a/2")
    driver.write("b/1", 0, b"zzzz")
    assert list(driver.list("a/")) == [("a/1", 3), ("a/2", 0)]
    assert list(driver.list("")) == [("a/1", 3), ("a/2", 0), ("b/1", 4)]
    with pytest.raises(InvalidPath):
        driver.write("a#tiered-part/x", 0, b"x")


QUICK = RetryPolicy(retries=3, base_delay=0.001, max_delay=0.01)


def fail_first(n: int, status_or_exc, method: str | None = None):
    """A request hook failing the first ``n`` requests (of ``method``, if given)."""
    left = {"n": n}

    def hook(m, what):
        if left["n"] and (method is None or m == method):
            left["n"] -= 1
            if isinstance(status_or_exc, int):
                return status_or_exc
            raise status_or_exc
        return None

    hook.left = left
    return hook


def test_transient_failures_surface_retryable_and_the_layer_retries(driver):
    """With retries=0 gcsfs sends each request once: the failure reaches the driver's
    caller as a retryable DriverError, and the retry layer repeats the operation."""
    driver.write("seg", 0, b"first")
    stack = layered(driver, QUICK)
    probe = RequestProbe.install(driver)
    probe.hook = hook = fail_first(2, 503)
    before = probe.requests
    assert stack.read("seg", 0, 5) == b"first"  # the listing fails twice, then the read goes through
    assert hook.left["n"] == 0 and probe.requests - before == 4  # 2 failed, listing, download
    probe.hook = fail_first(1, 503)
    with pytest.raises(DriverError) as info:
        driver.size("seg")  # the driver alone sends once
    assert info.value.retryable and "503" in str(info.value)


def test_gcsfs_retries_each_request_but_never_a_compose(fake_gcs):
    """``retries`` is gcsfs's count of retries per request (with its backoff); a compose
    is sent once, because only the driver can tell whether a lost one took place."""
    drv = GcsDriver(**fake_gcs.driver_options(GCS_BUCKET, f"r-{uuid.uuid4().hex[:8]}"), retries=1)
    drv.write("seg", 0, b"abc")
    drv.write("seg", 3, b"def")
    probe = RequestProbe.install(drv)
    probe.hook = hook = fail_first(1, 503)
    before = probe.requests
    assert drv.size("seg") == 6  # gcsfs retried the failed listing itself
    assert hook.left["n"] == 0 and probe.requests - before == 2  # every attempt is counted
    probe.uninstall()
    drv.transport.hook = fail_first(2, 503)
    with pytest.raises(DriverError) as info:
        drv.size("seg")  # two attempts, both failed
    assert info.value.retryable and "503" in str(info.value)
    seen = []

    def fail_composes(method, what):
        if what.startswith("compose"):
            seen.append(what)
            return 503
        return None

    drv.transport.hook = fail_composes
    with pytest.raises(DriverError) as info:
        drv.seal("seg")
    assert info.value.retryable and seen == ["compose 'seg'"]  # not resent
    drv.transport.hook = None
    drv.seal("seg")
    assert drv.is_sealed("seg") and drv.read("seg", 0, 6) == b"abcdef"
    drv.close()


def emulator_upload(url: str, bucket: str, name: str, data: bytes) -> None:
    """A multipart upload straight to the emulator (outside gcsfs's loop)."""
    body = (b"--b\r\nContent-Type: application/json\r\n\r\n" + json.dumps({"name": name}).encode()
            + b"\r\n--b\r\nContent-Type: application/octet-stream\r\n\r\n" + data + b"\r\n--b--\r\n")
    req = urllib.request.Request(f"{url}/upload/storage/v1/b/{bucket}/o?uploadType=multipart", data=body,
                                 method="POST", headers={"Content-Type": "multipart/related; boundary=b"})
    urllib.request.urlopen(req, timeout=10).close()


@pytest.mark.parametrize("same_bytes", [True, False])
def test_a_part_found_by_the_upload_counts_only_when_it_is_this_writes_bytes(driver, fake_gcs, same_bytes):
    """gcsfs resends an upload whose answer was lost; the resend finds the first attempt's
    part (412). Staged here: the part appears just before the upload is sent. The driver
    takes it for its own only when it holds exactly this write's bytes."""
    driver.write("seg", 0, b"base")
    view = driver._view(driver._key("seg"), "seg")
    name = part_key(driver._key("seg"), view.segment_id, 4)
    landed = b"-part" if same_bytes else b"-othr"

    def first_attempt_landed(method, what):
        if what.startswith("write") and not staged:
            staged.append(True)
            emulator_upload(fake_gcs.url, GCS_BUCKET, name, landed)
        return None

    staged: list[bool] = []
    driver.transport.hook = first_attempt_landed
    if same_bytes:
        driver.write("seg", 4, b"-part")
    else:
        with pytest.raises(PositionMismatch) as info:
            driver.write("seg", 4, b"-part")
        assert info.value.actual_size == 9
    driver.transport.hook = None
    assert staged and driver.read("seg", 0, 9) == b"base" + landed


def test_a_failed_write_is_not_resent_and_file_segment_converges(driver):
    counting = CountingLayer(driver)
    seg = FileSegment(layered(counting, QUICK), "seg")
    seg.append(b"first")
    assert seg.commit()
    seg.append(b"second")
    driver.transport.hook = hook = fail_first(2, 503, method="POST")
    attempts = 1
    while not seg.commit():  # each failed upload is handed back: one write per commit
        attempts += 1
    assert hook.left["n"] == 0 and attempts == 3 and counting.calls["write"] == 1 + 3
    driver.transport.hook = None
    assert driver.read("seg", 0, 11) == b"firstsecond"


def test_connection_resets_are_retryable(driver):
    driver.transport.hook = fail_first(1, ConnectionResetError("injected reset"))
    with pytest.raises(DriverError) as info:
        driver.write("seg", 0, b"abc")
    assert info.value.retryable and driver.size("seg") == 0
    driver.transport.hook = fail_first(1, ConnectionResetError("injected reset"))
    assert layered(driver, QUICK).size("seg") == 0


def test_persistent_transient_failure_is_retryable_driver_error(driver):
    driver.write("seg", 0, b"abc")
    driver.transport.hook = lambda method, what: 503
    with pytest.raises(DriverError) as info:
        layered(driver, QUICK).size("seg")
    assert info.value.retryable is True and info.value.attempts == QUICK.retries + 1
    assert GCS_BUCKET in str(info.value)
    driver.transport.hook = None
    assert driver.size("seg") == 3  # nothing landed


@pytest.mark.parametrize("status", [401, 403])
def test_access_denied_is_permanent_and_names_the_bucket(driver, status):
    calls = {"n": 0}

    def hook(method, what):
        calls["n"] += 1
        return status

    driver.transport.hook = hook
    with pytest.raises(DriverError) as info:
        layered(driver, QUICK).size("seg")
    assert info.value.retryable is False
    assert calls["n"] == 1  # never retried
    assert GCS_BUCKET in str(info.value) and "access denied" in str(info.value)


def test_missing_bucket_is_a_clear_permanent_error(fake_gcs):
    drv = GcsDriver(**fake_gcs.driver_options("no-such-bucket-xyz"))
    for call in (lambda: drv.size("x"), lambda: drv.write("x", 0, b"a")):
        with pytest.raises(DriverError) as info:
            call()
        assert info.value.retryable is False
        assert "no-such-bucket-xyz" in str(info.value) and "does not exist" in str(info.value)


def test_file_segment_commits_over_gcs(driver):
    seg = FileSegment(driver, "commitlog/00000000000000000000")
    data = [bytes([i]) * 1000 for i in range(50)]
    for i, chunk in enumerate(data):
        seg.append(chunk)
        if i % 7 == 6:
            assert seg.commit()
    assert seg.commit()
    seg.seal()
    again = FileSegment(driver.reopen(), "commitlog/00000000000000000000")
    assert again.commit_position == 50_000 and again.sealed
    assert again.read(0, 50_000) == b"".join(data)


SECRET = "ya29.SECRET-token-value-never-shown"


@pytest.mark.parametrize("token", [{"type": "service_account", "client_email": "x@example.com",
                                    "private_key": "SECRET-KEY-TEXT"}, {"client_id": "c"}])
def test_an_incomplete_credentials_table_names_the_option_not_the_secret(token):
    """A ``[tiered.options.token]`` table missing a field: INVALID_OPTION naming ``token`` and
    the field (it was DRIVER_ERROR "KeyError"); the table's values never appear."""
    with pytest.raises(InvalidOption) as err:
        open_driver("gcs", bucket="b", token=token, endpoint="http://127.0.0.1:9")
    assert err.value.context["option"] == "token" and err.value.context["field"] == "refresh_token"
    assert "SECRET-KEY-TEXT" not in str(err.value) and "service-account key" in str(err.value)


def test_token_is_redacted_everywhere(fake_gcs):
    drv = GcsDriver(**fake_gcs.driver_options(GCS_BUCKET, "secret-test"))
    drv.options["token"] = SECRET  # as if configured: every rendering goes through redact()
    assert SECRET not in repr(drv) and SECRET not in json.dumps(drv.describe())
    assert drv.describe()["options"]["token"] == "***"
    with pytest.raises(Exception) as info:
        GcsDriver(bucket=GCS_BUCKET, token=SECRET)  # not a usable credential
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)


def test_tiered_drivers_json_lists_gcs_with_version_and_no_secret(tmp_path):
    tiered = Path(sys.executable).parent / "tiered"
    env = {**os.environ, "TIERED_DRIVER": "gcs", "TIERED_OPTION_TOKEN": SECRET, "GOOGLE_OAUTH_ACCESS_TOKEN": SECRET}
    out = subprocess.run([str(tiered), "drivers", "--json"], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    listed = {d["name"]: d for d in json.loads(out.stdout)}
    assert listed["gcs"]["version"] == "0.1.0"
    assert listed["gcs"]["distribution"] == "tiered-driver-gcs"
    assert "token" in listed["gcs"]["options"]
    assert SECRET not in out.stdout and SECRET not in out.stderr


def lose_first_answer(match):
    """A fault hook: the first request matching ``match`` is carried out, its answer lost."""
    state = {"done": False}

    def hook(method, what):
        if not state["done"] and match(method, what):
            state["done"] = True
            return LOST_ANSWER
        return None

    return hook


def test_lost_answer_of_a_part_upload_is_not_written_twice(driver):
    seg = FileSegment(layered(driver, QUICK), "seg")
    seg.append(b"base")
    assert seg.commit()
    driver.transport.hook = lose_first_answer(lambda m, w: w.startswith("write"))
    seg.append(b"-part")
    assert seg.commit()  # the write failed, but size() shows the part landed: adopted, not resent
    driver.transport.hook = None
    assert driver.read("seg", 0, driver.size("seg")) == b"base-part"
    assert len([o for o in raw_objects(driver, "seg") if PART_MARK in o.name]) == 1


def test_lost_answer_of_a_compose_is_not_composed_twice(driver):
    """The emulator does not enforce the generation precondition: a blind retry would
    append the parts twice. The driver looks at the base before composing again."""
    expected = bytearray()
    for i in range(COMPACT_AT):  # the first is the base, then COMPACT_AT - 1 parts
        chunk = f"<{i:03d}>".encode()
        driver.write("seg", len(expected), chunk)
        expected += chunk
    driver.transport.hook = lose_first_answer(lambda m, w: w.startswith("compose"))
    driver.write("seg", len(expected), b"<last>")  # reaches COMPACT_AT: composes
    expected += b"<last>"
    driver.transport.hook = None
    assert len([o for o in raw_objects(driver, "seg") if PART_MARK in o.name]) < COMPACT_AT  # it composed
    assert driver.size("seg") == len(expected)
    assert driver.read("seg", 0, len(expected)) == bytes(expected)
    driver.seal("seg")
    assert driver.read("seg", 0, len(expected)) == bytes(expected)


def test_storage_emulator_host_is_honoured(fake_gcs, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    drv = GcsDriver(bucket=GCS_BUCKET, prefix=f"env-{uuid.uuid4().hex[:8]}", emulated=True)  # no endpoint option
    assert drv.gcs.fs._location == fake_gcs.url  # gcsfs resolved the emulator from the environment
    drv.write("x", 0, b"via env")
    assert drv.read("x", 0, 7) == b"via env"


@pytest.mark.parametrize("how", ["endpoint", "STORAGE_EMULATOR_HOST"])
def test_emulation_is_never_inferred_from_the_endpoint(fake_gcs, monkeypatch, how):
    """A plain-http endpoint or STORAGE_EMULATOR_HOST says where to connect, not what the
    backend can do: only the explicit ``emulated`` option declares the emulator's gap."""
    options = {"bucket": GCS_BUCKET, "prefix": f"infer-{uuid.uuid4().hex[:8]}", "token": "anon"}
    if how == "endpoint":
        options["endpoint"] = fake_gcs.url
    else:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    with GcsDriver(**options) as drv:
        assert drv.emulated is False
        assert drv.capabilities is GcsDriver.capabilities and not drv.capabilities.overridden
    with open_driver("gcs", **options, emulated="true") as drv:  # as a config file gives it
        assert drv.innermost.emulated is True and drv.capabilities.overridden["conditional_append"] == EMULATOR_GAP
    # An instance's override never reaches the class (the real service's capabilities).
    assert GcsDriver.capabilities.conditional_append and not GcsDriver.capabilities.overridden


def test_bearer_token_never_reaches_logs_or_errors(fake_gcs, caplog):
    import logging

    from google.oauth2.credentials import Credentials

    creds = Credentials(token=SECRET)  # sent as "Authorization: Bearer ..." (the emulator ignores it)
    # one retry (with its log lines) is enough to show none of them carries the token
    drv = GcsDriver(bucket=GCS_BUCKET, endpoint=fake_gcs.url, token=creds, prefix="bearer", emulated=True, retries=1)
    caplog.set_level(logging.DEBUG)
    texts = [repr(drv), json.dumps(drv.describe(), default=str)]
    drv.write("x", 0, b"abc")
    drv.transport.hook = lambda method, what: 503
    for call in (lambda: drv.write("x", 3, b"d"), lambda: drv.read("x", 0, 3),
                 lambda: GcsDriver(bucket="missing-bucket-q", endpoint=fake_gcs.url, token=creds,
                                   emulated=True, retries=1).size("x")):
        with pytest.raises(DriverError) as info:
            call()
        texts += [str(info.value), repr(info.value), repr(info.value.context)]
    texts.append(caplog.text)
    assert all(SECRET not in text for text in texts)


def test_an_object_uploaded_by_someone_else_is_adopted(driver):
    upload(driver, driver._key("foreign"), b"written elsewhere")
    assert driver.size("foreign") == 17
    driver.write("foreign", 17, b", appended here")
    assert driver.read("foreign", 0, 32) == b"written elsewhere, appended here"
    driver.seal("foreign")
    assert driver.is_sealed("foreign") and driver.size("foreign") == 32


@pytest.mark.parametrize("same_bytes", [False, True])
def test_stale_writer_racing_a_compaction_is_rejected(fake_gcs, same_bytes):
    """Writer A checks the size (P), then B writes at P and compacts (deleting the part at
    P) before A's upload: A's part at P then lies inside the base. A must not report
    success for bytes that are not there. Run as on the real service (emulated=False):
    the race is staged step by step, so the emulator's missing preconditions do not
    matter."""
    a = GcsDriver(bucket=GCS_BUCKET, prefix=f"race-{uuid.uuid4().hex[:8]}", endpoint=fake_gcs.url,
                  token="anon", emulated=False)
    b = a.reopen()
    assert a.capabilities.conditional_append
    expected = bytearray()
    for i in range(COMPACT_AT):  # the base, then COMPACT_AT - 1 parts: B's next write compacts
        chunk = f"<{i:03d}>".encode()
        b.write("seg", len(expected), chunk)
        expected += chunk
    position = len(expected)
    theirs = b"<B-b>"
    mine = theirs if same_bytes else b"<A-a>"
    real_create = a._create_object

    def create_after_b(name, data, metadata, **kwargs):
        if PART_MARK in name and not b.size("seg") > position:
            b.write("seg", position, theirs)  # B wins the position and compacts
        return real_create(name, data, metadata, **kwargs)

    a._create_object = create_after_b
    if same_bytes:
        a.write("seg", position, mine)  # the bytes at P are A's bytes: success is true
    else:
        with pytest.raises(PositionMismatch) as info:
            a.write("seg", position, mine)
        assert info.value.actual_size == position + len(theirs)
    expected += theirs
    assert b.size("seg") == len(expected)
    assert b.read("seg", 0, len(expected)) == bytes(expected)
    assert len([o for o in raw_objects(b, "seg") if PART_MARK in o.name]) < COMPACT_AT  # B compacted


def test_conformance_environment_starts_or_reuses_an_emulator(tmp_path, fake_gcs, monkeypatch):
    """The driver's plugin answers the tiered_conformance_environment hook."""
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("TIERED_GCS_ENDPOINT", raising=False)
    with conformance_environment("gcs", str(tmp_path / "own")) as options:  # starts its own
        assert options["endpoint"] != fake_gcs.url
        with GcsDriver(**options) as drv:
            drv.write("x", 0, b"own emulator")
            assert drv.capabilities.overridden["conditional_append"] == EMULATOR_GAP
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    monkeypatch.setenv("TIERED_GCS_BUCKET", "env-made-bucket")
    with conformance_environment("gcs", str(tmp_path / "env")) as options:  # reuses, makes the bucket
        assert options["endpoint"] == fake_gcs.url and options["bucket"] == "env-made-bucket"
        with GcsDriver(**options) as drv:
            drv.write("x", 0, b"shared emulator")
            assert drv.size("x") == 15


def test_a_segment_laid_out_by_the_fsspec_driver_is_refused_not_misread(driver):
    """An operator drill (round 3): a prefix the fsspec driver wrote (gs://) whose owner record
    was gone, opened with the gcs driver, was read as the gcs layout: the fsspec parts did not
    count, a rebuild recorded the segments too short, and puts handed out acknowledged offsets
    again. Parts of the fsspec layout's ids are refused, naming one, wherever they are read."""
    key = driver._key("seg")
    upload(driver, key, b"base")  # the fsspec base: no segment id in its metadata
    upload(driver, part_key(key, "s", 4), b"more")
    upload(driver, key + PART_MARK + "meta/tiered-sealed", b"8")
    for call in (lambda: driver.size("seg"), lambda: list(driver.list("")), lambda: driver.seal("seg")):
        with pytest.raises(StateConflict, match="fsspec driver's layout"):
            call()
    assert len(raw_objects(driver, "seg")) == 3  # nothing removed



def test_an_object_named_as_an_fsspec_part_below_a_gcs_segment_refuses_nothing(driver):
    """An operator drill (S3): one stray object named like an fsspec part below a segment this
    layout wrote made every command refuse the tier (get, put, verify, repair). The base
    carries this layout's segment id: the object is someone else's, never counted or removed."""
    driver.write("seg", 0, b"AAAA")
    driver.write("seg", 4, b"BBBB")
    stray = part_key(driver._key("seg"), "s", 5000)
    upload(driver, stray, b"stray object, not a part")
    assert driver.size("seg") == 8 and dict(driver.list("")) == {"seg": 8}
    driver.write("seg", 8, b"CC")
    driver.seal("seg")
    assert driver.read("seg", 0, 10) == b"AAAABBBBCC"
    driver.delete("seg")
    assert [o.name for o in raw_objects(driver, "seg")] == [stray]


def test_objects_the_listing_hides_are_named_by_foreign_objects(driver):
    """``list`` hides every object named with the part mark; ``foreign_objects`` names those
    that are not the store's own (a chain part, or its own garbage behind the chain's end,
    which its seal removes), so that verify can report them (it could not see them)."""
    driver.write("a/seg", 0, b"AAAA")
    driver.write("a/seg", 4, b"BBBB")  # a part of the chain: the store's, not foreign
    key = driver._key("a/seg")
    own = driver._view(key, "a/seg").segment_id
    strays = [part_key(key, "0ld", 8), part_key(key, own, 100), key + PART_MARK + "junk"]
    for name in strays:
        upload(driver, name, b"zz")
    orphan = part_key(driver._key("a/gone"), "x1", 0)  # a part whose base is gone
    upload(driver, orphan, b"yyy")
    rel = {name: name[len(driver.root) + 1:] for name in [*strays, orphan]}
    assert dict(driver.list("a/")) == {"a/seg": 8}
    assert list(driver.foreign_objects("a/")) == sorted([(rel[n], 2) for n in strays] + [(rel[orphan], 3)])
    assert list(driver.foreign_objects("b/")) == []
    driver.seal("a/seg")
    assert driver.read("a/seg", 0, 8) == b"AAAABBBB"  # ... and nothing of them was read, counted or removed
    assert len(list(driver.foreign_objects("a/"))) == 4


@pytest.mark.parametrize("endpoint", ["127.0.0.1:4443", "localhost", "http://"])
def test_an_endpoint_that_is_no_url_is_an_invalid_option(endpoint):
    """Drill s14b F11: an endpoint without its scheme was retried for 36 s, then failed with
    gcsfs's NonHttpUrlClientError, naming no option."""
    with pytest.raises(InvalidOption) as info:
        GcsDriver(bucket="bkt", endpoint=endpoint, emulated=True)
    assert info.value.option == "endpoint" and repr(endpoint) in str(info.value)
