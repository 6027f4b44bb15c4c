"""The fsspec driver on ``gs://`` through gcsfs, against fake-gcs-server (127.0.0.1, a free port).

gcsfs 2026.x picks its zonal-bucket class (``ExtendedGcsFileSystem``) for ``gs://`` unless
``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``; that class is not exclusive on a zonal bucket,
so the driver refused every ``gs://`` URL, suggesting ``gs://`` (an operator drill). The
driver now opens gcsfs's plain class, whose create uploads with ``ifGenerationMatch=0``.
gcsfs and the fake-gcs-server wheel come with the dev extra: a missing one fails the run.
"""

from __future__ import annotations

import uuid

from tiered_conformance.emulator import running
from tiered_core.plugins import open_driver
from tiered_driver_gcs.emulator import FakeGcsServer

BUCKET = "tiered-fsspec-gs"


def test_gs_urls_open_gcsfs_plain_class_and_keep_the_bytes(tmp_path, monkeypatch):
    monkeypatch.delenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", raising=False)
    with running(FakeGcsServer(tmp_path / "gcs"), lambda s: s.create_bucket(BUCKET)) as server:
        options = {"endpoint_url": server.url, "token": "anon", "project": "test"}
        drv = open_driver("fsspec", url=f"gs://{BUCKET}/p-{uuid.uuid4().hex[:8]}", storage_options=options)
        try:
            described = drv.describe()["filesystem"]
            assert (described["filesystem"], described["layout"]) == ("gcsfs.core.GCSFileSystem", "chain")
            drv.write("seg", 0, b"a" * 100)
            drv.write("seg", 100, b"b" * 50)
            assert drv.size("seg") == 150 and drv.read("seg", 95, 10) == b"a" * 5 + b"b" * 5
            assert not drv.write_if_absent("seg", b"x")  # exclusive create holds
            drv.seal("seg")
            assert drv.is_sealed("seg") and drv.read("seg", 0, 150) == b"a" * 100 + b"b" * 50
        finally:
            drv.close()


def test_a_missing_bucket_is_named_at_open_and_nothing_is_created(tmp_path, capsys):
    """An operator drill (round 3): gs:// with a bucket that does not exist listed as empty, so
    a store was created against it, failed at its first write with NOT_FOUND of an owner
    record, and left its store directory behind. The driver names the bucket at open."""
    from tiered_core.config import StoreConfig
    from tiered_core.cli import main

    with running(FakeGcsServer(tmp_path / "gcs"), lambda s: s.create_bucket(BUCKET)) as server:
        conf = tmp_path / "c.toml"
        conf.write_text(f'[tiered]\nstore_path = "{tmp_path / "store"}"\ndriver = "fsspec"\n[tiered.options]\n'
                        f'url = "gs://no-such-bucket-x/p"\n[tiered.options.storage_options]\n'
                        f'endpoint_url = "{server.url}"\ntoken = "anon"\nproject = "test"\n')
        StoreConfig.load(str(conf))
        assert main(["put", "--config", str(conf), "--topic", "t", "--body", "x"]) == 5
    err = capsys.readouterr().err
    assert "'no-such-bucket-x'" in err and "does not exist" in err, err
    assert not (tmp_path / "store").exists()
