"""An object-store driver's ``prefix`` has no empty, ``.`` or ``..`` segment (drill s14:
``prefix = "/../x/"`` was accepted and made keys ``../x/...``)."""

from __future__ import annotations

import pytest

from tiered_core.errors import InvalidOption
from tiered_core.plugins import driver_class, open_driver

OPEN = {
    "s3": {"bucket": "bkt", "endpoint_url": "http://127.0.0.1:1", "emulated": True},
    "gcs": {"bucket": "bkt", "endpoint": "http://127.0.0.1:1", "emulated": True, "token": "anon"},
    "azure": {"container": "bkt", "connection_string": "DefaultEndpointsProtocol=http;AccountName=a;"
              "AccountKey=aGVsbG8=;BlobEndpoint=http://127.0.0.1:1/a;"},
}


@pytest.mark.parametrize("driver", sorted(OPEN))
@pytest.mark.parametrize("prefix", ["/../x/", "a//b", "./a", "a/.", "a/../b"])
def test_a_prefix_with_an_empty_dot_or_dot_dot_segment_is_refused(driver, prefix):
    with pytest.raises(InvalidOption) as info:
        open_driver(driver, **OPEN[driver], prefix=prefix)
    assert info.value.context["option"] == "prefix" and repr(prefix) in str(info.value)


@pytest.mark.parametrize("driver", sorted(OPEN))
def test_surrounding_slashes_are_still_dropped(driver):
    cls = driver_class(driver)
    drv = cls(**cls.coerce_options({**OPEN[driver], "prefix": "/prod/tier/"}))
    try:
        assert drv.root == "prod/tier"
    finally:
        drv.close()


@pytest.mark.parametrize("url", ["s3:///x", "gs:///x/y", "s3://bkt/../x", "abfs://c/a//b", "s3://bkt/./a"])
def test_an_fsspec_object_store_url_names_a_bucket_and_plain_key_segments(url):
    from tiered_driver_fsspec.options import check_url

    with pytest.raises(InvalidOption) as info:
        check_url(url)
    assert info.value.context["option"] == "url" and repr(url) in str(info.value)
    for fine in ("s3://bkt/x/", "file:///a/../b", "hdfs:///user/x", "memory://t"):
        assert check_url(fine) == fine.rstrip("/")
