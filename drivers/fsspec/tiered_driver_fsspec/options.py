"""The fsspec driver's options: the ``url``, the ``storage_options`` table, and their secrets.

``storage_options`` are the keyword arguments of the fsspec filesystem (what pandas, Dask
and Arrow users pass as ``storage_options``). Their credentials (``key``, ``secret``,
``token``, ``password``, ``account_key``, ``sas_token``, ``connection_string``,
``client_secret``, ``credential``... and any name that contains one of
:data:`SECRET_WORDS`, at any depth, e.g. ``client_kwargs.aws_secret_access_key``) are
redacted wherever options are shown, and their values are scrubbed from error messages.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any, Iterable, Mapping

from tiered_core.errors import InvalidOption
from tiered_core.spi.driver import (  # noqa: F401  (re-exported)
    REDACTED, SECRET_WORDS, is_secret_name, redact_tree, secret_values,
)


#: The listing and instance caches would hide another writer's objects from a size or a
#: listing (fsspec keeps listings without expiry): the driver always turns them off.
FORCED_OPTIONS = {"use_listings_cache": False, "skip_instance_cache": True}


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of a secret value replaced by ``***``."""
    for s in secrets:
        if s in text:
            text = text.replace(s, REDACTED)
    return text


def parse_storage_options(value: Any) -> dict[str, Any]:
    """The ``storage_options`` table: a mapping (TOML ``[tiered.options.storage_options]``),
    or its JSON text (``--option storage_options='{"anon": true}'``, an environment
    variable, broker.conf). Raises :class:`InvalidOption` naming the option, never its value."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        out = dict(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            return {}
        try:
            out = json.loads(text)
        except ValueError as exc:
            raise InvalidOption(
                f"option 'storage_options' of driver 'fsspec' must be a table (TOML) or a JSON object, "
                f"e.g. '{{\"anon\": true}}'; the text given is not JSON ({exc.msg} at character {exc.pos})",
                option="storage_options") from None
        if not isinstance(out, dict):
            raise InvalidOption(f"option 'storage_options' of driver 'fsspec' must be a JSON object, got a "
                                f"JSON {type(out).__name__}", option="storage_options")
    else:
        raise InvalidOption(f"option 'storage_options' of driver 'fsspec' must be a table, got a "
                            f"{type(value).__name__}", option="storage_options")
    for key in out:
        if not isinstance(key, str) or not key:
            raise InvalidOption(f"option 'storage_options' of driver 'fsspec' has a bad name {key!r}",
                                option="storage_options")
    if out.get("use_listings_cache"):
        raise InvalidOption(
            "storage option 'use_listings_cache' of driver 'fsspec' cannot be enabled: a cached listing "
            "hides objects other writers created, so sizes and ownership checks would be wrong; leave it "
            "out (the driver turns the cache off)", option="storage_options.use_listings_cache")
    return out


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


#: Protocols whose URL's first segment is a bucket or container (a key prefix follows it).
_BUCKET_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl"})


def check_url(url: str) -> str:
    """A ``PROTOCOL://...`` URL without credentials in it, its trailing ``/`` removed.

    Credentials belong in ``storage_options`` (where they are redacted); a URL is recorded
    as the store's tier location, so a password or a signed query in it is refused.
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidOption("option 'url' of driver 'fsspec' must be a URL such as 'memory://tiered', "
                            "'file:///var/lib/tiered', 's3://bucket/prefix' or 'gs://bucket/prefix'",
                            option="url")
    url = url.strip()
    if "::" in url:
        raise InvalidOption("option 'url' of driver 'fsspec' is a chained URL ('::'): give one filesystem's URL "
                            "(a cache or wrapper in front of it gets no credit for its guarantees) and put its "
                            "settings in storage_options", option="url")
    if not _SCHEME.match(url):
        raise InvalidOption(f"option 'url' of driver 'fsspec' must start with a protocol "
                            f"('memory://', 'file://', 's3://', 'gs://', 'abfs://', ...), got {url!r}",
                            option="url")
    parts = urllib.parse.urlsplit(url)
    if parts.password is not None:
        shown = url.replace(f":{parts.password}@", f":{REDACTED}@")
        raise InvalidOption(f"option 'url' of driver 'fsspec' carries a password ({shown}): the URL is "
                            "recorded as the store's location, so give the password in storage_options "
                            "(e.g. storage_options.password) and leave it out of the URL", option="url")
    if parts.query:
        raise InvalidOption("option 'url' of driver 'fsspec' has a query string (it could hold a signature); "
                            "give the URL without it and put the filesystem's settings in storage_options",
                            option="url")
    head, sep, rest = url.partition("://")
    rest = rest.rstrip("/")
    if not rest:
        raise InvalidOption(f"option 'url' of driver 'fsspec' names no location after {head}://: give a "
                            f"bucket, container or directory ({head}://NAME/prefix)", option="url")
    if head.lower() in _BUCKET_SCHEMES:
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise InvalidOption(f"option 'url' of driver 'fsspec' ({url!r}) names no bucket: write "
                                f"{head}://BUCKET/prefix", option="url")
        if key and any(part in ("", ".", "..") for part in key.split("/")):
            raise InvalidOption(f"option 'url' of driver 'fsspec' ({url!r}) has an empty, '.' or '..' segment "
                                "after the bucket: object keys are literal (no directory to go up to); write "
                                "the prefix as names separated by single '/'", option="url")
    return f"{head}{sep}{rest}"
