"""moto's S3 server for tests, conformance runs and benchmarks (test tooling, not driver code).

Loaded only through the ``tiered_conformance_environment`` hook or by a test suite; it
needs the ``testing`` extra (``pip install tiered-driver-s3[testing]``: the kit in
``tiered-conformance``, ``moto[s3]`` and flask for moto's server mode).

moto runs as its own process on 127.0.0.1 and a free port, so the driver under test and
the server do not share an interpreter lock, and a fault test can kill it. The process is
``python -m tiered_driver_s3.moto_atomic``: moto's server with each S3 request handled
as one step, so a conditional write's check and its write cannot interleave with another
request's, as on S3 (that module says what moto does without it), and connections kept
open between requests. moto keeps objects in memory only: a killed server comes back empty.
Clients get fake credentials (:data:`FAKE_CREDENTIALS`), so botocore never looks for
real ones (environment, profile files, instance metadata).
"""

from __future__ import annotations

import contextlib
import os
import sys
import urllib.error
import urllib.request
import uuid
from typing import Any, Iterator

from tiered_conformance.emulator import Emulator, EmulatorError, running

#: Bucket the conformance environment uses unless ``TIERED_S3_BUCKET`` names another.
CONFORMANCE_BUCKET = "tiered-conformance"
#: moto accepts any credentials; fixed fake ones keep botocore's chain from probing.
FAKE_CREDENTIALS = {"key": "tiered-test-key", "secret": "tiered-test-secret"}
#: The region the emulator's clients name (moto accepts any).
EMULATOR_REGION = "us-east-1"


class MotoServer(Emulator):
    """moto's server mode (S3 only is used) over plain HTTP on ``127.0.0.1:port``.

    Clients reach it with the s3 driver's ``endpoint_url`` option (plus ``emulated=true``
    and the fake credentials): :meth:`driver_options` gives all of them. ``data_dir`` holds
    only the server's log: moto keeps objects in memory.
    """

    name = "moto"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "tiered_driver_s3.moto_atomic", "-H", "127.0.0.1", "-p", str(self.port)]

    def probe_url(self) -> str:
        return f"{self.url}/moto-api/"

    def is_me(self, status: int, headers, body: bytes) -> bool:
        return status == 200 and b"moto" in body.lower()

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (a no-op when it exists)."""
        create_emulator_bucket(self.url, bucket)

    def driver_options(self, bucket: str, prefix: str = "") -> dict[str, Any]:
        """Options of the s3 driver for ``bucket`` on this emulator."""
        return {"bucket": bucket, "prefix": prefix, "endpoint_url": self.url, "region": EMULATOR_REGION,
                "emulated": True, **FAKE_CREDENTIALS}


def create_emulator_bucket(url: str, bucket: str) -> None:
    """Create ``bucket`` on the moto server at ``url`` (a no-op when it exists).

    moto accepts unsigned requests, so a plain ``PUT /bucket`` does (no client library).
    """
    if len(bucket) < 3:
        raise EmulatorError(f"bucket name {bucket!r} is too short: S3 bucket names have 3 to 63 characters")
    req = urllib.request.Request(f"{url.rstrip('/')}/{bucket}", method="PUT", data=b"")
    try:
        urllib.request.urlopen(req, timeout=10).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # BucketAlreadyOwnedByYou / BucketAlreadyExists
            raise EmulatorError(f"moto at {url}: cannot create bucket {bucket!r}: HTTP {exc.code}") from exc
    except OSError as exc:
        raise EmulatorError(f"moto at {url} is not reachable: {exc}") from exc


@contextlib.contextmanager
def conformance_environment(workdir: str) -> Iterator[dict[str, Any]]:
    """Options for a throw-away bucket prefix; starts moto unless an endpoint is configured.

    ``TIERED_S3_ENDPOINT`` points at a real service or a running S3-compatible server,
    used as is (the bucket must exist; credentials come from the usual AWS chain; add
    ``--option emulated=true`` for an emulator). ``TIERED_S3_BUCKET`` names the bucket,
    default ``tiered-conformance``.
    """
    bucket = os.environ.get("TIERED_S3_BUCKET", CONFORMANCE_BUCKET)
    prefix = f"conformance-{uuid.uuid4().hex[:12]}"
    endpoint = os.environ.get("TIERED_S3_ENDPOINT")
    if endpoint:
        yield {"bucket": bucket, "prefix": prefix, "endpoint_url": endpoint}
        return
    server = MotoServer(os.path.join(workdir, "moto-data"))
    with running(server, lambda s: s.create_bucket(bucket)):
        yield server.driver_options(bucket, prefix)


__all__ = ["CONFORMANCE_BUCKET", "EMULATOR_REGION", "FAKE_CREDENTIALS", "MotoServer", "conformance_environment",
           "create_emulator_bucket"]
