"""The azure driver against a real Azurite: append blocks, partial landing, failures, secrets.

Fixtures construct the driver directly (no layers), so each request is sent once and a
failure surfaces as it is; where retries matter the driver is put in the standard layers,
as open_driver opens it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tiered_conformance.request_probe import RequestProbe
from tiered_core.errors import (
    DriverError, IllegalParam, InvalidOption, InvalidPath, NotFound, PositionMismatch, SegmentSealed, StateConflict,
)
from tiered_core.plugins import conformance_environment, open_driver
from tiered_core.segment import FileSegment
from tiered_core.spi.layer import RetryPolicy, layered
from tiered_core.spi.transport import LOST_ANSWER
from tiered_driver_azure import MAX_APPEND_BLOCK, AzureDriver
from tiered_driver_azure.emulator import AZURITE_KEY
from tiered_driver_azure.testing import AZURE_CONTAINER

BLOCK = 1000  # small blocks make multi-block writes cheap to test
QUICK = RetryPolicy(retries=3, base_delay=0.001, max_delay=0.01)


@pytest.fixture
def driver(azurite):
    drv = AzureDriver(container=AZURE_CONTAINER, prefix=f"t-{uuid.uuid4().hex[:10]}",
                      connection_string=azurite.connection_string, retries=3, max_block_size=BLOCK)
    yield drv
    drv.close()


def appends_sent(drv: AzureDriver):
    """A fault hook recorder: (method, url) of each request."""
    seen: list[tuple[str, str]] = []

    def hook(method, url):
        seen.append((method, url))
        return None

    drv.transport.hook = hook
    return seen


def test_registered_and_opened_by_name(azurite):
    with open_driver("azure", container=AZURE_CONTAINER, connection_string=azurite.connection_string,
                     prefix="by-name") as drv:
        assert isinstance(drv.innermost, AzureDriver)
        drv.write("x", 0, b"abc")
        assert drv.size("x") == 3


def test_block_limit_default_is_the_append_blob_limit():
    assert MAX_APPEND_BLOCK == 4 * 1024 * 1024
    with pytest.raises(InvalidOption):
        AzureDriver(container="c", connection_string="UseDevelopmentStorage=true", max_block_size=0)


def test_large_write_is_split_into_blocks(driver):
    data = bytes(range(256)) * 11  # 2816 bytes -> 3 blocks of <= 1000
    seen = appends_sent(driver)
    driver.write("seg", 0, data)
    puts = [s for s in seen if s[1].endswith("comp=appendblock")]
    assert len(puts) >= 3
    driver.transport.hook = None
    assert driver.size("seg") == len(data)
    assert driver.read("seg", 0, len(data)) == data
    assert driver.read("seg", 999, 3) == data[999:1002]


def test_position_mismatch_is_enforced_by_the_service(driver):
    driver.write("seg", 0, b"12345")
    other = driver.reopen()
    other.write("seg", 5, b"678")
    with pytest.raises(PositionMismatch) as info:
        driver.write("seg", 5, b"zz")  # a stale writer
    assert info.value.actual_size == 8
    assert driver.read("seg", 0, 8) == b"12345678"
    with pytest.raises(PositionMismatch):
        driver.write("fresh", 3, b"x")


def test_partial_landing_is_told_by_size_and_resumed(driver):
    data = b"".join(bytes([65 + i]) * BLOCK for i in range(4))
    calls = {"puts": 0}

    def hook(method, url):
        if url.endswith("comp=appendblock"):
            calls["puts"] += 1
            if calls["puts"] >= 2:  # the first block passes; the second keeps failing
                return 500
        return None

    driver.create("seg")
    driver.transport.hook = hook
    with pytest.raises(DriverError) as info:
        driver.write("seg", 0, data)
    assert info.value.retryable is True
    driver.transport.hook = None
    landed = driver.size("seg")
    assert landed == BLOCK
    assert driver.read("seg", 0, landed) == data[:landed]
    seg = FileSegment(driver, "seg")  # recovers the position from size() and goes on
    assert seg.commit_position == landed
    seg.append(data[landed:])
    assert seg.commit()
    assert driver.read("seg", 0, len(data)) == data


def test_seal(driver):
    driver.write("seg", 0, b"sealed bytes")
    driver.seal("seg")
    driver.seal("seg")  # idempotent
    assert driver.is_sealed("seg")
    with pytest.raises(SegmentSealed):
        driver.write("seg", 12, b"more")
    assert driver.read("seg", 0, 12) == b"sealed bytes"
    with pytest.raises(NotFound):
        driver.seal("never-written")


def test_reads_and_list(driver):
    driver.write("a/1", 0, b"xyz")
    driver.create("a/2")
    driver.create("a/2")  # idempotent
    driver.write("b/1", 0, b"q")
    assert list(driver.list("a/")) == [("a/1", 3), ("a/2", 0)]
    assert list(driver.list("")) == [("a/1", 3), ("a/2", 0), ("b/1", 1)]
    with pytest.raises(IllegalParam):
        driver.read("a/1", 2, 5)
    with pytest.raises(IllegalParam):
        driver.read("a/1", 30, 1)
    with pytest.raises(NotFound):
        driver.read("nope", 0, 1)
    driver.delete("a/1")
    driver.delete("a/1")
    assert driver.size("a/1") == 0 and not driver.exists("a/1")


def test_transient_failures_are_retried_by_the_layer_not_the_driver(driver):
    left = {"n": 2}

    def hook(method, url):
        if left["n"]:
            left["n"] -= 1
            return 503
        return None

    driver.write("seg", 0, b"abc")
    probe = RequestProbe.install(driver)
    probe.hook = hook
    before = probe.requests
    assert layered(driver, QUICK).read("seg", 0, 3) == b"abc"
    assert left["n"] == 0 and probe.requests - before == 3
    probe.uninstall()
    calls = {"n": 0}

    def reset(method, url):
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionResetError("injected reset")
        return None

    driver.transport.hook = reset
    with pytest.raises(DriverError) as info:
        driver.write("seg", 3, b"def")  # a write is sent once, and not resent by the layer
    assert info.value.retryable and driver.size("seg") == 3
    seg = FileSegment(layered(driver, QUICK), "seg")
    seg.append(b"def")
    assert seg.commit()
    driver.transport.hook = None
    assert driver.read("seg", 0, 6) == b"abcdef"


def test_persistent_transient_failure_is_retryable_and_bounded(driver):
    calls = {"n": 0}

    def hook(method, url):
        calls["n"] += 1
        return 429

    driver.transport.hook = hook
    with pytest.raises(DriverError) as info:
        layered(driver, QUICK).size("seg")
    assert info.value.retryable is True and calls["n"] == QUICK.retries + 1 == info.value.attempts
    assert AZURE_CONTAINER in str(info.value)


def test_access_denied_is_permanent(azurite):
    wrong_key = "A" * 4 + AZURITE_KEY[4:]
    drv = AzureDriver(container=AZURE_CONTAINER, endpoint=azurite.blob_endpoint,
                      account_name="devstoreaccount1", account_key=wrong_key)
    with pytest.raises(DriverError) as info:
        drv.size("x")
    assert info.value.retryable is False and "access denied" in str(info.value)
    assert AZURE_CONTAINER in str(info.value)
    assert wrong_key not in str(info.value) and wrong_key not in repr(drv)


def test_missing_container_is_a_clear_permanent_error(azurite):
    drv = AzureDriver(container="no-such-container", connection_string=azurite.connection_string)
    for call in (lambda: drv.size("x"), lambda: drv.write("x", 0, b"a"), lambda: list(drv.list(""))):
        with pytest.raises(DriverError) as info:
            call()
        assert info.value.retryable is False
        assert "no-such-container" in str(info.value) and "does not exist" in str(info.value)


def test_secrets_are_redacted(azurite):
    drv = AzureDriver(container=AZURE_CONTAINER, connection_string=azurite.connection_string)
    text = repr(drv) + json.dumps(drv.describe())
    assert AZURITE_KEY not in text and "AccountKey" not in text
    assert drv.describe()["options"]["connection_string"] == "***"
    bad = "DefaultEndpointsProtocol=http;AccountName=x;AccountKey=NotBase64!!SECRET;BlobEndpoint=::bad"
    try:
        AzureDriver(container=AZURE_CONTAINER, connection_string=bad).size("x")
    except Exception as exc:
        assert "SECRET" not in str(exc) and "SECRET" not in repr(exc)


def test_tiered_drivers_json_lists_azure_without_secrets(tmp_path, azurite):
    tiered = Path(sys.executable).parent / "tiered"
    env = {**os.environ, "AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string,
           "TIERED_AZURE_CONNECTION_STRING": azurite.connection_string}
    out = subprocess.run([str(tiered), "drivers", "--json"], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    listed = {d["name"]: d for d in json.loads(out.stdout)}
    assert listed["azure"]["version"] == "0.1.0"
    assert listed["azure"]["distribution"] == "tiered-driver-azure"
    assert AZURITE_KEY not in out.stdout + out.stderr


def test_file_segment_over_azure(driver):
    seg = FileSegment(driver, "commitlog/00000000000000000000")
    data = [bytes([i]) * 700 for i in range(30)]
    for i, chunk in enumerate(data):
        seg.append(chunk)
        if i % 5 == 4:
            assert seg.commit()
    seg.seal()
    again = FileSegment(driver.reopen(), "commitlog/00000000000000000000")
    assert again.commit_position == 21_000 and again.sealed
    assert again.read(0, 21_000) == b"".join(data)


def test_lost_answer_of_an_append_is_not_written_twice(driver):
    data = b"".join(bytes([97 + i]) * BLOCK for i in range(3))
    driver.create("seg")
    state = {"n": 0}

    def hook(method, url):
        if url.endswith("comp=appendblock"):
            state["n"] += 1
            if state["n"] == 2:  # the second block lands, its answer does not
                return LOST_ANSWER
        return None

    driver.transport.hook = hook
    seg = FileSegment(layered(driver, QUICK), "seg")
    seg.append(data)
    assert seg.commit() is False  # the second block's answer was lost: the write failed
    assert driver.size("seg") == 2 * BLOCK  # ... but size() tells that it landed
    assert seg.commit()  # so the third block follows it, and nothing is written twice
    driver.transport.hook = None
    assert driver.size("seg") == len(data)
    assert driver.read("seg", 0, len(data)) == data


def test_account_key_never_reaches_logs(azurite, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    drv = AzureDriver(container=AZURE_CONTAINER, endpoint=azurite.blob_endpoint, account_name="devstoreaccount1",
                      account_key=AZURITE_KEY, prefix="logs")
    drv.write("x", 0, b"abc")
    drv.transport.hook = lambda method, url: 500
    with pytest.raises(DriverError) as info:
        drv.write("x", 3, b"d")
    assert AZURITE_KEY not in str(info.value) + repr(info.value) + repr(drv) + json.dumps(drv.describe())
    assert AZURITE_KEY not in caplog.text


def test_conformance_environment_starts_or_reuses_azurite(tmp_path, azurite, monkeypatch):
    """The driver's plugin answers the tiered_conformance_environment hook."""
    monkeypatch.delenv("TIERED_AZURE_CONNECTION_STRING", raising=False)
    with conformance_environment("azure", str(tmp_path / "own")) as options:  # starts its own
        assert options["connection_string"] != azurite.connection_string
        with AzureDriver(**options) as drv:
            drv.write("x", 0, b"own emulator")
            assert drv.size("x") == 12
    monkeypatch.setenv("TIERED_AZURE_CONNECTION_STRING", azurite.connection_string)
    monkeypatch.setenv("TIERED_AZURE_CONTAINER", "env-made-container")
    with conformance_environment("azure", str(tmp_path / "env")) as options:  # reuses, makes the container
        assert options["container"] == "env-made-container"
        with AzureDriver(**options) as drv:
            drv.write("x", 0, b"shared emulator")
            assert drv.size("x") == 15


@pytest.mark.parametrize("options, option, needle", [
    ({"account_name": "acct", "account_key": 12345}, "account_key", "got an int"),
    ({"account_name": "acct", "account_key": "not base64!"}, "account_key", "not base64"),
    ({"account_name": "acct", "account_key": " " + AZURITE_KEY}, "account_key", "a blank or padded string"),
    ({"connection_string": 42}, "connection_string", "got an int"),
    ({"account_name": 7}, "account_name", "7 (an int)"),
    ({"endpoint": ["http://x"]}, "endpoint", "(a list)"),
    ({"account_name": "acct", "retries": "3"}, "retries", "an int >= 0"),
    ({"account_name": "acct", "timeout": True}, "timeout", "a number of seconds"),
    ({"account_name": "acct", "credential": "  "}, "credential", "blank"),
])
def test_a_bad_option_is_named_with_what_it_must_be_and_no_secret(options, option, needle):
    """Issue 18: `account_key = 12345` said "cannot build a client: TypeError" and named
    connection_string."""
    with pytest.raises(InvalidOption) as info:
        AzureDriver(container="c", **options)
    assert info.value.option == option and needle in str(info.value)
    assert f"'{option}'" in str(info.value)
    if option in AzureDriver.secret_options and str(options[option]).strip():  # described, never shown
        assert str(options[option]).strip() not in str(info.value)


def test_a_client_that_cannot_be_built_names_the_option_it_came_from():
    with pytest.raises(InvalidOption) as info:
        AzureDriver(container="c", endpoint="http://", account_name="acct", account_key=AZURITE_KEY)
    assert info.value.option == "endpoint" and "'endpoint'" in str(info.value)
    secret = "DefaultEndpointsProtocol=http;AccountName=x;AccountKey=SECRET"  # no endpoint in it
    with pytest.raises(InvalidOption) as info:
        AzureDriver(container="c", connection_string=secret + ";garbage")
    assert info.value.option == "connection_string" and "SECRET" not in str(info.value)


# -- adlfs owns the session and the credential chain (issue 19) --------------------------


def _account_sas() -> str:
    from datetime import datetime, timedelta, timezone

    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    return generate_account_sas("devstoreaccount1", AZURITE_KEY, ResourceTypes(container=True, object=True),
                                AccountSasPermissions(read=True, write=True, delete=True, list=True, add=True,
                                                      create=True),
                                expiry=datetime.now(timezone.utc) + timedelta(hours=1))


def test_sas_token_through_adlfs_never_shown(azurite):
    sas = _account_sas()
    sig = [q for q in sas.split("&") if q.startswith("sig=")][0]
    drv = AzureDriver(container=AZURE_CONTAINER, endpoint=azurite.blob_endpoint, account_name="devstoreaccount1",
                      sas_token=sas, prefix=f"sas-{uuid.uuid4().hex[:8]}")
    seen = appends_sent(drv)
    drv.write("seg", 0, b"signed")
    assert drv.write_if_absent("owner", b"me") and not drv.write_if_absent("owner", b"other")
    assert drv.read("seg", 0, 6) == b"signed" and drv.read("owner", 0, 2) == b"me"
    assert list(drv.list("")) == [("owner", 2), ("seg", 6)]
    drv.transport.hook = lambda method, url: 500
    with pytest.raises(DriverError) as info:
        drv.read("seg", 0, 6)
    assert info.value.retryable
    assert drv.describe()["options"]["sas_token"] == "***"
    shown = repr(drv) + json.dumps(drv.describe()) + str(info.value) + repr(info.value) + repr(seen)
    assert sig not in shown and sig.split("=", 1)[1] not in shown
    drv.close()


def test_credentials_from_adlfs_environment_variables(azurite, monkeypatch):
    """Nothing but the container in the options: adlfs reads AZURE_STORAGE_CONNECTION_STRING."""
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    with AzureDriver(container=AZURE_CONTAINER, prefix=f"env-{uuid.uuid4().hex[:8]}") as drv:
        drv.write("x", 0, b"from the environment")
        assert drv.size("x") == 20
        assert AZURITE_KEY not in repr(drv) + json.dumps(drv.describe())


def test_an_environment_variable_adlfs_prefers_to_the_option_is_refused(azurite, monkeypatch):
    """adlfs takes AZURE_STORAGE_CONNECTION_STRING before account_key: the store would go to
    that account, quietly. The driver refuses, naming the variable (never its value)."""
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    with pytest.raises(InvalidOption) as info:
        AzureDriver(container="c", endpoint=azurite.blob_endpoint, account_name="devstoreaccount1",
                    account_key=AZURITE_KEY)
    assert "AZURE_STORAGE_CONNECTION_STRING" in str(info.value) and "'account_key'" in str(info.value)
    assert AZURITE_KEY not in str(info.value)
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY)
    with pytest.raises(InvalidOption) as info:
        AzureDriver(container="c", endpoint=azurite.blob_endpoint, account_name="devstoreaccount1",
                    sas_token=_account_sas())
    assert info.value.option == "account_key" and "AZURE_STORAGE_ACCOUNT_KEY" in str(info.value)


@pytest.mark.parametrize("options, option", [
    ({"connection_string": "UseDevelopmentStorage=true", "account_key": AZURITE_KEY}, "account_key"),
    ({"account_name": "acct", "account_key": AZURITE_KEY, "sas_token": "sv=1&sig=x"}, "sas_token"),
    ({"account_name": "acct", "account_key": AZURITE_KEY, "credential": "sv=1&sig=x"}, "account_key"),
    ({"account_name": "acct", "client_id": "id", "client_secret": "s3cr3t"}, "tenant_id"),
    ({"connection_string": "UseDevelopmentStorage=true", "endpoint": "http://127.0.0.1:1/a"}, "endpoint"),
])
def test_one_way_to_authenticate(options, option, monkeypatch):
    monkeypatch.delenv("AZURE_STORAGE_TENANT_ID", raising=False)
    with pytest.raises(InvalidOption) as info:
        AzureDriver(container="c", **options)
    assert info.value.option == option
    for secret in ("connection_string", "account_key", "sas_token", "client_secret", "credential"):
        if secret in options and secret != "connection_string":
            assert options[secret] not in str(info.value)


def test_service_principal_secret_never_shown(monkeypatch, caplog):
    """adlfs builds the service principal's credential; its token request fails here (the
    authority cannot be reached: a transient failure), and neither that error, nor the logs,
    nor anything shown carries the secret."""
    import logging

    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", "https://127.0.0.1:9")  # refused at once, never the internet
    secret = "sp-SECRET-value-123"
    drv = AzureDriver(container="c", account_name="acct", endpoint="https://127.0.0.1:9/acct",
                      client_id="00000000-0000-0000-0000-000000000001", client_secret=secret,
                      tenant_id="00000000-0000-0000-0000-000000000002")
    with pytest.raises(DriverError) as info:
        drv.size("x")
    assert info.value.retryable is True and "ServiceRequestError" in str(info.value)
    assert secret not in repr(drv) + json.dumps(drv.describe()) + str(info.value) + repr(info.value)
    assert secret not in caplog.text
    assert drv.describe()["options"]["client_secret"] == "***"
    drv.close()


def test_adlfs_calls_go_through_the_probe_and_failures_stay_typed(driver):
    """read, write_if_absent and delete are adlfs calls: each request is counted, a fault is
    a retryable DriverError, never a missing blob (a 503 on delete is not "already gone")."""
    driver.write("seg", 0, b"abc")
    probe = RequestProbe.install(driver)
    for call in (lambda: driver.read("seg", 0, 3), lambda: driver.write_if_absent("o", b"x"),
                 lambda: driver.delete("seg")):
        before = probe.requests
        probe.hook = lambda method, url: 503
        with pytest.raises(DriverError) as info:
            call()
        assert info.value.retryable and probe.requests - before == 1
        probe.hook = None
    assert driver.read("seg", 0, 3) == b"abc" and not driver.exists("o")
    before = probe.requests
    assert driver.write_if_absent("o", b"x") and probe.requests - before == 1
    driver.delete("seg")
    assert not driver.exists("seg")


def test_a_path_adlfs_would_read_as_a_version_is_refused(driver):
    with pytest.raises(InvalidPath):
        driver.write_if_absent("a?versionid=1", b"x")
    with pytest.raises(InvalidPath):
        driver.delete("a?versionid=1")


def test_anon_is_an_option():
    drv = AzureDriver.coerce_options({"container": "c", "account_name": "acct", "anon": "true"})
    assert drv["anon"] is True
    with AzureDriver(**drv) as anon:
        assert anon.describe()["options"]["anon"] is True


def test_an_environment_connection_string_for_another_account_is_refused(azurite, monkeypatch):
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    with pytest.raises(InvalidOption) as info:
        AzureDriver(container="c", account_name="production")
    assert info.value.option == "account_name" and "'devstoreaccount1'" in str(info.value)
    assert AZURITE_KEY not in str(info.value)
    with pytest.raises(InvalidOption) as info:
        AzureDriver(container="c", endpoint="https://production.blob.core.windows.net")
    assert info.value.option == "endpoint"
    with AzureDriver(container=AZURE_CONTAINER, account_name="devstoreaccount1") as same:  # the same account
        assert same.size("never-written") == 0


def test_a_prefix_laid_out_by_the_fsspec_driver_is_refused_not_misread(driver):
    """An operator drill (round 3): an abfs:// prefix the fsspec driver wrote, its owner record
    gone, opened with the azure driver: the fsspec parts were strays, `repair --apply` moved
    them to the quarantine and puts handed out acknowledged offsets again. The listing refuses
    another driver's part chain, naming a part, before anything reads or moves it."""
    driver.write("t/0/COMMIT_LOG/seg", 0, b"base")
    driver.write("t/0/COMMIT_LOG/seg#tiered-part/s/00000000000000000004", 0, b"more")
    with pytest.raises(StateConflict, match="another driver's layout"):
        list(driver.list(""))


def test_a_stray_blob_named_like_a_part_is_hidden_and_reported_not_a_refusal(driver):
    """Drill s14b F3: one stray blob named like an fsspec part (continuing no segment) made
    every command -- verify and repair too -- fail with STATE_CONFLICT. It is a foreign
    object now: the listing hides it, ``foreign_objects`` names it (verify's STRAY_OBJECT)."""
    driver.write("t/0/COMMIT_LOG/seg", 0, b"base")
    stray = "t/0/COMMIT_LOG/seg#tiered-part/0123456789abcdef/00000000000000009999"
    driver.write(stray, 0, b"junk")
    assert list(driver.list("")) == [("t/0/COMMIT_LOG/seg", 4)]
    assert list(driver.foreign_objects("")) == [(stray, 4)]


def test_the_fsspec_driver_with_a_wrong_account_key_says_access_denied_once(azurite):
    """A cloud drill: a wrong key on fsspec abfs:// was retried (azure-core's status_code was
    not read: the failure counted as transient) and the error quoted Azure's whole XML."""
    import base64

    from tiered_core.errors import DriverError

    wrong = base64.b64encode(b"x" * 64).decode()
    cs = azurite.connection_string.replace(AZURITE_KEY, wrong)
    with pytest.raises(DriverError) as err:
        open_driver("fsspec", url=f"abfs://{AZURE_CONTAINER}/p", storage_options={"connection_string": cs})
    text = str(err.value)
    assert err.value.retryable is False and "access denied" in text
    assert "<?xml" not in text and "\n" not in text and wrong not in text


@pytest.mark.parametrize("container", ["drill/sub", "Drill", "tier_s", "tïer"])
def test_a_container_that_is_no_container_name_is_an_invalid_option(container):
    """Drill s14b F10: these reached Azure and came back as HTTP 404 BlobNotFound / 400 (exit 5)."""
    with pytest.raises(InvalidOption) as info:
        AzureDriver(container=container, connection_string="UseDevelopmentStorage=true")
    assert info.value.option == "container" and repr(container) in str(info.value)


def test_a_block_blob_in_a_segments_place_is_named_as_such(driver):
    """An operator restored a segment with a plain upload (a block blob: what azcopy and `az
    storage blob upload` make by default). The store appends to a segment it has not sealed,
    which a block blob refuses: every dispatch of its queue failed with the service's
    InvalidBlobType. The append and the seal now say what the blob is and what to do."""
    driver.write("seg", 0, b"abc")
    data = driver.read("seg", 0, 3)
    driver.delete("seg")
    driver._fs.pipe_file(driver._fs_path("seg"), data)  # a plain upload: a block blob
    for call in (lambda: driver.write("seg", 3, b"def"), lambda: driver.seal("seg")):
        with pytest.raises(DriverError) as err:
            call()
        assert not err.value.retryable
        text = str(err.value)
        assert "block blob" in text and "append blob" in text and "'seg'" in text, text
    assert driver.read("seg", 0, 3) == b"abc"  # nothing changed
