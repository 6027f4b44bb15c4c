"""Output paths never land in, over or around a store (issue 18, finding 1): the rules of
:mod:`tiered_core.ops.output_paths`, on real directories, symlinks and config files."""

from __future__ import annotations

import os

import pytest

from tiered_core.config import StoreConfig
from tiered_core.errors import InvalidPath
from tiered_core.ops.output_paths import (
    MARKER, check_output_path, check_separate_stores, create_output_dir, has_marker, protected_locations,
    remove_output_dir, replace_output_dir, staging_dir,
)


def config_file(path, text: str) -> StoreConfig:
    path.write_text(text)
    return StoreConfig.load(str(path))


@pytest.fixture
def store(tmp_path):
    """A posix store whose tier root and metadata file live outside its store_path."""
    (tmp_path / "data" / "tiered").mkdir(parents=True)
    (tmp_path / "tier").mkdir()
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "m.db").write_bytes(b"")
    return config_file(tmp_path / "s.toml", f"""[tiered]
store_path = "{tmp_path / 'data'}"
metadata_path = "{tmp_path / 'meta' / 'm.db'}"
[tiered.options]
root = "{tmp_path / 'tier'}"
""")


def refused(path, configs, **kwargs) -> InvalidPath:
    with pytest.raises(InvalidPath) as info:
        check_output_path(path, configs, **kwargs)
    return info.value


@pytest.mark.parametrize("relative,relation,what", [
    ("data", "is", "store_path"),
    ("data/export", "lies inside", "store_path"),
    ("tier", "is", "tier root (driver 'posix' option 'root')"),
    ("tier/212d6b50_DefaultCluster", "lies inside", "tier root (driver 'posix' option 'root')"),
    ("meta/m.db", "is", "metadata file"),
    ("meta/m.db-wal", "is", "metadata file's companion (-wal)"),
    ("meta", "contains", "metadata file"),
    (".", "contains", "store_path"),
    ("data/tiered/../../tier/x", "lies inside", "tier root (driver 'posix' option 'root')"),
])
def test_an_output_that_is_contains_or_lies_inside_a_store_location_is_refused(store, tmp_path, monkeypatch,
                                                                               relative, relation, what):
    monkeypatch.chdir(tmp_path)
    err = refused(relative, [store], option="--to")
    assert (err.relation, err.collides_with, err.option, err.code.value) == (relation, what, "--to", "INVALID_PATH")
    assert err.path == os.path.realpath(relative) and err.source == store.source
    assert f"{relation} the {what}" in err.message and "Choose another --to" in err.message


def test_an_empty_path_is_refused(store):
    for empty in ("", "  ", None):
        err = refused(empty, [store], option="--checkpoint")
        assert err.option == "--checkpoint" and "empty" in err.message


def test_symlinks_do_not_get_around_the_check(store, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "tier", tmp_path / "elsewhere" / "link")
    err = refused(tmp_path / "elsewhere" / "link", [store])
    assert err.relation == "is" and err.path == str(tmp_path / "tier")
    err = refused(tmp_path / "elsewhere" / "link" / "sub", [store])
    assert err.relation == "lies inside"
    # and a store whose store_path is itself a symlink: the real directory is protected too
    os.symlink(tmp_path / "data", tmp_path / "data-link")
    linked = config_file(tmp_path / "l.toml", f'[tiered]\nstore_path = "{tmp_path / "data-link"}"\n')
    assert refused(tmp_path / "data" / "x", [linked]).relation == "lies inside"
    assert refused(tmp_path / "data-link" / "x", [linked]).relation == "lies inside"


def test_a_bind_mount_like_alias_is_caught_by_inode(store, tmp_path):
    # A hard link stands in for an alias no path comparison sees (bind mounts need privileges).
    os.link(tmp_path / "meta" / "m.db", tmp_path / "alias.db")
    err = refused(tmp_path / "alias.db", [store])
    assert err.relation == "is" and err.collides_with == "metadata file"


def test_an_output_beside_the_store_is_accepted_and_resolved(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path / "data")
    out = check_output_path("../exports/../exports/today", [store])
    assert out.path == str(tmp_path / "exports" / "today") and not out.url
    assert check_output_path(f"file://{tmp_path}/exports", [store]).path == str(tmp_path / "exports")


def test_object_store_urls_are_compared_by_bucket_and_prefix(tmp_path):
    gcs = config_file(tmp_path / "g.toml", f"""[tiered]
store_path = "{tmp_path / 'g'}"
driver = "gcs"
[tiered.options]
bucket = "tier-bucket"
prefix = "prod/tier"
""")
    for url, relation in (("gs://tier-bucket/prod/tier", "is"), ("gs://tier-bucket/prod/tier/x/y", "lies inside"),
                          ("gs://tier-bucket/prod", "contains"), ("gs://tier-bucket/", "contains")):
        err = refused(url, [gcs])
        assert (err.relation, err.location, err.path) == (relation, "tier-bucket", url)
    for url in ("gs://tier-bucket/prod/tier2", "gs://other-bucket/prod/tier", "s3a://tier-bucket/prod/tier",
                "hdfs://namenode/prod/tier"):
        assert check_output_path(url, [gcs]).url
    azure = config_file(tmp_path / "a.toml", f"""[tiered]
store_path = "{tmp_path / 'a'}"
driver = "azure"
[tiered.options]
container = "tier"
account_name = "acct"
""")
    assert refused("abfss://tier@acct.dfs.core.windows.net/exports", [azure]).relation == "lies inside"
    assert refused("https://acct.blob.core.windows.net/tier/x", [azure]).relation == "lies inside"
    assert refused("az://tier/x", [azure]).relation == "lies inside"  # the account is not in the URL
    assert check_output_path("abfss://tier@other.dfs.core.windows.net/exports", [azure]).url


def test_every_config_is_checked(store, tmp_path):
    other = config_file(tmp_path / "o.toml", f'[tiered]\nstore_path = "{tmp_path / "other"}"\n')
    err = refused(tmp_path / "other" / "tiered" / "x", [store, other], option="--checkpoint")
    assert err.source == other.source and "tier root" in err.collides_with
    assert [p.key for p in protected_locations(other)][:2] == ["store_path", "options.root"]


def test_a_target_store_inside_the_source_is_refused(store, tmp_path):
    inside = config_file(tmp_path / "t.toml", f'[tiered]\nstore_path = "{tmp_path / "tier" / "b"}"\n')
    with pytest.raises(InvalidPath) as info:
        check_separate_stores(inside, [store], option="--to-config")
    assert info.value.relation == "lies inside" and info.value.option == "--to-config"
    beside = config_file(tmp_path / "b.toml", f'[tiered]\nstore_path = "{tmp_path / "b"}"\n')
    check_separate_stores(beside, [store], option="--to-config")


def test_only_directories_with_the_marker_are_deleted_or_replaced(tmp_path):
    out = create_output_dir(str(tmp_path / "a" / "out"), "test")
    assert has_marker(out) and os.listdir(out) == [MARKER]
    with pytest.raises(InvalidPath, match="exists"):
        create_output_dir(out, "test")
    (tmp_path / "a" / "out" / "part-0.parquet").write_bytes(b"old")

    staged = staging_dir(out, "test")
    (tmp_path / "a" / os.path.basename(staged) / "part-0.parquet").write_bytes(b"new")
    replace_output_dir(staged, out)
    assert (tmp_path / "a" / "out" / "part-0.parquet").read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path / "a")) == ["out"]  # the old one and the staging name are gone

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep").write_bytes(b"mine")
    for action in (lambda: remove_output_dir(str(foreign)),
                   lambda: replace_output_dir(staging_dir(str(foreign), "test"), str(foreign))):
        with pytest.raises(InvalidPath) as info:
            action()
        assert info.value.marker == MARKER and MARKER in info.value.message
    assert (foreign / "keep").read_bytes() == b"mine"
    (foreign / MARKER).symlink_to(tmp_path / "a" / "out" / MARKER)  # a linked marker does not count
    with pytest.raises(InvalidPath):
        remove_output_dir(str(foreign))
    remove_output_dir(out)
    assert not os.path.exists(out)


def test_an_output_in_over_or_around_a_store_no_config_names_is_refused(tmp_path):
    """An operator drill: the check knew only the stores of the command's configs, so an
    export could land inside another store's store_path or tier (whose next open then
    refused UNKNOWN_OBJECTS), and ``--overwrite`` of an earlier export deleted a store
    someone had put inside it. Stores are now also found on disk: a store id file, or a
    tier prefix's owner records."""
    from tiered_core import Message, TieredMessageStore

    other = StoreConfig(store_path=str(tmp_path / "other"), driver="posix",
                        driver_options={"root": str(tmp_path / "other_tier")})
    with TieredMessageStore.open(other) as s:
        s.put_message(Message(topic="t", body=b"x"), 0)
        s.dispatch(force=True)
    prefix = tmp_path / "other_tier" / "212d6b50_DefaultCluster" / "broker-a"
    for relative, relation in [("other/x", "lies inside"), ("other_tier/x", "lies inside"),
                               (str(prefix.relative_to(tmp_path) / "x"), "lies inside"), ("other", "is"),
                               ("other_tier", "is")]:
        err = refused(str(tmp_path / relative), [], option="--to")
        assert err.relation == relation, (relative, err)
        assert "a store that no config of this command names" in str(err)
    # An earlier export with a store put inside it is not replaced.
    out = create_output_dir(str(tmp_path / "export"), "test")
    nested = StoreConfig(store_path=os.path.join(out, "nested"), driver="posix")
    with TieredMessageStore.open(nested) as s:
        s.put_message(Message(topic="t", body=b"y"), 0)
    err = refused(out, [], option="--to")
    assert err.relation == "contains" and os.path.join(out, "nested") in str(err)
    assert os.path.isfile(os.path.join(out, "nested", "tiered-store-id"))
    # Beside the stores is fine.
    assert check_output_path(str(tmp_path / "elsewhere"), [], option="--to").path == str(tmp_path / "elsewhere")


def fsspec_config(tmp_path, name: str, url: str) -> StoreConfig:
    """A store ``name`` (store_path ``tmp_path/name``) on the fsspec driver at ``url``."""
    return config_file(tmp_path / f"{name}.toml", f'[tiered]\nstore_path = "{tmp_path / name}"\ndriver = "fsspec"\n'
                                                  f'[tiered.options]\nurl = "{url}"\n')


def test_an_fsspec_tier_url_is_protected_like_a_tier_root(store, tmp_path):
    """The fsspec driver's ``url`` is its tier root (drill s14: a migration wrote a target whose
    url lay inside the source's store_path, and one whose store_path lay inside an fsspec tier)."""
    inside_source = fsspec_config(tmp_path, "t1", f"file://{tmp_path / 'data' / 'migrated-tier'}")
    with pytest.raises(InvalidPath) as info:
        check_separate_stores(inside_source, [store], option="--to-config")
    assert info.value.relation == "lies inside" and info.value.key == "options.url"

    fsspec_source = fsspec_config(tmp_path, "fs", f"file://{tmp_path / 'fs-tier'}")
    into_its_tier = config_file(tmp_path / "t2.toml", f'[tiered]\nstore_path = "{tmp_path / "fs-tier" / "t2"}"\n')
    with pytest.raises(InvalidPath) as info:
        check_separate_stores(into_its_tier, [fsspec_source], option="--to-config")
    assert info.value.collides_with == "tier root (driver 'fsspec' option 'url')"
    assert refused(str(tmp_path / "fs-tier" / "export"), [fsspec_source]).relation == "lies inside"

    s3 = config_file(tmp_path / "s3.toml", f"""[tiered]
store_path = "{tmp_path / 's3'}"
driver = "s3"
[tiered.options]
bucket = "drill"
prefix = "exps3"
""")
    s3_inside = fsspec_config(tmp_path, "t3", "s3://drill/exps3/inner")
    with pytest.raises(InvalidPath) as info:
        check_separate_stores(s3_inside, [s3], option="--to-config")
    assert info.value.relation == "lies inside"
    beside = fsspec_config(tmp_path, "t4", "s3://drill/exps3-copy")
    check_separate_stores(beside, [s3], option="--to-config")
    memory = fsspec_config(tmp_path, "t5", "memory://tiered")
    assert [p.key for p in protected_locations(memory)] == ["store_path"] + ["metadata_path"] * 6


def test_a_relative_file_url_resolves_against_the_config_files_directory(tmp_path, monkeypatch):
    (tmp_path / "conf").mkdir()
    monkeypatch.chdir(tmp_path)
    config = config_file(tmp_path / "conf" / "t.toml", '[tiered]\nstore_path = "store"\ndriver = "fsspec"\n'
                                                       '[tiered.options]\nurl = "file://tier"\n')
    assert config.driver_options["url"] == f"file://{tmp_path / 'conf' / 'tier'}"
    assert config.store_path == str(tmp_path / "conf" / "store")
