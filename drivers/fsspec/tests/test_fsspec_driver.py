"""The fsspec driver beyond the conformance suite: derived capabilities, the refusal of a
filesystem without atomic create (and ``single_writer``), options, secrets, ownership."""

from __future__ import annotations

import json
import os
import threading
import uuid

import pytest

from tiered_core.cli import main
from tiered_core.config import StoreConfig
from tiered_core.errors import DriverError, Fenced, InvalidOption, PrefixOwned
from tiered_core.flat.ownership import PrefixOwnership
from tiered_core.plugins import driver_class, open_driver
from tiered_driver_fsspec import FsspecDriver
from tiered_driver_fsspec.testing import OBJECTS, PLAIN

SECRET_KEY = "AKIA-not-a-real-key-4711"
SECRET_NESTED = "nested-secret-value-0815"
SECRET_PASSWORD = "pa55-word-in-options-42"


def _memory_url() -> str:
    return f"memory://test-{uuid.uuid4().hex[:8]}"


# -- capabilities ------------------------------------------------------------------------


def test_registered_with_conservative_class_capabilities():
    cls = driver_class("fsspec")
    assert cls is FsspecDriver
    assert not cls.capabilities.create_if_absent and not cls.capabilities.conditional_append
    assert {"url", "storage_options", "single_writer"} <= set(cls.option_names())


def test_capabilities_derived_from_the_filesystem(tmp_path):
    memory = FsspecDriver(url=_memory_url())
    assert memory.guarantees.layout == "append"
    assert (memory.capabilities.create_if_absent, memory.capabilities.conditional_append,
            memory.capabilities.atomic_write, memory.capabilities.survives_process_exit) == (True, True, True, False)

    local = FsspecDriver(url=f"file://{tmp_path}/tier")
    assert local.guarantees.layout == "append"
    # os.link makes the create atomic; "ab" has no size condition.
    assert (local.capabilities.create_if_absent, local.capabilities.conditional_append,
            local.capabilities.atomic_write, local.capabilities.survives_process_exit) == (True, False, False, True)

    objects = FsspecDriver(url=f"{OBJECTS}://bucket/p")
    assert objects.guarantees.layout == "chain"
    assert (objects.capabilities.create_if_absent, objects.capabilities.conditional_append,
            objects.capabilities.atomic_write) == (True, True, True)


@pytest.mark.parametrize("kind", ["memory", "file", "objects"])
def test_write_if_absent_has_one_winner_among_racing_threads(kind, tmp_path):
    url = {"memory": _memory_url(), "file": f"file://{tmp_path}/tier", "objects": f"{OBJECTS}://b/{uuid.uuid4().hex}"}
    drivers = [FsspecDriver(url=url[kind]) for _ in range(8)]
    keys = [f"owner/{i:03d}" for i in range(40)]
    wins: dict[str, list[int]] = {k: [] for k in keys}
    barrier = threading.Barrier(len(drivers))

    def claim(n: int) -> None:
        barrier.wait()
        for key in keys:
            if drivers[n].write_if_absent(key, f"writer {n}".encode() * 1000):
                wins[key].append(n)

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(len(drivers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(len(w) == 1 for w in wins.values()), {k: w for k, w in wins.items() if len(w) != 1}
    for key, (winner,) in wins.items():
        assert drivers[0].read(key, 0, drivers[0].size(key)) == f"writer {winner}".encode() * 1000


# -- refusal and single_writer -------------------------------------------------------------


def test_filesystem_without_atomic_create_is_refused_naming_what_is_missing(tmp_path):
    with pytest.raises(InvalidOption) as info:
        open_driver("fsspec", url=f"{PLAIN}://{tmp_path}/tier")
    err = info.value
    assert err.option == "url"
    assert err.context["missing"] == ["create_if_absent"]
    text = str(err)
    assert "tiered_driver_fsspec.testing.PlainLocalFS" in text
    assert "cannot create an object atomically" in text and "single_writer = true" in text
    assert not (tmp_path / "tier").exists(), "a refused open must write nothing"


def test_single_writer_opens_it_and_says_so(tmp_path):
    drv = open_driver("fsspec", url=f"{PLAIN}://{tmp_path}/tier", single_writer="true")
    described = drv.describe()
    assert described["single_writer"] is True
    assert described["missing"] == ["create_if_absent"]
    assert described["capabilities"]["create_if_absent"] is False
    assert described["filesystem"]["layout"] == "chain"
    drv.write("seg", 0, b"abc")
    drv.write("seg", 3, b"def")
    drv.seal("seg")
    assert drv.read("seg", 0, 6) == b"abcdef" and drv.is_sealed("seg")


def _config(tmp_path, options: str) -> str:
    path = tmp_path / "tiered.toml"
    path.write_text(f'[tiered]\ndriver = "fsspec"\nstore_path = "{tmp_path}/store"\n'
                    f"[tiered.options]\n{options}\n")
    return str(path)


def test_tiered_drivers_reports_single_writer(tmp_path, capsys):
    config = _config(tmp_path, f'url = "{PLAIN}://{tmp_path}/tier"\nsingle_writer = true')
    assert main(["drivers", "--config", config]) == 0
    out = capsys.readouterr().out
    assert "configured by" in out and "driver 'fsspec'" in out
    assert "single_writer = true: the backend lacks create_if_absent" in out
    assert main(["drivers", "--config", config, "--json"]) == 0
    (entry,) = [e for e in json.loads(capsys.readouterr().out) if e["name"] == "fsspec"]
    assert entry["configured"]["single_writer"] is True
    assert entry["configured"]["missing"] == ["create_if_absent"]
    assert entry["configured"]["capabilities"]["create_if_absent"] is False
    assert not (tmp_path / "tier").exists() and not (tmp_path / "store").exists(), "listing wrote something"


def test_tiered_drivers_config_shows_the_derived_capabilities(tmp_path, capsys):
    config = _config(tmp_path, f'url = "file://{tmp_path}/tier"')
    assert main(["drivers", "--config", config, "--json"]) == 0
    (entry,) = [e for e in json.loads(capsys.readouterr().out) if e["name"] == "fsspec"]
    assert entry["configured"]["capabilities"]["create_if_absent"] is True
    assert entry["configured"]["single_writer"] is False
    assert entry["capabilities"]["create_if_absent"] is False  # the class's: conservative


# -- ownership, as a store uses it -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["file", "objects"])
def test_second_store_refused_and_takeover_fences(kind, tmp_path):
    url = f"file://{tmp_path}/tier" if kind == "file" else f"{OBJECTS}://b/{uuid.uuid4().hex}"
    drv = open_driver("fsspec", url=url)
    a = PrefixOwnership(drv, "c", "b", "store-a", "/data/a")
    assert a.claim().epoch == 1
    with pytest.raises(PrefixOwned):
        PrefixOwnership(open_driver("fsspec", url=url), "c", "b", "store-b", "/data/b").claim()
    b = PrefixOwnership(open_driver("fsspec", url=url), "c", "b", "store-b", "/data/b")
    assert b.claim(take_over=True).epoch == 2
    with pytest.raises(Fenced):
        a.check()


# -- options -------------------------------------------------------------------------------


def test_storage_options_as_json_text_and_as_a_table():
    coerced = FsspecDriver.coerce_options({"url": "memory://x", "storage_options": '{"anon": true}',
                                           "single_writer": "false"})
    assert coerced == {"url": "memory://x", "storage_options": {"anon": True}, "single_writer": False}
    assert FsspecDriver.coerce_options({"url": "memory://x", "storage_options": {"a": {"b": 1}}})[
        "storage_options"] == {"a": {"b": 1}}
    with pytest.raises(InvalidOption) as info:
        FsspecDriver.coerce_options({"url": "memory://x", "storage_options": '{"key": "' + SECRET_KEY})
    assert info.value.option == "storage_options" and SECRET_KEY not in str(info.value)


def test_config_file_takes_a_storage_options_table_and_env_json(tmp_path, monkeypatch):
    path = _config(tmp_path, 'url = "memory://cfg"\n[tiered.options.storage_options]\n'
                             f'key = "{SECRET_KEY}"\nendpoint_url = "http://127.0.0.1:9"')
    config = StoreConfig.load(path, environ={})
    assert config.driver_options["storage_options"] == {"key": SECRET_KEY, "endpoint_url": "http://127.0.0.1:9"}
    shown = json.dumps(config.describe_options())
    assert SECRET_KEY not in shown and "http://127.0.0.1:9" in shown
    env = StoreConfig.load(path, environ={"TIERED_OPTION_STORAGE_OPTIONS": '{"anon": true}'})
    assert env.driver_options["storage_options"] == {"anon": True}


@pytest.mark.parametrize("url, fragment", [
    ("", "must be a URL"),
    ("just/a/path", "must start with a protocol"),
    ("memory://", "names no location"),
    (f"sftp://user:{SECRET_PASSWORD}@host/data", "carries a password"),
    ("s3://bucket/p?X-Amz-Signature=abc", "query string"),
    ("simplecache::s3://bucket/p", "chained URL"),
    ("nosuchprotocol-xyz://a/b", "nosuchprotocol-xyz"),
])
def test_bad_url_refused_naming_the_option(url, fragment):
    with pytest.raises(InvalidOption) as info:
        FsspecDriver(url=url)
    assert info.value.option == "url"
    assert fragment in str(info.value)
    assert SECRET_PASSWORD not in str(info.value)


def test_listing_cache_cannot_be_enabled():
    with pytest.raises(InvalidOption) as info:
        FsspecDriver(url=_memory_url(), storage_options={"use_listings_cache": True})
    assert info.value.option == "storage_options.use_listings_cache"


def test_location_is_the_url_and_the_endpoint_never_a_secret(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, where = FsspecDriver.location({"url": "file://rel/dir/", "storage_options": {
        "key": SECRET_KEY, "endpoint_url": "http://minio:9000"}})
    assert name == "fsspec"
    assert where == {"url": f"file://{tmp_path}/rel/dir", "storage_options.endpoint_url": "http://minio:9000"}
    assert FsspecDriver.location({"url": "s3://bucket/prefix/"})[1] == {"url": "s3://bucket/prefix"}


# -- secrets -------------------------------------------------------------------------------


def _secret_options() -> dict:
    return {"key": SECRET_KEY, "endpoint_url": "http://127.0.0.1:9",
            "client_kwargs": {"aws_secret_access_key": SECRET_NESTED, "region_name": "eu-west-1"},
            "password": SECRET_PASSWORD}


def _assert_no_secret(text: str) -> None:
    for secret in (SECRET_KEY, SECRET_NESTED, SECRET_PASSWORD):
        assert secret not in text


def test_secrets_never_shown_in_repr_describe_or_listings():
    drv = open_driver("fsspec", url=_memory_url(), storage_options=_secret_options())
    described = drv.describe()
    _assert_no_secret(repr(drv) + repr(drv.innermost) + json.dumps(described, default=str))
    assert described["options"]["storage_options"]["client_kwargs"] == {
        "aws_secret_access_key": "***", "region_name": "eu-west-1"}
    assert described["options"]["storage_options"]["endpoint_url"] == "http://127.0.0.1:9"
    as_text = FsspecDriver.redact_options({"url": "memory://x", "storage_options": json.dumps(_secret_options())})
    _assert_no_secret(json.dumps(as_text))
    assert FsspecDriver.redact_options({"storage_options": "not json " + SECRET_KEY}) == {"storage_options": "***"}


def test_secrets_scrubbed_from_library_errors(monkeypatch):
    drv = open_driver("fsspec", url=_memory_url(), storage_options=_secret_options())
    fs = drv.innermost.fs

    def leaky(*args, **kwargs):
        raise OSError(f"signature mismatch for key {SECRET_KEY} / {SECRET_NESTED} / {SECRET_PASSWORD}")

    monkeypatch.setattr(fs, "info", leaky)
    with pytest.raises(DriverError) as info:
        drv.innermost.size("seg")
    text = str(info.value) + repr(info.value)
    _assert_no_secret(text)
    assert "***" in text and "'seg'" in text
    assert info.value.__cause__ is None and info.value.__context__ is None  # the library's error is not attached


def test_conformance_cli_redacts_storage_options_given_as_text(capsys):
    code = main(["conformance", "fsspec", "--option", f"url={_memory_url()}", "--option",
                 "storage_options=" + json.dumps({"secret": SECRET_KEY}), "-k", "test_unknown_option_rejected"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "result: PASS" in out and "'secret': '***'" in out
    _assert_no_secret(out)


def test_memory_store_is_shared_by_instances_but_not_between_urls():
    url = _memory_url()
    FsspecDriver(url=url).write("a", 0, b"xyz")
    assert FsspecDriver(url=url).read("a", 0, 3) == b"xyz"
    assert FsspecDriver(url=_memory_url()).size("a") == 0


def test_file_seal_and_write_are_durable_files(tmp_path):
    drv = FsspecDriver(url=f"file://{tmp_path}/tier")
    drv.write("t/q/seg", 0, b"hello")
    drv.seal("t/q/seg")
    assert (tmp_path / "tier/t/q/seg").read_bytes() == b"hello"
    assert os.path.exists(tmp_path / "tier/t/q/seg#tiered-sealed")
    assert list(drv.list("t/")) == [("t/q/seg", 5)]


@pytest.mark.parametrize("url, typo, meant", [("memory://typo", "use_listings_cach", "use_listings_cache"),
                                              ("s3://bucket/p", "anonn", "anon"),
                                              ("gs://bucket/p", "endpont_url", "endpoint_url")])
def test_a_misspelt_storage_option_is_named_with_the_option_it_resembles(url, typo, meant):
    """An operator drill (round 3): ``endpont_url`` in gs:// storage_options was dropped by
    gcsfs, and the store went to the public endpoint (a DNS error 35 s later named nothing).
    A key one letter or two from an option of the filesystem is refused, naming both; a key
    that resembles none passes on to the filesystem (its client may take it)."""
    with pytest.raises(InvalidOption) as info:
        open_driver("fsspec", url=url, storage_options={typo: True})
    assert info.value.context["key"] == typo and f"did you mean {meant!r}?" in str(info.value)
    drv = open_driver("fsspec", url="memory://typo-ok", storage_options={"skip_instance_cache": True})
    drv.close()


def test_the_part_chain_names_objects_its_listing_hides_but_not_its_own_markers():
    """``foreign_objects`` (what verify reports as stray): another id's part and a part past
    a gap, never a chain part or the seal's marker objects; the append layout hides none."""
    drv = FsspecDriver(url=f"{OBJECTS}://b/{uuid.uuid4().hex}")
    chain = drv._layout
    drv.write("q/seg", 0, b"AAAA")
    drv.write("q/seg", 4, b"BB")
    drv.seal("q/seg")  # its markers: below the base's part mark too
    key = chain._key("q/seg")
    assert chain._create_object(key + "#tiered-part/s/00000000000000000100", b"zz", None, what="test") is not None
    assert dict(drv.list("q/")) == {"q/seg": 6}
    assert list(drv.foreign_objects("q/")) == [("q/seg#tiered-part/s/00000000000000000100", 2)]
    assert list(FsspecDriver(url=_memory_url()).foreign_objects("")) == []


def test_only_an_http_status_decides_a_retry():
    """A library error carrying ``code = 0`` beside an HTTP ``status_code`` (403) was read as
    status 0 and retried; the response's status decides (403: not retryable)."""
    from tiered_driver_fsspec.driver import _retryable, _status

    class Refused(Exception):
        code = 0
        status_code = 403

    assert _status(Refused()) == 403 and not _retryable(Refused())
    assert _status(OSError(5, "io")) is None
