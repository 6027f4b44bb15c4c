"""An ``endpoint_url`` with credentials in it (``http://KEY:PASSWORD@host``) is refused.

An operator drill: the s3 driver accepted such a URL and ``tiered drivers --config``
printed the password in clear (text and ``--json``); the fsspec driver refuses it.
"""

from __future__ import annotations

import json

import pytest

from tiered_core.cli import main
from tiered_core.errors import InvalidOption
from tiered_driver_s3 import S3Driver

PASSWORD = "TopSecretPassw0rd"


@pytest.mark.parametrize("url, shown", [
    (f"http://AKIAKEY:{PASSWORD}@127.0.0.1:1", "http://***@127.0.0.1:1"),
    (f"https://AKIAKEY:{PASSWORD}@s3.example.com/", "https://***@s3.example.com/"),
    ("http://AKIAKEY@127.0.0.1:1", "http://***@127.0.0.1:1"),
])
def test_an_endpoint_url_with_user_info_is_refused_without_showing_the_password(url, shown):
    with pytest.raises(InvalidOption) as info:
        S3Driver(bucket="tiered-x", endpoint_url=url)
    assert info.value.code == "INVALID_OPTION" and info.value.context["option"] == "endpoint_url"
    assert "endpoint_url" in str(info.value) and shown in str(info.value)
    assert PASSWORD not in str(info.value) and PASSWORD not in repr(info.value.context)
    assert "AKIAKEY" not in str(info.value)  # the access key id is a credential too (drill s14)


def test_an_endpoint_url_without_user_info_is_accepted():
    with S3Driver(bucket="tiered-x", endpoint_url="http://127.0.0.1:1", emulated=True) as drv:
        assert drv.endpoint_url == "http://127.0.0.1:1"


def test_listed_options_never_show_the_endpoint_password():
    shown = S3Driver.redact_options({"bucket": "b", "endpoint_url": f"http://AKIAKEY:{PASSWORD}@127.0.0.1:1"})
    assert shown["endpoint_url"] == "http://***:***@127.0.0.1:1"


def test_tiered_drivers_refuses_the_config_and_never_prints_the_password(tmp_path, capsys):
    conf = tmp_path / "t.toml"
    conf.write_text('[tiered]\nstore_path = "./data"\ndriver = "s3"\n[tiered.options]\nbucket = "bkt1"\n'
                    f'endpoint_url = "http://AKIAKEY:{PASSWORD}@127.0.0.1:1"\n')
    assert main(["drivers", "--config", str(conf)]) == 2
    text = capsys.readouterr()
    assert "INVALID_OPTION" in text.err and "endpoint_url" in text.err and "://***@" in text.err
    assert PASSWORD not in text.out + text.err and "AKIAKEY" not in text.out + text.err
    assert main(["drivers", "--config", str(conf), "--json"]) == 2
    as_json = capsys.readouterr()
    assert PASSWORD not in as_json.out + as_json.err
    error = json.loads(as_json.out)["error"]
    assert error["code"] == "INVALID_OPTION" and error["option"] == "endpoint_url"


def test_a_short_secret_does_not_garble_error_texts():
    """Load-and-faults drill s15 F7: with secret "s", every "s" of an error's text became
    ``***`` (bucket 'nobuc***et', 'li***t-type'). Values shorter than MIN_SCRUBBED_LEN are not
    replaced in texts (they are still hidden as option values); longer ones are."""
    from tiered_core.errors import DriverError
    from tiered_core.plugins import open_driver
    from tiered_core.spi.driver import MIN_SCRUBBED_LEN, scrubbed_texts

    assert scrubbed_texts(["s", "abc", "abcd", None, "longer-secret", "abcd"]) == ["longer-secret", "abcd"]
    assert MIN_SCRUBBED_LEN == 4
    for secret, shown in (("s", "'nobucket'"), ("nobucket-secret", "")):
        with open_driver("s3", bucket="nobucket", endpoint_url="http://127.0.0.1:9", region="us-east-1", key="k",
                         secret=secret, emulated=True, timeout=2, retries=0) as driver:
            with pytest.raises(DriverError) as err:
                driver.size("x/y")
        text = str(err.value)
        assert shown in text and "list-type" in text, text
        if len(secret) >= MIN_SCRUBBED_LEN:
            assert secret not in text
