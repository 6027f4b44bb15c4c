"""The s3 drivers of one process share their TLS set-up (``_shared_tls_session_class``).

A client's HTTP session builds its TLS context on its first request, loading the CA bundle:
most of the CPU a new driver costs. Drivers with the same TLS inputs share one context;
different inputs (no verification, another CA bundle) never get another driver's.
"""

from __future__ import annotations

import ssl
import uuid

from tiered_driver_s3 import S3Driver
from tiered_driver_s3.testing import S3_BUCKET


def tls_context(drv: S3Driver) -> ssl.SSLContext:
    """The TLS context of ``drv``'s open HTTP session (after at least one request)."""
    sessions = drv.fs.s3._endpoint.http_session._sessions
    return next(iter(sessions.values())).connector._ssl


def opened(moto_s3, **options) -> S3Driver:
    drv = S3Driver(**moto_s3.driver_options(S3_BUCKET, f"tls-{uuid.uuid4().hex[:8]}"), retries=0, **options)
    assert not drv.exists("seg")  # one request: the session and its TLS context now exist
    return drv


def test_drivers_with_the_same_tls_inputs_share_one_context(moto_s3):
    first, second = opened(moto_s3), opened(moto_s3)
    try:
        assert tls_context(first) is tls_context(second)
        assert tls_context(first).verify_mode == ssl.CERT_REQUIRED
        assert tls_context(first).check_hostname
    finally:
        first.close()
        second.close()


def test_a_driver_that_does_not_verify_never_shares_a_verifying_context(moto_s3):
    verifying = opened(moto_s3)
    unverified = opened(moto_s3, storage_options={"client_kwargs": {"verify": False}})
    again = opened(moto_s3, storage_options={"client_kwargs": {"verify": False}})
    try:
        assert tls_context(unverified) is not tls_context(verifying)
        assert tls_context(unverified).verify_mode == ssl.CERT_NONE
        assert tls_context(verifying).verify_mode == ssl.CERT_REQUIRED
        assert tls_context(again) is tls_context(unverified)
    finally:
        for drv in (verifying, unverified, again):
            drv.close()
